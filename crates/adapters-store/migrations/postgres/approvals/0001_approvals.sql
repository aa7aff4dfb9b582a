-- The one approval ledger (FORGE-89) shared by every gateway on this server: current state per
-- hold, plus an append-only audit trail. Columns match the SQLite ledger's; times are timestamptz.
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
    created_at      TIMESTAMPTZ NOT NULL,
    decided_at      TIMESTAMPTZ,
    deadline        TIMESTAMPTZ,
    requested_by    TEXT
);
CREATE INDEX approvals_by_status ON approvals (status, created_at);
CREATE INDEX approvals_by_deadline ON approvals (deadline) WHERE status = 'awaiting_approval';

CREATE TABLE approval_history (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    approval_id TEXT NOT NULL REFERENCES approvals (id),
    from_status TEXT,
    to_status   TEXT NOT NULL,
    trigger     TEXT NOT NULL,
    reason      TEXT,
    approver    TEXT,
    at          TIMESTAMPTZ NOT NULL
);
CREATE INDEX approval_history_by_approval ON approval_history (approval_id, seq);

CREATE FUNCTION approval_history_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'approval_history is append-only';
END;
$$;
CREATE TRIGGER approval_history_is_append_only
    BEFORE UPDATE OR DELETE ON approval_history
    FOR EACH ROW EXECUTE FUNCTION approval_history_is_append_only();
