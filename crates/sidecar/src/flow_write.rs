//! The sidecar's store-backed flow tools: `flow.propose` (caller-proposed tailoring whose version
//! is held for a person), `flow.version` and `approvals.list` (reads), and the
//! `metaforge://flow/version/{id}` resource.
//!
//! FORGE-400/471: `flow.propose` returns the proposal, the diff and the approval id and stops.
//! The version it writes is held in the one approval ledger; the call itself is not held, and no
//! tool here decides anything.

use std::sync::Arc;

use metaforge_domain::flow::{
    DEFAULT_TEMPLATE_ID, FlowContext, Operation, Question, TailorStatus, verify_version,
};
use metaforge_domain::tool_gating::{Annotation, Caller, Decision, ToolSpec, decide};
use metaforge_ports::{
    ApprovalLedger, CallerClass, CallerContext, Clock, FlowVersionStore, HeldProposal, HostCallOutcome,
    IdGen, InputQuestion, PortError, PortErrorKind, ResourceTemplateDescriptor, ResourceText, ToolDescriptor,
    ToolHints, ToolOutput,
};
use serde_json::{Map, Value, json};

use super::bound::{held_proposal_output, input_questions};
use super::flow_read::{context_argument, invalid};
use super::host::{SidecarResource, SidecarTool};
use metaforge_app::approvals::ApprovalService;
use metaforge_app::flow_generator::{GenerateError, GenerateRequest, Generated, ProposalGenerator};
use metaforge_app::flows::{FlowService, FlowServiceError, ProposalOutcome};

/// What the store-backed tools need: the one approval ledger, the version store, time and ids.
/// The tools go through the same services as the gateway ([`FlowService`], [`ApprovalService`]),
/// so a proposal from a plugin is the same record a dashboard proposal is.
#[derive(Clone)]
pub struct FlowStores {
    /// The approval ledger (SQLite in the sidecar).
    pub approvals: Arc<dyn ApprovalLedger>,
    /// The flow-version store.
    pub versions: Arc<dyn FlowVersionStore>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Ids (uuid v7).
    pub ids: Arc<dyn IdGen>,
}

impl FlowStores {
    /// The design-flow service over these stores.
    pub fn flow_service(&self) -> FlowService {
        FlowService::new(
            Arc::clone(&self.versions),
            Arc::clone(&self.approvals),
            Arc::clone(&self.clock),
            Arc::clone(&self.ids),
        )
    }

    /// The approvals service over these stores.
    pub fn approval_service(&self) -> ApprovalService {
        ApprovalService::new(
            Arc::clone(&self.approvals),
            Arc::clone(&self.versions),
            Arc::clone(&self.clock),
            Arc::clone(&self.ids),
        )
    }
}

pub(crate) fn refused(tool: &str, reason: &str) -> HostCallOutcome {
    HostCallOutcome::Done(ToolOutput::error(json!({
        "status": "refused", "error": "refused", "tool": tool, "reason": reason,
    })))
}

fn input_question(q: &Question) -> InputQuestion {
    InputQuestion {
        id: q.id.to_owned(),
        prompt: q.question.to_owned(),
        choices: q
            .options
            .as_ref()
            .map(|o| o.iter().map(|s| (*s).to_owned()).collect())
            .unwrap_or_default(),
    }
}

/// Ids of the generator model's product-specific questions start with this.
const MODEL_QUESTION_PREFIX: &str = "model_";

/// The intent the server's generator tailors to: the caller's intent with the person's answers to
/// the model's product-specific questions (`model_1` …) appended, one line each. `None` when no
/// intent was given.
pub(crate) fn generator_intent(arguments: &Map<String, Value>) -> Option<String> {
    let intent = arguments
        .get("intent")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|i| !i.is_empty())?;
    let mut text = intent.to_owned();
    if let Some(answers) = arguments.get("answers").and_then(Value::as_object) {
        for (id, answer) in answers
            .iter()
            .filter(|(id, _)| id.starts_with(MODEL_QUESTION_PREFIX))
        {
            let answer = answer.as_str().map_or_else(|| answer.to_string(), str::to_owned);
            text.push_str(&format!("\nAnswer to {id}: {answer}"));
        }
    }
    Some(text)
}

