//! The sidecar's flow tools over [`FlowBindings`] (FORGE-462): `flow.propose` and `flow.version`
//! answered either in process or by the gateway, with one result shape either way.
//!
//! With `METAFORGE_GATEWAY_URL` set the composition root binds these to the gateway's routes, so
//! the version a plugin proposes is the one the dashboard shows and its hold sits in the one
//! ledger. [`InProcessFlowBindings`] is the same port over the local stores.

use std::sync::Arc;

use metaforge_domain::flow::{DEFAULT_TEMPLATE_ID, Operation, TailorStatus};
use metaforge_domain::tool_gating::{Caller, Decision, ToolSpec, decide};
use metaforge_ports::{
    CallerClass, CallerContext, CallerProposal, FlowBindings, FlowVersionRecord, HeldProposal,
    HostCallOutcome, InputQuestion, PortError, PortErrorKind, ProposalAnswer, ToolDescriptor, ToolOutput,
};
use serde_json::{Map, Value, json};

use super::flow_read::invalid;
use super::flow_write::{
    FlowStores, context_with_answers, generated_needs_input, generator_intent, generator_unavailable,
    propose_descriptor, propose_spec, refused, version_descriptor, version_view, wants_generator,
};
use super::host::{SidecarHost, SidecarTool};
use super::{HeldWrites, read_only_host};
use metaforge_app::flows::FlowServiceError;

/// [`FlowBindings`] over the local stores, through the same [`metaforge_app::flows::FlowService`] the
/// gateway uses: correct only inside the gateway's process, where these stores are its own.
pub struct InProcessFlowBindings {
    stores: FlowStores,
}

impl InProcessFlowBindings {
    /// The bindings over `stores`.
    pub fn new(stores: FlowStores) -> Self {
        Self { stores }
    }
}

#[async_trait::async_trait]
impl FlowBindings for InProcessFlowBindings {
    async fn propose(&self, proposal: CallerProposal) -> Result<ProposalAnswer, PortError> {
        let invalid =
            |field: &str, e: String| PortError::new(PortErrorKind::Invalid, format!("{field}: {e}"));
        if proposal.template_id.is_none() && proposal.operations.is_null() {
            return Err(invalid(
                "template_id",
                "MetaForge's generator does not run behind these bindings: send template_id and operations"
                    .to_owned(),
            ));
        }
        let template_id = proposal.template_id.as_deref().unwrap_or(DEFAULT_TEMPLATE_ID);
        let operations: Vec<Operation> = match proposal.operations {
            Value::Null => Vec::new(),
            ops @ (Value::Bool(_)
            | Value::Number(_)
            | Value::String(_)
            | Value::Array(_)
            | Value::Object(_)) => {
                serde_json::from_value(ops).map_err(|e| invalid("operations", e.to_string()))?
            }
        };
        let context = match proposal.context {
            None | Some(Value::Null) => None,
            Some(c) => Some(serde_json::from_value(c).map_err(|e| invalid("context", e.to_string()))?),
        };
        let outcome = self
            .stores
            .flow_service()
            .propose_from_caller(
                template_id,
                &operations,
                context.as_ref(),
                None,
                None,
                &proposal.caller,
            )
            .await
            .map_err(|e| match e {
                FlowServiceError::Port(e) => e,
                other @ (FlowServiceError::Template(_)
                | FlowServiceError::Invalid { .. }
                | FlowServiceError::Violations { .. }
                | FlowServiceError::TooLarge(_)
                | FlowServiceError::IdenticalToTemplate(_)) => {
                    PortError::new(PortErrorKind::Invalid, other.to_string())
                }
            })?;
        if outcome.result.status == TailorStatus::NeedsInput {
            return Ok(ProposalAnswer::NeedsInput {
                questions: serde_json::to_value(&outcome.result.questions)
                    .map_err(|e| PortError::new(PortErrorKind::Internal, e.to_string()))?,
            });
        }
        let (Some(version), Some(approval_id)) = (outcome.version, outcome.approval_id) else {
            return Err(PortError::new(
                PortErrorKind::Internal,
                "a proposal was accepted without a stored version and a hold",
            ));
        };
        let as_value = |v: Result<Value, serde_json::Error>| {
            v.map_err(|e| PortError::new(PortErrorKind::Internal, e.to_string()))
        };
        Ok(ProposalAnswer::Held(Box::new(HeldProposal {
            approval_id,
            flow_version_id: version.id,
            template_id: version.template_id,
            content_hash: version.content_hash,
            diff: as_value(serde_json::to_value(&outcome.result.diff))?,
            applied: as_value(serde_json::to_value(&outcome.result.applied))?,
            skipped: as_value(serde_json::to_value(&outcome.result.skipped))?,
            generated_by: None,
            open_questions: Vec::new(),
        })))
    }

    async fn version(&self, id: &str) -> Result<FlowVersionRecord, PortError> {
        self.stores.versions.get(id).await
    }
}

/// `flow.propose` over [`FlowBindings`].
pub struct BoundFlowPropose {
    bindings: Arc<dyn FlowBindings>,
}

impl BoundFlowPropose {
    /// The tool over `bindings`.
    pub fn new(bindings: Arc<dyn FlowBindings>) -> Self {
        Self { bindings }
    }
}

