-- The session ledger: threads with parent lineage, messages, and an FTS5 index over messages.
CREATE TABLE sessions (
    id                TEXT PRIMARY KEY NOT NULL,
    parent_session_id TEXT REFERENCES sessions (id),
    project_id        TEXT,
    title             TEXT,
    created_at        TEXT NOT NULL
);
CREATE INDEX sessions_by_time ON sessions (created_at);

CREATE TABLE messages (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL REFERENCES sessions (id),
    role       TEXT NOT NULL,
    content    TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX messages_by_session ON messages (session_id, seq);

CREATE VIRTUAL TABLE messages_fts USING fts5 (
    content,
    content = 'messages',
    content_rowid = 'seq',
    tokenize = 'unicode61'
);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
BEGIN INSERT INTO messages_fts (rowid, content) VALUES (NEW.seq, NEW.content); END;