/// True when the arguments ask for the server's generator: neither a template nor operations.
pub(crate) fn wants_generator(arguments: &Map<String, Value>) -> bool {
    arguments.get("template_id").is_none_or(Value::is_null)
        && arguments.get("operations").is_none_or(Value::is_null)
}

/// The `context` argument with the person's `answers` folded in; a bad one is the refusal naming
/// it (nothing was done).
pub(crate) fn context_with_answers(
    arguments: &Map<String, Value>,
) -> Result<Option<FlowContext>, Box<HostCallOutcome>> {
    const TOOL: &str = "flow.propose";
    let context = context_argument(arguments).map_err(|e| Box::new(invalid(TOOL, "context", e)))?;
    match arguments.get("answers").filter(|a| !a.is_null()) {
        None => Ok(context),
        Some(answers) => apply_answers(context, answers)
            .map(Some)
            .map_err(|e| Box::new(invalid(TOOL, "answers", e))),
    }
}

/// Folds a person's answers (keyed by question id) into the tailoring context.
pub(crate) fn apply_answers(context: Option<FlowContext>, answers: &Value) -> Result<FlowContext, String> {
    let mut ctx = serde_json::to_value(context.unwrap_or_default()).map_err(|e| e.to_string())?;
    let Some(answers) = answers.as_object() else {
        return Err("answers: must be an object keyed by question id".to_owned());
    };
    for (id, answer) in answers {
        match id.as_str() {
            "manufacturing_route" => {
                ctx["manufacturing_context"]["route"] = answer.clone();
            }
            "in_house_capabilities" => {
                let listed = |v: &Value| -> Value {
                    match v {
                        Value::String(s) => Value::from(
                            s.split(',')
                                .map(str::trim)
                                .filter(|p| !p.is_empty())
                                .collect::<Vec<_>>(),
                        ),
                        Value::Null
                        | Value::Bool(_)
                        | Value::Number(_)
                        | Value::Array(_)
                        | Value::Object(_) => v.clone(),
                    }
                };
                match answer {
                    Value::Object(groups) => {
                        for (k, v) in groups {
                            ctx["manufacturing_context"][k.as_str()] = listed(v);
                        }
                    }
                    Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Array(_) => {
                        ctx["manufacturing_context"]["processes"] = listed(answer);
                    }
                }
            }
            "target_maturity" => ctx["target_maturity"] = answer.clone(),
            "loads_and_use" => ctx["loads_and_use"] = answer.clone(),
            // The generator's product-specific questions refine the intent (see `generator_intent`).
            model if model.starts_with(MODEL_QUESTION_PREFIX) => {}
            other => return Err(format!("answers.{other}: not a question flow.propose asks")),
        }
    }
    serde_json::from_value(ctx).map_err(|e| format!("answers: {e}"))
}

/// `flow.propose`.
pub struct FlowPropose {
    stores: FlowStores,
    generator: Option<Arc<dyn ProposalGenerator>>,
}

/// `flow.propose`'s descriptor, shared by the in-process and the gateway-bound tool.
pub(crate) fn propose_descriptor() -> ToolDescriptor {
    FlowPropose::describe()
}

impl FlowPropose {
    /// The tool over `stores`; without a generator, a call with neither template nor operations
    /// is refused naming what to send instead.
    pub fn new(stores: FlowStores) -> Self {
        Self {
            stores,
            generator: None,
        }
    }

    /// Answers calls without template and operations through `generator` (the gateway's, when
    /// the sidecar runs inside it).
    #[must_use]
    pub fn with_generator(mut self, generator: Arc<dyn ProposalGenerator>) -> Self {
        self.generator = Some(generator);
        self
    }

    fn spec(&self) -> ToolSpec {
        propose_spec()
    }
}

/// `flow.propose`'s gating spec: additive, not approval-gated (its effect is the hold).
pub(crate) fn propose_spec() -> ToolSpec {
    let d = propose_descriptor();
    ToolSpec {
        name: d.name,
        origin: "native".to_owned(),
        input_schema: Some(d.input_schema),
        required_gates: Vec::new(),
        requires_approval: false,
        annotation: Annotation::Additive,
    }
}

