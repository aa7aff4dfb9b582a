//! The OpenAI chat-completions request as the gateway accepts it, and its strict mapping onto the
//! ports' [`LlmRequest`].
//!
//! Agent harnesses speak OpenAI's wire: function `tools`, `tool_choice`, assistant messages that
//! carry `tool_calls` and `tool` messages answering them. Every field the mapping cannot honour is
//! refused with a 400 naming it (`messages[2].tool_calls[0].function.arguments`), before anything
//! is sent upstream, so a client never gets an answer to a conversation other than the one it sent.

use std::collections::{BTreeMap, BTreeSet};

use metaforge_ports::{ContentPart, LlmMessage, LlmRequest, LlmRole, ModelTool, SystemPrompt, ToolChoice};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::ApiError;

/// The one content-part type the gateway carries (documents `type`; the field stays a string so
/// any other part type is refused naming its exact position).
#[derive(Debug, ToSchema)]
#[schema(rename_all = "snake_case")]
pub(crate) enum TextPartKind {
    /// A text part.
    Text,
}

/// The one tool and tool-call type OpenAI defines (documents `type`; the field stays a string
/// so another type is refused naming its exact position).
#[derive(Debug, ToSchema)]
#[schema(rename_all = "snake_case")]
pub(crate) enum FunctionKind {
    /// A function tool.
    Function,
}

impl FunctionKind {
    /// The wire name.
    pub(crate) const fn as_str(&self) -> &'static str {
        match self {
            Self::Function => "function",
        }
    }
}

impl TextPartKind {
    /// The wire name.
    const fn as_str(&self) -> &'static str {
        match self {
            Self::Text => "text",
        }
    }
}

/// A message's content: a string, or an array of text parts (OpenAI's two shapes).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum MessageContent {
    /// Plain text.
    Text(String),
    /// Text parts, concatenated in order.
    Parts(Vec<MessageContentPart>),
}

/// One content part; only `{"type": "text", "text": …}` is supported (images, audio and files
/// are refused naming the part, never dropped).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct MessageContentPart {
    /// Must be `text`.
    #[serde(rename = "type")]
    #[schema(value_type = TextPartKind)]
    kind: String,
    /// The text.
    #[serde(default)]
    text: Option<String>,
}

/// A tool call: made by the model (responses) or replayed by the client in an assistant message.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct ChatToolCall {
    /// Call id; a later `tool` message answers it by this id.
    pub(crate) id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    #[schema(value_type = FunctionKind)]
    pub(crate) kind: String,
    /// The function called.
    pub(crate) function: ChatFunctionCall,
}

/// A function call: its name and its arguments as a JSON-encoded string.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct ChatFunctionCall {
    /// Tool name.
    pub(crate) name: String,
    /// Arguments: a JSON document encoded as a string (OpenAI's wire shape).
    pub(crate) arguments: String,
}

/// One chat message (OpenAI shape).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    role: String,
    /// A string or an array of `{type: "text", text}` parts; may be null on an assistant
    /// message that carries `tool_calls`.
    #[serde(default)]
    content: Option<MessageContent>,
    /// Tool calls the assistant made (assistant messages only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<ChatToolCall>>,
    /// The call this message answers (required on `tool` messages, refused on others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
}

/// `stop`: one sequence or several.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum StopSequences {
    /// One sequence.
    One(String),
    /// Several sequences.
    Many(Vec<String>),
}

/// Streaming options.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct StreamOptions {
    /// Send a last chunk with empty `choices` and the call's `usage` (counts null when the
    /// provider reported none).
    #[serde(default)]
    include_usage: Option<bool>,
}

/// A function the model may call.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct ChatFunctionDef {
    /// Unique tool name (letters, digits, `_` and `-`, at most 64).
    #[schema(pattern = "^[a-zA-Z0-9_-]{1,64}$")]
    name: String,
    /// What the tool does, for the model.
    #[serde(default)]
    description: Option<String>,
    /// JSON Schema of the arguments object; an empty object schema when absent.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    parameters: Option<serde_json::Value>,
}

/// A tool the model may call; only function tools exist.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct ChatTool {
    /// Must be `function`.
    #[serde(rename = "type")]
    #[schema(value_type = FunctionKind)]
    kind: String,
    /// The function.
    function: ChatFunctionDef,
}

