//! Anthropic Messages API: JSON and SSE, tool_use / tool_result, and explicit cache breakpoints.
//!
//! Three of the four allowed `cache_control` breakpoints are placed — the last tool, the stable
//! system block and the last message block — so each step reads the previous step's history from
//! the cache. The per-round system suffix is a second, unmarked system block, so it never alters
//! the cached one. Usage is the `message_start` usage with `message_delta` usage merged over it.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures::StreamExt;
use metaforge_ports::{
    ApiFamily, Credential, CredentialSecret, LlmEventStream, LlmProvider, LlmRequest, LlmResponse,
    ProviderError, ProviderErrorKind, RawUsage, StreamEvent, ToolCall,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::frames::{Frame, StreamDecoder, cut_stream, decode_frames, finish_reason, sse_frames};
use crate::http::{Endpoint, HttpSettings, build_client, read_json, send};
use crate::wire::usage_object;

mod wire;

use wire::{AnswerBlock, ApiError, BlockDelta, Event, MessageAnswer};
pub use wire::{MessagesRequest, request_body};

/// Output cap sent when the request names none (the Messages API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
const API_VERSION: &str = "2023-06-01";

/// An Anthropic Messages endpoint.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    client: reqwest::Client,
    /// `{base_url}/v1/messages`.
    messages: Endpoint,
    settings: HttpSettings,
}

impl AnthropicProvider {
    /// An adapter for `base_url` (e.g. `https://api.anthropic.com`; `/v1/messages` is appended).
    pub fn new(base_url: impl Into<String>, settings: HttpSettings) -> Result<Self, ProviderError> {
        Ok(Self {
            client: build_client(settings)?,
            messages: Endpoint::new(&base_url.into(), "v1/messages"),
            settings,
        })
    }

    fn post(&self, credential: Option<&Credential>) -> Result<reqwest::RequestBuilder, ProviderError> {
        let mut builder = self
            .messages
            .post(&self.client)
            .header("anthropic-version", API_VERSION);
        match credential.map(|c| &c.secret) {
            None => {}
            Some(CredentialSecret::ApiKey { api_key }) => builder = builder.header("x-api-key", api_key),
            Some(_) => {
                return Err(ProviderError::new(
                    ProviderErrorKind::Auth,
                    "the Anthropic API takes an api_key credential",
                ));
            }
        }
        Ok(builder)
    }
}

/// Parses a non-streamed Messages response.
pub fn parse_message(body: &Value) -> Result<LlmResponse, ProviderError> {
    let answer = MessageAnswer::deserialize(body)
        .map_err(|e| ProviderError::new(ProviderErrorKind::Server, format!("invalid message: {e}")))?;
    if answer.kind.as_deref() == Some("error") {
        return Err(api_error(answer.error.unwrap_or_default()));
    }
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in answer.content {
        match block {
            AnswerBlock::Text { text: t } => text.push_str(&t.unwrap_or_default()),
            AnswerBlock::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id: id.unwrap_or_default(),
                name: name.unwrap_or_default(),
                arguments: input.unwrap_or_else(|| json!({})),
            }),
            AnswerBlock::Other => {}
        }
    }
    Ok(LlmResponse {
        text,
        tool_calls,
        finish: answer.stop_reason.as_deref().map(finish_reason),
        usage: usage_object(answer.usage).map(|raw| RawUsage {
            family: ApiFamily::Anthropic,
            raw,
        }),
        model: answer.model,
    })
}

fn api_error(error: ApiError) -> ProviderError {
    let error_type = error.kind.unwrap_or_default();
    let message = error.message.unwrap_or_default();
    let kind = match error_type.as_str() {
        "overloaded_error" => ProviderErrorKind::Overloaded,
        "rate_limit_error" => ProviderErrorKind::RateLimit,
        "authentication_error" | "permission_error" => ProviderErrorKind::Auth,
        "invalid_request_error" => ProviderErrorKind::BadRequest,
        "not_found_error" => ProviderErrorKind::ModelNotFound,
        _ => ProviderErrorKind::Server,
    };
    ProviderError::new(kind, format!("{error_type}: {message}"))
}

/// Decoder for Messages SSE streams.
#[derive(Debug, Default)]
pub struct AnthropicStreamDecoder {
    usage: Map<String, Value>,
    /// content block index → (tool index, still open)
    tool_blocks: BTreeMap<u64, (u32, bool)>,
    next_tool: u32,
    stop_reason: Option<String>,
    stopped: bool,
}

impl AnthropicStreamDecoder {
    /// A fresh decoder.
    pub fn new() -> Self {
        Self::default()
    }

