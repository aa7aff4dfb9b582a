//! The run reads: `flow.status` (never held: a follower polls it, FORGE-400), `run.list`,
//! `run.get`, `phase.list_tasks`, and the resource `metaforge://flow/run/{id}` — the run as
//! markdown for a client with no canvas: its phases and statuses, the open gate, and whether the
//! state was read live or is unknown.

use metaforge_api::RunQuery;
use metaforge_api::{FlowStateView, RunDetail};
use metaforge_ports::{
    CallFacts, CallerContext, HostCallOutcome, PortError, ResourceTemplateDescriptor, ResourceText, ToolHints,
};
use serde_json::json;

use super::args::{ListTasksArgs, RunIdArgs, RunListArgs};
use super::{SidecarRuns, failure, output};
use crate::envelope::ToolError;
use crate::host::SidecarResource;
use crate::typed::{READ_ONLY, TypedTool};

/// `flow.status`.
pub const STATUS_TOOL: &str = "flow.status";
/// `run.list`.
pub const LIST_TOOL: &str = "run.list";
/// `run.get`.
pub const GET_TOOL: &str = "run.get";
/// `phase.list_tasks`.
pub const LIST_TASKS_TOOL: &str = "phase.list_tasks";

/// `flow.status`: the run phase by phase, the open gate with the decisions it allows, `live`.
pub struct FlowStatus {
    runs: SidecarRuns,
}

impl FlowStatus {
    /// The tool over `runs`.
    pub fn new(runs: SidecarRuns) -> Self {
        Self { runs }
    }
}

#[async_trait::async_trait]
impl TypedTool for FlowStatus {
    const NAME: &'static str = STATUS_TOOL;
    const TITLE: &'static str = "Follow a run";
    const DESCRIPTION: &'static str = "The run phase by phase as its engine reports it now: each \
        phase's status, the open gate (ready, findings, the decisions it allows) and live (false: \
        the engine could not be asked; statuses then read unknown). Never held; poll it to follow a run.";
    const HINTS: ToolHints = READ_ONLY;
    type Args = RunIdArgs;

    async fn run(
        &self,
        _caller: &CallerContext,
        _facts: &CallFacts,
        args: RunIdArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        match self.runs.bindings.flow_state(&args.run_id).await {
            Ok(state) => {
                let mut value = serde_json::to_value(&state).map_err(|e| {
                    PortError::with_source(metaforge_ports::PortErrorKind::Internal, "flow state", e)
                })?;
                value["awaiting_gate"] = json!(state.gate.is_some());
                Ok(output(&value)?)
            }
            Err(e) => Ok(failure(STATUS_TOOL, &args.run_id, e)?),
        }
    }
}

/// `run.list`: runs, oldest first.
pub struct RunList {
    runs: SidecarRuns,
}

impl RunList {
    /// The tool over `runs`.
    pub fn new(runs: SidecarRuns) -> Self {
        Self { runs }
    }
}

#[async_trait::async_trait]
impl TypedTool for RunList {
    const NAME: &'static str = LIST_TOOL;
    const TITLE: &'static str = "List runs";
    const DESCRIPTION: &'static str = "Design-flow runs, oldest first, optionally of one status \
        and/or project: what each runs on (template, version id and hash), its engine and \
        intelligence, where it is.";
    const HINTS: ToolHints = READ_ONLY;
    type Args = RunListArgs;

    async fn run(
        &self,
        _caller: &CallerContext,
        _facts: &CallFacts,
        args: RunListArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        let query = RunQuery {
            status: args.status.map(Into::into),
            project_id: args.project_id.filter(|p| !p.trim().is_empty()),
        };
        match self.runs.bindings.list(query).await {
            Ok(runs) => Ok(output(&json!({ "runs": runs }))?),
            Err(e) => Ok(failure(LIST_TOOL, "runs", e)?),
        }
    }
}

/// `run.get`: one run with its history and its model usage.
pub struct RunGet {
    runs: SidecarRuns,
}

impl RunGet {
    /// The tool over `runs`.
    pub fn new(runs: SidecarRuns) -> Self {
        Self { runs }
    }
}

#[async_trait::async_trait]
impl TypedTool for RunGet {
    const NAME: &'static str = GET_TOOL;
    const TITLE: &'static str = "Read a run";
    const DESCRIPTION: &'static str = "One run: its record (engine, template, version id and hash, \
        status, approval reason), its status history and the model usage recorded for it.";
    const HINTS: ToolHints = READ_ONLY;
    type Args = RunIdArgs;

    async fn run(
        &self,
        _caller: &CallerContext,
        _facts: &CallFacts,
        args: RunIdArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        match self.runs.bindings.get(&args.run_id).await {
            Ok(run) => Ok(output(&run)?),
            Err(e) => Ok(failure(GET_TOOL, &args.run_id, e)?),
        }
    }
}

/// `phase.list_tasks`: the client tasks of client-mode runs, with their briefs.
pub struct ListTasks {
    runs: SidecarRuns,
}

impl ListTasks {
    /// The tool over `runs`.
    pub fn new(runs: SidecarRuns) -> Self {
        Self { runs }
    }
}

