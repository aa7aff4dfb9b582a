//! Durable stores for MetaForge.
//!
//! SQLite ledgers via sqlx (approvals, flow versions, runs, client tasks, usage, sessions), the
//! embedded twin graph, the in-process event bus, and — behind the `falkordb` and `kafka`
//! features — the FalkorDB twin and the Kafka event bus. One file per ledger, each with its own
//! migrations; every ledger opens in WAL mode with `synchronous=FULL`, so a committed write
//! survives a crash. Adapters depend on `metaforge-ports` only.

// The falkordb client's async futures are deeply nested types.
#![recursion_limit = "256"]

pub mod approvals;
mod codec;
pub mod paths;
mod selection_file;
mod sqlite;
mod trace;

pub use approvals::SqliteApprovalLedger;
pub use paths::{StorePaths, StorePathsError};
pub use selection_file::{FileSelectionStore, SELECTION_FILE};
pub mod client_tasks;
pub mod flow_versions;
pub mod runs;
pub mod sessions;
pub mod usage;

pub use client_tasks::SqliteClientTaskStore;
pub use flow_versions::SqliteFlowVersionStore;
pub use runs::SqliteRunLedger;
pub use sessions::SqliteSessionStore;
pub use usage::SqliteUsageStore;
pub mod twin_sqlite;

pub use twin_sqlite::SqliteTwinStore;
pub mod event_bus;

pub use event_bus::InProcessEventBus;
#[cfg(feature = "falkordb")]
pub mod twin_falkordb;

#[cfg(feature = "falkordb")]
pub use twin_falkordb::FalkorTwinStore;
#[cfg(feature = "kafka")]
pub mod kafka_bus;
#[cfg(feature = "postgres")]
pub mod postgres;

#[cfg(feature = "kafka")]
pub use kafka_bus::{KafkaEventBus, start_event_bus};