#[async_trait::async_trait]
impl SidecarTool for FlowPropose {
    fn descriptor(&self) -> ToolDescriptor {
        Self::describe()
    }

    fn gate_spec(&self) -> ToolSpec {
        self.spec()
    }

    fn holds_its_own_effect(&self) -> bool {
        true
    }

    fn offered_to(&self, class: CallerClass) -> bool {
        // Flow administration is outside a service or client-task caller's bounds (FORGE-487/584).
        !matches!(class, CallerClass::Service | CallerClass::ClientTask)
    }

    async fn call(
        &self,
        caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        self.propose(caller, arguments).await
    }
}

impl FlowPropose {
    fn describe() -> ToolDescriptor {
        ToolDescriptor {
            name: "flow.propose".to_owned(),
            title: Some("Propose a tailored design flow".to_owned()),
            description: "Tailor a built-in flow template with your operations (template_id + \
                          operations), or send only the intent and context to have MetaForge's \
                          own generator tailor it. Missing context comes back as questions \
                          (needs_input): ask the person, do not answer them yourself. A valid \
                          proposal is stored as a new version held for a person: the result \
                          carries the diff and the approval id and does not wait. Nothing here \
                          approves it."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "template_id": {"type": "string", "description": "e.g. mech_v1 (design_v1 when operations come without one)"},
                    "intent": {"type": "string", "description": "what the person wants made; required when no template_id and operations are sent"},
                    "operations": {"type": "array", "items": {"type": "object"},
                        "description": "[{op, phase, value, rationale}]"},
                    "context": {"type": "object", "description": "manufacturing_context, target_maturity, loads_and_use"},
                    "answers": {"type": "object", "description": "answers to earlier questions, keyed by question id"}
                }
            }),
            hints: ToolHints {
                read_only_hint: Some(false),
                destructive_hint: Some(false),
                idempotent_hint: Some(false),
                open_world_hint: Some(false),
            },
        }
    }

    async fn propose(
        &self,
        caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        const TOOL: &str = "flow.propose";
        let verdict = decide(
            &self.spec(),
            &Caller::from(caller.class),
            &Value::Object(arguments.clone()),
        );
        if verdict.decision == Decision::Refuse {
            return Ok(refused(TOOL, &verdict.reason));
        }
        // Stored sizes are capped as at the HTTP route (issue 12): nothing oversized is stored.
        if let Err(too_large) = metaforge_app::limits::check_tool_arguments(TOOL, &arguments) {
            return Ok(invalid(TOOL, &too_large.field, too_large.to_string()));
        }
        if wants_generator(&arguments) {
            return self.generate(caller, &arguments).await;
        }
        let template_id = arguments
            .get("template_id")
            .and_then(Value::as_str)
            .unwrap_or(DEFAULT_TEMPLATE_ID)
            .to_owned();
        let operations: Vec<Operation> = match arguments.get("operations") {
            None | Some(Value::Null) => Vec::new(),
            Some(ops) => match serde_json::from_value(ops.clone()) {
                Ok(ops) => ops,
                Err(e) => return Ok(invalid(TOOL, "operations", e.to_string())),
            },
        };
        let context = match context_with_answers(&arguments) {
            Ok(c) => c,
            Err(refusal) => return Ok(*refusal),
        };
        let outcome = self
            .stores
            .flow_service()
            .propose_from_caller(
                &template_id,
                &operations,
                context.as_ref(),
                None,
                None,
                caller.class.as_str(),
            )
            .await;
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(err) => return refusal_output(err),
        };
        let result = &outcome.result;
        if result.status == TailorStatus::NeedsInput {
            return Ok(HostCallOutcome::NeedsInput {
                message: format!(
                    "Before tailoring {template_id}, MetaForge needs {} answer(s).",
                    result.questions.len()
                ),
                questions: result.questions.iter().map(input_question).collect(),
                result: ToolOutput::json(json!({
                    "status": "needs_input",
                    "template_id": template_id,
                    "questions": result.questions,
                    "hint": "call flow.propose again with the same arguments plus answers: {question id: answer}",
                })),
            });
        }
        held_output(&outcome, &[], caller)
    }
}

