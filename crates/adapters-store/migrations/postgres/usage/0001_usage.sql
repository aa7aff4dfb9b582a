-- Usage events (FORGE-476) from every gateway and worker on this server. Unknown counts and costs
-- are NULL, never 0. `seq` orders a run's events as they were recorded (the SQLite AUTOINCREMENT);
-- counts are BIGINT and costs DOUBLE PRECISION, the SQLite INTEGER and REAL (f64).
CREATE TABLE usage_events (
    seq                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id              TEXT,
    phase               TEXT,
    role                TEXT,
    caller              TEXT,
    provider            TEXT NOT NULL,
    model               TEXT NOT NULL,
    prompt_tokens       BIGINT,
    completion_tokens   BIGINT,
    cached_input_tokens BIGINT,
    cache_write_tokens  BIGINT,
    reasoning_tokens    BIGINT,
    cost_usd            DOUBLE PRECISION,
    billing             TEXT NOT NULL,
    at                  TIMESTAMPTZ NOT NULL
);
CREATE INDEX usage_events_by_run ON usage_events (run_id, seq);
CREATE INDEX usage_events_by_time ON usage_events (at);
