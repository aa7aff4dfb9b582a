//! The sidecar's read-only flow tools: `flow.list` and `flow.validate` (FORGE-400).
//!
//! Reads are never held: an agent calls them freely, and they change nothing.

use std::sync::OnceLock;

use metaforge_app::flow_validation::{ValidationError, validate_flow};
use metaforge_domain::flow::{Flow, Syntax, catalogue, parse_document, template};
use metaforge_ports::{
    CallFacts, CallerContext, HostCallOutcome, PortError, PortErrorKind, ToolHints, ToolOutput,
};
use serde_json::json;

use crate::args::{ArgError, FlowListArgs, FlowToValidate, FlowValidateArgs};
use crate::envelope::ToolError;
use crate::typed::{READ_ONLY, TypedTool};

/// `flow.list`: the catalogue, as the gateway will run it.
pub struct FlowList;

#[async_trait::async_trait]
impl TypedTool for FlowList {
    const NAME: &'static str = "flow.list";
    const TITLE: &'static str = "List design flows";
    const DESCRIPTION: &'static str = "The design-flow catalogue: every template with its phases, \
        gates, deliverables, and whether it can be started.";
    const HINTS: ToolHints = READ_ONLY;
    type Args = FlowListArgs;

    async fn run(
        &self,
        _caller: &CallerContext,
        _facts: &CallFacts,
        FlowListArgs {}: FlowListArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        // The templates are embedded in the binary, so the answer never changes: parse, validate
        // and serialize them once, not on every call (a read tool is the sidecar's hot path).
        static ANSWER: OnceLock<ToolOutput> = OnceLock::new();
        let answer = ANSWER.get_or_init(|| {
            let flows = catalogue();
            ToolOutput::json(json!({
                "count": flows.len(),
                "flows": flows,
            }))
        });
        Ok(HostCallOutcome::Done(answer.clone()))
    }
}

/// `flow.validate`: a flow (inline, as YAML/JSON text, or a template id) checked against every
/// invariant, optionally under a tailoring context.
pub struct FlowValidate;

const VALIDATE: &str = "flow.validate";

#[async_trait::async_trait]
impl TypedTool for FlowValidate {
    const NAME: &'static str = VALIDATE;
    const TITLE: &'static str = "Validate a design flow";
    const DESCRIPTION: &'static str = "Check a flow against every invariant and list all violations. \
        Give exactly one of: flow (a flow object), source (YAML or JSON text), template_id (a \
        built-in template). Optional context checks it for a manufacturing route.";
    const HINTS: ToolHints = READ_ONLY;
    type Args = FlowValidateArgs;

    async fn run(
        &self,
        _caller: &CallerContext,
        _facts: &CallFacts,
        args: FlowValidateArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        validate(args).await
    }
}

async fn validate(mut args: FlowValidateArgs) -> Result<HostCallOutcome, ToolError> {
    let context = args.context.take();
    let flow: Flow = match args.flow_to_validate()? {
        FlowToValidate::Flow(flow) => *flow,
        FlowToValidate::Source(text) => {
            let syntax = if text.trim_start().starts_with('{') {
                Syntax::Json
            } else {
                Syntax::Yaml
            };
            parse_document(&text, syntax).map_err(|e| ArgError::new("source", e.to_string()))?
        }
        FlowToValidate::Template(id) => {
            template(&id).map_err(|e| ArgError::new("template_id", e.to_string()))?
        }
    };
    // Size limits, then the invariants off the async workers under a deadline.
    let flow_id = flow.id.clone();
    let report = match validate_flow(flow, context).await {
        Ok(report) => report,
        Err(ValidationError::TooLarge(limit)) => return Err(ArgError::from(limit).into()),
        Err(err @ ValidationError::DeadlineExceeded(_)) => {
            return Ok(HostCallOutcome::Done(ToolOutput::error(json!({
                "status": "error", "error": "validation_timeout", "tool": VALIDATE,
                "message": err.to_string(),
            }))));
        }
        Err(ValidationError::Failed(message)) => {
            return Err(PortError::new(PortErrorKind::Internal, message).into());
        }
    };
    Ok(HostCallOutcome::Done(ToolOutput::json(json!({
        "flow_id": flow_id,
        "valid": report.valid,
        "violations": report.violations,
    }))))
}
