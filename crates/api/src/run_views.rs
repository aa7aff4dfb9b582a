//! What the run service hands its doors (FORGE-396/474/485): a run's record as the API shows it,
//! its flow state (the frozen version's phases with their statuses, the open gate), and client
//! tasks. One home for these shapes: the run service returns them, the gateway serves them, the
//! MCP sidecar's run tools read them in process, and the sidecar's remote mode decodes them from
//! the gateway — so a run started or watched through one door reads the same through the other. Unknown is never shown as a
//! value: a status the engine could not be asked for reads `unknown`, usage that could not be
//! read is absent with the reason beside it.

use metaforge_domain::usage::UsageTotals;
use metaforge_ports::{
    ClientTask, ClientTaskStatus, FlowEngineKind, GateDecisionKind, IntelligenceMode, PhaseStatus, RunRecord,
    RunStatus, Timestamp,
};
use serde::{Deserialize, Serialize};

/// The status a flow-state view shows for a run or a phase whose engine could not be asked
/// (FORGE-396): never `pending`, which would make an outage look like a flow not yet started.
pub const UNKNOWN_STATUS: &str = "unknown";

/// One run as lists show it: what it runs on (engine, template, version id and hash, FORGE-474)
/// and where its record says it is (FORGE-485).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunSummary {
    /// The run's id (uuid v7).
    pub id: String,
    /// The project it belongs to.
    pub project_id: Option<String>,
    /// The engine executing it: `embedded`, `temporal` or `in_process`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub flow_engine: FlowEngineKind,
    /// Who does its phase work: `server` or `client`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub intelligence: IntelligenceMode,
    /// The template the version came from.
    pub flow_template_id: String,
    /// That template's version.
    pub flow_version: String,
    /// The stored, approved flow version the run is pinned to.
    pub flow_version_id: String,
    /// That version's content hash (SHA-256 of its canonical JSON), verified at start.
    pub flow_content_hash: String,
    /// `queued`, `running`, `awaiting_approval`, `completed`, `failed` or `canceled`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub status: RunStatus,
    /// While the run waits at a gate: the gate's name and its check summary.
    pub approval_reason: Option<String>,
    /// The reason of the current status (the approval reason, a failure, a cancel).
    pub reason: Option<String>,
    /// When the run was created.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When its status last changed.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Timestamp,
}

impl From<&RunRecord> for RunSummary {
    fn from(record: &RunRecord) -> Self {
        let approval_reason = match record.status {
            RunStatus::AwaitingApproval => record.reason.clone(),
            RunStatus::Queued
            | RunStatus::Running
            | RunStatus::Completed
            | RunStatus::Failed
            | RunStatus::Canceled => None,
        };
        Self {
            id: record.id.clone(),
            project_id: record.project_id.clone(),
            flow_engine: record.flow_engine,
            intelligence: record.intelligence,
            flow_template_id: record.template_id.clone(),
            flow_version: record.template_version.clone(),
            flow_version_id: record.flow_version_id.clone(),
            flow_content_hash: record.content_hash.clone(),
            status: record.status,
            approval_reason,
            reason: record.reason.clone(),
            created_at: record.created_at,
            updated_at: record.updated_at,
        }
    }
}

/// One entry of a run's status history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunStatusEntry {
    /// The status entered.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub status: RunStatus,
    /// Why.
    pub reason: Option<String>,
    /// When.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: Timestamp,
}

/// One run with its history and its model usage (FORGE-476): `GET /v1/runs/{id}`, `run.get`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunDetail {
    /// The record.
    #[serde(flatten)]
    pub run: RunSummary,
    /// Every status it entered, oldest first.
    pub history: Vec<RunStatusEntry>,
    /// Totals of the model calls made for this run, by phase, role and `provider:model`
    /// (unknown counts and costs null, never 0); absent when the usage store could not be read.
    pub usage: Option<UsageTotals>,
    /// Why `usage` is absent.
    pub usage_unavailable: Option<String>,
}

/// One phase of a run's frozen version, with where the run is in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PhaseView {
    /// The phase id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// `pending`, `running`, `awaiting_gate`, `passed`, `failed`, `canceled`, or `unknown` when the
    /// engine could not be asked.
    pub status: String,
    /// The attempt last started (0: never), when known.
    pub attempt: Option<u32>,
    /// Its gate's name, when it has one.
    pub gate: Option<String>,
    /// True when its gate is an auto-approved checkpoint.
    pub auto_approve: bool,
    /// What its gate demands recorded.
    pub required_deliverables: Vec<String>,
    /// What its latest finished attempt recorded in the twin (empty when unknown).
    pub deliverables: Vec<String>,
    /// Its brain's summary of the latest finished attempt, when known.
    pub summary: Option<String>,
}

