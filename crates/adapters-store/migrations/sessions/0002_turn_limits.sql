-- Per-thread limits of a turn (null = the deployment's defaults).
ALTER TABLE sessions ADD COLUMN max_iterations INTEGER;
ALTER TABLE sessions ADD COLUMN token_budget INTEGER;
