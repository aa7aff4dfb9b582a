-- Usage events (FORGE-476). Unknown counts and costs are NULL, never 0.
CREATE TABLE usage_events (
    seq                 INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id              TEXT,
    phase               TEXT,
    role                TEXT,
    caller              TEXT,
    provider            TEXT NOT NULL,
    model               TEXT NOT NULL,
    prompt_tokens       INTEGER,
    completion_tokens   INTEGER,
    cached_input_tokens INTEGER,
    cache_write_tokens  INTEGER,
    reasoning_tokens    INTEGER,
    cost_usd            REAL,
    billing             TEXT NOT NULL,
    at                  TEXT NOT NULL
);
CREATE INDEX usage_events_by_run ON usage_events (run_id, seq);
CREATE INDEX usage_events_by_time ON usage_events (at);
