-- Issue 20: the process that parked a hold (host/pid/unique, one per start), so a process
-- starting beside live ones on one ledger orphans only the holds of processes that are gone.
-- NULL for holds parked before this column existed; those count as gone.
ALTER TABLE approvals ADD COLUMN parked_by TEXT;
CREATE INDEX approvals_open_parkers ON approvals (parked_by) WHERE status = 'awaiting_approval';
