//! Durable stores for MetaForge.
//!
//! The ledgers via sqlx (approvals, flow versions, runs, client tasks, usage, sessions), the
//! embedded twin graph, the in-process event bus, and — behind the `falkordb` and `kafka`
//! features — the FalkorDB twin and the Kafka event bus. Each ledger is one SQL engine, generic
//! over the database through the dialect seam of [`sql`] (`SqlApprovalLedger<E>` and its
//! siblings), with two instances: SQLite (one file per ledger, WAL with `synchronous=FULL`, so a
//! committed write survives a crash) and PostgreSQL behind the `postgres` feature (one schema
//! per ledger). Each keeps its own migration tree per database. Adapters depend on
//! `metaforge-ports` only.
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## Stores — ports, `crates/adapters-store`, `crates/test-support` (issue 5)
//!
//! Store ports (one file each in `crates/ports/src/`): `ApprovalLedger`, `FlowVersionStore`,
//! `RunLedger`, `ClientTaskStore`, `UsageStore`, `SessionStore`, `TwinStore`, `EventBus`.
//! `metaforge-adapters-store` implements them: one SQLite file per ledger under `METAFORGE_HOME`
//! (`paths::StorePaths::resolve(env_lookup, user_home)` applies the seed's overrides; the binary
//! passes the env lookup in), each with its own `migrations/<ledger>/` run by `sqlx::migrate!`
//! under an exclusive lock of `<ledger>.lock` (`sqlite::open_pool`: processes opening one fresh
//! home at once take turns; 30 s at most, then an error naming the lock);
//! `SqliteTwinStore` (embedded twin), `InProcessEventBus`; feature `falkordb` → `FalkorTwinStore`;
//! feature `kafka` → `KafkaEventBus` + `start_event_bus(bootstrap)`; feature `crash-harness` →
//! the `store_crash_child` helper bin. `metaforge-test-support` holds the in-memory doubles
//! (`doubles::Memory*`), `ManualClock`/`SequentialIds` and one contract suite per port
//! (`contracts::*_contract`) that every adapter's tests run; adapters take it as a dev-dependency.
//! **Invariants:**
//! - Every ledger opens WAL + `synchronous=FULL` + busy timeout; every write is one
//!   `BEGIN IMMEDIATE` transaction, so a commit that returned survives SIGKILL and two processes
//!   racing on one row serialise (approval decide is a conditional UPDATE on
//!   `status='awaiting_approval'`: exactly one wins, the other gets `Conflict`).
//! - Approvals: `approval_history` is append-only (triggers refuse UPDATE/DELETE); every read first
//!   expires overdue holds (`timed_out`, trigger `deadline`); `restore(gone)` marks the open holds
//!   of gone parkers `failed` with `ORPHANED_APPROVAL_REASON` (every read selects the one column
//!   list `APPROVAL_COLUMNS`, `parked_by` included); a waiter's resolve is idempotent, a person's
//!   decision is never overwritten.
//! - Flow versions: every read verifies `sha256(frozen) == content_hash`; a mismatch is `Corrupt`,
//!   logged (`flow_version_restore_skipped`) and never served or approved. Decided versions are
//!   immutable.
//! - Runs: a terminal run is never reopened (checked in the transaction and by a trigger). The
//!   engine's transition log (`RunLedger::{create_started, append_transition, latest_transition,
//!   transitions, mark_settled, unsettled}`, migration `runs/0002`): transitions numbered 1.. per
//!   run without gaps, append-only (triggers), appended with compare-and-set on the sequence in the
//!   same `BEGIN IMMEDIATE` transaction that moves the record's status and reason (two writers of one
//!   seq: one wins, the other `Conflict`); a run and its first transition are created atomically;
//!   the rules live on the port types (`metaforge_ports::run_ledger_rules`).
//! - Gate holds (`ApprovalKind::Gate`, id `gate:run:phase:attempt`): listed with every hold, never
//!   orphaned by `restore()` (their engine resumes them), refused by a generic decision
//!   (`ApprovalRecord::check_generic_decision`, a `Conflict` whose source is `GateDecisionRefused`,
//!   code `gate_decided_through_run`) and by a waiter's resolve; only the engine records their
//!   decision.
//! - Usage: unknown counts/costs are stored as NULL and read back as `None`, never 0; totals are
//!   the domain's job.
//! - Twin: node `content_hash` is recomputed from `{type, properties}` by every engine
//!   (`twin_content_hash`); commits are all-or-nothing on SQLite; merges are fast-forward only.
//!   Node types are the seed's five plus `Decision` (`twin.record_decision`).
//!   FalkorDB has no multi-statement transactions: its adapter validates a commit fully before
//!   writing and serialises writers per process, but a crash mid-commit can leave a partial write.
//! - Twin selection (issue 20, item 2): `METAFORGE_TWIN_URL` picks the twin of every process in one
//!   place, `crates/bins/src/twin_engine.rs` (`TwinEngine`): unset → `SqliteTwinStore` at
//!   `$METAFORGE_HOME/twin.db`; `falkordb://host:port` (`falkor://`, `redis://` read the same) →
//!   `FalkorTwinStore::connect` on the one fixed graph `metaforge_twin`. The gateway opens it (`up`
//!   and `worker` reuse its composition) and so does the standalone `mcp serve`, so every process on
//!   one URL shares one twin and no `twin.db` is written. Another scheme is a settings problem (exit
//!   2, nothing written); an unreachable server fails start-up, never a fallback to the file; each
//!   process logs `twin_engine` with the URL's password hidden. The bins' `falkordb` feature is on by
//!   default; a build without it refuses the URL. Writers in different processes are not serialised
//!   with one another (the adapter's lock is per process and its head check is a read), so two
//!   processes committing to one branch at once can race. Tested by
//!   `crates/bins/tests/it/falkordb_twin.rs`.
//! - Event bus: dispatch is always in-process; Kafka only adds the durable topic
//!   (`metaforge.<kind>`, `trace-id` header). An unreachable broker at start falls back to the
//!   in-process bus with an error-level `event_bus_kafka_unavailable` log. Run notices reach the bus
//!   from both engines, built by one rule (`app::runs::bus_event_of`): the embedded driver after
//!   each committed transition, and for a run on Temporal the gateways' follower, which claims each
//!   range of the workflow's transitions first with `RunLedger::claim_published` (compare-and-set on
//!   the run's `published_seq`, `runs/0004`, `postgres/runs/0003`) so of several gateways exactly
//!   one publishes each notice. Both publish after the record, fire-and-log: a process killed
//!   between the claim (or the commit) and the send loses those notices from the bus, never
//!   duplicates them; the workflow's history and the run ledger stay the record.

// The falkordb client's async futures are deeply nested types.
#![recursion_limit = "256"]

pub mod approvals;
mod codec;
pub mod paths;
mod selection_file;
pub mod skill_dirs;
pub mod sql;
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
