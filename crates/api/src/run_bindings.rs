//! The run bindings the MCP sidecar's run tools go through (issue 16 item 7; FORGE-400/581/582):
//! start a run, read it, follow its flow state, answer its open gate, and list, claim and submit
//! its client tasks.
//!
//! Inside the gateway (`metaforge up`) they run in process over the run service; in a sidecar
//! started with `METAFORGE_GATEWAY_URL` they call the gateway's own `/v1/runs…` and
//! `/v1/client-tasks…` routes, so a run started from a plugin is the run `/v1/runs` lists and a
//! gate answered in the chat is the gate the dashboard shows decided. Like
//! [`crate::FlowBindings`] for flows, both answer with the types below.
//!
//! They answer with the run views of [`crate::run_views`], the one home of those shapes: the
//! in-process bindings hand over the service's values as they are, and the remote ones decode the
//! same types from the gateway's JSON. A refusal crosses typed ([`RunReply::Refused`], with the
//! service's code from its one code table), never as a bare error message.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use metaforge_ports::{Claimant, ClientTaskStatus, PortError, RunStatus};

use crate::run_views::{ClientTaskView, FlowStateView, RunDetail, RunSummary};
use crate::runs::{GateDecisionBody, StartRunBody};

/// Which runs to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs of this project.
    pub project_id: Option<String>,
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
    async fn start(&self, request: StartRunBody) -> Result<RunReply<RunDetail>, PortError>;

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
        answer: GateDecisionBody,
        approver: &str,
    ) -> Result<RunReply<FlowStateView>, PortError>;

    /// Client tasks, oldest first, optionally of one run and/or in one status.
    async fn client_tasks(
        &self,
        run_id: Option<&str>,
        status: Option<ClientTaskStatus>,
    ) -> Result<Vec<ClientTaskView>, PortError>;

    /// One client task.
    async fn client_task(&self, id: &str) -> Result<ClientTaskView, PortError>;

    /// Takes an open task (`Conflict` unless it is open).
    async fn claim_client_task(
        &self,
        id: &str,
        claimant: &Claimant,
    ) -> Result<RunReply<ClientTaskView>, PortError>;

    /// Hands a claimed task back (`Conflict` unless the claimant holds it; an empty summary is
    /// refused).
    async fn submit_client_task(
        &self,
        id: &str,
        claimant: &Claimant,
        submission: TaskSubmission,
    ) -> Result<RunReply<ClientTaskView>, PortError>;
}
