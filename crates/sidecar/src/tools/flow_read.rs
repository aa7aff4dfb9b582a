//! The sidecar's read-only flow tools: `flow.list` and `flow.validate` (FORGE-400).
//!
//! Reads are never held: an agent calls them freely, and they change nothing.

use std::sync::OnceLock;

use metaforge_app::flow_validation::{ValidationError, validate_flow};
use metaforge_domain::flow::{Flow, Syntax, catalogue, parse_document, template};
use metaforge_ports::{CallerContext, HostCallOutcome, PortError, PortErrorKind, ToolDescriptor, ToolOutput};
use serde_json::{Map, Value, json};

use super::{read_only, schema_once};
use crate::args::{ArgError, FlowListArgs, FlowToValidate, FlowValidateArgs, parse};
use crate::envelope::{ToolError, at_boundary};
use crate::host::SidecarTool;

/// `flow.list`: the catalogue, as the gateway will run it.
pub struct FlowList;

#[async_trait::async_trait]
impl SidecarTool for FlowList {
    fn descriptor(&self) -> ToolDescriptor {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        ToolDescriptor {
            name: LIST.to_owned(),
            title: Some("List design flows".to_owned()),
            description: "The design-flow catalogue: every template with its phases, gates, \
                          deliverables, and whether it can be started."
                .to_owned(),
            input_schema: schema_once::<FlowListArgs>(&SCHEMA),
            hints: read_only(),
        }
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        at_boundary(LIST, list(arguments))
    }
}

const LIST: &str = "flow.list";

fn list(arguments: Map<String, Value>) -> Result<HostCallOutcome, ToolError> {
    let FlowListArgs {} = parse(arguments)?;
    // The templates are embedded in the binary, so the answer never changes: parse, validate and
    // serialize them once, not on every call (a read tool is the sidecar's hot path).
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

/// `flow.validate`: a flow (inline, as YAML/JSON text, or a template id) checked against every
/// invariant, optionally under a tailoring context.
pub struct FlowValidate;

const VALIDATE: &str = "flow.validate";

#[async_trait::async_trait]
impl SidecarTool for FlowValidate {
    fn descriptor(&self) -> ToolDescriptor {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        ToolDescriptor {
            name: VALIDATE.to_owned(),
            title: Some("Validate a design flow".to_owned()),
            description: "Check a flow against every invariant and list all violations. Give \
                          exactly one of: flow (a flow object), source (YAML or JSON text), \
                          template_id (a built-in template). Optional context checks it for a \
                          manufacturing route."
                .to_owned(),
            input_schema: schema_once::<FlowValidateArgs>(&SCHEMA),
            hints: read_only(),
        }
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        at_boundary(VALIDATE, validate(arguments).await)
    }
}

async fn validate(arguments: Map<String, Value>) -> Result<HostCallOutcome, ToolError> {
    let mut args: FlowValidateArgs = parse(arguments)?;
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
