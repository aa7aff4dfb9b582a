//! Design-flow runs as services (issue 16): the embedded engine and the phase brains.
//!
//! - [`EmbeddedEngine`]: `metaforge_ports::FlowEngine` (kind `embedded`) over the run ledger,
//!   the approval ledger, the client-task store, the twin and the event bus. It drives the pure
//!   reducer of `metaforge_domain::run` — never re-deciding what it decides — persisting every
//!   transition before acting on it; [`EmbeddedEngine::resume_all`] picks runs up after a restart;
//!   [`EmbeddedEngine::subscribe`] streams a run's [`RunNotice`]s (SSE).
//! - [`lead`]: which process drives the embedded runs of a shared run ledger (the holder of its
//!   engine lease); the others stand by and take over when it lapses.
//! - [`ServerPhaseBrain`] (the agent loop's P→G→E) and [`ClientPhaseBrain`] (a client task the
//!   MCP client claims and submits): `metaforge_ports::PhaseBrain`, picked by the run's
//!   intelligence; both report the deliverables the twin records on `run/<id>`.
//! - [`UnavailableEngine`]: an engine that is configured but not here (Temporal, issue 17): 503.
//! - [`settings`]: `METAFORGE_FLOW_ENGINE` and `METAFORGE_INTELLIGENCE`, parsed strictly.
//! - [`RunService`]: the use cases both doors call (start, list, get, flow state, answer a gate,
//!   cancel, events, client tasks) over a [`RunEngine`] (the `FlowEngine` port plus the engine's
//!   notice stream and worker state) and the ledgers; its views are in [`views`].

mod brains;
mod driver;
mod engine;
mod holds;
mod leadership;
mod notices;
mod service;
pub mod settings;
mod unavailable;
pub mod views;

pub use brains::{
    ClientPhaseBrain, DEFAULT_CLIENT_TASK_POLL, PHASE_BRAIN_ROLE, PHASE_SYSTEM_PROMPT, ServerBrainSettings,
    ServerPhaseBrain, recorded_deliverables, render_brief,
};
pub use engine::{EmbeddedEngine, EngineOptions, EnginePorts, PhaseBrains, ResumeReport};
pub use holds::GateHolds;
pub use leadership::{EngineLeadership, LeadStart, lead};
pub use notices::{RunEvents, RunNotice, RunNoticeKind, bus_event_of, notices_of};
pub use service::{
    ClientTaskSubmission, GateAnswerRequest, RunEngine, RunFilter, RunNoticeStream, RunService,
    RunServiceError, RunServicePorts, RunServiceSettings, StartRunRequest, WorkerHealth, event_id,
    parse_event_id,
};
pub use settings::{
    RunSettingError, parse_flow_engine, parse_gate_timeout, parse_intelligence, resolve_intelligence,
};
pub use unavailable::UnavailableEngine;
