//! One contract suite per store port. Each adapter's tests call the suite with a fresh instance;
//! the suite asserts the behaviour every adapter of the port must share, and panics (fails the
//! test) naming the broken rule.

mod approvals;
mod client_tasks;
mod event_bus;
mod flow_versions;
mod leases;
mod runs;
mod sessions;
mod twin;
mod usage;

pub use approvals::{approval_ledger_contract, approval_parkers_contract};
pub use client_tasks::client_task_store_contract;
pub use event_bus::event_bus_contract;
pub use flow_versions::{Tamper, flow_version_store_contract, frozen_version};
pub use leases::lease_store_contract;
pub use runs::{run_ledger_contract, sample_run, sample_state, transition};
pub use sessions::session_store_contract;
pub use twin::twin_store_contract;
pub use usage::usage_store_contract;

use metaforge_ports::{PortError, PortErrorKind, Timestamp};

/// The error kind of a result, or `None` when it succeeded.
pub fn kind_of<T>(result: &Result<T, PortError>) -> Option<PortErrorKind> {
    result.as_ref().err().map(|e| e.kind)
}

/// A fixed instant plus `secs` seconds, whole seconds so every engine round-trips it exactly.
pub fn t(secs: i64) -> Timestamp {
    chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .map(|t| t.with_timezone(&chrono::Utc))
        .unwrap_or_default()
        + chrono::Duration::seconds(secs)
}
