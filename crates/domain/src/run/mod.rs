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
