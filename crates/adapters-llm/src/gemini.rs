//! Gemini generateContent and streamGenerateContent (`alt=sse`), with function calls.
//!
//! Gemini sends a whole function call in one part (no argument deltas) and often no call id, so
//! ids are synthesised as `call_<n>`. Every streamed chunk repeats the running `usageMetadata`;
//! the last one is the call's usage. A stream that ends without a `finishReason` was cut.

use async_trait::async_trait;
use futures::StreamExt;
use metaforge_ports::{
    ApiFamily, Credential, CredentialSecret, FinishReason, LlmEventStream, LlmProvider, LlmRequest,
    LlmResponse, ProviderError, ProviderErrorKind, RawUsage, StreamEvent, ToolCall,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::frames::{Frame, StreamDecoder, cut_stream, decode_frames, finish_reason, sse_frames};
use crate::http::{HttpSettings, build_client, join_url, read_json, send};
use crate::wire::usage_object;

mod wire;

use wire::Answer;
pub use wire::{GenerateContentRequest, request_body};

/// A Gemini API endpoint.
#[derive(Debug, Clone)]
pub struct GeminiProvider {
    client: reqwest::Client,
    base_url: String,
    settings: HttpSettings,
}

impl GeminiProvider {
    /// An adapter for `base_url` (e.g. `https://generativelanguage.googleapis.com`).
    pub fn new(base_url: impl Into<String>, settings: HttpSettings) -> Result<Self, ProviderError> {
        Ok(Self {
            client: build_client(settings)?,
            base_url: base_url.into(),
            settings,
        })
    }

    fn post(
        &self,
        model: &str,
        stream: bool,
        credential: Option<&Credential>,
    ) -> Result<reqwest::RequestBuilder, ProviderError> {
        let model = model.strip_prefix("models/").unwrap_or(model);
        let path = if stream {
            format!("v1beta/models/{model}:streamGenerateContent?alt=sse")
        } else {
            format!("v1beta/models/{model}:generateContent")
        };
        let mut builder = self.client.post(join_url(&self.base_url, &path));
        match credential.map(|c| &c.secret) {
            None => {}
            Some(CredentialSecret::ApiKey { api_key }) => builder = builder.header("x-goog-api-key", api_key),
            Some(_) => {
                return Err(ProviderError::new(
                    ProviderErrorKind::Auth,
                    "the Gemini API takes an api_key credential",
                ));
            }
        }
        Ok(builder)
    }
}

fn gemini_finish(raw: &str, saw_call: bool) -> FinishReason {
    match finish_reason(raw) {
        FinishReason::Stop if saw_call => FinishReason::ToolCalls,
        reason @ (FinishReason::Stop
        | FinishReason::Length
        | FinishReason::ToolCalls
        | FinishReason::ContentFilter
        | FinishReason::Other(_)) => reason,
    }
}

/// Parses a non-streamed generateContent response.
pub fn parse_response(body: &Value) -> Result<LlmResponse, ProviderError> {
    let answer = Answer::deserialize(body).map_err(|e| {
        ProviderError::new(
            ProviderErrorKind::Server,
            format!("invalid generateContent response: {e}"),
        )
    })?;
    let blocked = answer.prompt_feedback.is_some_and(|f| f.block_reason.is_some());
    if blocked && answer.candidates.is_none() {
        return Ok(LlmResponse {
            text: String::new(),
            tool_calls: Vec::new(),
            finish: Some(FinishReason::ContentFilter),
            usage: usage(answer.usage_metadata),
            model: None,
        });
    }
    let candidate = answer.candidates.and_then(|c| c.into_iter().next());
    let (parts, finish) = match candidate {
        Some(c) => (c.content.map(|c| c.parts).unwrap_or_default(), c.finish_reason),
        None => (Vec::new(), None),
    };
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for part in parts.into_iter().filter(|p| p.thought != Some(true)) {
        if let Some(t) = part.text {
            text.push_str(&t);
        }
        if let Some(call) = part.function_call {
            tool_calls.push(ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{}", tool_calls.len())),
                name: call.name.unwrap_or_default(),
                arguments: call.args.unwrap_or_else(|| json!({})),
            });
        }
    }
    Ok(LlmResponse {
        finish: finish
            .as_deref()
            .map(|r| gemini_finish(r, !tool_calls.is_empty())),
        text,
        tool_calls,
        usage: usage(answer.usage_metadata),
        model: answer.model_version,
    })
}

