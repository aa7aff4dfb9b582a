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
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## `crates/adapters-temporal` — runs on Temporal (issue 17; FORGE-401/474/475/485)
//!
//! Built only with the bins' `temporal` feature (temporalio-sdk/-client 1.1.1, `vendored-protox`).
//! `workflow` · `activity` · `engine` · `worker` · `replay` · `trace_context` (the W3C context
//! from a run's start header to its activities' spans, "Traces" above); task queue
//! `metaforge-design-flows` (`TASK_QUEUE`).
//! - **`DesignFlowWorkflow`** (input `DesignFlowInput`: the frozen version whole, settings, and on
//!   continue-as-new the state and `transitions_before`): `FrozenFlow::from_frozen` verifies the
//!   hash before the first phase; every step is `metaforge_domain::run::{start, apply, resume}` (a
//!   refused event changes nothing and is kept in the query's `refusals`). `StartPhase` → the
//!   `run_phase` activity with the brief from `phase_brief` (start-to-close 24 h, heartbeat timeout
//!   30 s, Temporal retries 3 for a lost worker or timeout — the same attempt, so the reducer's
//!   attempt number does not move); the brain's own failure comes back as a value
//!   (`PhaseAttempt::Failed`), so the reducer's `phase_retries` decides re-runs exactly as on the
//!   embedded engine, a configuration failure failing the run once. `OpenGate` → `GateOpened`, then
//!   a signal raced against a durable timer to the gate's deadline (`GateExpired`: a rejection). A
//!   flow change accepted at a gate → continue-as-new. `CompleteRun` → the `complete_run` activity
//!   (`RunCompletion`; the binary merges the twin branch with `app::twin::merge_run_branch`).
//!   Signals `decide_gate(GateAnswer)` and `message(RunSignal)`; queries `run_state` →
//!   `DesignFlowSnapshot` and `run_transitions(after)` → the `RunTransition`s it made (kept in
//!   workflow memory only, never in a command, so they do not touch determinism; a page of 64).
//! - **`TemporalEngine`** (`FlowEngine`, kind `temporal`, over a `RunLedger` and a `Clock`):
//!   `worker_presence()` asks DescribeTaskQueue for workflow and activity pollers (cached
//!   `poller_cache`, 3 s); `start` refuses with `Unavailable` and the reason (no poller, server
//!   unreachable) before anything is sent or recorded, verifies the version and computes the first
//!   transition with the reducer, starts workflow id = run id, then creates the run record
//!   (`flow_engine: temporal`). `decide_gate`/`cancel` check the event with the reducer against the
//!   queried state (a refusal answers at once), signal, and answer with the state once applied.
//!   `state` = the query, or a closed workflow's result; `reconcile` sets the record's status to
//!   what the workflow answered (never guessed). Not live → `live: false` with the reason.
//!   `transitions_after` (the query), `wait_closed` (a script or bench waiting for a run's end).
//! - **`replay`**: Temporal's own `WorkflowReplayer` over histories in the SDK's JSON
//!   (`fetch_history` from the server, `history_from_json` from a file) — `metaforge replay`, and
//!   `tests/replay_histories.rs` over `tests/histories/*.json`, one real recorded run per decision
//!   kind (approve, retry, rework, reject, cancel at a gate, cancel mid-phase, gate expiry),
//!   re-recorded with `METAFORGE_RECORD_HISTORIES=crates/adapters-temporal/tests/histories` on
//!   `runs_temporal`'s recording test. A change to the workflow's commands makes them fail: that is
//!   the point (an in-flight run would diverge); version the change with a patch or, before any
//!   deployment, re-record them on purpose.
//! - **Composition** (`bins/src/runs_temporal.rs`): `METAFORGE_FLOW_ENGINE=temporal` composes
//!   `TemporalRunEngine` (the `RunEngine` over `TemporalEngine`, `TEMPORAL_HOST`, default
//!   `127.0.0.1:7233`); without the feature it stays `UnavailableEngine` naming the feature.
//!   Its `notices` are built from `run_transitions` (polled every 250 ms) by `app::runs::notices_of`,
//!   the embedded engine's rule. Its **follower** (gateway and `up` only, never the worker:
//!   `ComposedRuns::follow_runs`) passes every 2 s and at start-up over the runs not yet ended and
//!   the runs with an open gate hold, applies `app::runs::GateHolds::follow` to each transition
//!   the workflow made since its in-memory cursor (the gate parked in the one approval ledger,
//!   decided, timed out or canceled — the embedded driver calls the same `GateHolds`), publishes
//!   the notices of the transitions no gateway has claimed yet (`claim_published`), then
//!   reconciles the record; an answer or cancel follows the run at once. `metaforge worker`
//!   composes what the gateway does (engine fixed to Temporal) and polls the queue with the same
//!   `PhaseBrains`. `metaforge up --engine temporal` (or `up` with `METAFORGE_FLOW_ENGINE=temporal`)
//!   runs that worker in-process beside the gateway,
//!   starting `temporal server start-dev` from PATH (history in `METAFORGE_HOME/temporal.db`,
//!   killed with `up`) unless `TEMPORAL_HOST` is set or a server already listens on 7233. Twin
//!   writes of a phase in flight are scoped by `EngineRunScopes` over the Temporal engine.
//! - **Differs from the issue**: gates reach the approval ledger through the gateway's follower
//!   (within one 2 s pass, at once after an answer) rather than a worker-side `POST
//!   /v1/runs/{id}/gate-opened`, so a worker needs no route back to the gateway; flow-state's
//!   `gate.approval_id` stays `null` on Temporal (the hold's id is `gate:<run>:<phase>:<attempt>`).
//!   After a continue-as-new, transitions of earlier executions are no longer queryable (numbers
//!   keep counting).
//!
//! **Invariants** (tests `crates/bins/tests/runs_temporal.rs` on a real dev server,
//! `crates/adapters-temporal/tests/replay_histories.rs` offline): a run completes through its gates
//! with a worker polling, each gate's hold pending then approved in the approvals list; with none,
//! a start is 503 naming the queue and no run is recorded; one decision script gives the same gate
//! answers, status history, phase attempts and the same 28 notices on both engines; a worker killed
//! mid-phase has the attempt retried by Temporal (the same attempt, the run completes once, flow-state
//! `live: false` meanwhile); a gateway killed at a gate loses nothing (the approval lands on the
//! new one); every recorded decision kind replays, and a history naming another activity does not.
//! Bench: `cargo xtask bench runs --engine temporal` (`crates/bins/benches/engines.rs`).

pub mod activity;
pub mod engine;
pub mod replay;
pub mod trace_context;
pub mod worker;
pub mod workflow;

pub use activity::{PhaseActivities, PhaseAttempt};
pub use engine::{TemporalEngine, TemporalSettings};
pub use worker::{WorkerError, connect, run_worker};
pub use workflow::{DesignFlowInput, DesignFlowSnapshot, DesignFlowWorkflow, RunSignal};

/// The task queue design-flow workflows and their phase activities run on (seed FORGE-401).
pub const TASK_QUEUE: &str = "metaforge-design-flows";

/// Where the Temporal frontend listens when `TEMPORAL_HOST` is unset.
pub const DEFAULT_TEMPORAL_HOST: &str = "127.0.0.1:7233";

/// The Temporal namespace runs live in (the dev server's default).
pub const NAMESPACE: &str = "default";
