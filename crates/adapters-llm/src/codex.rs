//! openai-codex: the OpenAI Responses API driven by a ChatGPT subscription (Codex-CLI auth file).
//!
//! The backend only streams, so `complete` folds the `response.*` event stream into one answer;
//! usage comes from `response.completed`. It has no event-streaming tool adapter, so a streamed
//! call that offers tools is declined by capability (`CapabilityUnsupported`) — the pipeline
//! logs that fallback at INFO, not WARN, because it is by design.

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;
use futures::StreamExt;
use metaforge_ports::{
    ApiFamily, Credential, CredentialSecret, FinishReason, LlmEventStream, LlmProvider, LlmRequest,
    LlmResponse, ProviderError, ProviderErrorKind, RawUsage, StreamEvent,
};
use serde_json::Value;

use crate::frames::{Frame, StreamDecoder, collect_stream, cut_stream, decode_frames, sse_frames};
use crate::http::{Endpoint, HttpSettings, build_client, send};
use crate::wire::usage_object;

mod wire;

use wire::{OutputItem, ResponsesEvent};
pub use wire::{ResponsesRequest, request_body};

/// A Codex Responses endpoint (e.g. `https://chatgpt.com/backend-api/codex`).
#[derive(Debug, Clone)]
pub struct CodexProvider {
    client: reqwest::Client,
    /// `{base_url}/responses`.
    responses: Endpoint,
    settings: HttpSettings,
}

