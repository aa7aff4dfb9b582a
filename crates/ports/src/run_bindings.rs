//! The run bindings the MCP sidecar's run tools go through (issue 16 item 7; FORGE-400/581/582):
//! start a run, read it, follow its flow state, answer its open gate, and list, claim and submit
//! its client tasks.
//!
//! Inside the gateway (`metaforge up`) they run in process over the run service; in a sidecar
//! started with `METAFORGE_GATEWAY_URL` they call the gateway's own `/v1/runs…` and
//! `/v1/client-tasks…` routes, so a run started from a plugin is the run `/v1/runs` lists and a
//! gate answered in the chat is the gate the dashboard shows decided. Like
//! [`crate::flow_bindings::FlowBindings`] for flows, both answer with the types below.
//!
//! **The views are port-level copies of the run service's views, in their wire shape** (the JSON
//! the gateway answers): an adapter depends on this crate only, so it cannot name the service's
//! own types, and a copy that *is* the wire shape lets both modes decode the same JSON into the
//! same value — the in-process bindings go through the very serialisation the gateway's routes
//! use, so the two modes cannot drift apart field by field. Model usage, whose totals are a domain
//! type, crosses as the JSON the service wrote. A refusal crosses typed ([`RunReply::Refused`],
//! with the service's code from its one code table), never as a bare error message.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::client_task_store::{ClientTask, ClientTaskStatus};
use crate::clock::Timestamp;
use crate::error::PortError;
use crate::run_ledger::{FlowEngineKind, IntelligenceMode, RunStatus};
use crate::run_state::{DecisionSurface, GateDecisionKind, PhaseStatus};

/// One run as lists show it (the service's `RunSummary`): what it runs on and where its record
/// says it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The run's id.
    pub id: String,
    /// The project it belongs to.
    pub project_id: Option<String>,
    /// The engine executing it.
    pub flow_engine: FlowEngineKind,
    /// Who does its phase work.
    pub intelligence: IntelligenceMode,
    /// The template the version came from.
    pub flow_template_id: String,
    /// That template's version.
    pub flow_version: String,
    /// The approved flow version the run is pinned to.
    pub flow_version_id: String,
    /// That version's content hash.
    pub flow_content_hash: String,
    /// Where the record says the run is.
    pub status: RunStatus,
    /// While it waits at a gate: the gate's name and its check summary.
    pub approval_reason: Option<String>,
    /// The reason of the current status.
    pub reason: Option<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When its status last changed.
    pub updated_at: Timestamp,
}

/// One entry of a run's status history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStatusEntry {
    /// The status entered.
    pub status: RunStatus,
    /// Why.
    pub reason: Option<String>,
    /// When.
    pub at: Timestamp,
}

/// One run with its history and its model usage (the service's `RunDetail`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDetail {
    /// The record.
    #[serde(flatten)]
    pub run: RunSummary,
    /// Every status it entered, oldest first.
    pub history: Vec<RunStatusEntry>,
    /// The usage totals by phase, role and model as the service wrote them (unknown counts and
    /// costs null, never 0); absent when the usage store could not be read.
    pub usage: Option<Value>,
    /// Why `usage` is absent.
    pub usage_unavailable: Option<String>,
}

/// One phase of a run's frozen version with where the run is in it (the service's `PhaseView`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseView {
    /// The phase id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// `pending`, `running`, `awaiting_gate`, `passed`, `failed`, `canceled`, or `unknown`.
    pub status: String,
    /// The attempt last started, when known.
    pub attempt: Option<u32>,
    /// Its gate's name, when it has one.
    pub gate: Option<String>,
    /// True when its gate is an auto-approved checkpoint.
    pub auto_approve: bool,
    /// What its gate demands recorded.
    pub required_deliverables: Vec<String>,
    /// What its latest finished attempt recorded in the twin.
    pub deliverables: Vec<String>,
    /// Its latest summary, when known.
    pub summary: Option<String>,
}

/// The gate a run is parked at, with the decisions it allows now (the service's `GateView`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateView {
    /// The gated phase.
    pub phase: String,
    /// The gate's name.
    pub gate: String,
    /// False when a required deliverable is not recorded.
    pub ready: bool,
    /// What the readiness check found missing.
    pub findings: Vec<String>,
    /// The decisions it allows now, as the run's state machine computed them.
    pub allowed: Vec<GateDecisionKind>,
    /// True for an auto-approved checkpoint that parked because it was not ready.
    pub auto_approve: bool,
    /// Its approval reason.
    pub approval_reason: String,
    /// The gate hold in the approval ledger, once parked.
    pub approval_id: Option<String>,
    /// When it opened.
    pub opened_at: Timestamp,
    /// When it expires as a rejection, if ever.
    pub deadline: Option<Timestamp>,
}

/// A run phase by phase (the service's `FlowStateView`, FORGE-396): the frozen version's phases
/// with their statuses, the open gate, and whether the engine was asked just now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowStateView {
    /// The run.
    pub run_id: String,
    /// The engine holding it.
    pub flow_engine: FlowEngineKind,
    /// True when the state was read from the engine just now.
    pub live: bool,
    /// Why it is not live, when it is not.
    pub reason: Option<String>,
    /// The run's status as the engine reports it, or `unknown`.
    pub status: String,
    /// The template the version came from.
    pub flow_template_id: String,
    /// That template's version.
    pub flow_version: String,
    /// The version whose phases are listed.
    pub flow_version_id: String,
    /// That version's content hash.
    pub flow_content_hash: String,
    /// The version's phases in execution order.
    pub phases: Vec<PhaseView>,
    /// Why no phases are listed.
    pub phases_unavailable: Option<String>,
    /// The gate the run is parked at (only when live).
    pub gate: Option<GateView>,
    /// Why the run ended, when it failed or was canceled.
    pub error: Option<String>,
    /// The usage totals as the service wrote them; absent when unreadable.
    pub usage: Option<Value>,
    /// Why `usage` is absent.
    pub usage_unavailable: Option<String>,
}

