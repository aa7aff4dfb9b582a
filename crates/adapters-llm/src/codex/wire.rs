//! The Responses wire: the request as typed structs borrowed from the [`LlmRequest`] (always
//! streamed, never stored, history as input items: messages, function calls, function call
//! outputs), and the `response.*` stream events the adapter reads.
//!
//! Request field order is the order on the wire; `fixtures/wire/codex.json` pins the bytes.

use std::borrow::Cow;

use metaforge_ports::{ContentPart, LlmMessage, LlmRequest, LlmRole, ModelTool, ToolChoice};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::wire::{arguments_text, sent_parts, system_text};

/// A `POST /responses` body; built only by [`request_body`].
#[derive(Debug, Serialize)]
pub struct ResponsesRequest<'a> {
    model: &'a str,
    /// The system text, sent even when empty.
    instructions: Cow<'a, str>,
    input: Vec<InputItem<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    /// Sent only with tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ResponsesToolChoice<'a>>,
    /// `false` with tools: one call per turn, as the agent loop runs them.
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    /// Always `true`: the backend only streams.
    stream: bool,
    /// Always `false`: nothing is kept server-side.
    store: bool,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum InputItem<'a> {
    Message {
        role: Role,
        content: [MessageText<'a>; 1],
    },
    FunctionCall {
        call_id: &'a str,
        name: &'a str,
        /// JSON text, as the family carries arguments.
        arguments: Cow<'a, str>,
    },
    FunctionCallOutput {
        call_id: &'a str,
        output: &'a str,
    },
}

#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    User,
    Assistant,
}

/// Text the user gave (`input_text`) or the model wrote (`output_text`).
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum MessageText<'a> {
    InputText { text: &'a str },
    OutputText { text: &'a str },
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename = "function")]
struct Tool<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
    strict: bool,
}

/// `"auto" | "none" | "required"` or one named function.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum ResponsesToolChoice<'a> {
    Mode(Mode),
    Named(NamedFunction<'a>),
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Auto,
    None,
    Required,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename = "function")]
struct NamedFunction<'a> {
    name: &'a str,
}

/// The Responses body for `request`. Public so tests can inspect it.
pub fn request_body(request: &LlmRequest) -> ResponsesRequest<'_> {
    let offers_tools = !request.tools.is_empty();
    ResponsesRequest {
        model: &request.model,
        instructions: system_text(request),
        input: request.messages.iter().flat_map(input_items).collect(),
        tools: request.tools.iter().map(tool).collect(),
        tool_choice: offers_tools.then(|| tool_choice(&request.tool_choice)),
        parallel_tool_calls: offers_tools.then_some(false),
        stream: true,
        store: false,
    }
}

fn tool(spec: &ModelTool) -> Tool<'_> {
    Tool {
        name: &spec.name,
        description: &spec.description,
        parameters: &spec.parameters,
        strict: false,
    }
}

fn tool_choice(choice: &ToolChoice) -> ResponsesToolChoice<'_> {
    match choice {
        ToolChoice::Auto => ResponsesToolChoice::Mode(Mode::Auto),
        ToolChoice::None => ResponsesToolChoice::Mode(Mode::None),
        ToolChoice::Required => ResponsesToolChoice::Mode(Mode::Required),
        ToolChoice::Tool(name) => ResponsesToolChoice::Named(NamedFunction { name }),
    }
}

/// One input item per sent part, in order: each text part is its own message.
fn input_items(message: &LlmMessage) -> impl Iterator<Item = InputItem<'_>> {
    let role = match message.role {
        LlmRole::User => Role::User,
        LlmRole::Assistant => Role::Assistant,
    };
    sent_parts(message).map(move |part| match part {
        ContentPart::Text { text } => InputItem::Message {
            role,
            content: [match role {
                Role::User => MessageText::InputText { text },
                Role::Assistant => MessageText::OutputText { text },
            }],
        },
        ContentPart::ToolCall { id, name, arguments } => InputItem::FunctionCall {
            call_id: id,
            name,
            arguments: arguments_text(arguments),
        },
        ContentPart::ToolResult { call_id, content, .. } => InputItem::FunctionCallOutput {
            call_id,
            output: content,
        },
    })
}

/// A `response.*` stream event, tagged by `type` (or, without one, by the SSE event name).
/// Events the adapter does not read (`response.created`, reasoning, …) are `Other`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub(super) enum ResponsesEvent {
    #[serde(rename = "response.output_text.delta")]
    OutputTextDelta { delta: Option<String> },
    #[serde(rename = "response.output_item.added")]
    OutputItemAdded {
        output_index: Option<u64>,
        item: Option<OutputItem>,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    FunctionCallArgumentsDelta {
        output_index: Option<u64>,
        delta: Option<String>,
    },
    #[serde(rename = "response.output_item.done")]
    OutputItemDone { output_index: Option<u64> },
    /// The end of the answer, whole or cut by a limit.
    #[serde(rename = "response.completed", alias = "response.incomplete")]
    Completed { response: Option<ResponseState> },
    #[serde(rename = "response.failed")]
    Failed(Failure),
    #[serde(rename = "error")]
    Error(Failure),
    #[serde(other)]
    Other,
}

impl ResponsesEvent {
    /// The event in `data`; `event` (the SSE event name) stands in for a missing `type`, and an
    /// event with neither is `Other`. The data must be JSON whatever the event.
    pub(super) fn parse(event: Option<String>, data: &str) -> Result<Self, serde_json::Error> {
        let mut value: Value = serde_json::from_str(data)?;
        if let Value::Object(fields) = &mut value
            && !fields.get("type").is_some_and(Value::is_string)
        {
            let Some(name) = event else {
                return Ok(Self::Other);
            };
            fields.insert("type".to_owned(), Value::String(name));
        }
        Self::deserialize(value)
    }
}

/// An output item as it is added: a function call starts a tool call; other kinds are `Other`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum OutputItem {
    FunctionCall {
        /// The id results answer; `id` (the item's own) stands in when it is missing.
        call_id: Option<String>,
        id: Option<String>,
        name: Option<String>,
    },
    #[serde(other)]
    Other,
}

/// The response as it ends or fails.
#[derive(Debug, Deserialize)]
pub(super) struct ResponseState {
    /// Raw: turned into token counts by the domain.
    pub(super) usage: Option<Value>,
    pub(super) incomplete_details: Option<IncompleteDetails>,
    pub(super) error: Option<ErrorBody>,
}

/// Why a response stopped short.
#[derive(Debug, Deserialize)]
pub(super) struct IncompleteDetails {
    pub(super) reason: Option<String>,
}

/// A failure: the response's error, else the event's `error`, else the event's own fields.
#[derive(Debug, Deserialize)]
pub(super) struct Failure {
    pub(super) response: Option<ResponseState>,
    pub(super) error: Option<ErrorBody>,
    pub(super) code: Option<String>,
    pub(super) message: Option<String>,
}

impl Failure {
    /// The error this failure reports.
    pub(super) fn into_error(self) -> ErrorBody {
        self.response
            .and_then(|r| r.error)
            .or(self.error)
            .unwrap_or(ErrorBody {
                code: self.code,
                message: self.message,
            })
    }
}

/// An error code (which the kind is read from) and message.
#[derive(Debug, Deserialize)]
pub(super) struct ErrorBody {
    pub(super) code: Option<String>,
    pub(super) message: Option<String>,
}
