//! Conversions between rmcp's wire types and the port's value types.

use metaforge_ports::{PortError, PortErrorKind, ToolDescriptor, ToolHints, ToolOutput};
use rmcp::model::{CallToolResult, Tool};
use serde_json::Value;

/// An rmcp tool as the port describes it; a missing schema becomes the permissive object schema.
pub(crate) fn descriptor_from_tool(tool: &Tool) -> ToolDescriptor {
    let hints = tool
        .annotations
        .as_ref()
        .map(|a| ToolHints {
            read_only_hint: a.read_only_hint,
            destructive_hint: a.destructive_hint,
            idempotent_hint: a.idempotent_hint,
            open_world_hint: a.open_world_hint,
        })
        .unwrap_or_default();
    let schema = Value::Object(tool.input_schema.as_ref().clone());
    let input_schema = if schema.as_object().is_some_and(|o| !o.is_empty()) {
        schema
    } else {
        serde_json::json!({"type": "object"})
    };
    ToolDescriptor {
        name: tool.name.to_string(),
        title: tool
            .title
            .clone()
            .or_else(|| tool.annotations.as_ref().and_then(|a| a.title.clone())),
        description: tool
            .description
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        input_schema,
        hints,
    }
}

/// A port descriptor as an rmcp tool, for the sidecar's `tools/list`.
pub(crate) fn tool_from_descriptor(d: &ToolDescriptor) -> Result<Tool, PortError> {
    let schema = match &d.input_schema {
        Value::Object(map) => map.clone(),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Array(_) => {
            return Err(PortError::new(
                PortErrorKind::Internal,
                format!("tool {}: input schema is not a JSON object", d.name),
            ));
        }
    };
    let mut tool = Tool::new(d.name.clone(), d.description.clone(), schema);
    let mut annotations = rmcp::model::ToolAnnotations::default();
    annotations.read_only_hint = d.hints.read_only_hint;
    annotations.destructive_hint = d.hints.destructive_hint;
    annotations.idempotent_hint = d.hints.idempotent_hint;
    annotations.open_world_hint = d.hints.open_world_hint;
    tool.annotations = Some(annotations);
    tool.title = d.title.clone();
    Ok(tool)
}

/// An rmcp call result as the port's output, keeping every content block verbatim.
pub(crate) fn output_from_result(result: CallToolResult) -> Result<ToolOutput, PortError> {
    let content = result
        .content
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PortError::with_source(PortErrorKind::Internal, "tool result content", e))?;
    Ok(ToolOutput {
        content,
        structured: result.structured_content,
        is_error: result.is_error.unwrap_or(false),
    })
}

/// A port output as an rmcp call result, for the sidecar's `tools/call`. Takes the output by
/// value: a read's answer can be tens of kilobytes, and copying it is the call's main cost.
pub(crate) fn result_from_output(output: ToolOutput) -> Result<CallToolResult, PortError> {
    let content = output
        .content
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PortError::with_source(PortErrorKind::Internal, "tool output content", e))?;
    let mut result = if output.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = output.structured;
    Ok(result)
}
