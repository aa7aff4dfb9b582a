//! The generateContent wire: the request as typed structs borrowed from the [`LlmRequest`] (the
//! same body for `streamGenerateContent?alt=sse`; the model and the stream choice ride in the
//! URL), and the fields the adapter reads from a response or a streamed chunk (the same shape).
//!
//! Request field order is the order on the wire; `fixtures/wire/gemini.json` pins the bytes.

use std::borrow::Cow;

use metaforge_ports::{ContentPart, LlmMessage, LlmRequest, LlmRole, ModelTool, ToolChoice};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::wire::{blocks, list, system_text, temperature};

/// A `generateContent` body; built only by [`request_body`].
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateContentRequest<'a> {
    contents: Vec<Content<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<SystemInstruction<'a>>,
    /// One entry holding every declaration, when tools are offered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tools<'a>>,
    /// Sent only with tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<ToolConfig<'a>>,
    /// Left out when the request sets no cap, temperature or stop.
    #[serde(skip_serializing_if = "Option::is_none")]
    generation_config: Option<GenerationConfig<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    User,
    Model,
}

#[derive(Debug, Serialize)]
struct Content<'a> {
    role: Role,
    parts: Vec<Part<'a>>,
}

/// A part: a union keyed by its one field.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
enum Part<'a> {
    Text(Cow<'a, str>),
    FunctionCall {
        name: &'a str,
        args: &'a Value,
    },
    FunctionResponse {
        name: &'a str,
        response: FunctionResult<'a>,
    },
}

/// A tool's answer: `{"content": …}`, or `{"error": …}` when the tool failed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
enum FunctionResult<'a> {
    Content(&'a str),
    Error(&'a str),
}

#[derive(Debug, Serialize)]
struct SystemInstruction<'a> {
    parts: [Part<'a>; 1],
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Tools<'a> {
    function_declarations: Vec<FunctionDeclaration<'a>>,
}

#[derive(Debug, Serialize)]
struct FunctionDeclaration<'a> {
    name: &'a str,
    description: &'a str,
    /// The schema in Gemini's dialect (see [`gemini_schema`]).
    parameters: Value,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig<'a> {
    function_calling_config: FunctionCallingConfig<'a>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCallingConfig<'a> {
    mode: Mode,
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed_function_names: Option<[&'a str; 1]>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum Mode {
    Auto,
    None,
    Any,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
}

/// The generateContent body for `request`. Public so tests can inspect it.
pub fn request_body(request: &LlmRequest) -> GenerateContentRequest<'_> {
    let system = system_text(request);
    let offers_tools = !request.tools.is_empty();
    let generation = GenerationConfig {
        max_output_tokens: request.max_tokens,
        temperature: temperature(request),
        stop_sequences: &request.stop,
    };
    let sets_generation = generation.max_output_tokens.is_some()
        || generation.temperature.is_some()
        || !generation.stop_sequences.is_empty();
    GenerateContentRequest {
        contents: request.messages.iter().filter_map(content).collect(),
        system_instruction: (!system.is_empty()).then_some(SystemInstruction {
            parts: [Part::Text(system)],
        }),
        tools: if offers_tools {
            vec![Tools {
                function_declarations: request.tools.iter().map(declaration).collect(),
            }]
        } else {
            Vec::new()
        },
        tool_config: offers_tools.then(|| ToolConfig {
            function_calling_config: calling_config(&request.tool_choice),
        }),
        generation_config: sets_generation.then_some(generation),
    }
}

fn declaration(spec: &ModelTool) -> FunctionDeclaration<'_> {
    FunctionDeclaration {
        name: &spec.name,
        description: &spec.description,
        parameters: gemini_schema(&spec.parameters),
    }
}

fn calling_config(choice: &ToolChoice) -> FunctionCallingConfig<'_> {
    let (mode, allowed_function_names) = match choice {
        ToolChoice::Auto => (Mode::Auto, None),
        ToolChoice::None => (Mode::None, None),
        ToolChoice::Required => (Mode::Any, None),
        ToolChoice::Tool(name) => (Mode::Any, Some([name.as_str()])),
    };
    FunctionCallingConfig {
        mode,
        allowed_function_names,
    }
}

/// Gemini's schema dialect rejects a few JSON-Schema keywords; they are removed recursively.
fn gemini_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "$schema" | "additionalProperties" | "$id"))
                .map(|(k, v)| (k.clone(), gemini_schema(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(gemini_schema).collect()),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => schema.clone(),
    }
}

/// A message with its parts in order; `None` when it has none to send.
fn content(message: &LlmMessage) -> Option<Content<'_>> {
    let parts = blocks(message, part)?;
    let role = match message.role {
        LlmRole::User => Role::User,
        LlmRole::Assistant => Role::Model,
    };
    Some(Content { role, parts })
}

fn part(part: &ContentPart) -> Part<'_> {
    match part {
        ContentPart::Text { text } => Part::Text(Cow::Borrowed(text)),
        ContentPart::ToolCall { name, arguments, .. } => Part::FunctionCall {
            name,
            args: arguments,
        },
        ContentPart::ToolResult {
            name,
            content,
            is_error,
            ..
        } => Part::FunctionResponse {
            name,
            response: if *is_error {
                FunctionResult::Error(content)
            } else {
                FunctionResult::Content(content)
            },
        },
    }
}

/// A generateContent response, and each chunk of a `streamGenerateContent` stream.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Answer {
    /// Missing when the prompt itself was blocked.
    pub(super) candidates: Option<Vec<Candidate>>,
    pub(super) prompt_feedback: Option<PromptFeedback>,
    /// Raw; every streamed chunk repeats the running total.
    pub(super) usage_metadata: Option<Value>,
    pub(super) model_version: Option<String>,
    /// A failure sent inside a stream.
    pub(super) error: Option<StreamError>,
}

/// One candidate answer (the adapter reads the first).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Candidate {
    pub(super) content: Option<CandidateContent>,
    pub(super) finish_reason: Option<String>,
}

/// A candidate's parts.
#[derive(Debug, Deserialize)]
pub(super) struct CandidateContent {
    #[serde(default, deserialize_with = "list")]
    pub(super) parts: Vec<AnswerPart>,
}

/// A part of an answer: text, a whole function call, or a thought (skipped).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AnswerPart {
    pub(super) thought: Option<bool>,
    pub(super) text: Option<String>,
    pub(super) function_call: Option<FunctionCall>,
}

/// A function call; Gemini often gives it no id.
#[derive(Debug, Deserialize)]
pub(super) struct FunctionCall {
    pub(super) id: Option<String>,
    pub(super) name: Option<String>,
    pub(super) args: Option<Value>,
}

/// Why the prompt was refused.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PromptFeedback {
    pub(super) block_reason: Option<String>,
}

/// A mid-stream error: an HTTP-like code and a message.
#[derive(Debug, Deserialize)]
pub(super) struct StreamError {
    pub(super) code: Option<u64>,
    pub(super) message: Option<String>,
}
