//! The agent loop (issue 15): one turn of a chat or a phase brain calling tools, over ports only.
//!
//! A turn runs the native tool-calling loop or the JSON-ReAct loop (chosen from the serving
//! model's capability, or forced), with the rules of the domain live on every step: schema
//! pre-validation and gating by caller class before any hold (`tool_gating`), holds parked in the
//! one approval ledger, the same-turn duplicate guard, structured error envelopes, loud
//! truncation, the history budget and within-turn folding (`compaction`), the provider's tool cap
//! (`tool_cap`) and the grounding guard on the final reply (`grounding`). Planner → Generator →
//! Evaluator runs turns with the `planner`, `generator` and `evaluator` role slots.
//!
//! No HTTP here: the model is the [`TurnModel`] port, tools are [`ToolBox`] over the tool ports,
//! and a turn reports through typed [`TurnEvent`]s that a chat thread forwards as SSE.

pub mod events;
pub mod exec;
pub mod model;
pub mod pge;
pub mod react;
pub mod tools;
pub mod turn;

pub use events::{EventSink, TurnEvent};
pub use exec::{APPROVAL_TOOL_REFUSED_UNATTENDED, ApprovalMode, CallRecord};
pub use model::{
    ModelAnswer, ModelCall, ModelError, ModelProfile, ModelTarget, ProviderModels, TurnModel, UsageScope,
};
pub use pge::{Evaluation, PgeConfig, PgeOutcome, Verdict, parse_evaluation};
pub use tokio_util::sync::CancellationToken;
pub use tools::{AgentTool, ToolBox, ToolBoxes, ToolPolicy};
pub use turn::{
    AGENT_LOOP_ENV, Agent, AgentPorts, LoopMode, LoopModeError, TurnConfig, TurnError, TurnFailure,
    TurnInput, TurnOutcome,
};
