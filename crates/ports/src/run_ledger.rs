//! The run ledger (FORGE-485): the gateway's record of a design-flow run, a cache of the
//! workflow that carries what the run was started on and every status it passed through.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::error::PortError;
use crate::run_state::{RunCommand, RunEvent, RunState};

/// A run's status. Completed, failed and canceled are terminal and never reopened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Accepted, the workflow not yet started.
    Queued,
    /// The workflow is running.
    Running,
    /// Parked at a gate, waiting for a person.
    AwaitingApproval,
    /// Finished successfully.
    Completed,
    /// Finished with an error.
    Failed,
    /// Stopped by a person.
    Canceled,
}

impl RunStatus {
    /// The snake_case name used in JSON and storage.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }

    /// Parses the name written by [`RunStatus::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "queued" => Self::Queued,
            "running" => Self::Running,
            "awaiting_approval" => Self::AwaitingApproval,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "canceled" => Self::Canceled,
            _ => return None,
        })
    }

    /// True for the states a run never leaves.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Canceled)
    }
}

/// Which engine executes the run (`METAFORGE_FLOW_ENGINE`); recorded so a restart knows whom to ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowEngineKind {
    /// The embedded engine, durable at phase and gate boundaries.
    Embedded,
    /// Temporal.
    Temporal,
    /// The in-process executor (test double engine).
    InProcess,
}

impl FlowEngineKind {
    /// The snake_case name used in JSON and storage.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Embedded => "embedded",
            Self::Temporal => "temporal",
            Self::InProcess => "in_process",
        }
    }

    /// Parses the name written by [`FlowEngineKind::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "embedded" => Self::Embedded,
            "temporal" => Self::Temporal,
            "in_process" => Self::InProcess,
            _ => return None,
        })
    }
}

/// Who does a run's phase work (FORGE-581): fixed when the run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntelligenceMode {
    /// A model the server calls.
    Server,
    /// The connected MCP client, through client tasks.
    Client,
}

impl IntelligenceMode {
    /// The snake_case name used in JSON and storage.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Server => "server",
            Self::Client => "client",
        }
    }

    /// Parses the name written by [`IntelligenceMode::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "server" => Self::Server,
            "client" => Self::Client,
            _ => return None,
        })
    }
}

/// One entry of a run's status history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStatusChange {
    /// The status entered.
    pub status: RunStatus,
    /// Why (a gate's approval reason, a failure message).
    pub reason: Option<String>,
    /// When.
    pub at: Timestamp,
}

/// A design-flow run as the ledger keeps it: what it runs on, and where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// uuid v7.
    pub id: String,
    /// The project the run belongs to.
    pub project_id: Option<String>,
    /// The engine executing it.
    pub flow_engine: FlowEngineKind,
    /// Who does its phase work.
    pub intelligence: IntelligenceMode,
    /// The template the version came from.
    pub template_id: String,
    /// The template's version.
    pub template_version: String,
    /// The approved flow version it runs.
    pub flow_version_id: String,
    /// That version's content hash, pinned at start.
    pub content_hash: String,
    /// Current status.
    pub status: RunStatus,
    /// The reason for the current status (gate name and check summary, failure message).
    pub reason: Option<String>,
    /// Every status it entered, oldest first; the first entry is its creation.
    pub history: Vec<RunStatusChange>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When its status last changed.
    pub updated_at: Timestamp,
}

/// One step of a run as the engine persists it before acting on it: the event it applied, the
/// reducer's resulting state and the commands that state asks for. Transitions of a run are
/// numbered 1, 2, … without gaps; the log is append-only, so "what did the run do" is answered
/// from it, and an engine restarting re-acts from the last one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunTransition {
    /// The run.
    pub run_id: String,
    /// Its sequence number (1 = the run's start). Appending is compare-and-set on it.
    pub seq: u64,
    /// The event applied; `None` only for the start (seq 1).
    pub event: Option<RunEvent>,
    /// The reducer's state after the event.
    pub state: RunState,
    /// What the state asks the engine to do, in order.
    pub commands: Vec<RunCommand>,
    /// The record's reason after this step (a gate's approval reason, a failure message).
    pub reason: Option<String>,
    /// When it happened.
    pub at: Timestamp,
}

/// The run ledger.
#[async_trait]
pub trait RunLedger: Send + Sync {
    /// Records a new run. Its history is written by the ledger (one entry: its initial status);
    /// a supplied history is ignored. An existing id is a `Conflict`.
    async fn create(&self, record: RunRecord) -> Result<RunRecord, PortError>;

    /// One run (`NotFound` when absent).
    async fn get(&self, id: &str) -> Result<RunRecord, PortError>;

    /// Runs, oldest first, optionally only those in one status.
    async fn list(&self, status: Option<RunStatus>) -> Result<Vec<RunRecord>, PortError>;

    /// Moves a run to `status`. A terminal run is never reopened (`Conflict`, naming both
    /// states); moving to the status and reason it already has changes nothing.
    async fn set_status(
        &self,
        id: &str,
        status: RunStatus,
        reason: Option<String>,
        at: Timestamp,
    ) -> Result<RunRecord, PortError>;

    /// Records a new run together with its first transition (seq 1, no event), atomically: the
    /// run's status is the first state's. An existing id is a `Conflict`, a record and a
    /// transition that disagree (id, status, seq) are `Invalid`, and nothing is written.
    async fn create_started(&self, record: RunRecord, first: RunTransition) -> Result<RunRecord, PortError>;

    /// Appends the next transition of a run, compare-and-set on its sequence: `seq` must be
    /// exactly one past the latest (another writer got there first: `Conflict`, nothing written).
    /// The run's status and reason follow the transition's state in the same write (a status
    /// change enters the history); a terminal run takes no further transition (`Conflict`).
    async fn append_transition(&self, transition: RunTransition) -> Result<RunRecord, PortError>;

    /// The run's latest transition (`NotFound` for an unknown run; `None` for a run recorded
    /// without engine state, e.g. by [`RunLedger::create`]).
    async fn latest_transition(&self, run_id: &str) -> Result<Option<RunTransition>, PortError>;

    /// The run's transitions with a sequence number above `after_seq`, oldest first
    /// (`NotFound` for an unknown run).
    async fn transitions(&self, run_id: &str, after_seq: u64) -> Result<Vec<RunTransition>, PortError>;

    /// The engine carried out every effect of transition `seq` and the run needs nothing more
    /// until its next transition. Idempotent, never moves back; a `seq` past the latest is
    /// `Invalid`.
    async fn mark_settled(&self, run_id: &str, seq: u64) -> Result<(), PortError>;

    /// Runs with engine state an engine must pick up at start-up, oldest first: every run that
    /// is not terminal, and every terminal run whose last transition is not marked settled.
    async fn unsettled(&self) -> Result<Vec<RunRecord>, PortError>;

    /// Claims the publishing of a run's notices up to transition `upto`, compare-and-set on the
    /// run's published mark: when the mark is below `upto` it moves to `upto` and the claim
    /// answers where it was (the caller publishes the notices of the transitions after it);
    /// when it is already there or past, another process claimed them and the answer is
    /// `None`. So among gateways following one run on Temporal, each transition's notices are
    /// published by one of them, once (`NotFound` for an unknown run).
    async fn claim_published(&self, run_id: &str, upto: u64) -> Result<Option<u64>, PortError>;
}