/// Why a Codex auth file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CodexAuthError {
    /// The file could not be read.
    #[error("cannot read Codex auth file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The file is readable by group or others.
    #[error("Codex auth file {path} is readable by group or others (mode {mode:o}); run: chmod 600 {path}")]
    TooOpen {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// The file is not the Codex CLI's JSON shape.
    #[error("Codex auth file {path} is not valid: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// Reads a Codex-CLI-shaped `auth.json` (`tokens.access_token` + `tokens.account_id`, or
/// `OPENAI_API_KEY`) into a credential. Group- or world-readable files are refused.
pub fn read_codex_auth_file(path: &Path) -> Result<Credential, CodexAuthError> {
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|source| CodexAuthError::Read {
        path: shown.clone(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(CodexAuthError::TooOpen { path: shown, mode });
    }
    let text = std::fs::read_to_string(path).map_err(|source| CodexAuthError::Read {
        path: shown.clone(),
        source,
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| CodexAuthError::Invalid {
        path: shown.clone(),
        reason: format!("line {} column {}: {e}", e.line(), e.column()),
    })?;
    if let Some(token) = value.pointer("/tokens/access_token").and_then(Value::as_str) {
        return Ok(Credential {
            id: "codex-auth".to_owned(),
            secret: CredentialSecret::ChatGpt {
                access_token: token.to_owned(),
                account_id: value
                    .pointer("/tokens/account_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            },
        });
    }
    if let Some(key) = value.get("OPENAI_API_KEY").and_then(Value::as_str) {
        return Ok(Credential {
            id: "codex-api-key".to_owned(),
            secret: CredentialSecret::ApiKey {
                api_key: key.to_owned(),
            },
        });
    }
    Err(CodexAuthError::Invalid {
        path: shown,
        reason: "neither tokens.access_token nor OPENAI_API_KEY is set; run `codex login`".to_owned(),
    })
}

impl CodexProvider {
    /// An adapter for `base_url`; `/responses` is appended.
    pub fn new(base_url: impl Into<String>, settings: HttpSettings) -> Result<Self, ProviderError> {
        Ok(Self {
            client: build_client(settings)?,
            responses: Endpoint::new(&base_url.into(), "responses"),
            settings,
        })
    }

    async fn open_stream(
        &self,
        request: &LlmRequest,
        credential: Option<&Credential>,
    ) -> Result<LlmEventStream, ProviderError> {
        let mut builder = self
            .responses
            .post(&self.client)
            .header("OpenAI-Beta", "responses=experimental")
            .header("originator", "codex_cli_rs")
            .header("accept", "text/event-stream");
        match credential.map(|c| &c.secret) {
            Some(CredentialSecret::ChatGpt {
                access_token,
                account_id,
            }) => {
                builder = builder.bearer_auth(access_token);
                if let Some(account) = account_id {
                    builder = builder.header("chatgpt-account-id", account);
                }
            }
            Some(CredentialSecret::ApiKey { api_key }) => builder = builder.bearer_auth(api_key),
            _ => {
                return Err(ProviderError::new(
                    ProviderErrorKind::Auth,
                    "openai-codex needs a ChatGPT login (Codex auth.json); run `codex login`",
                ));
            }
        }
        let response = send(
            builder.json(&request_body(request)),
            self.settings.request_timeout,
        )
        .await?;
        Ok(decode_frames(
            sse_frames(response.bytes_stream().boxed()),
            CodexStreamDecoder::new(),
        ))
    }
}

/// Decoder for Responses API `response.*` SSE events.
#[derive(Debug, Default)]
pub struct CodexStreamDecoder {
    /// output_index → (tool index, open)
    calls: BTreeMap<u64, (u32, bool)>,
    next_tool: u32,
    completed: bool,
}

impl CodexStreamDecoder {
    /// A fresh decoder.
    pub fn new() -> Self {
        Self::default()
    }
}

impl StreamDecoder for CodexStreamDecoder {
    fn on_frame(&mut self, frame: Frame) -> Result<Vec<StreamEvent>, ProviderError> {
        if self.completed {
            return Ok(Vec::new());
        }
        let event = ResponsesEvent::parse(frame.event, frame.data.trim())
            .map_err(|e| ProviderError::new(ProviderErrorKind::Server, format!("invalid event JSON: {e}")))?;
        let mut events = Vec::new();
        match event {
            ResponsesEvent::OutputTextDelta { delta } => {
                if let Some(t) = delta.filter(|t| !t.is_empty()) {
                    events.push(StreamEvent::TextDelta { text: t });
                }
            }
            ResponsesEvent::OutputItemAdded { output_index, item } => match item {
                Some(OutputItem::FunctionCall { call_id, id, name }) => {
                    let index = self.next_tool;
                    self.next_tool += 1;
                    self.calls.insert(output_index.unwrap_or(0), (index, true));
                    events.push(StreamEvent::ToolCallStart {
                        index,
                        id: call_id.or(id).unwrap_or_default(),
                        name: name.unwrap_or_default(),
                    });
                }
                Some(OutputItem::Other) | None => {}
            },
            ResponsesEvent::FunctionCallArgumentsDelta { output_index, delta } => {
                if let (Some((index, true)), Some(delta)) = (
                    self.calls.get(&output_index.unwrap_or(0)).copied(),
                    delta.filter(|d| !d.is_empty()),
                ) {
                    events.push(StreamEvent::ToolCallArgumentsDelta { index, delta });
                }
            }
            ResponsesEvent::OutputItemDone { output_index } => {
                if let Some((index, open)) = self.calls.get_mut(&output_index.unwrap_or(0))
                    && *open
                {
                    *open = false;
                    events.push(StreamEvent::ToolCallEnd { index: *index });
                }
            }
            ResponsesEvent::Completed { response } => {
                self.completed = true;
                for (index, open) in self.calls.values_mut() {
                    if *open {
                        *open = false;
                        events.push(StreamEvent::ToolCallEnd { index: *index });
                    }
                }
                let (usage, incomplete) = match response {
                    Some(r) => (r.usage, r.incomplete_details.and_then(|d| d.reason)),
                    None => (None, None),
                };
                if let Some(raw) = usage_object(usage) {
                    events.push(StreamEvent::Usage {
                        usage: RawUsage {
                            family: ApiFamily::OpenaiCodex,
                            raw,
                        },
                    });
                }
                let reason = match incomplete.as_deref() {
                    Some("max_output_tokens") => FinishReason::Length,
                    Some("content_filter") => FinishReason::ContentFilter,
                    Some(other) => FinishReason::Other(other.to_owned()),
                    None if self.next_tool > 0 => FinishReason::ToolCalls,
                    None => FinishReason::Stop,
                };
                events.push(StreamEvent::Finish { reason });
            }
            ResponsesEvent::Failed(failure) | ResponsesEvent::Error(failure) => {
                let err = failure.into_error();
                let code = err.code.unwrap_or_default();
                let message = err.message.unwrap_or_default();
                let kind = match code.as_str() {
                    "rate_limit_exceeded" | "usage_limit_reached" => ProviderErrorKind::RateLimit,
                    "server_is_overloaded" | "slow_down" => ProviderErrorKind::Overloaded,
                    "context_length_exceeded" => ProviderErrorKind::ContextLength,
                    "invalid_prompt" => ProviderErrorKind::BadRequest,
                    _ => ProviderErrorKind::Server,
                };
                return Err(ProviderError::new(kind, format!("{code}: {message}")));
            }
            ResponsesEvent::Other => {}
        }
        Ok(events)
    }

    fn on_end(&mut self) -> Result<Vec<StreamEvent>, ProviderError> {
        if self.completed {
            Ok(Vec::new())
        } else {
            Err(cut_stream("Responses", "response.completed"))
        }
    }
}

#[async_trait]
impl LlmProvider for CodexProvider {
    fn family(&self) -> ApiFamily {
        ApiFamily::OpenaiCodex
    }

    async fn complete(
        &self,
        request: &LlmRequest,
        credential: Option<&Credential>,
    ) -> Result<LlmResponse, ProviderError> {
        collect_stream(self.open_stream(request, credential).await?).await
    }

    async fn stream(
        &self,
        request: &LlmRequest,
        credential: Option<&Credential>,
    ) -> Result<LlmEventStream, ProviderError> {
        if !request.tools.is_empty() {
            return Err(ProviderError::new(
                ProviderErrorKind::CapabilityUnsupported,
                "openai-codex has no event-streaming tool adapter: streamed calls with tools are declined",
            ));
        }
        self.open_stream(request, credential).await
    }
}
