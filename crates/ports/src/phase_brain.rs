//! The phase brain (FORGE-475/581): whatever does one phase's work — the server's agent loop
//! (planner, generator, evaluator) or the connected MCP client through a client task. The engine
//! hands it a brief and gets back a summary and what was *recorded* in the twin; the gate then
//! checks the record, never the prose, so a deliverable described but not recorded fails it.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::run_ledger::IntelligenceMode;
use crate::run_state::{PhaseFailureKind, PhaseFeedback};
use crate::usage::UsageEvent;

/// An earlier phase's summary, given to later phases as context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EarlierSummary {
    /// The earlier phase.
    pub phase: String,
    /// What its brain reported.
    pub summary: String,
}

/// Everything one phase attempt is told, built once by the domain from the frozen flow and the
/// run state so both intelligence modes get the same brief.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseBrief {
    /// The run.
    pub run_id: String,
    /// The project the run belongs to (tools are scoped to it).
    pub project_id: Option<String>,
    /// The frozen version the phase belongs to.
    pub flow_version_id: String,
    /// Who does the work.
    pub intelligence: IntelligenceMode,
    /// The phase id.
    pub phase: String,
    /// Its title.
    pub title: String,
    /// The goal in one sentence, built from the flow.
    pub goal: String,
    /// The disciplines the phase's tools are scoped to.
    pub disciplines: Vec<String>,
    /// What the phase is expected to produce.
    pub expected_artifacts: Vec<String>,
    /// What its gate demands recorded.
    pub required_deliverables: Vec<String>,
    /// The named parts (deliverable slots) it writes.
    pub items: Vec<String>,
    /// The flow's id and title, for context.
    pub flow_context: String,
    /// The pinned `provider:model` route, when the phase has one.
    pub model: Option<String>,
    /// The attempt.
    pub attempt: u32,
    /// `run:phase:attempt`.
    pub key: String,
    /// Retry or rework feedback, given first.
    pub feedback: Option<PhaseFeedback>,
    /// Summaries of the phases that passed before it, in order.
    pub earlier: Vec<EarlierSummary>,
}

/// What one finished phase attempt hands back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseOutcome {
    /// The brain's summary for the reviewer and for later phases.
    pub summary: String,
    /// The deliverables recorded in the run's twin branch (artifact names).
    pub deliverables: Vec<String>,
    /// The model calls it made (empty for a client-mode phase).
    pub usage: Vec<UsageEvent>,
}

/// Why a phase attempt produced nothing. The kind decides whether running it again could help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct PhaseFailure {
    /// Configuration (fails the run once) or retryable.
    pub kind: PhaseFailureKind,
    /// Why, as the run's error will read `Phase '<id>' failed: <reason>`.
    pub reason: String,
}

/// Does one phase attempt. Called again with the same `key` after a restart; an implementation
/// finds the work (client task, submission) the first call started instead of duplicating it.
#[async_trait]
pub trait PhaseBrain: Send + Sync {
    /// Runs the attempt described by `brief`.
    async fn run_phase(&self, brief: PhaseBrief) -> Result<PhaseOutcome, PhaseFailure>;
}