/// The gate a run is parked at, with the decisions it allows now (computed by the run's state
/// machine, never by a door).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GateView {
    /// The gated phase.
    pub phase: String,
    /// The gate's name.
    pub gate: String,
    /// False when a required deliverable is not recorded (then it cannot be approved).
    pub ready: bool,
    /// What the readiness check found missing.
    pub findings: Vec<String>,
    /// The decisions it allows now (`approve`, `reject`, `retry`, `rework`).
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub allowed: Vec<GateDecisionKind>,
    /// True for an auto-approved checkpoint that parked because it was not ready.
    pub auto_approve: bool,
    /// Its approval reason: name and check summary.
    pub approval_reason: String,
    /// The gate hold in the approval ledger (kind `gate`), once parked.
    pub approval_id: Option<String>,
    /// When it opened.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub opened_at: Timestamp,
    /// When it expires as a rejection, if ever.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub deadline: Option<Timestamp>,
}

impl From<&metaforge_ports::OpenGate> for GateView {
    fn from(gate: &metaforge_ports::OpenGate) -> Self {
        Self {
            phase: gate.phase.clone(),
            gate: gate.gate.clone(),
            ready: gate.ready,
            findings: gate.findings.clone(),
            allowed: gate.allowed.clone(),
            auto_approve: gate.auto_approve,
            approval_reason: metaforge_domain::run::gate_reason(gate),
            approval_id: gate.approval_id.clone(),
            opened_at: gate.opened_at,
            deadline: gate.deadline,
        }
    }
}

/// A run phase by phase (FORGE-396): the FROZEN version's phases (never the template's), each
/// with its status, the open gate, and whether the engine was asked just now (`live`). When it
/// could not be, the phases still list — the run's shape is known — and every status reads
/// `unknown`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FlowStateView {
    /// The run.
    pub run_id: String,
    /// The engine holding it.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub flow_engine: FlowEngineKind,
    /// True when the state below was read from the engine just now.
    pub live: bool,
    /// Why it is not live, when it is not.
    pub reason: Option<String>,
    /// The run's status as the engine reports it, or `unknown` when it could not be asked.
    pub status: String,
    /// The template the version came from.
    pub flow_template_id: String,
    /// That template's version.
    pub flow_version: String,
    /// The version whose phases are listed.
    pub flow_version_id: String,
    /// That version's content hash.
    pub flow_content_hash: String,
    /// The version's phases in execution order (empty when the version cannot be read).
    pub phases: Vec<PhaseView>,
    /// Why no phases are listed: the run's version could not be read back or verified.
    pub phases_unavailable: Option<String>,
    /// The gate the run is parked at (only when live).
    pub gate: Option<GateView>,
    /// Why the run ended, when it failed or was canceled (only when live).
    pub error: Option<String>,
    /// The run's model usage by phase, role and model (absent when the store could not be read).
    pub usage: Option<UsageTotals>,
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

/// A client-mode phase posted for the connected MCP client (FORGE-581/582).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClientTaskView {
    /// `run:phase:attempt`.
    pub id: String,
    /// The run.
    pub run_id: String,
    /// The phase.
    pub phase: String,
    /// The attempt.
    pub attempt: u32,
    /// `open`, `claimed`, `submitted` or `withdrawn`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub status: ClientTaskStatus,
    /// Who claimed it (an authenticated identity).
    pub claimed_by: Option<String>,
    /// The brief a phase brain would have been given.
    pub brief: serde_json::Value,
    /// What the client handed back (`summary`, optional `details`).
    pub submission: Option<serde_json::Value>,
    /// When it was first posted.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When it last changed.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Timestamp,
}

impl From<ClientTask> for ClientTaskView {
    fn from(task: ClientTask) -> Self {
        Self {
            id: task.id,
            run_id: task.run_id,
            phase: task.phase,
            attempt: task.attempt,
            status: task.status,
            claimed_by: task.claimed_by,
            brief: task.brief,
            submission: task.submission,
            created_at: task.created_at,
            updated_at: task.updated_at,
        }
    }
}
