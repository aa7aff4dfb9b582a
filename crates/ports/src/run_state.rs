//! A design-flow run's state, the events that move it and the commands it asks an engine to
//! carry out (FORGE-401/474/495/500).
//!
//! These are plain serde values so every engine can persist them (the embedded engine writes the
//! state beside each transition in the run ledger; Temporal replays it from workflow history) and
//! so the [`crate::flow_engine::FlowEngine`] port can hand them out without depending on the
//! domain. The rules that move a state live once, in `metaforge_domain::run`; engines only persist
//! what it returns and carry out its commands. Time and ids come in with the events.

use serde::{Deserialize, Serialize};

use crate::client_task_store::client_task_id;
use crate::clock::Timestamp;
use crate::run_ledger::RunStatus;

/// The frozen flow version a run is pinned to: a version id and the content hash verified when
/// the run started (FORGE-474). Events for any other version are refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FlowRef {
    /// The approved flow version's id.
    pub version_id: String,
    /// SHA-256 of its canonical JSON.
    pub content_hash: String,
}

/// Per-run bounds fixed when the run starts, so a restart or a replay decides the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSettings {
    /// How many rework decisions (FORGE-500) one run may take; bounds the loops.
    pub rework_cap: u32,
    /// How many times a phase failing for a retryable reason re-runs (same attempt key) before the
    /// run fails.
    pub phase_retries: u32,
    /// How long a human gate stays open before it expires as a rejection; `None`: no deadline.
    pub gate_timeout_seconds: Option<u64>,
}

impl RunSettings {
    /// The default per-run rework cap.
    pub const DEFAULT_REWORK_CAP: u32 = 3;
    /// The default retries of a phase failing for a retryable reason (the seed's "3 retries").
    pub const DEFAULT_PHASE_RETRIES: u32 = 3;
}

impl Default for RunSettings {
    fn default() -> Self {
        Self {
            rework_cap: Self::DEFAULT_REWORK_CAP,
            phase_retries: Self::DEFAULT_PHASE_RETRIES,
            gate_timeout_seconds: None,
        }
    }
}

/// Where one phase of a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseStatus {
    /// Not started (or reset by a rework).
    Pending,
    /// A `StartPhase` was issued and no result came back yet.
    Running,
    /// Its work is done and its gate is open (or about to be evaluated).
    AwaitingGate,
    /// Its gate passed (approved, auto-approved, or the phase has no gate).
    Passed,
    /// It failed and ended the run.
    Failed,
    /// The run was canceled while it was in flight.
    Canceled,
}

impl PhaseStatus {
    /// The snake_case name used in JSON and in the live view.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::AwaitingGate => "awaiting_gate",
            Self::Passed => "passed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }
}

/// The kind of a gate decision, as the gate lists the ones it allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateDecisionKind {
    /// The phase's work is accepted; the run moves on.
    Approve,
    /// The run ends, failed.
    Reject,
    /// The phase runs again with the reason and the gate's findings first (FORGE-495).
    Retry,
    /// An earlier phase and every later one run again (FORGE-500).
    Rework,
}

impl GateDecisionKind {
    /// The snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Reject => "reject",
            Self::Retry => "retry",
            Self::Rework => "rework",
        }
    }
}

/// Where a person gave a gate decision (FORGE-582), recorded with it: the HTTP API (a dashboard,
/// a script) or the chat of an MCP client (`flow.await_gate`, which asked the person by
/// elicitation). Provenance only: it never changes what the decision does or who may give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionSurface {
    /// `POST /v1/runs/{id}/approval` (the default: every decision before surfaces were recorded).
    #[default]
    Api,
    /// An MCP client's chat, through `flow.await_gate`.
    Chat,
}

impl DecisionSurface {
    /// The snake_case name used in JSON and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Chat => "chat",
        }
    }
}

