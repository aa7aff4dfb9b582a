-- Flow versions (FORGE-482) shared by every gateway on this server: written through, restored at
-- start-up, hash-verified on every read. Columns match the SQLite store's; `frozen` stays TEXT so
-- it reads back byte for byte (its hash is over those bytes); times are timestamptz.
CREATE TABLE flow_versions (
    id               TEXT PRIMARY KEY NOT NULL,
    template_id      TEXT NOT NULL,
    template_version TEXT NOT NULL,
    status           TEXT NOT NULL,
    frozen           TEXT NOT NULL,
    content_hash     TEXT NOT NULL,
    origin           TEXT NOT NULL,
    approval_id      TEXT,
    approver         TEXT,
    created_at       TIMESTAMPTZ NOT NULL,
    decided_at       TIMESTAMPTZ
);
CREATE INDEX flow_versions_by_template ON flow_versions (template_id, created_at);
CREATE INDEX flow_versions_by_time ON flow_versions (created_at, id);
