//! Design-flow runs (FORGE-401/474/495/500): one pure state machine both engines drive.
//!
//! A run walks its frozen, hash-verified flow version one phase at a time in dependency order
//! (list order when no phase carries `depends_on`) and parks at each gate a person answers.
//! [`apply`] takes the frozen flow, the run's state and one event (time and ids inside it) and
//! returns the next state and the commands the engine carries out after persisting it, or a
//! [`RunRefusal`] and no change. The state is a serde value (`metaforge_ports::RunState`), so the
//! embedded engine persists it at every boundary and Temporal can replay it; the same flow, state
//! and event always give the same answer.
//!
//! - [`frozen`]: the verified flow version and its execution order.
//! - [`reducer`]: [`start`], [`apply`], [`resume`].
//! - [`gate`]: readiness findings, the decisions a gate allows, the approval reason.
//! - [`brief`]: the brief a phase attempt is given.
//! - [`refusal`]: why an event was refused.
//!
//! ```
//! use chrono::{TimeZone, Utc};
//! use metaforge_domain::flow::template;
//! use metaforge_domain::run::{FrozenFlow, start};
//! use metaforge_ports::{RunCommand, RunSettings};
//!
//! let flow = FrozenFlow::new("v1", template("mech_v1")?)?;
//! let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().ok_or("time")?;
//! let started = start(&flow, "run-1", RunSettings::default(), at)?;
//! assert!(matches!(&started.commands[..], [RunCommand::StartPhase { attempt: 1, .. }]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## `crates/domain/src/run` — the run state machine (issue 16; FORGE-401/474/495/500)
//!
//! One pure reducer both engines drive: `apply(frozen flow, state, event) -> Transition { state,
//! commands }` or a `RunRefusal` and no change; `start` builds the first state, `resume` gives the
//! commands that re-establish the last boundary after a restart. The value types are the ports'
//! (`metaforge_ports::run_state`: `RunState`, `RunEvent`, `RunCommand`, `GateDecision`, `RunSettings`)
//! so engines persist them and the `FlowEngine` port returns them without depending on the domain.
//! `frozen` (`FrozenFlow`: an approved version, hash checked, re-freeze reproduces it, phases in
//! `flow::execution_order`) · `reducer` · `gate` (`readiness_findings`, `allowed_decisions`,
//! `approval_reason`) · `brief` (`phase_brief`, the one brief both intelligence modes get) ·
//! `refusal` (stable `code()`, `port_kind()`). Ports: `FlowEngine` (start, decide gate, state,
//! cancel; `RunView.live` says whether the state was read just now) and `PhaseBrain` (one attempt →
//! summary, deliverables recorded, usage; `PhaseFailure` configuration or retryable).
//! Driven by `app::runs::EmbeddedEngine` (below) and by the Temporal workflow of
//! `crates/adapters-temporal` (below), which calls the same reducer.
//! **Invariants** (table `fixtures/rules/run_reducer.json` via `crates/domain/tests/it/run_reducer.rs`;
//! properties in `crates/domain/tests/it/run_props.rs`):
//! - One phase at a time, in dependency order (list order when no phase carries `depends_on`, ties by
//!   list order). Time and ids come in with events; the same flow, state and event give the same answer.
//! - The reducer refuses a flow or a phase event of any version but the run's pinned `FlowRef`
//!   (version id + content hash); every `StartPhase` names the pinned version and the key
//!   `run:phase:attempt` (the client task id). A retryable failure re-runs the same attempt (same
//!   key) up to `phase_retries`; a configuration failure, or retries used up, fails the run once
//!   with `Phase '<id>' failed: <reason>`.
//! - A gate whose enforced required deliverables are not all recorded (by any phase that finished)
//!   is not ready: it parks with findings and allows no approve. An auto-approve gate that is ready
//!   passes and is recorded (`approver: auto`); one that is not ready parks for a person. A human
//!   gate passes only on a person's `approve`.
//! - `retry` (reason required) re-runs the gated phase as a new attempt with the reason and findings
//!   first; `rework` (reason required) names an earlier phase: it and every later phase re-run,
//!   earlier approvals stand, at most `rework_cap` per run. Expiry at or past the stored deadline is
//!   a rejection (`approver: deadline`). A flow change is applied only while the run is parked at a
//!   gate (the gate is withdrawn and re-evaluated under the new version); mid-phase it is refused.
//! - A completed, failed or canceled run refuses every event: it never reopens.

pub mod brief;
pub mod frozen;
pub mod gate;
pub mod reducer;
pub mod refusal;

pub use brief::phase_brief;
pub use frozen::FrozenFlow;
pub use gate::{allowed_decisions, approval_reason, gate_reason, readiness_findings};
pub use reducer::{Transition, apply, resume, start};
pub use refusal::RunRefusal;