/// `auto`, `none` or `required`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ToolChoiceMode {
    /// The model decides.
    Auto,
    /// No tool call.
    None,
    /// Some tool call.
    Required,
}

/// The function a named tool choice forces.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct NamedFunction {
    /// One of the request's tool names.
    name: String,
}

/// `{"type": "function", "function": {"name": …}}`: this tool must be called.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct NamedToolChoice {
    /// Must be `function`.
    #[serde(rename = "type")]
    #[schema(value_type = FunctionKind)]
    kind: String,
    /// The function.
    function: NamedFunction,
}

/// How the model must use the tools.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum ChatToolChoice {
    /// A policy.
    Mode(ToolChoiceMode),
    /// One named tool.
    Named(NamedToolChoice),
}

/// An OpenAI-compatible chat completion request.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct ChatCompletionRequest {
    /// A routing role (`chat`, `phase_brain`, …), an explicit `provider:model`, or a model name a
    /// configured provider serves (`gpt-4o-mini`, `openai/gpt-4o-mini`); `GET /v1/models` lists them.
    pub(crate) model: String,
    /// The conversation, oldest first; at least one user, assistant or tool message.
    messages: Vec<ChatMessage>,
    /// Stream the answer as server-sent events ending with `data: [DONE]`.
    #[serde(default)]
    pub(crate) stream: Option<bool>,
    /// Output cap.
    #[serde(default)]
    #[schema(minimum = 1)]
    max_tokens: Option<u32>,
    /// Output cap (newer name; `max_tokens` wins when both are given).
    #[serde(default)]
    #[schema(minimum = 1)]
    max_completion_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default)]
    temperature: Option<f32>,
    /// Stop sequences.
    #[serde(default)]
    stop: Option<StopSequences>,
    /// Streaming options; only with `stream: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    /// Function tools the model may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<ChatTool>>,
    /// Tool policy (`auto` when absent); `required` and a named tool need `tools`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ChatToolChoice>,
}

impl ChatCompletionRequest {
    /// Whether a streamed answer ends with a usage chunk.
    pub(crate) fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }
}

/// Whether `name` is a tool name every family accepts (OpenAI's rule is the strictest).
fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The content's text: a string, or text parts concatenated; any other part is refused.
fn content_text(content: Option<&MessageContent>, field: &str) -> Result<String, ApiError> {
    match content {
        None => Ok(String::new()),
        Some(MessageContent::Text(text)) => Ok(text.clone()),
        Some(MessageContent::Parts(parts)) => {
            let mut text = String::new();
            for (k, part) in parts.iter().enumerate() {
                if part.kind != TextPartKind::Text.as_str() {
                    return Err(ApiError::bad_request(
                        &format!("{field}[{k}].type"),
                        format!(
                            "{field}[{k}].type '{}' is not supported (only text parts)",
                            part.kind
                        ),
                    ));
                }
                let Some(part_text) = &part.text else {
                    return Err(ApiError::bad_request(
                        &format!("{field}[{k}].text"),
                        format!("{field}[{k}].text is required on a text part"),
                    ));
                };
                text.push_str(part_text);
            }
            Ok(text)
        }
    }
}

/// An assistant message's tool calls as content parts; arguments must be JSON.
fn assistant_tool_calls(
    calls: &[ChatToolCall],
    i: usize,
    names_by_id: &mut BTreeMap<String, String>,
) -> Result<Vec<ContentPart>, ApiError> {
    let mut parts = Vec::with_capacity(calls.len());
    for (j, call) in calls.iter().enumerate() {
        let field = format!("messages[{i}].tool_calls[{j}]");
        if call.kind != FunctionKind::Function.as_str() {
            return Err(ApiError::bad_request(
                &format!("{field}.type"),
                format!("{field}.type '{}' is not supported (function)", call.kind),
            ));
        }
        if call.id.trim().is_empty() {
            return Err(ApiError::bad_request(
                &format!("{field}.id"),
                format!("{field}.id must not be empty"),
            ));
        }
        if call.function.name.trim().is_empty() {
            return Err(ApiError::bad_request(
                &format!("{field}.function.name"),
                format!("{field}.function.name must not be empty"),
            ));
        }
        let arguments: serde_json::Value = serde_json::from_str(&call.function.arguments).map_err(|e| {
            ApiError::bad_request(
                &format!("{field}.function.arguments"),
                format!("{field}.function.arguments is not a JSON-encoded string: {e}"),
            )
        })?;
        if names_by_id
            .insert(call.id.clone(), call.function.name.clone())
            .is_some()
        {
            return Err(ApiError::bad_request(
                &format!("{field}.id"),
                format!("{field}.id '{}' repeats an earlier tool call id", call.id),
            ));
        }
        parts.push(ContentPart::ToolCall {
            id: call.id.clone(),
            name: call.function.name.clone(),
            arguments,
        });
    }
    Ok(parts)
}

