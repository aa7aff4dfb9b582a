-- The run ledger (FORGE-485) shared by every gateway and worker on this server: the run record,
-- its status history, and the embedded engine's transition log. Columns match the SQLite
-- ledger's; times are timestamptz; JSON columns stay TEXT so they read back byte for byte.
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
    created_at       TIMESTAMPTZ NOT NULL,
    updated_at       TIMESTAMPTZ NOT NULL,
    -- The latest transition, and the last one whose effects the engine confirmed carried out.
    last_seq         BIGINT NOT NULL DEFAULT 0,
    settled_seq      BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_status ON runs (status, created_at);
CREATE INDEX runs_by_time ON runs (created_at, id);

CREATE TABLE run_status_history (
    seq    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (id),
    status TEXT NOT NULL,
    reason TEXT,
    at     TIMESTAMPTZ NOT NULL
);
CREATE INDEX run_status_history_by_run ON run_status_history (run_id, seq);

-- Numbered per run without gaps: the primary key makes appending compare-and-set on the
-- sequence (two writers of one seq, one wins).
CREATE TABLE run_transitions (
    run_id   TEXT NOT NULL REFERENCES runs (id),
    seq      BIGINT NOT NULL CHECK (seq >= 1),
    event    TEXT,
    state    TEXT NOT NULL,
    commands TEXT NOT NULL,
    reason   TEXT,
    at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Defence in depth: even a hand-written UPDATE cannot reopen a terminal run.
CREATE FUNCTION runs_terminal_is_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status IN ('completed', 'failed', 'canceled') AND NEW.status <> OLD.status THEN
        RAISE EXCEPTION 'a terminal run is never reopened';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER runs_terminal_is_final
    BEFORE UPDATE OF status ON runs
    FOR EACH ROW EXECUTE FUNCTION runs_terminal_is_final();

CREATE FUNCTION run_transitions_are_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'run_transitions is append-only';
END;
$$;
CREATE TRIGGER run_transitions_are_append_only
    BEFORE UPDATE OR DELETE ON run_transitions
    FOR EACH ROW EXECUTE FUNCTION run_transitions_are_append_only();
