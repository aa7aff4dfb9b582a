//! The chat-completions wire: the request as typed structs borrowed from the [`LlmRequest`], and
//! the fields the adapter reads from a completion and from each `chat.completion.chunk`.
//!
//! Request field order is the order on the wire (serde_json keeps it), so the bytes match what
//! the endpoint has always been sent; `fixtures/wire/openai.json` pins them.

use std::borrow::Cow;

use metaforge_ports::{ContentPart, LlmMessage, LlmRequest, LlmRole, ModelTool, ToolChoice};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::wire::{arguments_text, joined, list, system_text, temperature};

/// A `POST /chat/completions` body; built only by [`request_body`].
#[derive(Debug, Serialize)]
pub struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    /// Sent only with tools: some servers refuse a choice without them.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ChatToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    /// With `stream`: asks for the usage chunk at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    /// Only for endpoints that honour it (OpenAI, OpenRouter); self-hosted servers may refuse it.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
}

/// One chat message, tagged by its role.
#[derive(Debug, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Message<'a> {
    System {
        content: Cow<'a, str>,
    },
    User {
        content: Cow<'a, str>,
    },
    Assistant {
        /// `null` when the turn is tool calls only.
        content: Option<Cow<'a, str>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCallOut<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

/// The one kind of tool the family has.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Function,
}

/// A call the model made, replayed in the history.
#[derive(Debug, Serialize)]
struct ToolCallOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: Kind,
    function: CalledFunction<'a>,
}

#[derive(Debug, Serialize)]
struct CalledFunction<'a> {
    name: &'a str,
    /// JSON text, as the family carries arguments.
    arguments: Cow<'a, str>,
}

/// A tool offered to the model.
#[derive(Debug, Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: Kind,
    function: FunctionDecl<'a>,
}

#[derive(Debug, Serialize)]
struct FunctionDecl<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// `"auto" | "none" | "required"` or one named function.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum ChatToolChoice<'a> {
    Mode(Mode),
    Named {
        #[serde(rename = "type")]
        kind: Kind,
        function: NamedFunction<'a>,
    },
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Auto,
    None,
    Required,
}

#[derive(Debug, Serialize)]
struct NamedFunction<'a> {
    name: &'a str,
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// The chat-completions body for `request`; `send_prompt_cache_key` only for endpoints that
/// honour the key. Public so contract tests and benches can send or inspect it.
pub fn request_body(request: &LlmRequest, stream: bool, send_prompt_cache_key: bool) -> ChatRequest<'_> {
    let mut messages = Vec::new();
    let system = system_text(request);
    if !system.is_empty() {
        messages.push(Message::System { content: system });
    }
    for message in &request.messages {
        push_messages(message, &mut messages);
    }
    let offers_tools = !request.tools.is_empty();
    ChatRequest {
        model: &request.model,
        messages,
        tools: request.tools.iter().map(tool).collect(),
        tool_choice: offers_tools.then(|| tool_choice(&request.tool_choice)),
        max_tokens: request.max_tokens,
        temperature: temperature(request),
        stop: &request.stop,
        stream,
        stream_options: stream.then_some(StreamOptions { include_usage: true }),
        prompt_cache_key: request
            .prompt_cache_key
            .as_deref()
            .filter(|_| send_prompt_cache_key),
    }
}

fn tool(spec: &ModelTool) -> Tool<'_> {
    Tool {
        kind: Kind::Function,
        function: FunctionDecl {
            name: &spec.name,
            description: &spec.description,
            parameters: &spec.parameters,
        },
    }
}

fn tool_choice(choice: &ToolChoice) -> ChatToolChoice<'_> {
    match choice {
        ToolChoice::Auto => ChatToolChoice::Mode(Mode::Auto),
        ToolChoice::None => ChatToolChoice::Mode(Mode::None),
        ToolChoice::Required => ChatToolChoice::Mode(Mode::Required),
        ToolChoice::Tool(name) => ChatToolChoice::Named {
            kind: Kind::Function,
            function: NamedFunction { name },
        },
    }
}

