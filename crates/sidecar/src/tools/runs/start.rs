//! `flow.start_run` (FORGE-400/471/581): a run on an approved version, or on a shipped template
//! run as it is. A version that is not approved (or corrupt, or unreproducible) is refused by the
//! run service 409-style and nothing is recorded; the call is never held — the person's decision
//! was the version's approval, and holding the start would only ask them twice.

use std::sync::OnceLock;

use metaforge_api::{RunReply, StartRunBody};
use metaforge_app::limits::check_tool_arguments;
use metaforge_domain::tool_gating::{Caller, Decision, ToolSpec, decide};
use metaforge_ports::{CallerContext, HostCallOutcome, PortError, ToolDescriptor};
use serde_json::{Map, Value, json};

use super::args::StartRunArgs;
use super::{SidecarRuns, failure, output, write_hints, write_spec};
use crate::args::{ArgError, parse};
use crate::envelope::{ToolError, at_boundary, refused, run_refusal};
use crate::host::SidecarTool;
use crate::tools::schema_once;

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

    async fn start(
        &self,
        caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, ToolError> {
        // Run administration is outside a service or client-task caller's bounds (FORGE-487/584):
        // the domain's rule, asked here because the host does not gate a call whose effect was
        // approved already.
        let verdict = decide(
            &self.gate_spec(),
            &Caller::from(caller.class),
            &Value::Object(arguments.clone()),
        );
        if verdict.decision == Decision::Refuse {
            return Ok(refused(TOOL, &verdict.reason));
        }
        check_tool_arguments(TOOL, &arguments).map_err(ArgError::from)?;
        let args: StartRunArgs = parse(arguments)?;
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

#[async_trait::async_trait]
impl SidecarTool for FlowStartRun {
    fn descriptor(&self) -> ToolDescriptor {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        ToolDescriptor {
            name: TOOL.to_owned(),
            title: Some("Start a design-flow run".to_owned()),
            description: "Start a run on an approved flow version (flow_version_id, approved by a \
                          person after flow.propose) or on a shipped template as it is \
                          (template_id). intelligence=client makes you do the phase work through \
                          phase.* tasks. A version that is not approved is refused (409-style); \
                          nothing is held or recorded then."
                .to_owned(),
            input_schema: schema_once::<StartRunArgs>(&SCHEMA),
            hints: write_hints(),
        }
    }

    fn gate_spec(&self) -> ToolSpec {
        write_spec(&self.descriptor(), false)
    }

    fn holds_its_own_effect(&self) -> bool {
        true
    }

    async fn call(
        &self,
        caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        at_boundary(TOOL, self.start(caller, arguments).await)
    }
}
