-- The run ledger (FORGE-485): the run record plus its status history. Terminal runs are final.
CREATE TABLE runs (
    id               TEXT PRIMARY KEY NOT NULL,
    project_id       TEXT,
    flow_engine      TEXT NOT NULL,
    intelligence     TEXT NOT NULL,
    template_id      TEXT NOT NULL,
    template_version TEXT NOT NULL,
    flow_version_id  TEXT NOT NULL,
    content_hash     TEXT NOT NULL,
    status           TEXT NOT NULL,
    reason           TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX runs_by_status ON runs (status, created_at);

CREATE TABLE run_status_history (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs (id),
    status TEXT NOT NULL,
    reason TEXT,
    at     TEXT NOT NULL
);
CREATE INDEX run_status_history_by_run ON run_status_history (run_id, seq);

-- Defence in depth: even a hand-written UPDATE cannot reopen a terminal run.
CREATE TRIGGER runs_terminal_is_final BEFORE UPDATE OF status ON runs
WHEN OLD.status IN ('completed', 'failed', 'canceled') AND NEW.status <> OLD.status
BEGIN SELECT RAISE(ABORT, 'a terminal run is never reopened'); END;
