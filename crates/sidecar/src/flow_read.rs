//! The sidecar's read-only flow tools: `flow.list` and `flow.validate` (FORGE-400).
//!
//! Reads are never held: an agent calls them freely, and they change nothing.

use metaforge_domain::flow::{Flow, FlowContext, Syntax, catalogue, parse_document, template};
use metaforge_ports::{
    CallerContext, HostCallOutcome, PortError, PortErrorKind, ToolDescriptor, ToolHints, ToolOutput,
};
use serde_json::{Map, Value, json};

use super::host::SidecarTool;
use metaforge_app::flow_validation::{ValidationError, validate_flow};

fn read_only() -> ToolHints {
    ToolHints {
        read_only_hint: Some(true),
        destructive_hint: Some(false),
        idempotent_hint: Some(true),
        open_world_hint: Some(false),
    }
}

/// A tool-level refusal naming the field, in the MET-569 envelope shape.
pub(crate) fn invalid(tool: &str, field: &str, message: impl Into<String>) -> HostCallOutcome {
    HostCallOutcome::Done(ToolOutput::error(json!({
        "status": "error", "error": "invalid_arguments", "tool": tool,
        "validation_errors": [format!("{field}: {}", message.into())],
        "hint": "fix the arguments and call again; the tool was NOT executed"
    })))
}

/// The optional `context` argument as a tailoring context.
pub(crate) fn context_argument(arguments: &Map<String, Value>) -> Result<Option<FlowContext>, String> {
    match arguments.get("context") {
        None | Some(Value::Null) => Ok(None),
        Some(value) => serde_json::from_value(value.clone())
            .map(Some)
            .map_err(|e| e.to_string()),
    }
}

/// `flow.list`: the catalogue, as the gateway will run it.
pub struct FlowList;

#[async_trait::async_trait]
impl SidecarTool for FlowList {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor {
            name: "flow.list".to_owned(),
            title: Some("List design flows".to_owned()),
            description: "The design-flow catalogue: every template with its phases, gates, \
                          deliverables, and whether it can be started."
                .to_owned(),
            input_schema: json!({"type": "object", "properties": {}}),
            hints: read_only(),
        }
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        _arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        // The templates are embedded in the binary, so the answer never changes: parse and
        // validate them once, not on every call (a read tool is the sidecar's hot path).
        static ANSWER: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        let answer = ANSWER.get_or_init(|| {
            let flows = catalogue();
            json!({
                "count": flows.len(),
                "flows": flows,
            })
        });
        Ok(HostCallOutcome::Done(ToolOutput::json(answer.clone())))
    }
}

/// `flow.validate`: a flow (inline, as YAML/JSON text, or a template id) checked against every
/// invariant, optionally under a tailoring context.
pub struct FlowValidate;

#[async_trait::async_trait]
impl SidecarTool for FlowValidate {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor {
            name: "flow.validate".to_owned(),
            title: Some("Validate a design flow".to_owned()),
            description: "Check a flow against every invariant and list all violations. Give \
                          exactly one of: flow (a flow object), source (YAML or JSON text), \
                          template_id (a built-in template). Optional context checks it for a \
                          manufacturing route."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "flow": {"type": "object", "description": "the flow document"},
                    "source": {"type": "string", "description": "the flow as YAML or JSON text"},
                    "template_id": {"type": "string", "description": "a built-in template id, e.g. mech_v1"},
                    "context": {"type": "object", "description": "tailoring context (manufacturing_context, target_maturity, loads_and_use)"}
                }
            }),
            hints: read_only(),
        }
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        const TOOL: &str = "flow.validate";
        let given: Vec<&str> = ["flow", "source", "template_id"]
            .into_iter()
            .filter(|k| arguments.get(*k).is_some_and(|v| !v.is_null()))
            .collect();
        if given.len() != 1 {
            return Ok(invalid(
                TOOL,
                "flow",
                format!("give exactly one of flow, source, template_id (got {given:?})"),
            ));
        }
        let flow: Flow = match given[0] {
            "flow" => match arguments.get("flow").map(|v| serde_json::from_value(v.clone())) {
                Some(Ok(flow)) => flow,
                Some(Err(e)) => return Ok(invalid(TOOL, "flow", e.to_string())),
                None => return Ok(invalid(TOOL, "flow", "missing")),
            },
            "source" => {
                let text = arguments
                    .get("source")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let syntax = if text.trim_start().starts_with('{') {
                    Syntax::Json
                } else {
                    Syntax::Yaml
                };
                match parse_document(text, syntax) {
                    Ok(flow) => flow,
                    Err(e) => return Ok(invalid(TOOL, "source", e.to_string())),
                }
            }
            _ => {
                let id = arguments
                    .get("template_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                match template(id) {
                    Ok(flow) => flow,
                    Err(e) => return Ok(invalid(TOOL, "template_id", e.to_string())),
                }
            }
        };
        let context = match context_argument(&arguments) {
            Ok(context) => context,
            Err(e) => return Ok(invalid(TOOL, "context", e)),
        };
        // Size limits, then the invariants off the async workers under a deadline.
        let flow_id = flow.id.clone();
        let report = match validate_flow(flow, context).await {
            Ok(report) => report,
            Err(ValidationError::TooLarge(limit)) => {
                return Ok(invalid(TOOL, limit.field, limit.to_string()));
            }
            Err(err @ ValidationError::DeadlineExceeded(_)) => {
                return Ok(HostCallOutcome::Done(ToolOutput::error(json!({
                    "status": "error", "error": "validation_timeout", "tool": TOOL,
                    "message": err.to_string(),
                }))));
            }
            Err(ValidationError::Failed(message)) => {
                return Err(PortError::new(PortErrorKind::Internal, message));
            }
        };
        Ok(HostCallOutcome::Done(ToolOutput::json(json!({
            "flow_id": flow_id,
            "valid": report.valid,
            "violations": report.violations,
        }))))
    }
}
