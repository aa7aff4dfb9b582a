-- Client tasks (FORGE-581) shared by every gateway on this server: id is run:phase:attempt.
-- Columns match the SQLite store's; times are timestamptz; JSON columns stay TEXT.
CREATE TABLE client_tasks (
    id         TEXT PRIMARY KEY NOT NULL,
    run_id     TEXT NOT NULL,
    phase      TEXT NOT NULL,
    attempt    BIGINT NOT NULL,
    brief      TEXT NOT NULL,
    status     TEXT NOT NULL,
    claimed_by TEXT,
    submission TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX client_tasks_by_run ON client_tasks (run_id, created_at);
CREATE INDEX client_tasks_by_status ON client_tasks (status, created_at);
