//! The Messages wire: the request as typed structs borrowed from the [`LlmRequest`], with the
//! three cache breakpoints (the last tool, the stable system block and the last message block),
//! and the fields the adapter reads from a message and from each stream event.
//!
//! Request field order is the order on the wire; `fixtures/wire/anthropic.json` pins the bytes.

use metaforge_ports::{ContentPart, LlmMessage, LlmRequest, ModelTool, ToolChoice};

use crate::wire::BlockRole;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::DEFAULT_MAX_TOKENS;
use crate::wire::{blocks, list, temperature};

/// A `POST /v1/messages` body; built only by [`request_body`].
#[derive(Debug, Serialize)]
pub struct MessagesRequest<'a> {
    model: &'a str,
    /// Required by the API: the request's cap or [`DEFAULT_MAX_TOKENS`].
    max_tokens: u32,
    /// The stable block (cached), then the per-round suffix (never cached).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<TextBlock<'a>>,
    messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    /// Sent only with tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<AnthropicToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

/// A prompt-cache breakpoint: everything up to and including the marked block is cached.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum CacheControl {
    Ephemeral,
}

/// A system text block.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename = "text")]
struct TextBlock<'a> {
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Debug, Serialize)]
struct Message<'a> {
    role: BlockRole,
    content: Vec<Block<'a>>,
}

/// A content block; only the last block of the last message carries `cache_control`.
#[derive(Debug, Serialize)]
struct Block<'a> {
    #[serde(flatten)]
    content: BlockContent<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockContent<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        is_error: bool,
    },
}

#[derive(Debug, Serialize)]
struct Tool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum AnthropicToolChoice<'a> {
    Auto,
    None,
    Any,
    Tool { name: &'a str },
}

/// The Messages body for `request`, with the three cache breakpoints. Public so tests can
/// inspect it.
pub fn request_body(request: &LlmRequest, stream: bool) -> MessagesRequest<'_> {
    let mut system = Vec::new();
    if !request.system.stable.is_empty() {
        system.push(TextBlock {
            text: &request.system.stable,
            cache_control: Some(CacheControl::Ephemeral),
        });
    }
    if let Some(suffix) = request.system.volatile_suffix.as_ref().filter(|s| !s.is_empty()) {
        system.push(TextBlock {
            text: suffix,
            cache_control: None,
        });
    }
    let mut messages: Vec<Message<'_>> = request.messages.iter().filter_map(message).collect();
    if let Some(last_block) = messages.last_mut().and_then(|m| m.content.last_mut()) {
        last_block.cache_control = Some(CacheControl::Ephemeral);
    }
    let mut tools: Vec<Tool<'_>> = request.tools.iter().map(tool).collect();
    if let Some(last) = tools.last_mut() {
        last.cache_control = Some(CacheControl::Ephemeral);
    }
    MessagesRequest {
        model: &request.model,
        max_tokens: request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        system,
        messages,
        tool_choice: (!tools.is_empty()).then(|| tool_choice(&request.tool_choice)),
        tools,
        temperature: temperature(request),
        stop_sequences: &request.stop,
        stream,
    }
}

fn tool(spec: &ModelTool) -> Tool<'_> {
    Tool {
        name: &spec.name,
        description: &spec.description,
        input_schema: &spec.parameters,
        cache_control: None,
    }
}

fn tool_choice(choice: &ToolChoice) -> AnthropicToolChoice<'_> {
    match choice {
        ToolChoice::Auto => AnthropicToolChoice::Auto,
        ToolChoice::None => AnthropicToolChoice::None,
        ToolChoice::Required => AnthropicToolChoice::Any,
        ToolChoice::Tool(name) => AnthropicToolChoice::Tool { name },
    }
}

/// A message with its blocks in order; `None` when it has none to send.
fn message(message: &LlmMessage) -> Option<Message<'_>> {
    let content = blocks(message, |part| Block {
        content: block(part),
        cache_control: None,
    })?;
    Some(Message {
        role: message.role.into(),
        content,
    })
}

fn block(part: &ContentPart) -> BlockContent<'_> {
    match part {
        ContentPart::Text { text } => BlockContent::Text { text },
        ContentPart::ToolCall { id, name, arguments } => BlockContent::ToolUse {
            id,
            name,
            input: arguments,
        },
        ContentPart::ToolResult {
            call_id,
            content,
            is_error,
            ..
        } => BlockContent::ToolResult {
            tool_use_id: call_id,
            content,
            is_error: *is_error,
        },
    }
}

/// A non-streamed Messages answer, or the API's error object (`type: "error"`).
#[derive(Debug, Deserialize)]
pub(super) struct MessageAnswer {
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
    pub(super) error: Option<ApiError>,
    #[serde(default, deserialize_with = "list")]
    pub(super) content: Vec<AnswerBlock>,
    pub(super) stop_reason: Option<String>,
    /// Raw: turned into token counts by the domain.
    pub(super) usage: Option<Value>,
    pub(super) model: Option<String>,
}

/// An answer block; kinds the adapter does not read (thinking, server tools…) are `Other`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum AnswerBlock {
    Text {
        text: Option<String>,
    },
    ToolUse {
        id: Option<String>,
        name: Option<String>,
        /// Whole in a message; empty at a streamed block's start (the input follows as deltas).
        input: Option<Value>,
    },
    #[serde(other)]
    Other,
}

/// The API's error: its type names the kind of failure.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ApiError {
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
    pub(super) message: Option<String>,
}

/// One Messages stream event; kinds the adapter does not read (`ping`, …) are `Other`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Event {
    MessageStart {
        message: Option<StartedMessage>,
    },
    ContentBlockStart {
        index: Option<u64>,
        content_block: Option<AnswerBlock>,
    },
    ContentBlockDelta {
        index: Option<u64>,
        delta: Option<BlockDelta>,
    },
    ContentBlockStop {
        index: Option<u64>,
    },
    MessageDelta {
        delta: Option<MessageDelta>,
        /// Raw; merged over the start's usage.
        usage: Option<Value>,
    },
    MessageStop,
    Error {
        error: Option<ApiError>,
    },
    #[serde(other)]
    Other,
}

/// The message a stream starts with: only its usage is read.
#[derive(Debug, Deserialize)]
pub(super) struct StartedMessage {
    /// Raw; the input side of the call's usage.
    pub(super) usage: Option<Value>,
}

/// A piece of a content block; kinds the adapter does not read are `Other`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum BlockDelta {
    TextDelta {
        text: Option<String>,
    },
    InputJsonDelta {
        partial_json: Option<String>,
    },
    #[serde(other)]
    Other,
}

/// The message-level change near the end of a stream.
#[derive(Debug, Deserialize)]
pub(super) struct MessageDelta {
    pub(super) stop_reason: Option<String>,
}