#[async_trait::async_trait]
impl TypedTool for ListTasks {
    const NAME: &'static str = LIST_TASKS_TOOL;
    const TITLE: &'static str = "List phase tasks";
    const DESCRIPTION: &'static str = "The phases client-mode runs posted for you (tasks \
        run:phase:attempt), oldest first, each with the brief a phase brain would get: goal, \
        required deliverables, context, feedback. Take an open one with phase.claim.";
    const HINTS: ToolHints = READ_ONLY;
    type Args = ListTasksArgs;

    async fn run(
        &self,
        _caller: &CallerContext,
        _facts: &CallFacts,
        args: ListTasksArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        let run_id = args.run_id.filter(|r| !r.trim().is_empty());
        match self
            .runs
            .bindings
            .client_tasks(run_id.as_deref(), args.status.map(Into::into))
            .await
        {
            Ok(tasks) => Ok(output(&json!({ "tasks": tasks }))?),
            Err(e) => Ok(failure(LIST_TASKS_TOOL, run_id.as_deref().unwrap_or("tasks"), e)?),
        }
    }
}

/// The resource URI prefix.
pub const RUN_URI_PREFIX: &str = "metaforge://flow/run/";

/// `metaforge://flow/run/{id}`: the run as markdown.
pub struct RunResource {
    runs: SidecarRuns,
}

impl RunResource {
    /// The resource over `runs`.
    pub fn new(runs: SidecarRuns) -> Self {
        Self { runs }
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "—".to_owned()
    } else {
        items.join(", ")
    }
}

/// A run as markdown: what it runs on, whether the state is live, one row per phase of its
/// frozen version, the open gate with the decisions it allows, and why it ended.
pub fn run_markdown(run: &RunDetail, state: &FlowStateView) -> String {
    let summary = &run.run;
    let mut md = format!(
        "# Run {}\n\n- Status: {}\n- Flow: {} {} — version `{}` (hash `{}`)\n- Engine: {} · Intelligence: {} · Project: {}\n",
        summary.id,
        state.status,
        state.flow_template_id,
        state.flow_version,
        state.flow_version_id,
        state.flow_content_hash,
        state.flow_engine.as_str(),
        summary.intelligence.as_str(),
        summary.project_id.as_deref().unwrap_or("(none)"),
    );
    if state.live {
        md.push_str("- State: live (read from the engine just now)\n");
    } else {
        md.push_str(&format!(
            "- State: unknown — {} (statuses read `unknown`, never `pending`)\n",
            state.reason.as_deref().unwrap_or("the engine could not be asked")
        ));
    }
    md.push_str("\n## Phases\n\n");
    if let Some(why) = &state.phases_unavailable {
        md.push_str(&format!("No phases listed: {why}\n"));
    } else {
        md.push_str("| # | Phase | Status | Gate | Requires | Recorded |\n|---|---|---|---|---|---|\n");
        for (i, phase) in state.phases.iter().enumerate() {
            let gate = match (&phase.gate, phase.auto_approve) {
                (Some(gate), true) => format!("{gate} (auto)"),
                (Some(gate), false) => gate.clone(),
                (None, _) => "—".to_owned(),
            };
            md.push_str(&format!(
                "| {} | {} (`{}`) | {} | {} | {} | {} |\n",
                i + 1,
                phase.title,
                phase.id,
                phase.status,
                gate,
                list(&phase.required_deliverables),
                list(&phase.deliverables),
            ));
        }
    }
    if let Some(gate) = &state.gate {
        let allowed: Vec<String> = gate.allowed.iter().map(|d| d.as_str().to_owned()).collect();
        md.push_str(&format!(
            "\n## Open gate: {} on `{}`\n\n- Ready: {}\n- Findings: {}\n- Allowed decisions: {}\n- A person answers it: flow.await_gate asks them in the chat; no tool decides it.\n",
            gate.gate,
            gate.phase,
            if gate.ready { "yes" } else { "no" },
            list(&gate.findings),
            list(&allowed),
        ));
    }
    if let Some(error) = &state.error {
        md.push_str(&format!("\n## Ended\n\n{error}\n"));
    }
    md
}

#[async_trait::async_trait]
impl SidecarResource for RunResource {
    fn template(&self) -> ResourceTemplateDescriptor {
        ResourceTemplateDescriptor {
            uri_template: format!("{RUN_URI_PREFIX}{{id}}"),
            name: "flow-run".to_owned(),
            description: "A design-flow run as markdown: phases, statuses, the open gate, live or unknown"
                .to_owned(),
            mime_type: "text/markdown".to_owned(),
        }
    }

    async fn read(&self, uri: &str) -> Option<Result<ResourceText, PortError>> {
        let id = uri.strip_prefix(RUN_URI_PREFIX)?;
        let read = async {
            let run = self.runs.bindings.get(id).await?;
            let state = self.runs.bindings.flow_state(id).await?;
            Ok(ResourceText {
                uri: uri.to_owned(),
                mime_type: "text/markdown".to_owned(),
                text: run_markdown(&run, &state),
            })
        };
        Some(read.await)
    }
}
