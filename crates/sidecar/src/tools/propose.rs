//! `flow.propose`, once, over [`FlowBindings`] (FORGE-400/462/471, issue 11 W2): caller-proposed
//! tailoring (a template and operations, checked strictly) or, with neither, MetaForge's own
//! generator. The bindings are the in-process ones ([`InProcessFlowBindings`], with the
//! generator when this process has one) or the gateway's over HTTP in remote mode; either way the
//! call is answered by this one code path, in one shape: a held proposal, the questions to ask
//! first, or the service's refusal with its code from the one code table.
//!
//! The tool returns the proposal, the diff and the approval id and stops: the version it writes is
//! held in the one approval ledger; the call itself is not held, and no tool here decides anything.

use metaforge_app::limits::{FLOW_BUDGET, FLOW_LOADS, Limits, PROPOSAL_OPERATIONS, PROPOSAL_TOOL};
use std::sync::Arc;

use metaforge_api::{CallerProposal, FlowBindings, ProposalAnswer};
use metaforge_domain::flow::DEFAULT_TEMPLATE_ID;
use metaforge_ports::{
    CallFacts, CallerClass, CallerContext, HostCallOutcome, PortErrorKind, ToolHints, ToolOutput,
};
use serde_json::Value;

use crate::args::{ArgError, FlowProposeArgs};
use crate::envelope::{
    ToolError, generated_needs_input, generator_unavailable, held_proposal_output, invalid_proposal, refusal,
    template_needs_input,
};
use crate::typed::{ADDITIVE_WRITE, ToolGate, TypedTool, class_verdict};

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

#[async_trait::async_trait]
impl<B: FlowBindings + ?Sized + 'static> TypedTool for FlowPropose<B> {
    const NAME: &'static str = TOOL;
    const TITLE: &'static str = "Propose a tailored design flow";
    const DESCRIPTION: &'static str = "Tailor a built-in flow template with your operations (template_id + \
                      operations), or send only the intent and context to have MetaForge's \
                      own generator tailor it. Missing context comes back as questions \
                      (needs_input): ask the person, do not answer them yourself. A valid \
                      proposal is stored as a new version held for a person: the result \
                      carries the diff and the approval id and does not wait. Nothing here \
                      approves it.";
    const HINTS: ToolHints = ADDITIVE_WRITE;
    const GATE: ToolGate = ToolGate::Write {
        requires_approval: false,
    };
    // Its effect is the hold: the version it writes waits for a person.
    const HOLDS_ITS_OWN_EFFECT: bool = true;
    type Args = FlowProposeArgs;
    const LIMITS: Limits = &[PROPOSAL_TOOL, PROPOSAL_OPERATIONS, FLOW_LOADS, FLOW_BUDGET];

    fn offered_to(&self, class: CallerClass) -> bool {
        // Flow administration is outside a service or client-task caller's bounds (FORGE-487/584).
        !matches!(class, CallerClass::Service | CallerClass::ClientTask)
    }

    async fn run(
        &self,
        caller: &CallerContext,
        _facts: &CallFacts,
        args: FlowProposeArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        self.propose(caller, args).await
    }
}

impl<B: FlowBindings + ?Sized + 'static> FlowPropose<B> {
    async fn propose(
        &self,
        caller: &CallerContext,
        args: FlowProposeArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        let generated = args.wants_generator();
        let intent = args.generator_intent();
        if generated && intent.is_none() {
            return Err(ArgError::new(
                "intent",
                "send intent (and context) for MetaForge's generator, or template_id and operations to tailor the flow yourself",
            )
            .into());
        }
        let proposal = CallerProposal {
            context: args.context_with_answers()?,
            template_id: args.template_id.clone(),
            operations: args.operations,
            intent,
            requirements: args.requirements,
            caller: caller.class.as_str().to_owned(),
            requested_by: caller.identity.clone(),
        };
        match self.bindings.propose(proposal).await {
            Ok(ProposalAnswer::Held(held)) => {
                let verdict = class_verdict(self, caller, &Value::Null);
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