fn usage(usage_metadata: Option<Value>) -> Option<RawUsage> {
    usage_object(usage_metadata).map(|raw| RawUsage {
        family: ApiFamily::Gemini,
        raw,
    })
}

/// Decoder for streamGenerateContent SSE streams.
#[derive(Debug, Default)]
pub struct GeminiStreamDecoder {
    next_tool: u32,
    usage: Option<RawUsage>,
    finish: Option<String>,
}

impl GeminiStreamDecoder {
    /// A fresh decoder.
    pub fn new() -> Self {
        Self::default()
    }
}

impl StreamDecoder for GeminiStreamDecoder {
    fn on_frame(&mut self, frame: Frame) -> Result<Vec<StreamEvent>, ProviderError> {
        let chunk: Answer = serde_json::from_str(frame.data.trim())
            .map_err(|e| ProviderError::new(ProviderErrorKind::Server, format!("invalid chunk JSON: {e}")))?;
        if let Some(err) = chunk.error {
            let status = err.code.and_then(|c| u16::try_from(c).ok());
            let message = err.message.unwrap_or_default();
            return Err(match status {
                Some(code) => ProviderError::from_http(code, None, &message),
                None => ProviderError::new(ProviderErrorKind::Server, message),
            });
        }
        let mut events = Vec::new();
        let candidate = chunk.candidates.and_then(|c| c.into_iter().next());
        let (parts, finish) = match candidate {
            Some(c) => (c.content.map(|c| c.parts).unwrap_or_default(), c.finish_reason),
            None => (Vec::new(), None),
        };
        for part in parts.into_iter().filter(|p| p.thought != Some(true)) {
            if let Some(t) = part.text.filter(|t| !t.is_empty()) {
                events.push(StreamEvent::TextDelta { text: t });
            }
            if let Some(call) = part.function_call {
                let index = self.next_tool;
                self.next_tool += 1;
                events.push(StreamEvent::ToolCallStart {
                    index,
                    id: call.id.unwrap_or_else(|| format!("call_{index}")),
                    name: call.name.unwrap_or_default(),
                });
                events.push(StreamEvent::ToolCallArgumentsDelta {
                    index,
                    delta: call.args.unwrap_or_else(|| json!({})).to_string(),
                });
                events.push(StreamEvent::ToolCallEnd { index });
            }
        }
        if let Some(reason) = finish {
            self.finish = Some(reason);
        }
        if chunk.prompt_feedback.is_some_and(|f| f.block_reason.is_some()) {
            self.finish = Some("SAFETY".to_owned());
        }
        if let Some(usage) = usage(chunk.usage_metadata) {
            self.usage = Some(usage);
        }
        Ok(events)
    }

    fn on_end(&mut self) -> Result<Vec<StreamEvent>, ProviderError> {
        let Some(reason) = self.finish.take() else {
            return Err(cut_stream("Gemini", "a finishReason"));
        };
        let mut events = Vec::new();
        if let Some(usage) = self.usage.take() {
            events.push(StreamEvent::Usage { usage });
        }
        events.push(StreamEvent::Finish {
            reason: gemini_finish(&reason, self.next_tool > 0),
        });
        Ok(events)
    }
}

#[async_trait]
impl LlmProvider for GeminiProvider {
    fn family(&self) -> ApiFamily {
        ApiFamily::Gemini
    }

    async fn complete(
        &self,
        request: &LlmRequest,
        credential: Option<&Credential>,
    ) -> Result<LlmResponse, ProviderError> {
        let body = request_body(request);
        let builder = self.post(&request.model, false, credential)?.json(&body);
        let response = send(builder, self.settings.request_timeout).await?;
        parse_response(&read_json(response, self.settings.request_timeout).await?)
    }

    async fn stream(
        &self,
        request: &LlmRequest,
        credential: Option<&Credential>,
    ) -> Result<LlmEventStream, ProviderError> {
        let body = request_body(request);
        let builder = self.post(&request.model, true, credential)?.json(&body);
        let response = send(builder, self.settings.request_timeout).await?;
        Ok(decode_frames(
            sse_frames(response.bytes_stream().boxed()),
            GeminiStreamDecoder::new(),
        ))
    }
}
