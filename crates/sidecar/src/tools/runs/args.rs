//! The run tools' arguments as types, each tool's `input_schema` generated from its type
//! ([`crate::args::input_schema`]), and the person's answers `flow.await_gate` reads.

use metaforge_ports::{ClientTaskStatus, GateDecisionKind, RunStatus};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

/// `flow.start_run`: an approved version, or a shipped template run as it is.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct StartRunArgs {
    /// the approved flow version to run (from flow.propose, once a person approved it)
    pub flow_version_id: Option<String>,
    /// a shipped template to run as it is, e.g. mech_v1 (default design_v1)
    #[serde(alias = "template")]
    pub template_id: Option<String>,
    /// the project the run belongs to
    pub project_id: Option<String>,
    /// who does the phase work: client (you, through phase.* tasks) or server (MetaForge's model)
    pub intelligence: Option<String>,
}

/// `flow.status`, `run.get`: one run.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct RunIdArgs {
    /// the run's id
    pub run_id: String,
}

/// A run status, as `run.list` filters by it.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatusArg {
    /// accepted, not started
    Queued,
    /// running a phase
    Running,
    /// parked at a gate
    AwaitingApproval,
    /// finished
    Completed,
    /// ended with an error or a rejection
    Failed,
    /// stopped by a person
    Canceled,
}

impl From<RunStatusArg> for RunStatus {
    fn from(status: RunStatusArg) -> Self {
        match status {
            RunStatusArg::Queued => Self::Queued,
            RunStatusArg::Running => Self::Running,
            RunStatusArg::AwaitingApproval => Self::AwaitingApproval,
            RunStatusArg::Completed => Self::Completed,
            RunStatusArg::Failed => Self::Failed,
            RunStatusArg::Canceled => Self::Canceled,
        }
    }
}

/// `run.list`: runs, optionally of one status and/or project.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct RunListArgs {
    /// only runs in this status
    pub status: Option<RunStatusArg>,
    /// only runs of this project
    pub project_id: Option<String>,
}

/// `flow.await_gate`: the run whose next gate to wait for, and for how long.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct AwaitGateArgs {
    /// the run's id
    pub run_id: String,
    /// how long to wait for a gate before answering that none is open yet (seconds; default 120)
    #[schemars(range(min = 0, max = 1800))]
    pub wait_seconds: Option<u64>,
}

/// A client task status, as `phase.list_tasks` filters by it.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatusArg {
    /// posted, nobody works on it: take it with phase.claim
    Open,
    /// a client took it
    Claimed,
    /// handed back
    Submitted,
    /// the run stopped waiting for it
    Withdrawn,
}

impl From<TaskStatusArg> for ClientTaskStatus {
    fn from(status: TaskStatusArg) -> Self {
        match status {
            TaskStatusArg::Open => Self::Open,
            TaskStatusArg::Claimed => Self::Claimed,
            TaskStatusArg::Submitted => Self::Submitted,
            TaskStatusArg::Withdrawn => Self::Withdrawn,
        }
    }
}

/// `phase.list_tasks`: client tasks, optionally of one run and/or status.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct ListTasksArgs {
    /// only the tasks of this run
    pub run_id: Option<String>,
    /// only tasks in this status (open: the phases waiting for you)
    pub status: Option<TaskStatusArg>,
}

/// `phase.claim`: the task to take.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct ClaimArgs {
    /// the task id (run:phase:attempt) from phase.list_tasks
    pub task_id: String,
}

/// `phase.submit`: the task to hand back, and what was done.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct SubmitArgs {
    /// the task id (run:phase:attempt) you claimed
    pub task_id: String,
    /// what the phase did and what is open: the gate's reviewer reads it; the deliverables are
    /// what the twin records (twin.commit_work_product), not what this says
    pub summary: String,
    /// anything else worth reporting
    pub details: Option<Value>,
}

/// The person's answer to a gate, from the form `flow.await_gate` asked them to fill in (never
/// from the tool's arguments).
#[derive(Debug, Clone, Deserialize)]
pub struct GateAnswers {
    /// approve, reject, retry or rework.
    pub decision: GateDecisionKind,
    /// Why (required for retry and rework).
    #[serde(default)]
    pub reason: Option<String>,
    /// For rework: the earlier phase to go back to.
    #[serde(default)]
    pub rework_phase: Option<String>,
}

impl GateAnswers {
    /// Reads the answers; empty strings are absent (a form leaves an unanswered field empty).
    pub fn from_answers(answers: &Map<String, Value>) -> Result<Self, crate::args::ArgError> {
        let mut parsed: Self = crate::args::parse(answers.clone()).map_err(|e| {
            let field = if e.field == "arguments" {
                "answers".to_owned()
            } else {
                format!("answers.{}", e.field)
            };
            crate::args::ArgError::new(field, e.message)
        })?;
        let blank = |v: &Option<String>| v.as_deref().is_some_and(|t| t.trim().is_empty());
        if blank(&parsed.reason) {
            parsed.reason = None;
        }
        if blank(&parsed.rework_phase) {
            parsed.rework_phase = None;
        }
        Ok(parsed)
    }
}