/// The result a held proposal gives the agent, whichever bindings stored it.
pub fn held_proposal_output(held: &HeldProposal) -> Value {
    json!({
        "status": "proposed",
        "held_for_approval": true,
        "approval_id": held.approval_id,
        "flow_version_id": held.flow_version_id,
        "template_id": held.template_id,
        "content_hash": held.content_hash,
        "diff": held.diff,
        "applied": held.applied,
        "skipped": held.skipped,
        "generated_by": held.generated_by,
        "open_questions": held.open_questions,
        "note": "A person approves or rejects this in the MetaForge approvals queue; no MCP tool decides it.",
    })
}

#[async_trait::async_trait]
impl SidecarTool for BoundFlowPropose {
    fn descriptor(&self) -> ToolDescriptor {
        propose_descriptor()
    }

    fn gate_spec(&self) -> ToolSpec {
        propose_spec()
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
        const TOOL: &str = "flow.propose";
        let verdict = decide(
            &propose_spec(),
            &Caller::from(caller.class),
            &Value::Object(arguments.clone()),
        );
        if verdict.decision == Decision::Refuse {
            return Ok(refused(TOOL, &verdict.reason));
        }
        let generated = wants_generator(&arguments);
        let intent = generator_intent(&arguments);
        if generated && intent.is_none() {
            return Ok(invalid(
                TOOL,
                "intent",
                "send intent (and context) for MetaForge's generator, or template_id and operations to tailor the flow yourself".to_owned(),
            ));
        }
        let template_id = arguments
            .get("template_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let context = match context_with_answers(&arguments) {
            Ok(c) => c,
            Err(refusal) => return Ok(*refusal),
        };
        let context = match context.map(serde_json::to_value).transpose() {
            Ok(c) => c,
            Err(e) => return Ok(invalid(TOOL, "context", e.to_string())),
        };
        let proposal = CallerProposal {
            template_id: template_id.clone(),
            operations: arguments.get("operations").cloned().unwrap_or(Value::Null),
            intent,
            context,
            caller: caller.class.as_str().to_owned(),
        };
        match self.bindings.propose(proposal).await {
            Ok(ProposalAnswer::Held(held)) => {
                tracing::info!(
                    event = "mcp_flow_proposal_held",
                    approval_id = %held.approval_id,
                    flow_version_id = %held.flow_version_id,
                    caller = caller.class.as_str(),
                    gate = %verdict.reason,
                );
                Ok(HostCallOutcome::Done(ToolOutput::json(held_proposal_output(
                    &held,
                ))))
            }
            Ok(ProposalAnswer::NeedsInput { questions }) if generated => {
                Ok(generated_needs_input(&questions, &[]))
            }
            Ok(ProposalAnswer::NeedsInput { questions }) => {
                let template_id = template_id.as_deref().unwrap_or(DEFAULT_TEMPLATE_ID);
                let asked = input_questions(&questions);
                Ok(HostCallOutcome::NeedsInput {
                    message: format!(
                        "Before tailoring {template_id}, MetaForge needs {} answer(s).",
                        asked.len()
                    ),
                    questions: asked,
                    result: ToolOutput::json(json!({
                        "status": "needs_input",
                        "template_id": template_id,
                        "questions": questions,
                        "hint": "call flow.propose again with the same arguments plus answers: {question id: answer}",
                    })),
                })
            }
            Err(e) if generated && e.kind == PortErrorKind::Unavailable => {
                Ok(generator_unavailable(&e.message))
            }
            Err(e) if e.kind == PortErrorKind::Invalid => {
                Ok(HostCallOutcome::Done(ToolOutput::error(json!({
                    "status": "invalid", "error": "invalid_proposal", "message": e.message,
                }))))
            }
            Err(e) => Err(e),
        }
    }
}

/// The questions as the transport asks them, read from their wire form (`id`, `question`,
/// `options`) so they look the same whichever bindings asked.
pub(crate) fn input_questions(questions: &Value) -> Vec<InputQuestion> {
    questions
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|q| {
            Some(InputQuestion {
                id: q.get("id")?.as_str()?.to_owned(),
                prompt: q.get("question")?.as_str()?.to_owned(),
                choices: q
                    .get("options")
                    .and_then(Value::as_array)
                    .map(|o| o.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// `flow.version` over [`FlowBindings`]: the version verified against its hash.
pub struct BoundFlowVersion {
    bindings: Arc<dyn FlowBindings>,
}

impl BoundFlowVersion {
    /// The tool over `bindings`.
    pub fn new(bindings: Arc<dyn FlowBindings>) -> Self {
        Self { bindings }
    }
}

#[async_trait::async_trait]
impl SidecarTool for BoundFlowVersion {
    fn descriptor(&self) -> ToolDescriptor {
        version_descriptor()
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        let id = arguments.get("id").and_then(Value::as_str).unwrap_or_default();
        match self.bindings.version(id).await.and_then(|r| version_view(&r)) {
            Ok(value) => Ok(HostCallOutcome::Done(ToolOutput::json(value))),
            Err(e) if e.kind == PortErrorKind::NotFound => Ok(HostCallOutcome::Done(ToolOutput::error(
                json!({"status": "error", "error": "not_found", "id": id, "message": e.message}),
            ))),
            Err(e) => Err(e),
        }
    }
}

/// The sidecar host whose flow writes go through `bindings` and whose held writes wait in
/// `held` (the gateway's ledger in remote mode): flow.list, flow.validate, flow.propose,
/// flow.version.
pub fn host_with_bindings(bindings: Arc<dyn FlowBindings>, held: HeldWrites) -> SidecarHost {
    read_only_host()
        .with_tool(Arc::new(BoundFlowPropose::new(Arc::clone(&bindings))))
        .with_tool(Arc::new(BoundFlowVersion::new(bindings)))
        .with_held_writes(held)
}
