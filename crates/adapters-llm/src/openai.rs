//! OpenAI-compatible chat completions (OpenAI, OpenRouter, vLLM, Ollama, llama.cpp, LM Studio…).
//!
//! One adapter serves every provider of the family by base URL alone. Streaming asks for
//! `stream_options.include_usage` so the last chunk carries usage; `prompt_cache_key` is sent only
//! when the adapter was built for an endpoint that honours it (OpenAI and OpenRouter), because
//! self-hosted servers may reject unknown fields.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures::StreamExt;
use metaforge_ports::{
    ApiFamily, Credential, CredentialSecret, LlmEventStream, LlmProvider, LlmRequest, LlmResponse,
    ProviderError, ProviderErrorKind, RawUsage, StreamEvent, ToolCall,
};
use serde_json::Value;

use crate::frames::{
    Frame, StreamDecoder, cut_stream, decode_frames, finish_reason, parse_arguments, sse_frames,
};
use crate::http::{HttpSettings, build_client, join_url, read_json, send};

mod wire;

pub use wire::{ChatRequest, request_body};

/// An OpenAI-compatible endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiCompatibleProvider {
    client: reqwest::Client,
    base_url: String,
    settings: HttpSettings,
    send_prompt_cache_key: bool,
}

impl OpenAiCompatibleProvider {
    /// An adapter for `base_url` (ending in `/v1` or the provider's equivalent).
    /// `send_prompt_cache_key` must be true only for OpenAI and OpenRouter endpoints.
    pub fn new(
        base_url: impl Into<String>,
        settings: HttpSettings,
        send_prompt_cache_key: bool,
    ) -> Result<Self, ProviderError> {
        Ok(Self {
            client: build_client(settings)?,
            base_url: base_url.into(),
            settings,
            send_prompt_cache_key,
        })
    }

    fn post(&self, credential: Option<&Credential>) -> Result<reqwest::RequestBuilder, ProviderError> {
        let mut builder = self.client.post(join_url(&self.base_url, "chat/completions"));
        match credential.map(|c| &c.secret) {
            None => {}
            Some(CredentialSecret::ApiKey { api_key }) => builder = builder.bearer_auth(api_key),
            Some(_) => {
                return Err(ProviderError::new(
                    ProviderErrorKind::Auth,
                    "an OpenAI-compatible endpoint takes an api_key credential",
                ));
            }
        }
        Ok(builder)
    }
}

