-- Leases (issue 20): which process drives this ledger's embedded-engine runs, until when. One row
-- per duty; the holder renews it, anyone may take it once it lapsed.
CREATE TABLE leases (
    duty        TEXT PRIMARY KEY NOT NULL,
    holder      TEXT NOT NULL,
    acquired_at TEXT NOT NULL,
    expires_at  TEXT NOT NULL
);
