-- Flow versions (FORGE-482): written through, restored at start-up, hash-verified on every read.
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
    created_at       TEXT NOT NULL,
    decided_at       TEXT
);
CREATE INDEX flow_versions_by_template ON flow_versions (template_id, created_at);
