-- The one approval ledger (FORGE-89): current state per hold, plus an append-only audit trail.
CREATE TABLE approvals (
    id              TEXT PRIMARY KEY NOT NULL,
    kind            TEXT NOT NULL,
    tool            TEXT NOT NULL,
    arguments       TEXT NOT NULL,
    caller          TEXT NOT NULL,
    status          TEXT NOT NULL,
    reason          TEXT,
    approver        TEXT,
    flow_version_id TEXT,
    created_at      TEXT NOT NULL,
    decided_at      TEXT,
    deadline        TEXT
);
CREATE INDEX approvals_by_status ON approvals (status, created_at);
CREATE INDEX approvals_by_deadline ON approvals (deadline) WHERE status = 'awaiting_approval';

CREATE TABLE approval_history (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    approval_id TEXT NOT NULL REFERENCES approvals (id),
    from_status TEXT,
    to_status   TEXT NOT NULL,
    trigger     TEXT NOT NULL,
    reason      TEXT,
    approver    TEXT,
    at          TEXT NOT NULL
);
CREATE INDEX approval_history_by_approval ON approval_history (approval_id, seq);

CREATE TRIGGER approval_history_is_append_only_update BEFORE UPDATE ON approval_history
BEGIN SELECT RAISE(ABORT, 'approval_history is append-only'); END;
CREATE TRIGGER approval_history_is_append_only_delete BEFORE DELETE ON approval_history
BEGIN SELECT RAISE(ABORT, 'approval_history is append-only'); END;
