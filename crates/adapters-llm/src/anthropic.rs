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
use serde_json::{Map, Value, json};

use crate::frames::{Frame, StreamDecoder, cut_stream, decode_frames, finish_reason, sse_frames};
use crate::http::{HttpSettings, build_client, join_url, read_json, send};

mod wire;

pub use wire::{MessagesRequest, request_body};

/// Output cap sent when the request names none (the Messages API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
const API_VERSION: &str = "2023-06-01";

/// An Anthropic Messages endpoint.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    client: reqwest::Client,
    base_url: String,
    settings: HttpSettings,
}

impl AnthropicProvider {
    /// An adapter for `base_url` (e.g. `https://api.anthropic.com`; `/v1/messages` is appended).
    pub fn new(base_url: impl Into<String>, settings: HttpSettings) -> Result<Self, ProviderError> {
        Ok(Self {
            client: build_client(settings)?,
            base_url: base_url.into(),
            settings,
        })
    }

    fn post(&self, credential: Option<&Credential>) -> Result<reqwest::RequestBuilder, ProviderError> {
        let mut builder = self
            .client
            .post(join_url(&self.base_url, "v1/messages"))
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
    if body.get("type").and_then(Value::as_str) == Some("error") {
        return Err(stream_error(body));
    }
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in body
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or_default()),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: block
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                name: block
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                arguments: block.get("input").cloned().unwrap_or_else(|| json!({})),
            }),
            _ => {}
        }
    }
    Ok(LlmResponse {
        text,
        tool_calls,
        finish: body.get("stop_reason").and_then(Value::as_str).map(finish_reason),
        usage: body.get("usage").filter(|u| u.is_object()).map(|u| RawUsage {
            family: ApiFamily::Anthropic,
            raw: u.clone(),
        }),
        model: body.get("model").and_then(Value::as_str).map(str::to_owned),
    })
}

fn stream_error(body: &Value) -> ProviderError {
    let error_type = body
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let message = body
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let kind = match error_type {
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

    fn merge_usage(&mut self, usage: Option<&Value>) {
        if let Some(fields) = usage.and_then(Value::as_object) {
            for (k, v) in fields {
                if !v.is_null() {
                    self.usage.insert(k.clone(), v.clone());
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
        let data: Value = serde_json::from_str(frame.data.trim())
            .map_err(|e| ProviderError::new(ProviderErrorKind::Server, format!("invalid event JSON: {e}")))?;
        let mut events = Vec::new();
        let kind = data.get("type").and_then(Value::as_str).unwrap_or_default();
        let block_index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => self.merge_usage(data.pointer("/message/usage")),
            "content_block_start" => {
                let block = data.get("content_block").cloned().unwrap_or(Value::Null);
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(t) = block
                            .get("text")
                            .and_then(Value::as_str)
                            .filter(|t| !t.is_empty())
                        {
                            events.push(StreamEvent::TextDelta { text: t.to_owned() });
                        }
                    }
                    Some("tool_use") => {
                        let index = self.next_tool;
                        self.next_tool += 1;
                        self.tool_blocks.insert(block_index, (index, true));
                        events.push(StreamEvent::ToolCallStart {
                            index,
                            id: block
                                .get("id")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            name: block
                                .get("name")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                        });
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = data.get("delta").cloned().unwrap_or(Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(t) = delta
                            .get("text")
                            .and_then(Value::as_str)
                            .filter(|t| !t.is_empty())
                        {
                            events.push(StreamEvent::TextDelta { text: t.to_owned() });
                        }
                    }
                    Some("input_json_delta") => {
                        if let (Some((index, true)), Some(partial)) = (
                            self.tool_blocks.get(&block_index).copied(),
                            delta
                                .get("partial_json")
                                .and_then(Value::as_str)
                                .filter(|p| !p.is_empty()),
                        ) {
                            events.push(StreamEvent::ToolCallArgumentsDelta {
                                index,
                                delta: partial.to_owned(),
                            });
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some((index, open)) = self.tool_blocks.get_mut(&block_index)
                    && *open
                {
                    *open = false;
                    events.push(StreamEvent::ToolCallEnd { index: *index });
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                self.merge_usage(data.get("usage"));
            }
            "message_stop" => {
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
            "error" => return Err(stream_error(&data)),
            _ => {}
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
