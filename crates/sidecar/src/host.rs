//! The sidecar's tool host: a fixed set of tools, resources and prompts behind the [`ToolHost`]
//! port.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use metaforge_ports::{
    CallFacts, CallerClass, CallerContext, HostCallOutcome, PortError, PortErrorKind, PromptDescriptor,
    PromptText, ResourceTemplateDescriptor, ResourceText, ToolDescriptor, ToolHost, ToolOutput,
};
use serde_json::{Map, Value};

use metaforge_domain::tool_gating::{
    Annotation, ArgumentSchema, Caller, Decision, ToolSpec, decide_with_schema, invalid_arguments_envelope,
};

use super::held::{HeldOutcome, HeldWrites};

/// One tool the sidecar exposes.
#[async_trait::async_trait]
pub trait SidecarTool: Send + Sync {
    /// Its descriptor (`name` is the dotted id, e.g. `flow.list`); its input schema is compiled
    /// once when the tool is added to a host.
    fn descriptor(&self) -> ToolDescriptor;

    /// Whether callers of `class` see it at all (a tool a class may never call is not listed).
    fn offered_to(&self, class: CallerClass) -> bool {
        let _ = class;
        true
    }

    /// How the domain's gating rules see this tool, read once when the tool is added to a host
    /// (a tool's gates do not change while it is served). The default reads the MCP hints: read-only
    /// → `READ_ONLY`, explicitly non-destructive → `ADDITIVE`, anything else → `DESTRUCTIVE`.
    fn gate_spec(&self) -> ToolSpec {
        let d = self.descriptor();
        let annotation = Annotation::from_hints(&d.hints);
        ToolSpec {
            name: d.name,
            origin: "native".to_owned(),
            input_schema: Some(d.input_schema),
            required_gates: Vec::new(),
            requires_approval: false,
            annotation,
        }
    }

    /// True for a tool whose effect is itself a hold for a person (e.g. `flow.propose`, whose
    /// version is held while the call returns): the host does not hold the call a second time.
    fn holds_its_own_effect(&self) -> bool {
        false
    }

    /// Refuses a call whose arguments the tool cannot use, before any gate or hold
    /// (FORGE-222: a person is never asked to approve a call that was always going to be
    /// refused): `Some(answer)` ends the call with that answer, `None` lets it go on to the
    /// gate. The default accepts whatever the schema accepted.
    async fn preflight(
        &self,
        caller: &CallerContext,
        arguments: &Map<String, Value>,
    ) -> Result<Option<HostCallOutcome>, PortError> {
        let _ = (caller, arguments);
        Ok(None)
    }

    /// Runs the call; arguments were validated against the descriptor's schema.
    async fn call(
        &self,
        caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError>;

    /// Runs the call with what the transport knows beyond the caller's class (the authenticated
    /// identity, the person's answers to the questions the call asked). Only a tool that records
    /// something for a person reads them; the default runs [`call`](Self::call).
    async fn call_with(
        &self,
        caller: &CallerContext,
        facts: &CallFacts,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        let _ = facts;
        self.call(caller, arguments).await
    }
}

/// One resource family the sidecar serves.
#[async_trait::async_trait]
pub trait SidecarResource: Send + Sync {
    /// Its template.
    fn template(&self) -> ResourceTemplateDescriptor;

    /// Reads `uri` when it belongs to this family (`None` when it does not).
    async fn read(&self, uri: &str) -> Option<Result<ResourceText, PortError>>;
}

/// One prompt template the sidecar serves (e.g. `metaforge:flow`).
#[async_trait::async_trait]
pub trait SidecarPrompt: Send + Sync {
    /// Its descriptor.
    fn descriptor(&self) -> PromptDescriptor;

