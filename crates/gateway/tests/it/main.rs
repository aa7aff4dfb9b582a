//! Gateway handler tests: the real router over in-memory ledger doubles, one binary.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a broken fixture should fail the test loudly"
)]

mod approvals;
mod auth;
mod chat;
mod common;
mod console;
mod flows;
mod generator;
mod hardening;
mod harness;
mod runs;
mod threads;
mod twin;
mod usage;