impl FlowPropose {
    /// The server generator path: intent required; needs_input carries the server's questions and
    /// the model's; a proposal is held exactly as the gateway holds it.
    async fn generate(
        &self,
        caller: &CallerContext,
        arguments: &Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        const TOOL: &str = "flow.propose";
        let Some(intent) = generator_intent(arguments) else {
            return Ok(invalid(
                TOOL,
                "intent",
                "send intent (and context) for MetaForge's generator, or template_id and operations to tailor the flow yourself".to_owned(),
            ));
        };
        let context = match context_with_answers(arguments) {
            Ok(c) => c,
            Err(refusal) => return Ok(*refusal),
        };
        let Some(generator) = &self.generator else {
            return Ok(generator_unavailable(
                "MetaForge's generator does not run in this sidecar: send template_id and operations (your own tailoring), or run the sidecar with METAFORGE_GATEWAY_URL or under `metaforge up`",
            ));
        };
        let request = GenerateRequest {
            intent,
            context: context.unwrap_or_default(),
            requirements: arguments.get("requirements").filter(|r| !r.is_null()).cloned(),
            caller: caller.class.as_str().to_owned(),
            session: format!("mcp-{}", caller.class.as_str()),
        };
        match generator.generate(request).await {
            Ok(Generated::NeedsInput { questions, notes, .. }) => {
                let questions = serde_json::to_value(&questions)
                    .map_err(|e| PortError::new(PortErrorKind::Internal, e.to_string()))?;
                Ok(generated_needs_input(&questions, &notes))
            }
            Ok(Generated::Proposed {
                outcome,
                open_questions,
                ..
            }) => held_output(&outcome, &open_questions, caller),
            Err(GenerateError::Flow(err)) => refusal_output(err),
            Err(err) => Ok(generator_unavailable(&err.to_string())),
        }
    }
}

/// A held proposal as the agent sees it — the same shape the gateway-bound tool gives
/// ([`held_proposal_output`]), whichever path wrote it.
fn held_output(
    outcome: &ProposalOutcome,
    open_questions: &[String],
    caller: &CallerContext,
) -> Result<HostCallOutcome, PortError> {
    let (Some(version), Some(approval_id)) = (&outcome.version, &outcome.approval_id) else {
        return Err(PortError::new(
            PortErrorKind::Internal,
            "a proposal was accepted without a stored version and a hold",
        ));
    };
    tracing::info!(
        event = "mcp_flow_proposal_held",
        approval_id = %approval_id,
        flow_version_id = %version.id,
        caller = caller.class.as_str(),
        generated = outcome.generated_by.is_some(),
    );
    let value = |v: Result<Value, serde_json::Error>| {
        v.map_err(|e| PortError::new(PortErrorKind::Internal, e.to_string()))
    };
    let held = HeldProposal {
        approval_id: approval_id.clone(),
        flow_version_id: version.id.clone(),
        template_id: version.template_id.clone(),
        content_hash: version.content_hash.clone(),
        diff: value(serde_json::to_value(&outcome.result.diff))?,
        applied: value(serde_json::to_value(&outcome.result.applied))?,
        skipped: value(serde_json::to_value(&outcome.result.skipped))?,
        generated_by: outcome
            .generated_by
            .as_ref()
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| PortError::new(PortErrorKind::Internal, e.to_string()))?,
        open_questions: open_questions.to_vec(),
    };
    Ok(HostCallOutcome::Done(ToolOutput::json(held_proposal_output(
        &held,
    ))))
}

/// The agent-facing answer when the server's generator cannot run: nothing was proposed.
pub(crate) fn generator_unavailable(message: &str) -> HostCallOutcome {
    HostCallOutcome::Done(ToolOutput::error(json!({
        "status": "unavailable", "error": "generator_unavailable", "message": message,
    })))
}

/// needs_input from the generator path, in the wire form of its questions (`id`, `question`,
/// `options`, `source`), shared by the in-process and the gateway-bound tool.
pub(crate) fn generated_needs_input(questions: &Value, notes: &[String]) -> HostCallOutcome {
    let asked = input_questions(questions);
    HostCallOutcome::NeedsInput {
        message: format!(
            "Before MetaForge's generator tailors a flow, it needs {} answer(s). Ask the person; do not answer them yourself.",
            asked.len()
        ),
        questions: asked,
        result: ToolOutput::json(json!({
            "status": "needs_input",
            "questions": questions,
            "notes": notes,
            "hint": "call flow.propose again with the same arguments plus answers: {question id: answer}",
        })),
    }
}

