//! The LLM provider port: one normalised request/response/stream shape for every API family.
//!
//! The agent loop talks to this trait only, so the same loop runs against any provider with zero
//! code change. Usage crosses this port RAW (the family plus the provider's own usage object):
//! turning it into token counts is a domain rule, kept out of the adapters so every family is
//! normalised in one place.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};

use crate::credentials::Credential;
use crate::provider::ApiFamily;

/// The system prompt split for prompt caching: providers cache by exact prefix, so the stable
/// part must stay byte-identical across steps and the per-round note rides after it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemPrompt {
    /// Byte-stable text (no time, no ids); part of the cached prefix.
    pub stable: String,
    /// Per-round note (e.g. the tools-array truncation note); never part of the cached prefix.
    #[serde(default)]
    pub volatile_suffix: Option<String>,
}

/// Who said a message. System text travels in [`SystemPrompt`], never as a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LlmRole {
    /// The person or the calling loop.
    User,
    /// The model.
    Assistant,
}

/// One piece of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call the model made (assistant messages).
    ToolCall {
        /// Provider-assigned call id, echoed by the matching result.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments as a JSON value.
        arguments: serde_json::Value,
    },
    /// The result of a tool call (user messages).
    ToolResult {
        /// The call id this answers.
        call_id: String,
        /// The tool's name (Gemini matches results by name).
        name: String,
        /// The observation text.
        content: String,
        /// True when the tool failed.
        #[serde(default)]
        is_error: bool,
    },
}

/// One conversation message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmMessage {
    /// Who said it.
    pub role: LlmRole,
    /// What was said, in order.
    pub content: Vec<ContentPart>,
}

impl LlmMessage {
    /// A user message holding one text part.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            role: LlmRole::User,
            content: vec![ContentPart::Text { text: text.into() }],
        }
    }

    /// An assistant message holding one text part.
    pub fn assistant_text(text: impl Into<String>) -> Self {
        Self {
            role: LlmRole::Assistant,
            content: vec![ContentPart::Text { text: text.into() }],
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelTool {
    /// Unique tool name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// How the model must use the tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// No tool call allowed.
    None,
    /// Some tool call is required.
    Required,
    /// This named tool must be called.
    Tool(String),
}

/// A provider-neutral completion request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LlmRequest {
    /// Model name as the provider knows it.
    pub model: String,
    /// System prompt (stable prefix + volatile suffix).
    pub system: SystemPrompt,
    /// Conversation so far, including tool calls and their results.
    pub messages: Vec<LlmMessage>,
    /// Tools, in the order they are sent (the pipeline sorts them for caching).
    pub tools: Vec<ModelTool>,
    /// Tool policy.
    pub tool_choice: ToolChoice,
    /// Output cap; families that require one get a default from the adapter.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Stable prompt-cache key (hash of system prompt and tools); only sent where honoured.
    pub prompt_cache_key: Option<String>,
}

/// Why generation ended, normalised across families.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// Natural end or a stop sequence.
    Stop,
    /// The output cap was reached.
    Length,
    /// The model asked for tool calls.
    ToolCalls,
    /// A safety filter or refusal ended it.
    ContentFilter,
    /// A family-specific reason kept verbatim.
    Other(String),
}

/// The provider's own usage object, untouched, with the family that gives its shape meaning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawUsage {
    /// Whose shape `raw` has.
    pub family: ApiFamily,
    /// OpenAI `usage`, Anthropic merged `usage`, Gemini `usageMetadata`, Bedrock `usage`, Codex
    /// `response.usage`.
    pub raw: serde_json::Value,
}

/// A finished tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider call id (synthesised as `call_<n>` for families that have none).
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Parsed arguments; a string that is not JSON is kept as a JSON string.
    pub arguments: serde_json::Value,
}

/// A complete (non-streamed) answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmResponse {
    /// Concatenated text output.
    pub text: String,
    /// Tool calls, in the model's order.
    pub tool_calls: Vec<ToolCall>,
    /// Why it ended (`None` when the provider did not say).
    pub finish: Option<FinishReason>,
    /// Usage as the provider reported it; `None` when it reported none.
    pub usage: Option<RawUsage>,
    /// The model the provider says answered, when it says.
    pub model: Option<String>,
}