/// One normalised message as chat messages: an assistant turn (text and calls) comes before the
/// tool results it holds; a user turn sends its tool results (one `tool` message each) before
/// its text, and no user message when it has no text.
fn push_messages<'a>(message: &'a LlmMessage, out: &mut Vec<Message<'a>>) {
    let mut text = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for part in &message.content {
        match part {
            ContentPart::Text { text: t } => text.push(t.as_str()),
            ContentPart::ToolCall { id, name, arguments } => calls.push(ToolCallOut {
                id,
                kind: Kind::Function,
                function: CalledFunction {
                    name,
                    arguments: arguments_text(arguments),
                },
            }),
            ContentPart::ToolResult { call_id, content, .. } => results.push(Message::Tool {
                tool_call_id: call_id,
                content,
            }),
        }
    }
    let text = joined(&text);
    match message.role {
        LlmRole::Assistant => {
            out.push(Message::Assistant {
                content: Some(text).filter(|t| !t.is_empty()),
                tool_calls: calls,
            });
            out.extend(results);
        }
        LlmRole::User => {
            out.extend(results);
            if !text.is_empty() {
                out.push(Message::User { content: text });
            }
        }
    }
}

/// A non-streamed chat completion.
#[derive(Debug, Deserialize)]
pub(super) struct Completion {
    /// Some servers answer HTTP 200 with an error object.
    pub(super) error: Option<Value>,
    #[serde(default, deserialize_with = "list")]
    pub(super) choices: Vec<CompletionChoice>,
    /// Raw: turned into token counts by the domain.
    pub(super) usage: Option<Value>,
    pub(super) model: Option<String>,
}

/// One choice of a completion (the adapter reads the first).
#[derive(Debug, Deserialize)]
pub(super) struct CompletionChoice {
    pub(super) message: Option<AnswerMessage>,
    pub(super) finish_reason: Option<String>,
}

/// The assistant message of a completion.
#[derive(Debug, Deserialize)]
pub(super) struct AnswerMessage {
    pub(super) content: Option<String>,
    /// Read as the text when there is no content.
    pub(super) refusal: Option<String>,
    #[serde(default, deserialize_with = "list")]
    pub(super) tool_calls: Vec<AnswerCall>,
}

/// A whole tool call in a completion.
#[derive(Debug, Deserialize)]
pub(super) struct AnswerCall {
    pub(super) id: Option<String>,
    pub(super) function: Option<FunctionText>,
}

/// A called function's name and JSON-text arguments (whole, or a piece of them in a chunk).
#[derive(Debug, Default, Deserialize)]
pub(super) struct FunctionText {
    pub(super) name: Option<String>,
    pub(super) arguments: Option<String>,
}

/// One `chat.completion.chunk` of a stream.
#[derive(Debug, Deserialize)]
pub(super) struct Chunk {
    /// A mid-stream failure (e.g. an overloaded upstream behind a router).
    pub(super) error: Option<Value>,
    #[serde(default, deserialize_with = "list")]
    pub(super) choices: Vec<ChunkChoice>,
    /// Raw; sent on the last chunk when `stream_options.include_usage` asked for it.
    pub(super) usage: Option<Value>,
}

/// One choice of a chunk.
#[derive(Debug, Deserialize)]
pub(super) struct ChunkChoice {
    pub(super) delta: Option<Delta>,
    pub(super) finish_reason: Option<String>,
}

/// What a chunk adds to the answer.
#[derive(Debug, Deserialize)]
pub(super) struct Delta {
    pub(super) content: Option<String>,
    pub(super) refusal: Option<String>,
    #[serde(default, deserialize_with = "list")]
    pub(super) tool_calls: Vec<DeltaCall>,
}

/// A piece of a tool call: the first names it (id, function name), the rest carry arguments.
#[derive(Debug, Deserialize)]
pub(super) struct DeltaCall {
    pub(super) index: Option<u64>,
    pub(super) id: Option<String>,
    pub(super) function: Option<FunctionText>,
}
