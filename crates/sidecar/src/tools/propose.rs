//! `flow.propose`, once, over [`FlowBindings`] (FORGE-400/462/471, issue 11 W2): caller-proposed
//! tailoring (a template and operations, checked strictly) or, with neither, MetaForge's own
//! generator. The bindings are the in-process ones ([`InProcessFlowBindings`], with the
//! generator when this process has one) or the gateway's over HTTP in remote mode; either way the
//! call is answered by this one code path, in one shape: a held proposal, the questions to ask
//! first, or the service's refusal with its code from the one code table.
//!
//! The tool returns the proposal, the diff and the approval id and stops: the version it writes is
//! held in the one approval ledger; the call itself is not held, and no tool here decides anything.

use std::sync::{Arc, OnceLock};

use metaforge_domain::flow::DEFAULT_TEMPLATE_ID;
use metaforge_domain::tool_gating::{Annotation, Caller, Decision, ToolSpec, decide};
use metaforge_ports::{
    CallerClass, CallerContext, CallerProposal, FlowBindings, HostCallOutcome, PortError, PortErrorKind,
    ProposalAnswer, ToolDescriptor, ToolHints, ToolOutput,
};
use serde_json::{Map, Value};

use super::schema_once;
use crate::args::{ArgError, FlowProposeArgs, parse};
use crate::envelope::{
    ToolError, at_boundary, generated_needs_input, generator_unavailable, held_proposal_output,
    invalid_proposal, refusal, refused, template_needs_input,
};
use crate::host::SidecarTool;

const TOOL: &str = "flow.propose";

/// `flow.propose` over bindings `B` (by default any [`FlowBindings`] behind an `Arc`).
pub struct FlowPropose<B: ?Sized = dyn FlowBindings> {
    bindings: Arc<B>,
}

impl<B: FlowBindings + ?Sized> FlowPropose<B> {
    /// The tool over `bindings`.
    pub fn over(bindings: Arc<B>) -> Self {
        Self { bindings }
    }
}

/// `flow.propose`'s descriptor.
fn descriptor() -> ToolDescriptor {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    ToolDescriptor {
        name: TOOL.to_owned(),
        title: Some("Propose a tailored design flow".to_owned()),
        description: "Tailor a built-in flow template with your operations (template_id + \
                      operations), or send only the intent and context to have MetaForge's \
                      own generator tailor it. Missing context comes back as questions \
                      (needs_input): ask the person, do not answer them yourself. A valid \
                      proposal is stored as a new version held for a person: the result \
                      carries the diff and the approval id and does not wait. Nothing here \
                      approves it."
            .to_owned(),
        input_schema: schema_once::<FlowProposeArgs>(&SCHEMA),
        hints: ToolHints {
            read_only_hint: Some(false),
            destructive_hint: Some(false),
            idempotent_hint: Some(false),
            open_world_hint: Some(false),
        },
    }
}

/// `flow.propose`'s gating spec: additive, not approval-gated (its effect is the hold).
fn spec() -> ToolSpec {
    let d = descriptor();
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
impl<B: FlowBindings + ?Sized + 'static> SidecarTool for FlowPropose<B> {
    fn descriptor(&self) -> ToolDescriptor {
        descriptor()
    }

    fn gate_spec(&self) -> ToolSpec {
        spec()
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
        at_boundary(TOOL, self.propose(caller, arguments).await)
    }
}

impl<B: FlowBindings + ?Sized> FlowPropose<B> {
    async fn propose(
        &self,
        caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, ToolError> {
        let verdict = decide(
            &spec(),
            &Caller::from(caller.class),
            &Value::Object(arguments.clone()),
        );
        if verdict.decision == Decision::Refuse {
            return Ok(refused(TOOL, &verdict.reason));
        }
        // Stored sizes are capped as at the HTTP route (issue 12), before anything is parsed or
        // sent: nothing oversized is stored, or echoed back.
        metaforge_app::limits::check_tool_arguments(TOOL, &arguments).map_err(ArgError::from)?;
        let args: FlowProposeArgs = parse(arguments)?;
        let generated = args.wants_generator();
        let intent = args.generator_intent();
        if generated && intent.is_none() {
            return Err(ArgError::new(
                "intent",
                "send intent (and context) for MetaForge's generator, or template_id and operations to tailor the flow yourself",
            )
            .into());
        }
        let context = args.context_with_answers()?;
        let to_value = |value: Result<Value, serde_json::Error>| {
            value.map_err(|e| PortError::new(PortErrorKind::Internal, e.to_string()))
        };
        let proposal = CallerProposal {
            template_id: args.template_id.clone(),
            operations: match &args.operations {
                Some(ops) => to_value(serde_json::to_value(ops))?,
                None => Value::Null,
            },
            intent,
            context: context
                .as_ref()
                .map(serde_json::to_value)
                .transpose()
                .map_err(|e| ArgError::new("context", e.to_string()))?,
            requirements: args.requirements.clone(),
            caller: caller.class.as_str().to_owned(),
            requested_by: caller.identity.clone(),
        };
        match self.bindings.propose(proposal).await {
            Ok(ProposalAnswer::Held(held)) => {
                tracing::info!(
                    event = "mcp_flow_proposal_held",
                    approval_id = %held.approval_id,
                    flow_version_id = %held.flow_version_id,
                    caller = caller.class.as_str(),
                    generated = held.generated_by.is_some(),
                    gate = %verdict.reason,
                );
                Ok(HostCallOutcome::Done(ToolOutput::json(held_proposal_output(
                    &held,
                ))))
            }
            Ok(ProposalAnswer::NeedsInput { questions, notes }) if generated => {
                Ok(generated_needs_input(&questions, &notes))
            }
            Ok(ProposalAnswer::NeedsInput { questions, .. }) => Ok(template_needs_input(
                args.template_id.as_deref().unwrap_or(DEFAULT_TEMPLATE_ID),
                &questions,
            )),
            Ok(ProposalAnswer::Refused {
                code,
                message,
                details,
            }) => Ok(refusal(&code, &message, details.as_ref())),
            Err(e) if generated && e.kind == PortErrorKind::Unavailable => {
                Ok(generator_unavailable(&e.message))
            }
            Err(e) if e.kind == PortErrorKind::Invalid => Ok(invalid_proposal(&e.message)),
            Err(e) => Err(e.into()),
        }
    }
}
