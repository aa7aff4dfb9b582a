//! The Converse wire: the request as typed structs borrowed from the [`LlmRequest`] (the same
//! body for ConverseStream; the model and the operation ride in the URL), and the fields the
//! adapter reads from a response, from each ConverseStream event and from an exception frame.
//! Botocore's unions (`ContentBlock`, `Tool`, `ToolChoice`, …) are enums keyed by their one
//! member.
//!
//! Request field order is the order on the wire; `fixtures/wire/bedrock.json` pins the bytes,
//! and the contract test checks them against the botocore service model.

use metaforge_ports::{ContentPart, LlmMessage, LlmRequest, ModelTool, ToolChoice};

use crate::wire::BlockRole;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::wire::{blocks, list, temperature};

/// A `POST /model/{id}/converse` (or `converse-stream`) body; built only by [`request_body`].
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConverseRequest<'a> {
    messages: Vec<Message<'a>>,
    /// The stable text, then the per-round suffix.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<SystemBlock<'a>>,
    /// Left out when the request sets no cap, temperature or stop.
    #[serde(skip_serializing_if = "Option::is_none")]
    inference_config: Option<InferenceConfig<'a>>,
    /// Sent only with tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<ToolConfig<'a>>,
}

#[derive(Debug, Serialize)]
struct Message<'a> {
    role: BlockRole,
    content: Vec<ContentBlock<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
enum ContentBlock<'a> {
    Text(&'a str),
    ToolUse {
        tool_use_id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: [ToolResultContent<'a>; 1],
        status: ToolResultStatus,
    },
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
enum ToolResultContent<'a> {
    Text(&'a str),
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
enum ToolResultStatus {
    Success,
    Error,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
enum SystemBlock<'a> {
    Text(&'a str),
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct InferenceConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig<'a> {
    tools: Vec<Tool<'a>>,
    /// Left out for `ToolChoice::None`: Converse has no "none" choice.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ConverseToolChoice<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
enum Tool<'a> {
    ToolSpec(ToolSpecification<'a>),
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolSpecification<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: ToolInputSchema<'a>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
enum ToolInputSchema<'a> {
    Json(&'a Value),
}

/// An empty structure (`{}`), the member value of the `auto` and `any` choices.
#[derive(Debug, Serialize)]
struct Empty {}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
enum ConverseToolChoice<'a> {
    Auto(Empty),
    Any(Empty),
    Tool { name: &'a str },
}

/// The Converse body for `request`. Public so contract tests can check it.
pub fn request_body(request: &LlmRequest) -> ConverseRequest<'_> {
    let mut system = Vec::new();
    if !request.system.stable.is_empty() {
        system.push(SystemBlock::Text(&request.system.stable));
    }
    if let Some(suffix) = request.system.volatile_suffix.as_ref().filter(|s| !s.is_empty()) {
        system.push(SystemBlock::Text(suffix));
    }
    let inference = InferenceConfig {
        max_tokens: request.max_tokens,
        temperature: temperature(request),
        stop_sequences: &request.stop,
    };
    let sets_inference = inference.max_tokens.is_some()
        || inference.temperature.is_some()
        || !inference.stop_sequences.is_empty();
    ConverseRequest {
        messages: request.messages.iter().filter_map(message).collect(),
        system,
        inference_config: sets_inference.then_some(inference),
        tool_config: (!request.tools.is_empty()).then(|| ToolConfig {
            tools: request.tools.iter().map(tool).collect(),
            tool_choice: tool_choice(&request.tool_choice),
        }),
    }
}

fn tool(spec: &ModelTool) -> Tool<'_> {
    Tool::ToolSpec(ToolSpecification {
        name: &spec.name,
        description: &spec.description,
        input_schema: ToolInputSchema::Json(&spec.parameters),
    })
}

fn tool_choice(choice: &ToolChoice) -> Option<ConverseToolChoice<'_>> {
    match choice {
        ToolChoice::Auto => Some(ConverseToolChoice::Auto(Empty {})),
        ToolChoice::Required => Some(ConverseToolChoice::Any(Empty {})),
        ToolChoice::Tool(name) => Some(ConverseToolChoice::Tool { name }),
        // Converse has no "none" choice: leaving toolChoice out with tools offered is the
        // closest (the model decides); the pipeline never sends tools with `None` anyway.
        ToolChoice::None => None,
    }
}

/// A message with its blocks in order; `None` when it has none to send.
fn message(message: &LlmMessage) -> Option<Message<'_>> {
    let content = blocks(message, block)?;
    Some(Message {
        role: message.role.into(),
        content,
    })
}

fn block(part: &ContentPart) -> ContentBlock<'_> {
    match part {
        ContentPart::Text { text } => ContentBlock::Text(text),
        ContentPart::ToolCall { id, name, arguments } => ContentBlock::ToolUse {
            tool_use_id: id,
            name,
            input: arguments,
        },
        ContentPart::ToolResult {
            call_id,
            content,
            is_error,
            ..
        } => ContentBlock::ToolResult {
            tool_use_id: call_id,
            content: [ToolResultContent::Text(content)],
            status: if *is_error {
                ToolResultStatus::Error
            } else {
                ToolResultStatus::Success
            },
        },
    }
}

/// A Converse response.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ConverseResponse {
    pub(super) output: Option<Output>,
    pub(super) stop_reason: Option<String>,
    /// Raw: turned into token counts by the domain.
    pub(super) usage: Option<Value>,
}

