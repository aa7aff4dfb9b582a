//! Test support for MetaForge: in-memory doubles of every store port, a pinned clock and id
//! generator, and one generic contract suite per port that every adapter of that port runs.
//!
//! The doubles exist for unit tests only. Nothing in production code may depend on this crate
//! (adapters take it as a dev-dependency), so a double can never be selected silently at run time.
#![expect(
    clippy::expect_used,
    reason = "test support: a failed expectation in a contract suite is a failed test"
)]

pub mod clock;
pub mod contracts;
pub mod doubles;

pub use clock::{ManualClock, SequentialIds};
