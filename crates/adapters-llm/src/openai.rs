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
use serde::Deserialize;
use serde_json::Value;

use crate::frames::{
    Frame, StreamDecoder, cut_stream, decode_frames, finish_reason, parse_arguments, sse_frames,
};
use crate::http::{Endpoint, HttpSettings, build_client, read_json, send};
use crate::wire::usage_object;

mod wire;

pub use wire::{ChatRequest, request_body};
use wire::{Chunk, Completion};

/// An OpenAI-compatible endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiCompatibleProvider {
    client: reqwest::Client,
    /// `{base_url}/chat/completions`.
    completions: Endpoint,
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
            completions: Endpoint::new(&base_url.into(), "chat/completions"),
            settings,
            send_prompt_cache_key,
        })
    }

    fn post(&self, credential: Option<&Credential>) -> Result<reqwest::RequestBuilder, ProviderError> {
        let mut builder = self.completions.post(&self.client);
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
    let completion = Completion::deserialize(body).map_err(|e| {
        ProviderError::new(ProviderErrorKind::Server, format!("invalid chat completion: {e}"))
    })?;
    if let Some(err) = completion.error {
        return Err(ProviderError::new(ProviderErrorKind::Server, err.to_string()));
    }
    let Some(choice) = completion.choices.into_iter().next() else {
        return Err(ProviderError::new(
            ProviderErrorKind::Server,
            "chat completion without choices",
        ));
    };
    let (text, tool_calls) = match choice.message {
        Some(message) => (
            message.content.or(message.refusal).unwrap_or_default(),
            message
                .tool_calls
                .into_iter()
                .map(|call| {
                    let function = call.function.unwrap_or_default();
                    ToolCall {
                        id: call.id.unwrap_or_default(),
                        name: function.name.unwrap_or_default(),
                        arguments: parse_arguments(&function.arguments.unwrap_or_default()),
                    }
                })
                .collect(),
        ),
        None => (String::new(), Vec::new()),
    };
    Ok(LlmResponse {
        text,
        tool_calls,
        finish: choice.finish_reason.as_deref().map(finish_reason),
        usage: usage_object(completion.usage).map(|raw| RawUsage {
            family: ApiFamily::OpenaiCompatible,
            raw,
        }),
        model: completion.model,
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
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| ProviderError::new(ProviderErrorKind::Server, format!("invalid chunk JSON: {e}")))?;
        if let Some(err) = chunk.error {
            let message = err.get("message").and_then(Value::as_str).unwrap_or_default();
            let kind = if message.to_ascii_lowercase().contains("overloaded") {
                ProviderErrorKind::Overloaded
            } else {
                ProviderErrorKind::Server
            };
            return Err(ProviderError::new(kind, err.to_string()));
        }
        let mut events = Vec::new();
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                for text in [delta.content, delta.refusal].into_iter().flatten() {
                    if !text.is_empty() {
                        events.push(StreamEvent::TextDelta { text });
                    }
                }
                for call in delta.tool_calls {
                    let index = call.index.and_then(|i| u32::try_from(i).ok()).unwrap_or(0);
                    let function = call.function.unwrap_or_default();
                    if let std::collections::btree_map::Entry::Vacant(e) = self.open_calls.entry(index) {
                        e.insert(true);
                        events.push(StreamEvent::ToolCallStart {
                            index,
                            id: call.id.unwrap_or_default(),
                            name: function.name.unwrap_or_default(),
                        });
                    }
                    if let Some(args) = function.arguments.filter(|a| !a.is_empty()) {
                        events.push(StreamEvent::ToolCallArgumentsDelta { index, delta: args });
                    }
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.close_calls(&mut events);
                self.finished = true;
                events.push(StreamEvent::Finish {
                    reason: finish_reason(&reason),
                });
            }
        }
        if let Some(raw) = usage_object(chunk.usage) {
            events.push(StreamEvent::Usage {
                usage: RawUsage {
                    family: ApiFamily::OpenaiCompatible,
                    raw,
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