/// The response's output union: the adapter reads its message.
#[derive(Debug, Deserialize)]
pub(super) struct Output {
    pub(super) message: Option<OutputMessage>,
}

/// The assistant message of a response.
#[derive(Debug, Deserialize)]
pub(super) struct OutputMessage {
    #[serde(default, deserialize_with = "list")]
    pub(super) content: Vec<OutputBlock>,
}

/// A content block of the answer: text or a whole tool use (other members are ignored).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OutputBlock {
    pub(super) text: Option<String>,
    pub(super) tool_use: Option<ToolUse>,
}

/// A tool use: whole in a response (`input`), named only at a streamed block's start.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ToolUse {
    pub(super) tool_use_id: Option<String>,
    pub(super) name: Option<String>,
    pub(super) input: Option<Value>,
}

/// A ConverseStream event; the frame's `:event-type` header says which, the payload holds the
/// fields. Events the adapter does not read (`messageStart`, …) are `Other`.
#[derive(Debug)]
pub(super) enum ConverseEvent {
    ContentBlockStart(BlockStart),
    ContentBlockDelta(BlockDelta),
    ContentBlockStop(BlockStop),
    MessageStop(MessageStop),
    Metadata(Metadata),
    Other,
}

impl ConverseEvent {
    /// The event named `event` with `payload`; the payload must be JSON whatever the event.
    pub(super) fn parse(event: Option<&str>, payload: &str) -> Result<Self, serde_json::Error> {
        Ok(match event.unwrap_or_default() {
            "contentBlockStart" => Self::ContentBlockStart(serde_json::from_str(payload)?),
            "contentBlockDelta" => Self::ContentBlockDelta(serde_json::from_str(payload)?),
            "contentBlockStop" => Self::ContentBlockStop(serde_json::from_str(payload)?),
            "messageStop" => Self::MessageStop(serde_json::from_str(payload)?),
            "metadata" => Self::Metadata(serde_json::from_str(payload)?),
            _ => {
                serde_json::from_str::<IgnoredAny>(payload)?;
                Self::Other
            }
        })
    }
}

/// `contentBlockStart`: a tool use begins (text blocks start with their first delta).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BlockStart {
    pub(super) content_block_index: Option<u64>,
    pub(super) start: Option<BlockStartUnion>,
}

/// What a block starts as.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BlockStartUnion {
    pub(super) tool_use: Option<ToolUse>,
}

/// `contentBlockDelta`: a piece of text or of a tool use's JSON-text input.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BlockDelta {
    pub(super) content_block_index: Option<u64>,
    pub(super) delta: Option<DeltaUnion>,
}

/// What a delta adds.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct DeltaUnion {
    pub(super) text: Option<String>,
    pub(super) tool_use: Option<ToolUseDelta>,
}

/// A piece of a tool use's input, as JSON text.
#[derive(Debug, Deserialize)]
pub(super) struct ToolUseDelta {
    pub(super) input: Option<String>,
}

/// `contentBlockStop`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BlockStop {
    pub(super) content_block_index: Option<u64>,
}

/// `messageStop`: why generation ended.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct MessageStop {
    pub(super) stop_reason: Option<String>,
}

/// `metadata`: the call's usage, last on the stream.
#[derive(Debug, Deserialize)]
pub(super) struct Metadata {
    /// Raw: turned into token counts by the domain.
    pub(super) usage: Option<Value>,
}

/// The payload of an exception frame.
#[derive(Debug, Deserialize)]
pub(super) struct ExceptionPayload {
    pub(super) message: Option<String>,
}
