//! `phase.claim` and `phase.submit` (FORGE-581/582/584): a client takes a client-mode phase and
//! hands it back.
//!
//! `phase.claim` is a held write: the person approves letting the client take the phase, once
//! (a run-worker class never claims: a `client_task` session holds its claim until it submits,
//! and the service worker does server phases). A task that does not exist or is not open is
//! refused before any hold (FORGE-222). The claim records the session's grant, which makes the
//! session's calls `client_task` where the owner opted in (`METAFORGE_CLIENT_TASK_WRITES=on`) and
//! scopes its twin writes to the run's branch.
//!
//! `phase.submit` is not held: what it hands back is reviewed at the gate that follows, which
//! checks the twin, never the summary; only the claimant may submit (the task store's rule), and
//! submitting ends the grant.

use metaforge_api::{RunReply, TaskSubmission};
use metaforge_app::limits::{Limits, SUBMISSION};
use metaforge_ports::{
    CallFacts, CallerClass, CallerContext, Claimant, ClientTaskStatus, HostCallOutcome, ToolHints, ToolOutput,
};
use serde_json::json;

use super::args::{ClaimArgs, SubmitArgs};
use super::{SidecarRuns, failure, identity, output};
use crate::envelope::{ToolError, refused, run_refusal};
use crate::grants::Grant;
use crate::typed::{ADDITIVE_WRITE, ToolGate, TypedTool};

/// `phase.claim`.
pub const CLAIM_TOOL: &str = "phase.claim";
/// `phase.submit`.
pub const SUBMIT_TOOL: &str = "phase.submit";

/// Who takes or hands back a task in this call.
fn claimant(caller: &CallerContext) -> Claimant {
    Claimant {
        identity: identity(caller),
        session: caller
            .session
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
    }
}

/// `phase.claim`.
pub struct Claim {
    runs: SidecarRuns,
}

impl Claim {
    /// The tool over `runs`.
    pub fn new(runs: SidecarRuns) -> Self {
        Self { runs }
    }
}

#[async_trait::async_trait]
impl TypedTool for Claim {
    const NAME: &'static str = CLAIM_TOOL;
    const TITLE: &'static str = "Take a phase";
    const DESCRIPTION: &'static str = "Take an open client task (a client-mode phase) to do its work. \
        Held for a person: they approve letting you take the phase, once. Send a stable \
        X-MetaForge-Session header so the claim stays yours across MCP sessions.";
    const HINTS: ToolHints = ADDITIVE_WRITE;
    const GATE: ToolGate = ToolGate::Write {
        requires_approval: true,
    };
    // A person is never asked to approve a claim that was always going to be refused.
    const PREFLIGHT: bool = true;
    type Args = ClaimArgs;

    async fn preflight(
        &self,
        caller: &CallerContext,
        args: &ClaimArgs,
    ) -> Result<Option<HostCallOutcome>, ToolError> {
        match caller.class {
            CallerClass::Service => {
                return Ok(Some(refused(
                    CLAIM_TOOL,
                    "a service caller does the server's phases; client tasks are taken by a person's client",
                )));
            }
            CallerClass::ClientTask => {
                return Ok(Some(refused(
                    CLAIM_TOOL,
                    "this session already holds a client task: hand it back with phase.submit before taking another (each claim is approved by a person)",
                )));
            }
            CallerClass::Local | CallerClass::Remote | CallerClass::Untrusted => {}
        }
        // A person is never asked to approve a claim that was always going to be refused.
        match self.runs.bindings.client_task(&args.task_id).await {
            Ok(task) if task.status == ClientTaskStatus::Open => Ok(None),
            Ok(task) => Ok(Some(HostCallOutcome::Done(ToolOutput::error(json!({
                "status": "conflict", "error": "not_open", "tool": CLAIM_TOOL,
                "task_id": task.id, "task_status": task.status.as_str(),
                "claimed_by": task.claimed_by,
                "message": format!("task {} is {}, not open; nothing was held", task.id, task.status.as_str()),
            }))))),
            Err(e) => Ok(failure(CLAIM_TOOL, &args.task_id, e).map(Some)?),
        }
    }

    async fn run(
        &self,
        caller: &CallerContext,
        _facts: &CallFacts,
        args: ClaimArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        let who = claimant(caller);
        let task = match self.runs.bindings.claim_client_task(&args.task_id, &who).await {
            Ok(RunReply::Done(task)) => task,
            Ok(RunReply::Refused(refusal)) => return Ok(run_refusal(&refusal)),
            Err(e) => return Ok(failure(CLAIM_TOOL, &args.task_id, e)?),
        };
        let recorded = task.claimed_by.clone().unwrap_or_else(|| who.identity.clone());
        if let Some(session) = &who.session {
            self.runs.grants.record(
                session,
                Grant::new(
                    task.id.clone(),
                    task.run_id.clone(),
                    task.phase.clone(),
                    recorded,
                    caller.identity.clone(),
                ),
            );
        }
        tracing::info!(event = "mcp_client_task_claimed", task_id = %task.id, run_id = %task.run_id, phase = %task.phase, session = ?who.session, identity = %who.identity, "a client took a phase through the MCP sidecar");
        Ok(output(&json!({
            "status": "claimed",
            "task": task,
            "session": who.session,
            "next": "do the phase: record each required deliverable with twin.commit_work_product (artifact = the deliverable's name), then hand the phase back with phase.submit {task_id, summary}",
        }))?)
    }
}

/// `phase.submit`.
pub struct Submit {
    runs: SidecarRuns,
}

impl Submit {
    /// The tool over `runs`.
    pub fn new(runs: SidecarRuns) -> Self {
        Self { runs }
    }
}

#[async_trait::async_trait]
impl TypedTool for Submit {
    const NAME: &'static str = SUBMIT_TOOL;
    const TITLE: &'static str = "Hand a phase back";
    const DESCRIPTION: &'static str = "Hand a claimed phase back with a summary of what was done and \
        what is open. The gate that follows checks what the twin recorded on the run's branch \
        (twin.commit_work_product), not what the summary claims.";
    const HINTS: ToolHints = ADDITIVE_WRITE;
    const GATE: ToolGate = ToolGate::Write {
        requires_approval: false,
    };
    // What it hands back is reviewed by a person at the gate that follows.
    const HOLDS_ITS_OWN_EFFECT: bool = true;
    type Args = SubmitArgs;
    const LIMITS: Limits = &[SUBMISSION];

    async fn run(
        &self,
        caller: &CallerContext,
        _facts: &CallFacts,
        args: SubmitArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        let who = claimant(caller);
        let submission = TaskSubmission {
            summary: args.summary,
            details: args.details,
        };
        let task = match self
            .runs
            .bindings
            .submit_client_task(&args.task_id, &who, submission)
            .await
        {
            Ok(RunReply::Done(task)) => task,
            Ok(RunReply::Refused(refusal)) => return Ok(run_refusal(&refusal)),
            Err(e) => return Ok(failure(SUBMIT_TOOL, &args.task_id, e)?),
        };
        let ended = who
            .session
            .as_deref()
            .is_some_and(|s| self.runs.grants.end(s, &task.id, "submitted"));
        tracing::info!(event = "mcp_client_task_submitted", task_id = %task.id, run_id = %task.run_id, phase = %task.phase, grant_ended = ended, "a client handed a phase back through the MCP sidecar");
        Ok(output(&json!({
            "status": "submitted",
            "task": task,
            "grant_ended": ended,
            "next": "follow the run with flow.status; when a gate opens, call flow.await_gate so the person decides it; take the next phase with phase.list_tasks + phase.claim",
        }))?)
    }
}