impl FlowStateView {
    /// The phase in flight, when the state is live and one is running.
    pub fn running_phase(&self) -> Option<&PhaseView> {
        if !self.live {
            return None;
        }
        let running = PhaseStatus::Running.as_str();
        self.phases.iter().find(|p| p.status == running)
    }
}

/// A request to start a run: on a stored approved version, or on a shipped template.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartRunInput {
    /// The approved version to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_version_id: Option<String>,
    /// A shipped template to run as it is (default `design_v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_id: Option<String>,
    /// The project the run belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// `server` or `client`; absent: the deployment default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intelligence: Option<String>,
}

/// Which runs to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs of this project.
    pub project_id: Option<String>,
}

/// A person's answer to a run's open gate. The approver is not here: the bindings are given the
/// authenticated identity beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateAnswerInput {
    /// One of the decisions the open gate allows.
    pub decision: GateDecisionKind,
    /// Why (the run's state machine requires one for retry and rework).
    pub reason: Option<String>,
    /// The earlier phase a rework goes back to.
    pub phase: Option<String>,
    /// The gated phase the person saw (a stale answer for another gate is refused).
    pub gate_phase: Option<String>,
    /// Where the person answered (`chat` for `flow.await_gate`).
    pub surface: DecisionSurface,
}

/// Who takes or hands back a client task: the authenticated identity (what the task store
/// records as the claimant, and the only one that may submit) and the MCP session it works in
/// (kept beside the claim, so the twin's run scopes find which of the identity's sessions
/// writes for the task).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimant {
    /// The authenticated identity (`local` when the transport authenticated nobody).
    pub identity: String,
    /// The MCP session (`X-MetaForge-Session`, else the transport's session id).
    pub session: Option<String>,
}

/// A client's hand-back of a phase.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSubmission {
    /// What the phase did and what is open.
    pub summary: String,
    /// Anything else the client reports.
    pub details: Option<Value>,
}

/// The class of a refusal, as a door answers it: `Invalid` (HTTP 422) or `Conflict` (409).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalKind {
    /// A field is not acceptable; nothing was done.
    Invalid,
    /// The run's state does not allow it now (an unapproved version, a decision the gate does
    /// not allow, a run that ended); nothing was done.
    Conflict,
}

/// The run service refused a request; nothing was recorded. The same refusal carries the same
/// code in process and through the gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRefused {
    /// Invalid or conflict.
    pub kind: RefusalKind,
    /// The stable code (`not_approved`, `not_allowed`, `invalid_field`, `missing`, …).
    pub code: String,
    /// A sentence for people.
    pub message: String,
    /// The particulars (the field, the decisions the open gate allows, …).
    pub details: Option<Value>,
}

/// A request the run service answered: done, or refused with its code.
#[derive(Debug, Clone, PartialEq)]
pub enum RunReply<T> {
    /// Done.
    Done(T),
    /// Refused; nothing was recorded.
    Refused(RunRefused),
}

/// The run use cases, in process or through the gateway. `Err` is a failure to answer
/// (`NotFound` for an unknown run or task, `Conflict` for a task not in the state the call needs,
/// `Unavailable` when the engine or the gateway cannot be reached); a refusal by the run service
/// is [`RunReply::Refused`].
#[async_trait]
pub trait RunBindings: Send + Sync {
    /// Starts a run (an unapproved, corrupt or unreproducible version is refused; nothing is
    /// recorded then).
    async fn start(&self, request: StartRunInput) -> Result<RunReply<RunDetail>, PortError>;

    /// Runs, oldest first.
    async fn list(&self, query: RunQuery) -> Result<Vec<RunSummary>, PortError>;

    /// One run.
    async fn get(&self, run_id: &str) -> Result<RunDetail, PortError>;

    /// The run phase by phase, asked of its engine now.
    async fn flow_state(&self, run_id: &str) -> Result<FlowStateView, PortError>;

    /// Answers the run's open gate as `approver` (the authenticated identity); the flow state
    /// right after. A decision the gate does not allow is refused naming the allowed ones.
    async fn answer_gate(
        &self,
        run_id: &str,
        answer: GateAnswerInput,
        approver: &str,
    ) -> Result<RunReply<FlowStateView>, PortError>;

    /// Client tasks, oldest first, optionally of one run and/or in one status.
    async fn client_tasks(
        &self,
        run_id: Option<&str>,
        status: Option<ClientTaskStatus>,
    ) -> Result<Vec<ClientTask>, PortError>;

    /// One client task.
    async fn client_task(&self, id: &str) -> Result<ClientTask, PortError>;

    /// Takes an open task (`Conflict` unless it is open).
    async fn claim_client_task(
        &self,
        id: &str,
        claimant: &Claimant,
    ) -> Result<RunReply<ClientTask>, PortError>;

    /// Hands a claimed task back (`Conflict` unless the claimant holds it; an empty summary is
    /// refused).
    async fn submit_client_task(
        &self,
        id: &str,
        claimant: &Claimant,
        submission: TaskSubmission,
    ) -> Result<RunReply<ClientTask>, PortError>;
}