/// A person's answer to a gate (or, for an auto-approved checkpoint, the server's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum GateDecision {
    /// Accept the phase.
    Approve {
        /// Optional note.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// End the run.
    Reject {
        /// Optional note.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Run the gated phase again; the reason is given to the phase brain first.
    Retry {
        /// Why; required so the brain is told what to change.
        reason: String,
    },
    /// Run `phase` (earlier than the gated one) and every later phase again.
    Rework {
        /// The earlier phase to go back to.
        phase: String,
        /// Why; required.
        reason: String,
    },
}

impl GateDecision {
    /// The decision's kind.
    pub fn kind(&self) -> GateDecisionKind {
        match self {
            Self::Approve { .. } => GateDecisionKind::Approve,
            Self::Reject { .. } => GateDecisionKind::Reject,
            Self::Retry { .. } => GateDecisionKind::Retry,
            Self::Rework { .. } => GateDecisionKind::Rework,
        }
    }

    /// The reason given with it, if any.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Approve { reason } | Self::Reject { reason } => reason.as_deref(),
            Self::Retry { reason } | Self::Rework { reason, .. } => Some(reason),
        }
    }
}

/// Why a phase runs again, given to its brain before anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeedbackSource {
    /// A retry decision at the phase's own gate.
    Retry,
    /// A rework decision at a later gate.
    Rework,
}

/// The feedback a re-run phase gets first: the reason and the gate's findings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseFeedback {
    /// Retry or rework.
    pub source: FeedbackSource,
    /// The phase whose gate sent the work back.
    pub gate_phase: String,
    /// The gate's name.
    pub gate: String,
    /// The person's reason.
    pub reason: String,
    /// The gate's findings when it was decided (missing deliverables, …).
    pub findings: Vec<String>,
    /// Who decided.
    pub approver: String,
}

/// One phase of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseState {
    /// The phase id from the frozen flow.
    pub id: String,
    /// Where it is.
    pub status: PhaseStatus,
    /// The attempt last started (0: never started). Each retry or rework starts a new attempt;
    /// a retryable failure re-runs the same one, so its key finds the same client task.
    pub attempt: u32,
    /// Retryable failures of the current attempt.
    pub failures: u32,
    /// The summary its brain returned for the latest finished attempt.
    pub summary: Option<String>,
    /// The deliverables recorded by the latest finished attempt.
    pub deliverables: Vec<String>,
    /// Feedback for the next or current attempt (retry/rework reason and findings).
    pub feedback: Option<PhaseFeedback>,
    /// When the current attempt was started.
    pub started_at: Option<Timestamp>,
    /// When the latest attempt finished.
    pub finished_at: Option<Timestamp>,
}

impl PhaseState {
    /// A phase that has not started.
    pub fn pending(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            status: PhaseStatus::Pending,
            attempt: 0,
            failures: 0,
            summary: None,
            deliverables: Vec::new(),
            feedback: None,
            started_at: None,
            finished_at: None,
        }
    }
}

/// The gate a run is parked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenGate {
    /// The phase the gate sits on.
    pub phase: String,
    /// The gate's name.
    pub gate: String,
    /// False when a required deliverable is not recorded: the gate parks and cannot be approved.
    pub ready: bool,
    /// What the check found (empty when ready).
    pub findings: Vec<String>,
    /// The decisions this gate allows now.
    pub allowed: Vec<GateDecisionKind>,
    /// True for an auto-approved checkpoint that parked because it was not ready.
    pub auto_approve: bool,
    /// When it opened.
    pub opened_at: Timestamp,
    /// When it expires as a rejection, if ever.
    pub deadline: Option<Timestamp>,
    /// The approval the engine parked for it, once `GateOpened` reported it.
    pub approval_id: Option<String>,
    /// True once the engine reported the gate parked and the announcement was issued.
    pub announced: bool,
}

/// One gate decision the run took, human or automatic, kept for the audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateRecord {
    /// The gated phase.
    pub phase: String,
    /// The gate's name.
    pub gate: String,
    /// The phase attempt the decision was about.
    pub attempt: u32,
    /// The decision.
    pub decision: GateDecision,
    /// Who decided (`auto` for a checkpoint, `deadline` for an expiry).
    pub approver: String,
    /// True when the server passed an auto-approved checkpoint.
    pub auto: bool,
    /// The gate's findings at the time.
    pub findings: Vec<String>,
    /// When.
    pub at: Timestamp,
}