/// The request's tools as specs; names must be valid and unique, parameters an object.
fn tool_specs(tools: &[ChatTool]) -> Result<Vec<ModelTool>, ApiError> {
    let mut seen = BTreeSet::new();
    let mut specs = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        if tool.kind != FunctionKind::Function.as_str() {
            return Err(ApiError::bad_request(
                &format!("tools[{i}].type"),
                format!("tools[{i}].type '{}' is not supported (function)", tool.kind),
            ));
        }
        let name = &tool.function.name;
        if !valid_tool_name(name) {
            return Err(ApiError::bad_request(
                &format!("tools[{i}].function.name"),
                format!("tools[{i}].function.name '{name}' must be 1-64 letters, digits, '_' or '-'"),
            ));
        }
        if !seen.insert(name.clone()) {
            return Err(ApiError::bad_request(
                &format!("tools[{i}].function.name"),
                format!("tools[{i}].function.name '{name}' is declared twice"),
            ));
        }
        let parameters = match &tool.function.parameters {
            None => serde_json::json!({"type": "object", "properties": {}}),
            Some(schema) if schema.is_object() => schema.clone(),
            Some(_) => {
                return Err(ApiError::bad_request(
                    &format!("tools[{i}].function.parameters"),
                    format!("tools[{i}].function.parameters must be a JSON Schema object"),
                ));
            }
        };
        specs.push(ModelTool {
            name: name.clone(),
            description: tool.function.description.clone().unwrap_or_default(),
            parameters,
        });
    }
    Ok(specs)
}

/// The tool policy; `required` or a named tool without tools (or naming an unknown tool) is
/// refused, because no provider could honour it.
fn tool_choice(choice: Option<&ChatToolChoice>, tools: &[ModelTool]) -> Result<ToolChoice, ApiError> {
    let choice = match choice {
        None | Some(ChatToolChoice::Mode(ToolChoiceMode::Auto)) => ToolChoice::Auto,
        Some(ChatToolChoice::Mode(ToolChoiceMode::None)) => ToolChoice::None,
        Some(ChatToolChoice::Mode(ToolChoiceMode::Required)) => ToolChoice::Required,
        Some(ChatToolChoice::Named(named)) => {
            if named.kind != FunctionKind::Function.as_str() {
                return Err(ApiError::bad_request(
                    "tool_choice.type",
                    format!("tool_choice.type '{}' is not supported (function)", named.kind),
                ));
            }
            if !tools.iter().any(|t| t.name == named.function.name) {
                return Err(ApiError::bad_request(
                    "tool_choice.function.name",
                    format!(
                        "tool_choice.function.name '{}' is not one of the request's tools",
                        named.function.name
                    ),
                ));
            }
            ToolChoice::Tool(named.function.name.clone())
        }
    };
    if tools.is_empty() && matches!(choice, ToolChoice::Required | ToolChoice::Tool(_)) {
        return Err(ApiError::bad_request(
            "tool_choice",
            "tool_choice 'required' or a named tool needs tools",
        ));
    }
    Ok(choice)
}

/// Appends a tool result to the conversation: consecutive `tool` messages become one user turn
/// (families that take tool results as user content need them together).
fn push_tool_result(messages: &mut Vec<LlmMessage>, result: ContentPart, follows_tool: bool) {
    if follows_tool
        && let Some(last) = messages.last_mut()
        && last.role == LlmRole::User
    {
        last.content.push(result);
        return;
    }
    messages.push(LlmMessage {
        role: LlmRole::User,
        content: vec![result],
    });
}