/// A refused tailoring as the agent sees it: the reason and every problem; nothing was stored.
fn refusal_output(err: FlowServiceError) -> Result<HostCallOutcome, PortError> {
    const TOOL: &str = "flow.propose";
    match err {
        FlowServiceError::Template(e) => Ok(invalid(TOOL, "template_id", e.to_string())),
        FlowServiceError::Invalid { message, result } => {
            Ok(HostCallOutcome::Done(ToolOutput::error(json!({
                "status": result.status.as_str(),
                "error": "invalid_proposal",
                "message": message,
                "refused": result.refused,
                "violations": result.violations,
                "diff": result.diff,
            }))))
        }
        FlowServiceError::Violations { violations } => Ok(HostCallOutcome::Done(ToolOutput::error(json!({
            "status": "invalid", "error": "invalid_proposal", "violations": violations,
        })))),
        FlowServiceError::IdenticalToTemplate(message) => {
            Ok(HostCallOutcome::Done(ToolOutput::error(json!({
                "status": "invalid", "error": "identical_to_template", "message": message,
            }))))
        }
        FlowServiceError::TooLarge(limit) => Ok(invalid(TOOL, limit.field, limit.to_string())),
        FlowServiceError::Port(e) => Err(e),
    }
}

/// `flow.version`: one stored version, verified against its hash.
pub struct FlowVersion {
    stores: FlowStores,
}

impl FlowVersion {
    /// The tool over `stores`.
    pub fn new(stores: FlowStores) -> Self {
        Self { stores }
    }
}

/// `flow.version`'s descriptor, shared by the in-process and the gateway-bound tool.
pub(crate) fn version_descriptor() -> ToolDescriptor {
    ToolDescriptor {
        name: "flow.version".to_owned(),
        title: Some("Read a flow version".to_owned()),
        description: "One stored flow version: status, approval, hash and the flow itself.".to_owned(),
        input_schema: json!({
            "type": "object", "required": ["id"],
            "properties": {"id": {"type": "string", "description": "flow version id"}}
        }),
        hints: ToolHints {
            read_only_hint: Some(true),
            destructive_hint: Some(false),
            idempotent_hint: Some(true),
            open_world_hint: Some(false),
        },
    }
}

#[async_trait::async_trait]
impl SidecarTool for FlowVersion {
    fn descriptor(&self) -> ToolDescriptor {
        version_descriptor()
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        let id = arguments.get("id").and_then(Value::as_str).unwrap_or_default();
        match read_version(&self.stores, id).await {
            Ok(value) => Ok(HostCallOutcome::Done(ToolOutput::json(value))),
            Err(e) if e.kind == PortErrorKind::NotFound => Ok(HostCallOutcome::Done(ToolOutput::error(
                json!({"status": "error", "error": "not_found", "id": id, "message": e.message}),
            ))),
            Err(e) => Err(e),
        }
    }
}

async fn read_version(stores: &FlowStores, id: &str) -> Result<Value, PortError> {
    version_view(&stores.versions.get(id).await?)
}

/// The `flow.version` result for one record, its content verified against its hash: one shape
/// whether the record came from the local store or from the gateway.
pub(crate) fn version_view(record: &metaforge_ports::FlowVersionRecord) -> Result<Value, PortError> {
    let flow = verify_version(record).map_err(|e| PortError::new(PortErrorKind::Corrupt, e.to_string()))?;
    Ok(json!({
        "id": record.id,
        "template_id": record.template_id,
        "template_version": record.template_version,
        "status": record.status,
        "origin": record.origin,
        "content_hash": record.content_hash,
        "approval_id": record.approval_id,
        "approver": record.approver,
        "created_at": record.created_at,
        "decided_at": record.decided_at,
        "flow": flow,
    }))
}

/// `approvals.list`: what is waiting for a person (read only; deciding happens elsewhere).
pub struct ApprovalsList {
    stores: FlowStores,
}

impl ApprovalsList {
    /// The tool over `stores`.
    pub fn new(stores: FlowStores) -> Self {
        Self { stores }
    }
}

