-- Durable run state (issue 16): every transition the embedded engine applied, persisted before it
-- acts on it. Numbered per run without gaps (the primary key makes appending compare-and-set on
-- the sequence: two writers of one seq, one wins); append-only.
CREATE TABLE run_transitions (
    run_id   TEXT NOT NULL REFERENCES runs (id),
    seq      INTEGER NOT NULL CHECK (seq >= 1),
    event    TEXT,
    state    TEXT NOT NULL,
    commands TEXT NOT NULL,
    reason   TEXT,
    at       TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- The latest transition, and the last one whose effects the engine confirmed carried out.
ALTER TABLE runs ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN settled_seq INTEGER NOT NULL DEFAULT 0;

CREATE TRIGGER run_transitions_are_append_only_update BEFORE UPDATE ON run_transitions
BEGIN SELECT RAISE(ABORT, 'run_transitions is append-only'); END;
CREATE TRIGGER run_transitions_are_append_only_delete BEFORE DELETE ON run_transitions
BEGIN SELECT RAISE(ABORT, 'run_transitions is append-only'); END;
