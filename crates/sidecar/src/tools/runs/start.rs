//! `flow.start_run` (FORGE-400/471/581): a run on an approved version, or on a shipped template
//! run as it is. A version that is not approved (or corrupt, or unreproducible) is refused by the
//! run service 409-style and nothing is recorded; the call is never held — the person's decision
//! was the version's approval, and holding the start would only ask them twice.

use metaforge_api::{RunReply, StartRunBody};
use metaforge_app::limits::{Limits, RUN_START, RUN_START_TEMPLATE};
use metaforge_ports::{CallFacts, CallerContext, HostCallOutcome, ToolHints};
use serde_json::json;

use super::args::StartRunArgs;
use super::{SidecarRuns, failure, output};
use crate::envelope::{ToolError, run_refusal};
use crate::typed::{ADDITIVE_WRITE, ToolGate, TypedTool};

/// The tool's name.
pub const TOOL: &str = "flow.start_run";

/// `flow.start_run`.
pub struct FlowStartRun {
    runs: SidecarRuns,
}

impl FlowStartRun {
    /// The tool over `runs`.
    pub fn new(runs: SidecarRuns) -> Self {
        Self { runs }
    }
}

#[async_trait::async_trait]
impl TypedTool for FlowStartRun {
    const NAME: &'static str = TOOL;
    const TITLE: &'static str = "Start a design-flow run";
    const DESCRIPTION: &'static str = "Start a run on an approved flow version (flow_version_id, \
        approved by a person after flow.propose) or on a shipped template as it is (template_id). \
        intelligence=client makes you do the phase work through phase.* tasks. A version that is \
        not approved is refused (409-style); nothing is held or recorded then.";
    const HINTS: ToolHints = ADDITIVE_WRITE;
    const GATE: ToolGate = ToolGate::Write {
        requires_approval: false,
    };
    // The person's decision was the version's approval: holding the start would ask them twice.
    const HOLDS_ITS_OWN_EFFECT: bool = true;
    type Args = StartRunArgs;
    const LIMITS: Limits = &[RUN_START, RUN_START_TEMPLATE];

    async fn run(
        &self,
        caller: &CallerContext,
        _facts: &CallFacts,
        args: StartRunArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        let request = StartRunBody {
            flow_version_id: args.flow_version_id,
            template_id: args.template_id,
            project_id: args.project_id,
            intelligence: args.intelligence,
        };
        match self.runs.bindings.start(request).await {
            Ok(RunReply::Done(run)) => {
                tracing::info!(event = "mcp_run_started", run_id = %run.run.id, flow_version_id = %run.run.flow_version_id, intelligence = run.run.intelligence.as_str(), caller = caller.class.as_str(), "a run was started through the MCP sidecar");
                let intelligence = run.run.intelligence;
                Ok(output(&json!({
                    "status": "started",
                    "run": run,
                    "next": match intelligence {
                        metaforge_ports::IntelligenceMode::Client => "client intelligence: list the run's phases with phase.list_tasks, take one with phase.claim, record its deliverables with twin.commit_work_product and hand it back with phase.submit; at a gate call flow.await_gate (the person decides)",
                        metaforge_ports::IntelligenceMode::Server => "server intelligence: MetaForge's model does the phases; follow with flow.status and call flow.await_gate to bring each gate to the person",
                    },
                }))?)
            }
            Ok(RunReply::Refused(refusal)) => Ok(run_refusal(&refusal)),
            Err(e) => Ok(failure(TOOL, "flow.start_run", e)?),
        }
    }
}