#[async_trait::async_trait]
impl SidecarTool for ApprovalsList {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor {
            name: "approvals.list".to_owned(),
            title: Some("List approvals".to_owned()),
            description: "Holds waiting for a person (or, with recent, the latest of any state). \
                          Read only: approving happens in the MetaForge approvals queue."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "recent": {"type": "integer", "minimum": 1, "maximum": 200,
                        "description": "list the latest N holds of any state instead of the pending ones"}
                }
            }),
            hints: ToolHints {
                read_only_hint: Some(true),
                destructive_hint: Some(false),
                idempotent_hint: Some(true),
                open_world_hint: Some(false),
            },
        }
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        let records = match arguments.get("recent").and_then(Value::as_u64) {
            Some(n) => {
                self.stores
                    .approvals
                    .list_recent(usize::try_from(n).unwrap_or(200))
                    .await?
            }
            None => self.stores.approvals.list_pending().await?,
        };
        Ok(HostCallOutcome::Done(ToolOutput::json(json!({
            "count": records.len(),
            "approvals": records,
        }))))
    }
}

/// `metaforge://flow/version/{id}`: a version as markdown, for a client with no canvas.
pub struct FlowVersionResource {
    stores: FlowStores,
}

/// The resource URI prefix.
pub const FLOW_VERSION_URI_PREFIX: &str = "metaforge://flow/version/";

impl FlowVersionResource {
    /// The resource over `stores`.
    pub fn new(stores: FlowStores) -> Self {
        Self { stores }
    }
}

/// A version as markdown: header, status, and one section per phase with its gate.
pub fn version_markdown(version: &Value) -> String {
    let mut md = format!(
        "# Flow version {}\n\n- Template: {} {}\n- Status: {}\n- Content hash: `{}`\n",
        version["id"].as_str().unwrap_or_default(),
        version["template_id"].as_str().unwrap_or_default(),
        version["template_version"].as_str().unwrap_or_default(),
        version["status"].as_str().unwrap_or_default(),
        version["content_hash"].as_str().unwrap_or_default(),
    );
    if let Some(approval) = version["approval_id"].as_str() {
        md.push_str(&format!("- Approval: {approval}\n"));
    }
    if let Some(approver) = version["approver"].as_str() {
        md.push_str(&format!("- Decided by: {approver}\n"));
    }
    md.push_str(&format!(
        "\n## {}\n",
        version["flow"]["title"].as_str().unwrap_or_default()
    ));
    for phase in version["flow"]["phases"].as_array().into_iter().flatten() {
        md.push_str(&format!(
            "\n### {} (`{}`)\n",
            phase["title"].as_str().unwrap_or_default(),
            phase["id"].as_str().unwrap_or_default()
        ));
        let list = |v: &Value| -> String {
            v.as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        };
        let depends = list(&phase["depends_on"]);
        if !depends.is_empty() {
            md.push_str(&format!("- Depends on: {depends}\n"));
        }
        md.push_str(&format!("- Disciplines: {}\n", list(&phase["disciplines"])));
        if let Some(gate) = phase.get("gate").filter(|g| !g.is_null()) {
            md.push_str(&format!(
                "- Gate: {} — requires {}\n",
                gate["name"].as_str().unwrap_or_default(),
                list(&phase["required_deliverables"])
            ));
        }
    }
    md
}

#[async_trait::async_trait]
impl SidecarResource for FlowVersionResource {
    fn template(&self) -> ResourceTemplateDescriptor {
        ResourceTemplateDescriptor {
            uri_template: format!("{FLOW_VERSION_URI_PREFIX}{{id}}"),
            name: "flow-version".to_owned(),
            description: "A stored flow version as markdown".to_owned(),
            mime_type: "text/markdown".to_owned(),
        }
    }

    async fn read(&self, uri: &str) -> Option<Result<ResourceText, PortError>> {
        let id = uri.strip_prefix(FLOW_VERSION_URI_PREFIX)?;
        Some(read_version(&self.stores, id).await.map(|v| ResourceText {
            uri: uri.to_owned(),
            mime_type: "text/markdown".to_owned(),
            text: version_markdown(&v),
        }))
    }
}