/// The approver recorded for an auto-approved checkpoint.
pub const AUTO_APPROVER: &str = "auto";
/// The approver recorded when a gate expires (a rejection nobody made).
pub const DEADLINE_APPROVER: &str = "deadline";

/// A run's whole state: everything an engine needs to persist to resume at the last boundary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    /// The run's id.
    pub run_id: String,
    /// The frozen version it runs.
    pub flow: FlowRef,
    /// Its status (shared with the run ledger).
    pub status: RunStatus,
    /// Its bounds.
    pub settings: RunSettings,
    /// Every phase of the frozen version, in execution order.
    pub phases: Vec<PhaseState>,
    /// The gate it is parked at.
    pub gate: Option<OpenGate>,
    /// Rework decisions taken so far.
    pub reworks_used: u32,
    /// Every gate decision, oldest first.
    pub decisions: Vec<GateRecord>,
    /// Why it ended, when it failed or was canceled.
    pub error: Option<String>,
    /// When it started.
    pub started_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

impl RunState {
    /// The phase with this id.
    pub fn phase(&self, id: &str) -> Option<&PhaseState> {
        self.phases.iter().find(|p| p.id == id)
    }

    /// The phase in flight, if any (a run executes one phase at a time).
    pub fn running_phase(&self) -> Option<&PhaseState> {
        self.phases.iter().find(|p| p.status == PhaseStatus::Running)
    }
}

/// Why a phase failed, which decides whether running it again could help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseFailureKind {
    /// Provider configuration (a missing key, an unusable model): fails the run once, no retry.
    Configuration,
    /// Anything a re-run could fix (a timeout, a dropped connection).
    Retryable,
}

/// Something that happened to a run, reported by an engine with its time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    /// The engine began executing a phase attempt (acknowledges `StartPhase`; idempotent).
    PhaseStarted {
        /// The version whose phase it runs.
        flow_version_id: String,
        /// The phase.
        phase: String,
        /// The attempt.
        attempt: u32,
        /// When.
        at: Timestamp,
    },
    /// A phase attempt finished; its deliverables as recorded in the twin.
    PhaseFinished {
        /// The version whose phase it ran.
        flow_version_id: String,
        /// The phase.
        phase: String,
        /// The attempt.
        attempt: u32,
        /// The brain's summary.
        summary: String,
        /// Deliverables recorded (not merely described).
        deliverables: Vec<String>,
        /// When.
        at: Timestamp,
    },
    /// A phase attempt failed.
    PhaseFailed {
        /// The version whose phase it ran.
        flow_version_id: String,
        /// The phase.
        phase: String,
        /// The attempt.
        attempt: u32,
        /// Configuration (fail once) or retryable.
        failure: PhaseFailureKind,
        /// Why.
        reason: String,
        /// When.
        at: Timestamp,
    },
    /// The engine parked the gate (approval recorded) and the run may announce it.
    GateOpened {
        /// The gated phase.
        phase: String,
        /// The parked approval, when the engine keeps one.
        #[serde(default)]
        approval_id: Option<String>,
        /// When.
        at: Timestamp,
    },
    /// A person answered the gate.
    GateDecided {
        /// The gated phase.
        phase: String,
        /// The answer.
        decision: GateDecision,
        /// The authenticated identity that answered.
        approver: String,
        /// Where the person answered (absent in transitions recorded before surfaces were: `api`).
        #[serde(default)]
        surface: DecisionSurface,
        /// When.
        at: Timestamp,
    },
    /// The gate's deadline passed: a rejection.
    GateExpired {
        /// The gated phase.
        phase: String,
        /// When (at or after the deadline).
        at: Timestamp,
    },
    /// An approved new version replaces the frozen flow; applied only at a gate boundary.
    FlowChanged {
        /// The new version's id.
        version_id: String,
        /// Its content hash.
        content_hash: String,
        /// Its canonical JSON, verified against the hash before it is used.
        frozen: String,
        /// When.
        at: Timestamp,
    },
    /// A person stopped the run.
    Canceled {
        /// Who.
        by: String,
        /// Why, if given.
        #[serde(default)]
        reason: Option<String>,
        /// When.
        at: Timestamp,
    },
}

