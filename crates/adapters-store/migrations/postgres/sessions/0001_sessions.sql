-- The session ledger shared by every gateway on this server: threads with parent lineage and
-- per-thread turn limits (null = the deployment's defaults), messages, and a full-text index over
-- messages. The final shape of the SQLite ledger's migrations; times are timestamptz.
CREATE TABLE sessions (
    id                TEXT PRIMARY KEY NOT NULL,
    parent_session_id TEXT REFERENCES sessions (id),
    project_id        TEXT,
    title             TEXT,
    created_at        TIMESTAMPTZ NOT NULL,
    max_iterations    BIGINT,
    token_budget      BIGINT
);
CREATE INDEX sessions_by_time ON sessions (created_at, id);

-- `content_tsv` is PostgreSQL's own index of the words of `content`, standing in for SQLite's
-- FTS5 table (unicode61): the 'simple' configuration (lower-case, no stemming, no stop words),
-- over the content with every run of punctuation made a space, so a word is a run of letters and
-- digits on both engines ("example.com" holds "example" and "com", "bracket-check" holds
-- "bracket" and "check"). Only the first 200,000 characters are indexed: a tsvector holds at most
-- 1 MiB of distinct words, and a message past that must still be stored rather than refused.
CREATE TABLE messages (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    role        TEXT NOT NULL,
    content     TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    content_tsv TSVECTOR GENERATED ALWAYS AS (
        to_tsvector('simple', regexp_replace(left(content, 200000), '[[:punct:]]+', ' ', 'g'))
    ) STORED
);
CREATE INDEX messages_by_session ON messages (session_id, seq);
CREATE INDEX messages_content_tsv ON messages USING GIN (content_tsv);
