//! The JSON-ReAct protocol for a model (or family) without native tool calls: the tools are
//! described in the system prompt, the model answers one JSON object per step — an action with
//! its input, or a final answer — and each observation comes back as a user message.
//!
//! One call per step, so there is never a batch to parallelise; the duplicate guard, structured
//! errors, schema pre-validation and gating are the same as on the native path (`exec`).

use metaforge_ports::{ContentPart, LlmMessage, LlmRole};
use serde_json::Value;

use crate::tools::AgentTool;

/// The protocol text appended to the system prompt, listing every offered tool by the name the
/// model must use, its description and its argument schema.
pub fn protocol_prompt(tools: &[AgentTool]) -> String {
    let mut lines = vec![
        "You act in steps. Answer every step with exactly one JSON object and nothing else.".to_owned(),
        "To call a tool: {\"thought\": \"why\", \"action\": \"<tool name>\", \"action_input\": {<arguments>}}".to_owned(),
        "To finish: {\"thought\": \"why\", \"final_answer\": \"<your reply to the user>\"}".to_owned(),
        "After each action you receive its observation. Call one tool per step. Never claim an action was performed unless a tool call performed it.".to_owned(),
        "Tools:".to_owned(),
    ];
    for tool in tools {
        lines.push(format!(
            "- {}: {} arguments schema: {}",
            tool.provider_name,
            tool.descriptor.description,
            metaforge_ports::canonical_json(&tool.descriptor.input_schema)
        ));
    }
    if tools.is_empty() {
        lines.push("- (none this turn: answer with final_answer)".to_owned());
    }
    lines.join("\n")
}

/// One parsed step.
#[derive(Debug, Clone, PartialEq)]
pub enum ReactStep {
    /// Call `action` with `input`.
    Action {
        /// The tool name.
        action: String,
        /// Its arguments.
        input: Value,
    },
    /// The reply to the user.
    Final(String),
}

/// Reads one step leniently: the first JSON object in the text (code fences and prose around it
/// are ignored); an object with `action` is a call, one with `final_answer` is the reply; text
/// with no such object is the reply itself.
pub fn parse_step(text: &str) -> ReactStep {
    if let Some(object) = first_json_object(text) {
        if let Some(action) = object
            .get("action")
            .and_then(Value::as_str)
            .filter(|a| !a.trim().is_empty())
        {
            let input = match object.get("action_input") {
                None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
                Some(Value::String(s)) => {
                    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
                }
                Some(other) => other.clone(),
            };
            return ReactStep::Action {
                action: action.trim().to_owned(),
                input,
            };
        }
        if let Some(answer) = object.get("final_answer") {
            return ReactStep::Final(match answer {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        }
    }
    ReactStep::Final(text.trim().to_owned())
}

fn first_json_object(text: &str) -> Option<serde_json::Map<String, Value>> {
    for (start, _) in text.match_indices('{') {
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        if let Some(Ok(Value::Object(map))) = stream.next() {
            return Some(map);
        }
    }
    None
}

/// The transcript as a model without native tools reads it: a call becomes the assistant's JSON
/// action, a result becomes a user `Observation:` message.
pub fn render(messages: &[LlmMessage]) -> Vec<LlmMessage> {
    messages
        .iter()
        .map(|m| {
            let text: Vec<String> = m
                .content
                .iter()
                .map(|part| match part {
                    ContentPart::Text { text } => text.clone(),
                    ContentPart::ToolCall { name, arguments, .. } => {
                        serde_json::json!({"action": name, "action_input": arguments}).to_string()
                    }
                    ContentPart::ToolResult { content, .. } => format!("Observation: {content}"),
                })
                .collect();
            LlmMessage {
                role: m.role,
                content: vec![ContentPart::Text {
                    text: text.join("\n"),
                }],
            }
        })
        .filter(|m| m.role == LlmRole::Assistant || !m.content.is_empty())
        .collect()
}
