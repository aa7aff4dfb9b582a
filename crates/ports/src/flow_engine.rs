//! The flow engine (FORGE-401/474): what runs a frozen, approved flow version phase by phase and
//! parks at its gates. Embedded (the default, no server) and Temporal implement the same port so
//! the gateway, the MCP tools and the CLI start, answer and watch runs without knowing which engine
//! holds them, and so a missing engine is an error rather than a silent fall-through to another.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::error::PortError;
use crate::flow_version::FlowVersionRecord;
use crate::run_ledger::{FlowEngineKind, IntelligenceMode, RunRecord, RunStatus};
use crate::run_state::{DecisionSurface, GateDecision, RunSettings, RunState};

/// Everything a run starts from. The version travels whole (frozen text and hash) so the engine
/// runs exactly that version and never a template it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartRun {
    /// The new run's id (uuid v7, from the id port).
    pub run_id: String,
    /// The project the run belongs to.
    pub project_id: Option<String>,
    /// Who does its phase work; fixed for the run.
    pub intelligence: IntelligenceMode,
    /// The approved version it runs; its hash is verified before anything is recorded.
    pub version: FlowVersionRecord,
    /// Its bounds (rework cap, retries, gate timeout).
    pub settings: RunSettings,
}

impl StartRun {
    /// The ledger record of the run this request starts on `engine`, in its first status: one
    /// home for what a new run's record pins (version, hash, intelligence) on every engine.
    pub fn record(&self, engine: FlowEngineKind, status: RunStatus, now: Timestamp) -> RunRecord {
        RunRecord {
            id: self.run_id.clone(),
            project_id: self.project_id.clone(),
            flow_engine: engine,
            intelligence: self.intelligence,
            template_id: self.version.template_id.clone(),
            template_version: self.version.template_version.clone(),
            flow_version_id: self.version.id.clone(),
            content_hash: self.version.content_hash.clone(),
            status,
            reason: None,
            history: Vec::new(),
            created_at: now,
            updated_at: now,
        }
    }
}

/// A person's answer to a run's open gate, as the approval route or `flow.await_gate` relays it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateAnswer {
    /// The gated phase the person saw (a stale answer for another gate is refused).
    pub phase: String,
    /// The decision.
    pub decision: GateDecision,
    /// The authenticated identity answering, never a request field.
    pub approver: String,
    /// Where the person answered (the API, or an MCP client's chat).
    #[serde(default)]
    pub surface: DecisionSurface,
}

/// A run's live state as its engine reports it. `live: false` says the engine could not be asked,
/// so a reader shows "unknown" instead of mistaking an outage for "pending" (FORGE-396).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunView {
    /// The engine holding the run.
    pub engine: FlowEngineKind,
    /// True when `state` was read from the engine just now.
    pub live: bool,
    /// Why it is not live, when it is not.
    pub reason: Option<String>,
    /// The state, when it could be read.
    pub state: Option<RunState>,
}

/// Runs design flows. Every method names the run; the engine persists each transition before
/// acting on it, so an answer it returned is never lost to a restart.
#[async_trait]
pub trait FlowEngine: Send + Sync {
    /// Which engine this is (recorded on every run as `flow_engine`).
    fn kind(&self) -> FlowEngineKind;

    /// Starts a run on an approved, hash-verified version. An unapproved or corrupt version is a
    /// `Conflict`/`Corrupt` and nothing is recorded; an unreachable engine is `Unavailable`.
    async fn start(&self, request: StartRun) -> Result<RunState, PortError>;

    /// Answers the run's open gate. A decision the gate does not allow, or one for a gate that is
    /// not open, is a `Conflict` naming the gate and the allowed decisions.
    async fn decide_gate(&self, run_id: &str, answer: GateAnswer) -> Result<RunState, PortError>;

    /// The run's state as the engine holds it now (`NotFound` for an unknown run).
    async fn state(&self, run_id: &str) -> Result<RunView, PortError>;

    /// Cancels the run. A terminal run is a `Conflict`: it is never reopened or re-ended.
    async fn cancel(&self, run_id: &str, by: &str, reason: Option<String>) -> Result<RunState, PortError>;
}

/// Whether the engine's worker can run design flows now (`/health`'s `design_flow_worker`, the
/// seed's `ok`, `absent`, `unknown`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerHealth {
    /// Runs are driven.
    Ok,
    /// Nothing drives runs (the engine has not started, was stopped, or is not built here).
    Absent {
        /// Why.
        reason: String,
    },
    /// The engine could not be asked.
    Unknown {
        /// Why.
        reason: String,
    },
}

impl WorkerHealth {
    /// `ok`, `absent` or `unknown`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Absent { .. } => "absent",
            Self::Unknown { .. } => "unknown",
        }
    }

    /// Why it is not ok.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Ok => None,
            Self::Absent { reason } | Self::Unknown { reason } => Some(reason),
        }
    }
}

/// A flow engine whose runs an outside workflow service drives (Temporal): what the services read
/// to follow each run in this deployment — its transitions, to carry out their effects here — and
/// whether anything drives runs now.
#[async_trait]
pub trait DrivenRuns: FlowEngine {
    /// The run's transitions after sequence number `after`, oldest first (one page at most; ask
    /// again from the last one's number for more).
    async fn transitions_after(
        &self,
        run_id: &str,
        after: u64,
    ) -> Result<Vec<crate::RunTransition>, PortError>;

    /// Brings the run record in line with the workflow's `state`.
    async fn reconcile(&self, state: &RunState);

    /// The W3C trace context of the request that started the run, when it carried one.
    async fn traceparent(&self, run_id: &str) -> Option<String>;

    /// Whether a worker drives runs now.
    async fn worker(&self) -> WorkerHealth;
}