    fn merge_usage(&mut self, usage: Option<Value>) {
        if let Some(Value::Object(fields)) = usage {
            for (k, v) in fields {
                if !v.is_null() {
                    self.usage.insert(k, v);
                }
            }
        }
    }
}

impl StreamDecoder for AnthropicStreamDecoder {
    fn on_frame(&mut self, frame: Frame) -> Result<Vec<StreamEvent>, ProviderError> {
        if self.stopped {
            return Ok(Vec::new());
        }
        let event: Event = serde_json::from_str(frame.data.trim())
            .map_err(|e| ProviderError::new(ProviderErrorKind::Server, format!("invalid event JSON: {e}")))?;
        let mut events = Vec::new();
        match event {
            Event::MessageStart { message } => self.merge_usage(message.and_then(|m| m.usage)),
            Event::ContentBlockStart { index, content_block } => match content_block {
                Some(AnswerBlock::Text { text: Some(t) }) if !t.is_empty() => {
                    events.push(StreamEvent::TextDelta { text: t });
                }
                Some(AnswerBlock::ToolUse { id, name, .. }) => {
                    let tool = self.next_tool;
                    self.next_tool += 1;
                    self.tool_blocks.insert(index.unwrap_or(0), (tool, true));
                    events.push(StreamEvent::ToolCallStart {
                        index: tool,
                        id: id.unwrap_or_default(),
                        name: name.unwrap_or_default(),
                    });
                }
                Some(AnswerBlock::Text { .. } | AnswerBlock::Other) | None => {}
            },
            Event::ContentBlockDelta { index, delta } => match delta {
                Some(BlockDelta::TextDelta { text: Some(t) }) if !t.is_empty() => {
                    events.push(StreamEvent::TextDelta { text: t });
                }
                Some(BlockDelta::InputJsonDelta {
                    partial_json: Some(partial),
                }) if !partial.is_empty() => {
                    if let Some((tool, true)) = self.tool_blocks.get(&index.unwrap_or(0)).copied() {
                        events.push(StreamEvent::ToolCallArgumentsDelta {
                            index: tool,
                            delta: partial,
                        });
                    }
                }
                Some(
                    BlockDelta::TextDelta { .. } | BlockDelta::InputJsonDelta { .. } | BlockDelta::Other,
                )
                | None => {}
            },
            Event::ContentBlockStop { index } => {
                if let Some((tool, open)) = self.tool_blocks.get_mut(&index.unwrap_or(0))
                    && *open
                {
                    *open = false;
                    events.push(StreamEvent::ToolCallEnd { index: *tool });
                }
            }
            Event::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                self.merge_usage(usage);
            }
            Event::MessageStop => {
                self.stopped = true;
                for (index, open) in self.tool_blocks.values_mut() {
                    if *open {
                        *open = false;
                        events.push(StreamEvent::ToolCallEnd { index: *index });
                    }
                }
                if !self.usage.is_empty() {
                    events.push(StreamEvent::Usage {
                        usage: RawUsage {
                            family: ApiFamily::Anthropic,
                            raw: Value::Object(self.usage.clone()),
                        },
                    });
                }
                if let Some(reason) = &self.stop_reason {
                    events.push(StreamEvent::Finish {
                        reason: finish_reason(reason),
                    });
                }
            }
            Event::Error { error } => return Err(api_error(error.unwrap_or_default())),
            Event::Other => {}
        }
        Ok(events)
    }

    fn on_end(&mut self) -> Result<Vec<StreamEvent>, ProviderError> {
        if self.stopped {
            Ok(Vec::new())
        } else {
            Err(cut_stream("Anthropic Messages", "message_stop"))
        }
    }
}

#[async_trait]
impl LlmProvider for AnthropicProvider {
    fn family(&self) -> ApiFamily {
        ApiFamily::Anthropic
    }

    async fn complete(
        &self,
        request: &LlmRequest,
        credential: Option<&Credential>,
    ) -> Result<LlmResponse, ProviderError> {
        let body = request_body(request, false);
        let response = send(self.post(credential)?.json(&body), self.settings.request_timeout).await?;
        parse_message(&read_json(response, self.settings.request_timeout).await?)
    }

    async fn stream(
        &self,
        request: &LlmRequest,
        credential: Option<&Credential>,
    ) -> Result<LlmEventStream, ProviderError> {
        let body = request_body(request, true);
        let response = send(self.post(credential)?.json(&body), self.settings.request_timeout).await?;
        Ok(decode_frames(
            sse_frames(response.bytes_stream().boxed()),
            AnthropicStreamDecoder::new(),
        ))
    }
}
