//! Design-flow runs on Temporal (issue 17; seed FORGE-401/474/475/485): a second driver of the
//! same pure run reducer (`metaforge_domain::run`) the embedded engine drives, so the two engines
//! cannot drift.
//!
//! - [`workflow`]: [`DesignFlowWorkflow`], one interpreter workflow over the frozen flow passed
//!   as its input; it verifies the content hash before the first phase, asks the domain reducer
//!   for every decision, parks at gates on a signal raced against a durable timer, and answers
//!   the [`DesignFlowWorkflow::run_state`] query.
//! - [`activity`]: [`PhaseActivities::run_phase`], one phase attempt handed to a `PhaseBrain`,
//!   heartbeating while it works.
//! - [`engine`]: [`TemporalEngine`], the `FlowEngine` port over temporalio-client (start checks
//!   that a worker polls the queue, and records nothing when none does).
//! - [`worker`]: [`run_worker`], what `metaforge worker` runs.
//! - [`trace_context`]: the W3C trace context from the request that starts a run, through the
//!   workflow's headers, to each activity's span.
//! - [`replay`]: Temporal's own replayer over recorded histories (`metaforge replay`, and the
//!   determinism test over `tests/histories/`).
//!
//! The crate depends on the ports and on the domain (the reducer, the frozen flow, the brief):
//! the one adapter allowed the domain, because its workflow *is* an engine and must call the
//! rules rather than copy them (`xtask/src/layering.rs`).

pub mod activity;
pub mod engine;
pub mod replay;
pub mod trace_context;
pub mod worker;
pub mod workflow;

pub use activity::{PhaseActivities, PhaseAttempt};
pub use engine::{TemporalEngine, TemporalSettings, WorkerPresence};
pub use worker::{WorkerError, connect, run_worker};
pub use workflow::{DesignFlowInput, DesignFlowSnapshot, DesignFlowWorkflow, RunSignal};

/// The task queue design-flow workflows and their phase activities run on (seed FORGE-401).
pub const TASK_QUEUE: &str = "metaforge-design-flows";

/// Where the Temporal frontend listens when `TEMPORAL_HOST` is unset.
pub const DEFAULT_TEMPORAL_HOST: &str = "127.0.0.1:7233";

/// The Temporal namespace runs live in (the dev server's default).
pub const NAMESPACE: &str = "default";