/// Parses a non-streamed chat completion.
pub fn parse_completion(body: &Value) -> Result<LlmResponse, ProviderError> {
    if let Some(err) = body.get("error").filter(|e| !e.is_null()) {
        return Err(ProviderError::new(ProviderErrorKind::Server, err.to_string()));
    }
    let choice = body
        .pointer("/choices/0")
        .ok_or_else(|| ProviderError::new(ProviderErrorKind::Server, "chat completion without choices"))?;
    let message = choice.get("message").cloned().unwrap_or(Value::Null);
    let text = message
        .get("content")
        .and_then(Value::as_str)
        .or_else(|| message.get("refusal").and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned();
    let tool_calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .map(|c| ToolCall {
                    id: c.get("id").and_then(Value::as_str).unwrap_or_default().to_owned(),
                    name: c
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    arguments: parse_arguments(
                        c.pointer("/function/arguments")
                            .and_then(Value::as_str)
                            .unwrap_or_default(),
                    ),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(LlmResponse {
        text,
        tool_calls,
        finish: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(finish_reason),
        usage: body.get("usage").filter(|u| u.is_object()).map(|u| RawUsage {
            family: ApiFamily::OpenaiCompatible,
            raw: u.clone(),
        }),
        model: body.get("model").and_then(Value::as_str).map(str::to_owned),
    })
}

/// Decoder for `chat.completion.chunk` SSE streams.
#[derive(Debug, Default)]
pub struct OpenAiStreamDecoder {
    open_calls: BTreeMap<u32, bool>,
    done: bool,
    finished: bool,
}

impl OpenAiStreamDecoder {
    /// A fresh decoder.
    pub fn new() -> Self {
        Self::default()
    }

    fn close_calls(&mut self, events: &mut Vec<StreamEvent>) {
        for (index, open) in &mut self.open_calls {
            if *open {
                *open = false;
                events.push(StreamEvent::ToolCallEnd { index: *index });
            }
        }
    }
}

impl StreamDecoder for OpenAiStreamDecoder {
    fn on_frame(&mut self, frame: Frame) -> Result<Vec<StreamEvent>, ProviderError> {
        let data = frame.data.trim();
        if self.done || data.is_empty() {
            return Ok(Vec::new());
        }
        if data == "[DONE]" {
            self.done = true;
            let mut events = Vec::new();
            self.close_calls(&mut events);
            return Ok(events);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| ProviderError::new(ProviderErrorKind::Server, format!("invalid chunk JSON: {e}")))?;
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            let message = err.get("message").and_then(Value::as_str).unwrap_or_default();
            let kind = if message.to_ascii_lowercase().contains("overloaded") {
                ProviderErrorKind::Overloaded
            } else {
                ProviderErrorKind::Server
            };
            return Err(ProviderError::new(kind, err.to_string()));
        }
        let mut events = Vec::new();
        if let Some(choices) = chunk.get("choices").and_then(Value::as_array) {
            for choice in choices {
                let delta = choice.get("delta").cloned().unwrap_or(Value::Null);
                for key in ["content", "refusal"] {
                    if let Some(text) = delta.get(key).and_then(Value::as_str).filter(|t| !t.is_empty()) {
                        events.push(StreamEvent::TextDelta {
                            text: text.to_owned(),
                        });
                    }
                }
                for call in delta
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let index = call
                        .get("index")
                        .and_then(Value::as_u64)
                        .and_then(|i| u32::try_from(i).ok())
                        .unwrap_or(0);
                    if let std::collections::btree_map::Entry::Vacant(e) = self.open_calls.entry(index) {
                        e.insert(true);
                        events.push(StreamEvent::ToolCallStart {
                            index,
                            id: call
                                .get("id")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            name: call
                                .pointer("/function/name")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                        });
                    }
                    if let Some(args) = call
                        .pointer("/function/arguments")
                        .and_then(Value::as_str)
                        .filter(|a| !a.is_empty())
                    {
                        events.push(StreamEvent::ToolCallArgumentsDelta {
                            index,
                            delta: args.to_owned(),
                        });
                    }
                }
                if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                    self.close_calls(&mut events);
                    self.finished = true;
                    events.push(StreamEvent::Finish {
                        reason: finish_reason(reason),
                    });
                }
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            events.push(StreamEvent::Usage {
                usage: RawUsage {
                    family: ApiFamily::OpenaiCompatible,
                    raw: usage.clone(),
                },
            });
        }
        Ok(events)
    }

    fn on_end(&mut self) -> Result<Vec<StreamEvent>, ProviderError> {
        if self.done || self.finished {
            let mut events = Vec::new();
            self.close_calls(&mut events);
            Ok(events)
        } else {
            Err(cut_stream("chat completions", "a finish_reason or [DONE]"))
        }
    }
}

#[async_trait]
impl LlmProvider for OpenAiCompatibleProvider {
    fn family(&self) -> ApiFamily {
        ApiFamily::OpenaiCompatible
    }

    async fn complete(
        &self,
        request: &LlmRequest,
        credential: Option<&Credential>,
    ) -> Result<LlmResponse, ProviderError> {
        let body = request_body(request, false, self.send_prompt_cache_key);
        let response = send(self.post(credential)?.json(&body), self.settings.request_timeout).await?;
        parse_completion(&read_json(response, self.settings.request_timeout).await?)
    }

    async fn stream(
        &self,
        request: &LlmRequest,
        credential: Option<&Credential>,
    ) -> Result<LlmEventStream, ProviderError> {
        let body = request_body(request, true, self.send_prompt_cache_key);
        let response = send(self.post(credential)?.json(&body), self.settings.request_timeout).await?;
        Ok(decode_frames(
            sse_frames(response.bytes_stream().boxed()),
            OpenAiStreamDecoder::new(),
        ))
    }
}