/// One normalised streaming event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum StreamEvent {
    /// More output text.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// A tool call began.
    ToolCallStart {
        /// Position of the call in this response.
        index: u32,
        /// Provider call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// More argument JSON for a started tool call.
    ToolCallArgumentsDelta {
        /// Which call.
        index: u32,
        /// A fragment of the arguments JSON.
        delta: String,
    },
    /// A tool call's arguments are complete.
    ToolCallEnd {
        /// Which call.
        index: u32,
    },
    /// The provider's usage report (raw; normalised by the domain).
    Usage {
        /// The raw usage.
        usage: RawUsage,
    },
    /// Generation ended.
    Finish {
        /// Why.
        reason: FinishReason,
    },
}

/// What kind of failure a provider call hit; the pipeline decides retry/rotate/fall back on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderErrorKind {
    /// 401/403: the credential is invalid or lacks access.
    Auth,
    /// 429: too many requests.
    RateLimit,
    /// 529 or an explicit overloaded error.
    Overloaded,
    /// 400-class request the provider refused.
    BadRequest,
    /// The model does not exist for this provider.
    ModelNotFound,
    /// The prompt exceeds the model's context window.
    ContextLength,
    /// No answer within the time limit.
    Timeout,
    /// Connection refused/reset, or a stream cut mid-way.
    Transport,
    /// 5xx from the provider.
    Server,
    /// The adapter declines this call by design (e.g. Codex streaming with tools).
    CapabilityUnsupported,
}

impl ProviderErrorKind {
    /// Stable snake_case name for logs and attempt lists.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auth => "auth",
            Self::RateLimit => "rate_limit",
            Self::Overloaded => "overloaded",
            Self::BadRequest => "bad_request",
            Self::ModelNotFound => "model_not_found",
            Self::ContextLength => "context_length",
            Self::Timeout => "timeout",
            Self::Transport => "transport",
            Self::Server => "server",
            Self::CapabilityUnsupported => "capability_unsupported",
        }
    }
}

/// A typed provider failure: kind, HTTP status, Retry-After and the provider's own words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ProviderError {
    /// What went wrong.
    pub kind: ProviderErrorKind,
    /// HTTP status when there was one.
    pub status: Option<u16>,
    /// Retry-After the provider asked for.
    pub retry_after: Option<Duration>,
    /// The provider's message (or the transport's), verbatim.
    pub provider_message: String,
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind.as_str())?;
        if let Some(status) = self.status {
            write!(f, " (HTTP {status})")?;
        }
        write!(f, ": {}", self.provider_message)
    }
}

impl ProviderError {
    /// An error of `kind` with a message and nothing else.
    pub fn new(kind: ProviderErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            status: None,
            retry_after: None,
            provider_message: message.into(),
        }
    }

    /// Classifies an HTTP error answer by status and body text, the same way for every family.
    pub fn from_http(status: u16, retry_after: Option<Duration>, body: &str) -> Self {
        let lowered = body.to_ascii_lowercase();
        let kind = match status {
            401 | 403 => ProviderErrorKind::Auth,
            429 => ProviderErrorKind::RateLimit,
            529 => ProviderErrorKind::Overloaded,
            404 => ProviderErrorKind::ModelNotFound,
            408 => ProviderErrorKind::Timeout,
            400 | 413 | 422
                if lowered.contains("context_length")
                    || lowered.contains("context length")
                    || lowered.contains("too many tokens")
                    || lowered.contains("prompt is too long") =>
            {
                ProviderErrorKind::ContextLength
            }
            400..=499 => ProviderErrorKind::BadRequest,
            _ if lowered.contains("overloaded") => ProviderErrorKind::Overloaded,
            _ => ProviderErrorKind::Server,
        };
        Self {
            kind,
            status: Some(status),
            retry_after,
            provider_message: body.to_owned(),
        }
    }
}

/// A boxed stream of normalised events; an `Err` item ends the stream.
pub type LlmEventStream = BoxStream<'static, Result<StreamEvent, ProviderError>>;

/// One provider endpoint speaking one API family.
#[async_trait]
pub trait LlmProvider: Send + Sync {
    /// The wire family this adapter speaks.
    fn family(&self) -> ApiFamily;

    /// One complete answer.
    async fn complete(
        &self,
        request: &LlmRequest,
        credential: Option<&Credential>,
    ) -> Result<LlmResponse, ProviderError>;

    /// A stream of events; errors before the first event come back as `Err`.
    async fn stream(
        &self,
        request: &LlmRequest,
        credential: Option<&Credential>,
    ) -> Result<LlmEventStream, ProviderError>;
}