    /// Renders it with `arguments` (`Invalid` naming a missing required one).
    async fn render(&self, arguments: &Map<String, Value>) -> Result<PromptText, PortError>;
}

/// One tool as the host serves it: the handler, and what is read from it once rather than on
/// every call (a call then walks its arguments, never compiles a schema).
struct HostedTool {
    handler: Arc<dyn SidecarTool>,
    /// The handler's descriptor, read once: listings and calls never rebuild its schema.
    descriptor: ToolDescriptor,
    /// The descriptor's input schema, compiled: the arguments every call is checked against.
    arguments: ArgumentSchema,
    /// The handler's gate spec and its input schema compiled, for the domain's decision
    /// (permissive when it is the descriptor's schema, which `arguments` already checked).
    gate: ToolSpec,
    gate_arguments: ArgumentSchema,
}

impl HostedTool {
    fn new(handler: Arc<dyn SidecarTool>) -> Self {
        let descriptor = handler.descriptor();
        let input_schema = descriptor.input_schema.clone();
        let arguments = ArgumentSchema::compile(Some(&input_schema));
        let gate = handler.gate_spec();
        // Every call is checked against the descriptor's schema before the gate decides; when
        // the gate's schema is that same schema, the gate does not walk the arguments again.
        let gate_arguments = if gate.input_schema.as_ref() == Some(&input_schema) {
            ArgumentSchema::compile(None)
        } else {
            ArgumentSchema::compile(gate.input_schema.as_ref())
        };
        Self {
            handler,
            descriptor,
            arguments,
            gate,
            gate_arguments,
        }
    }
}

/// The sidecar's tools, resources and prompts, and where a held write waits.
#[derive(Default)]
pub struct SidecarHost {
    tools: BTreeMap<String, HostedTool>,
    resources: Vec<Arc<dyn SidecarResource>>,
    prompts: Vec<Arc<dyn SidecarPrompt>>,
    held: Option<HeldWrites>,
    skills: Option<Arc<metaforge_app::skills::SkillShelf>>,
}

fn envelope(status: &str, tool: &str, reason: &str, approval_id: Option<&str>) -> HostCallOutcome {
    HostCallOutcome::Done(ToolOutput::error(serde_json::json!({
        "status": status, "error": status, "tool": tool, "reason": reason,
        "approval_id": approval_id,
    })))
}

impl SidecarHost {
    /// An empty host.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves the skill catalogue on `shelf` over MCP (the Skills extension): every skill on
    /// offer now, its `SKILL.md` and the files its source read.
    pub fn with_skills(mut self, shelf: Arc<metaforge_app::skills::SkillShelf>) -> Self {
        self.skills = Some(shelf);
        self
    }

    /// Adds a tool (a later tool with the same id replaces the earlier one).
    pub fn with_tool(mut self, tool: Arc<dyn SidecarTool>) -> Self {
        let hosted = HostedTool::new(tool);
        self.tools.insert(hosted.descriptor.name.clone(), hosted);
        self
    }

    /// Where held writes wait: without it a write that must be held is refused (fail closed),
    /// never run unheld.
    pub fn with_held_writes(mut self, held: HeldWrites) -> Self {
        self.held = Some(held);
        self
    }

    /// Adds a resource family.
    pub fn with_resource(mut self, resource: Arc<dyn SidecarResource>) -> Self {
        self.resources.push(resource);
        self
    }

    /// Adds a prompt (a later prompt with the same name replaces the earlier one).
    pub fn with_prompt(mut self, prompt: Arc<dyn SidecarPrompt>) -> Self {
        let name = prompt.descriptor().name;
        self.prompts.retain(|p| p.descriptor().name != name);
        self.prompts.push(prompt);
        self
    }

    /// Every tool descriptor, whoever the caller (for catalogue-wide checks).
    pub fn all_tools(&self) -> Vec<ToolDescriptor> {
        self.tools.values().map(|t| t.descriptor.clone()).collect()
    }

    /// The tools in the ask tier (every call held for a person unless the domain's gating lets
    /// the caller's class through, as a run's worker on its run): the agent loop holds these
    /// itself, so a chat turn can tell its watchers and ask in the terminal. A tool that holds
    /// its own effect (`flow.propose` parks the proposal) is not among them.
    pub fn declared_holds(&self) -> BTreeSet<String> {
        self.tools
            .iter()
            .filter(|(_, tool)| !tool.handler.holds_its_own_effect() && tool.gate.requires_approval)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The static gates each tool declares (`twin_write` …), by tool id, for tools that declare
    /// any: what a composition folds into the agent loop's `ToolPolicy::required_gates`, so the
    /// grounding guard counts a twin write and a disabled gate refuses it in a turn too.
    pub fn declared_gates(&self) -> BTreeMap<String, Vec<String>> {
        self.tools
            .iter()
            .map(|(id, tool)| (id.clone(), tool.gate.required_gates.clone()))
            .filter(|(_, gates)| !gates.is_empty())
            .collect()
    }
}

#[async_trait::async_trait]
impl ToolHost for SidecarHost {
    fn tools(&self, caller: CallerClass) -> Vec<ToolDescriptor> {
        self.tools
            .values()
            .filter(|t| t.handler.offered_to(caller))
            .map(|t| t.descriptor.clone())
            .collect()
    }