impl RunEvent {
    /// When the event happened.
    pub fn at(&self) -> Timestamp {
        match self {
            Self::PhaseStarted { at, .. }
            | Self::PhaseFinished { at, .. }
            | Self::PhaseFailed { at, .. }
            | Self::GateOpened { at, .. }
            | Self::GateDecided { at, .. }
            | Self::GateExpired { at, .. }
            | Self::FlowChanged { at, .. }
            | Self::Canceled { at, .. } => *at,
        }
    }

    /// The snake_case name of the event.
    pub fn name(&self) -> &'static str {
        match self {
            Self::PhaseStarted { .. } => "phase_started",
            Self::PhaseFinished { .. } => "phase_finished",
            Self::PhaseFailed { .. } => "phase_failed",
            Self::GateOpened { .. } => "gate_opened",
            Self::GateDecided { .. } => "gate_decided",
            Self::GateExpired { .. } => "gate_expired",
            Self::FlowChanged { .. } => "flow_changed",
            Self::Canceled { .. } => "canceled",
        }
    }
}

/// What a transition asks the engine to do, in order, after it persisted the new state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum RunCommand {
    /// Run one phase attempt (server brain or client task keyed `key`).
    StartPhase {
        /// The run.
        run_id: String,
        /// The frozen version the phase belongs to.
        flow_version_id: String,
        /// Its content hash.
        content_hash: String,
        /// The phase.
        phase: String,
        /// The attempt.
        attempt: u32,
        /// `run:phase:attempt`: the idempotency key (client task id); the same on a re-run.
        key: String,
        /// Retry or rework feedback to give the brain first.
        feedback: Option<PhaseFeedback>,
    },
    /// Park the gate for a person (an approval of kind gate).
    OpenGate {
        /// The run.
        run_id: String,
        /// The gated phase.
        phase: String,
        /// The gate's name.
        gate: String,
        /// Whether its required deliverables are recorded.
        ready: bool,
        /// What the check found.
        findings: Vec<String>,
        /// The decisions it allows.
        allowed: Vec<GateDecisionKind>,
        /// When it expires as a rejection.
        deadline: Option<Timestamp>,
    },
    /// Tell the gateway and the run's watchers that the gate is waiting (FORGE-489).
    AnnounceGate {
        /// The run.
        run_id: String,
        /// The gated phase.
        phase: String,
        /// The gate's name.
        gate: String,
        /// The approval reason: gate name and check summary.
        reason: String,
    },
    /// Record that an auto-approved checkpoint passed.
    AutoApproveGate {
        /// The run.
        run_id: String,
        /// The gated phase.
        phase: String,
        /// The gate's name.
        gate: String,
    },
    /// Withdraw a parked gate nobody answered (the run was canceled or its flow changed).
    CloseGate {
        /// The run.
        run_id: String,
        /// The gated phase.
        phase: String,
        /// The gate's name.
        gate: String,
        /// Why.
        reason: String,
    },
    /// Stop the phase attempt in flight (withdraw its client task).
    CancelPhase {
        /// The run.
        run_id: String,
        /// The phase.
        phase: String,
        /// The attempt.
        attempt: u32,
        /// Its key.
        key: String,
    },
    /// The run finished successfully.
    CompleteRun {
        /// The run.
        run_id: String,
    },
    /// The run ended failed.
    FailRun {
        /// The run.
        run_id: String,
        /// Why (`Phase '<id>' failed: <reason>`, a rejection, an expiry).
        reason: String,
    },
    /// The run was canceled.
    CancelRun {
        /// The run.
        run_id: String,
        /// Why.
        reason: String,
    },
}

/// The idempotency key of one phase attempt, `run:phase:attempt` (the client task id).
pub fn phase_attempt_key(run_id: &str, phase: &str, attempt: u32) -> String {
    client_task_id(run_id, phase, attempt)
}

/// The id of the gate hold the engine parks for `attempt` of `phase`'s gate in the one approval
/// ledger: `gate:run:phase:attempt`. Deterministic, so an engine re-acting after a restart finds the
/// hold it parked instead of parking a second one.
pub fn gate_approval_id(run_id: &str, phase: &str, attempt: u32) -> String {
    format!("gate:{}", phase_attempt_key(run_id, phase, attempt))
}
