//! Test support for MetaForge: in-memory doubles of every store port, a pinned clock and id
//! generator, and one generic contract suite per port that every adapter of that port runs; and
//! the harness every test binary shares: bound loopback listeners ([`net`]), the npm/pip peers and
//! the skip-or-fail decision when one is missing ([`peers`]), a FalkorDB server of a test's own
//! ([`falkordb`]), children killed with their process
//! group ([`process`]), one scripted OpenAI-compatible upstream ([`upstream`]), the scripted model that
//! does a design-flow phase on it ([`phase_model`]) and the rule case tables ([`cases`]).
//!
//! The doubles exist for unit tests only. Nothing in production code may depend on this crate
//! (adapters take it as a dev-dependency), so a double can never be selected silently at run time.
#![expect(
    clippy::expect_used,
    reason = "test support: a failed expectation in a contract suite is a failed test"
)]

pub mod cases;
pub mod clock;
pub mod contracts;
pub mod doubles;
pub mod falkordb;
pub mod kafka;
pub mod net;
pub mod peers;
pub mod phase_model;
pub mod postgres;
pub mod process;
pub mod skills;
pub mod temporal;
pub mod upstream;

pub use cases::cases;
pub use clock::{ManualClock, SequentialIds};
pub use peers::{Peer, require};
pub use process::ChildGuard;