    async fn call(
        &self,
        caller: &CallerContext,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        self.call_with(caller, &CallFacts::default(), tool, arguments)
            .await
    }

    async fn call_with(
        &self,
        caller: &CallerContext,
        facts: &CallFacts,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        let Some(hosted) = self
            .tools
            .get(tool)
            .filter(|t| t.handler.offered_to(caller.class))
        else {
            return Err(PortError::new(
                PortErrorKind::NotFound,
                format!("unknown tool: {tool}"),
            ));
        };
        let as_value = Value::Object(arguments.clone());
        let handler = &hosted.handler;
        let problems = hosted.arguments.check(&as_value);
        if !problems.is_empty() {
            return Ok(HostCallOutcome::Done(ToolOutput::error(
                invalid_arguments_envelope(tool, &problems),
            )));
        }
        if let Some(refusal) = handler.preflight(caller, &arguments).await? {
            return Ok(refusal);
        }
        if !handler.holds_its_own_effect() {
            let verdict = decide_with_schema(
                &hosted.gate,
                &hosted.gate_arguments,
                &Caller::from(caller.class),
                &as_value,
            );
            tracing::info!(
                event = "mcp_sidecar_call",
                tool,
                caller = caller.class.as_str(),
                decision = ?verdict.decision,
            );
            match verdict.decision {
                Decision::Run => {}
                Decision::Hold => {
                    let Some(held) = &self.held else {
                        return Ok(envelope(
                            "refused",
                            tool,
                            "this call must be held for a person, and no approval ledger is configured",
                            None,
                        ));
                    };
                    let approved_already = match &facts.approved_hold {
                        Some(id) => held.approved_for(id, tool, &as_value).await?,
                        None => false,
                    };
                    if approved_already {
                        tracing::info!(event = "tool_call_runs_on_its_approved_hold", tool, approval_id = ?facts.approved_hold, "a person approved this exact call already");
                        return handler.call_with(caller, facts, arguments).await;
                    }
                    match held
                        .hold_and_wait(tool, as_value, caller, &verdict.reason)
                        .await?
                    {
                        HeldOutcome::Approved(_) => {}
                        HeldOutcome::TimedOut(record) => {
                            return Ok(envelope(
                                "timed_out",
                                tool,
                                record.reason.as_deref().unwrap_or("no decision in time"),
                                Some(&record.id),
                            ));
                        }
                        HeldOutcome::NotApproved(record) => {
                            return Ok(envelope(
                                record.status.as_str(),
                                tool,
                                record.reason.as_deref().unwrap_or("not approved"),
                                Some(&record.id),
                            ));
                        }
                    }
                }
                Decision::Refuse => return Ok(envelope("refused", tool, &verdict.reason, None)),
            }
        } else {
            tracing::info!(event = "mcp_sidecar_call", tool, caller = caller.class.as_str());
        }
        handler.call_with(caller, facts, arguments).await
    }

    fn resource_templates(&self) -> Vec<ResourceTemplateDescriptor> {
        self.resources.iter().map(|r| r.template()).collect()
    }

    fn skills(&self) -> Vec<metaforge_ports::ServedSkill> {
        self.skills.as_ref().map_or_else(Vec::new, |shelf| {
            shelf
                .current()
                .skills
                .values()
                .map(metaforge_app::skills::LoadedSkill::served)
                .collect()
        })
    }

    async fn read_resource(&self, uri: &str) -> Result<ResourceText, PortError> {
        for resource in &self.resources {
            if let Some(result) = resource.read(uri).await {
                return result;
            }
        }
        Err(PortError::new(
            PortErrorKind::NotFound,
            format!("unknown resource: {uri}"),
        ))
    }

    fn prompts(&self) -> Vec<PromptDescriptor> {
        self.prompts.iter().map(|p| p.descriptor()).collect()
    }

    async fn prompt(&self, name: &str, arguments: &Map<String, Value>) -> Result<PromptText, PortError> {
        match self.prompts.iter().find(|p| p.descriptor().name == name) {
            Some(prompt) => prompt.render(arguments).await,
            None => Err(PortError::new(
                PortErrorKind::NotFound,
                format!("unknown prompt: {name}"),
            )),
        }
    }
}
