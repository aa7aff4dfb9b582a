-- The MCP session a claim was made in, kept beside the claimant identity (issue 38 item 2).
ALTER TABLE client_tasks ADD COLUMN claim_session TEXT;
