-- Leases (issue 20): which process drives this ledger's embedded-engine runs, until when. One row
-- per duty; the holder renews it, anyone may take it once it lapsed. A row with an empty holder
-- is the placeholder an acquisition inserts so it has a row to lock.
CREATE TABLE leases (
    duty        TEXT PRIMARY KEY NOT NULL,
    holder      TEXT NOT NULL,
    acquired_at TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