/// The request in the ports' shape; every bad field is named.
pub(crate) fn to_llm_request(request: &ChatCompletionRequest) -> Result<LlmRequest, ApiError> {
    let mut system = Vec::new();
    let mut messages: Vec<LlmMessage> = Vec::new();
    let mut names_by_id: BTreeMap<String, String> = BTreeMap::new();
    let mut previous_was_tool = false;
    for (i, message) in request.messages.iter().enumerate() {
        let content_field = format!("messages[{i}].content");
        let text = content_text(message.content.as_ref(), &content_field)?;
        let role = message.role.as_str();
        if message.tool_calls.is_some() && role != "assistant" {
            return Err(ApiError::bad_request(
                &format!("messages[{i}].tool_calls"),
                format!("messages[{i}].tool_calls is only allowed on assistant messages"),
            ));
        }
        if message.tool_call_id.is_some() && role != "tool" {
            return Err(ApiError::bad_request(
                &format!("messages[{i}].tool_call_id"),
                format!("messages[{i}].tool_call_id is only allowed on tool messages"),
            ));
        }
        match role {
            "system" | "developer" => system.push(text),
            "user" => messages.push(LlmMessage::user_text(text)),
            "assistant" => {
                let mut content = Vec::new();
                if !text.is_empty() {
                    content.push(ContentPart::Text { text });
                }
                content.extend(assistant_tool_calls(
                    message.tool_calls.as_deref().unwrap_or_default(),
                    i,
                    &mut names_by_id,
                )?);
                if content.is_empty() {
                    content.push(ContentPart::Text { text: String::new() });
                }
                messages.push(LlmMessage {
                    role: LlmRole::Assistant,
                    content,
                });
            }
            "tool" => {
                let field = format!("messages[{i}].tool_call_id");
                let Some(call_id) = message.tool_call_id.as_deref().filter(|id| !id.trim().is_empty()) else {
                    return Err(ApiError::bad_request(
                        &field,
                        format!("{field} is required on a tool message"),
                    ));
                };
                let Some(name) = names_by_id.get(call_id) else {
                    return Err(ApiError::bad_request(
                        &field,
                        format!("{field} '{call_id}' answers no earlier assistant tool call"),
                    ));
                };
                let result = ContentPart::ToolResult {
                    call_id: call_id.to_owned(),
                    name: name.clone(),
                    content: text,
                    is_error: false,
                };
                push_tool_result(&mut messages, result, previous_was_tool);
            }
            other => {
                return Err(ApiError::bad_request(
                    &format!("messages[{i}].role"),
                    format!(
                        "messages[{i}].role '{other}' is not supported (system, developer, user, assistant, tool)"
                    ),
                ));
            }
        }
        previous_was_tool = role == "tool";
    }
    if messages.is_empty() {
        return Err(ApiError::bad_request(
            "messages",
            "messages must hold at least one user, assistant or tool message",
        ));
    }
    if let Some(t) = request.temperature
        && !(0.0..=2.0).contains(&t)
    {
        return Err(ApiError::bad_request(
            "temperature",
            "temperature must be between 0 and 2",
        ));
    }
    for (field, value) in [
        ("max_tokens", request.max_tokens),
        ("max_completion_tokens", request.max_completion_tokens),
    ] {
        if value == Some(0) {
            return Err(ApiError::bad_request(
                field,
                format!("{field} must be at least 1"),
            ));
        }
    }
    let max_tokens = request.max_tokens.or(request.max_completion_tokens);
    if request.stream_options.is_some() && request.stream != Some(true) {
        return Err(ApiError::bad_request(
            "stream_options",
            "stream_options is only allowed with stream: true",
        ));
    }
    let tools = tool_specs(request.tools.as_deref().unwrap_or_default())?;
    let tool_choice = tool_choice(request.tool_choice.as_ref(), &tools)?;
    Ok(LlmRequest {
        system: SystemPrompt {
            stable: system.join("\n\n"),
            volatile_suffix: None,
        },
        messages,
        tools,
        tool_choice,
        max_tokens,
        temperature: request.temperature,
        stop: match &request.stop {
            None => Vec::new(),
            Some(StopSequences::One(s)) => vec![s.clone()],
            Some(StopSequences::Many(s)) => s.clone(),
        },
        ..LlmRequest::default()
    })
}
