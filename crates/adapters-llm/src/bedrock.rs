//! AWS Bedrock Converse and ConverseStream.
//!
//! Requests are signed with SigV4 by the maintained `aws-sigv4` crate (service `bedrock`, the
//! credential's region), or carry a Bedrock API key as a bearer token. ConverseStream answers in
//! the `application/vnd.amazon.eventstream` binary framing, decoded by `aws-smithy-eventstream`;
//! each message's `:event-type` header names the Converse event and its payload is JSON.

use std::collections::BTreeMap;
use std::time::SystemTime;

use async_trait::async_trait;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::Message;
use bytes::{Buf, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use metaforge_ports::{
    ApiFamily, Credential, CredentialSecret, LlmEventStream, LlmProvider, LlmRequest, LlmResponse,
    ProviderError, ProviderErrorKind, RawUsage, StreamEvent, ToolCall,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::frames::{Frame, StreamDecoder, cut_stream, decode_frames, finish_reason};
use crate::http::{HttpSettings, build_client, join_url, read_json, send};
use crate::wire::usage_object;

mod wire;

use wire::{ConverseEvent, ConverseResponse, ExceptionPayload};
pub use wire::{ConverseRequest, request_body};

/// A Bedrock runtime endpoint (e.g. `https://bedrock-runtime.us-east-1.amazonaws.com`).
#[derive(Debug, Clone)]
pub struct BedrockProvider {
    client: reqwest::Client,
    base_url: String,
    settings: HttpSettings,
}

impl BedrockProvider {
    /// An adapter for `base_url`.
    pub fn new(base_url: impl Into<String>, settings: HttpSettings) -> Result<Self, ProviderError> {
        Ok(Self {
            client: build_client(settings)?,
            base_url: base_url.into(),
            settings,
        })
    }

    fn signed_post(
        &self,
        model: &str,
        stream: bool,
        body: &ConverseRequest<'_>,
        credential: Option<&Credential>,
    ) -> Result<reqwest::RequestBuilder, ProviderError> {
        let operation = if stream { "converse-stream" } else { "converse" };
        let url = join_url(
            &self.base_url,
            &format!("model/{}/{operation}", encode_path_segment(model)),
        );
        let payload = serde_json::to_vec(body).map_err(|e| {
            ProviderError::new(
                ProviderErrorKind::BadRequest,
                format!("cannot encode request: {e}"),
            )
        })?;
        let mut builder = self.client.post(&url).header("content-type", "application/json");
        match credential.map(|c| &c.secret) {
            Some(CredentialSecret::Aws {
                access_key_id,
                secret_access_key,
                session_token,
                region,
            }) => {
                #[expect(
                    clippy::disallowed_methods,
                    reason = "SigV4 signs with the wall clock AWS checks, never a test clock"
                )]
                let signed_at = SystemTime::now();
                let headers = sigv4_headers(
                    &url,
                    &payload,
                    access_key_id,
                    secret_access_key,
                    session_token.as_deref(),
                    region,
                    signed_at,
                )?;
                for (name, value) in headers {
                    builder = builder.header(name, value);
                }
            }
            Some(CredentialSecret::ApiKey { api_key }) => builder = builder.bearer_auth(api_key),
            _ => {
                return Err(ProviderError::new(
                    ProviderErrorKind::Auth,
                    "Bedrock needs AWS credentials (access key, secret, region) or a Bedrock API key",
                ));
            }
        }
        Ok(builder.body(payload))
    }
}

/// Percent-encodes a model id for the URL path (ids such as `…-v1:0` carry a colon).
fn encode_path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The SigV4 headers (Authorization, X-Amz-Date, security token) for a POST of `payload`.
pub fn sigv4_headers(
    url: &str,
    payload: &[u8],
    access_key_id: &str,
    secret_access_key: &str,
    session_token: Option<&str>,
    region: &str,
    time: SystemTime,
) -> Result<Vec<(String, String)>, ProviderError> {
    let signing_error = |e: &dyn std::fmt::Display| {
        ProviderError::new(ProviderErrorKind::Auth, format!("SigV4 signing failed: {e}"))
    };
    let identity = aws_credential_types::Credentials::new(
        access_key_id,
        secret_access_key,
        session_token.map(str::to_owned),
        None,
        "metaforge-credential-store",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("bedrock")
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| signing_error(&e))?
        .into();
    let signable = SignableRequest::new(
        "POST",
        url,
        [("content-type", "application/json")].into_iter(),
        SignableBody::Bytes(payload),
    )
    .map_err(|e| signing_error(&e))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| signing_error(&e))?
        .into_parts();
    let (headers, _params) = instructions.into_parts();
    Ok(headers
        .into_iter()
        .map(|h| (h.name().to_owned(), h.value().to_owned()))
        .collect())
}

/// Parses a Converse response.
pub fn parse_response(body: &Value) -> Result<LlmResponse, ProviderError> {
    let response = ConverseResponse::deserialize(body).map_err(|e| {
        ProviderError::new(
            ProviderErrorKind::Server,
            format!("invalid Converse response: {e}"),
        )
    })?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    let blocks = response
        .output
        .and_then(|o| o.message)
        .map(|m| m.content)
        .unwrap_or_default();
    for block in blocks {
        if let Some(t) = block.text {
            text.push_str(&t);
        }
        if let Some(tool) = block.tool_use {
            tool_calls.push(ToolCall {
                id: tool.tool_use_id.unwrap_or_default(),
                name: tool.name.unwrap_or_default(),
                arguments: tool.input.unwrap_or_else(|| json!({})),
            });
        }
    }
    Ok(LlmResponse {
        text,
        tool_calls,
        finish: response.stop_reason.as_deref().map(finish_reason),
        usage: usage_object(response.usage).map(|raw| RawUsage {
            family: ApiFamily::Bedrock,
            raw,
        }),
        model: None,
    })
}

/// Splits an event-stream body into frames: `:event-type` (or `:exception-type`) + payload.
pub fn eventstream_frames<S, E>(bytes: S) -> impl Stream<Item = Result<Frame, ProviderError>> + Send
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: std::fmt::Display + Send + 'static,
{
    struct State<S> {
        bytes: S,
        buffer: BytesMut,
        decoder: MessageFrameDecoder,
        done: bool,
    }
    let state = State {
        bytes,
        buffer: BytesMut::new(),
        decoder: MessageFrameDecoder::new(),
        done: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if state.done {
                return None;
            }
            match state.decoder.decode_frame(&mut state.buffer) {
                Ok(DecodedFrame::Complete(message)) => return Some((message_frame(&message), state)),
                Ok(DecodedFrame::Incomplete) => {}
                Err(err) => {
                    state.done = true;
                    let error = ProviderError::new(
                        ProviderErrorKind::Transport,
                        format!("invalid event-stream frame: {err}"),
                    );
                    return Some((Err(error), state));
                }
            }
            match state.bytes.next().await {
                Some(Ok(chunk)) => state.buffer.extend_from_slice(chunk.chunk()),
                Some(Err(err)) => {
                    state.done = true;
                    let error = ProviderError::new(
                        ProviderErrorKind::Transport,
                        format!("stream interrupted: {err}"),
                    );
                    return Some((Err(error), state));
                }
                None => {
                    state.done = true;
                    if state.buffer.has_remaining() {
                        let error = cut_stream("Bedrock event-stream", "the end of a frame");
                        return Some((Err(error), state));
                    }
                    return None;
                }
            }
        }
    })
}

fn header_string(message: &Message, name: &str) -> Option<String> {
    message
        .headers()
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| h.value().as_string().ok())
        .map(|s| s.as_str().to_owned())
}

fn message_frame(message: &Message) -> Result<Frame, ProviderError> {
    let payload = String::from_utf8_lossy(message.payload()).into_owned();
    match header_string(message, ":message-type").as_deref() {
        Some("exception") | Some("error") => {
            let exception = header_string(message, ":exception-type")
                .or_else(|| header_string(message, ":error-code"))
                .unwrap_or_default();
            let text = serde_json::from_str::<ExceptionPayload>(&payload)
                .ok()
                .and_then(|p| p.message)
                .unwrap_or(payload);
            let kind = match exception.as_str() {
                "throttlingException" => ProviderErrorKind::RateLimit,
                "serviceUnavailableException" | "modelNotReadyException" => ProviderErrorKind::Overloaded,
                "validationException" => ProviderErrorKind::BadRequest,
                "modelTimeoutException" => ProviderErrorKind::Timeout,
                _ => ProviderErrorKind::Server,
            };
            Err(ProviderError::new(kind, format!("{exception}: {text}")))
        }
        _ => Ok(Frame {
            event: header_string(message, ":event-type"),
            data: payload,
        }),
    }
}

/// Decoder for ConverseStream events.
#[derive(Debug, Default)]
pub struct BedrockStreamDecoder {
    /// content block index → (tool index, open)
    tool_blocks: BTreeMap<u64, (u32, bool)>,
    next_tool: u32,
    stop_reason: Option<String>,
    metadata_seen: bool,
}

impl BedrockStreamDecoder {
    /// A fresh decoder.
    pub fn new() -> Self {
        Self::default()
    }
}

impl StreamDecoder for BedrockStreamDecoder {
    fn on_frame(&mut self, frame: Frame) -> Result<Vec<StreamEvent>, ProviderError> {
        let event = ConverseEvent::parse(frame.event.as_deref(), frame.data.trim())
            .map_err(|e| ProviderError::new(ProviderErrorKind::Server, format!("invalid event JSON: {e}")))?;
        let mut events = Vec::new();
        match event {
            ConverseEvent::ContentBlockStart(start) => {
                if let Some(tool) = start.start.and_then(|s| s.tool_use) {
                    let index = self.next_tool;
                    self.next_tool += 1;
                    self.tool_blocks
                        .insert(start.content_block_index.unwrap_or(0), (index, true));
                    events.push(StreamEvent::ToolCallStart {
                        index,
                        id: tool.tool_use_id.unwrap_or_default(),
                        name: tool.name.unwrap_or_default(),
                    });
                }
            }
            ConverseEvent::ContentBlockDelta(delta) => {
                let block_index = delta.content_block_index.unwrap_or(0);
                let (text, tool_use) = match delta.delta {
                    Some(d) => (d.text, d.tool_use),
                    None => (None, None),
                };
                if let Some(t) = text.filter(|t| !t.is_empty()) {
                    events.push(StreamEvent::TextDelta { text: t });
                }
                if let (Some((index, true)), Some(input)) = (
                    self.tool_blocks.get(&block_index).copied(),
                    tool_use.and_then(|t| t.input).filter(|i| !i.is_empty()),
                ) {
                    events.push(StreamEvent::ToolCallArgumentsDelta { index, delta: input });
                }
            }
            ConverseEvent::ContentBlockStop(stop) => {
                if let Some((index, open)) = self.tool_blocks.get_mut(&stop.content_block_index.unwrap_or(0))
                    && *open
                {
                    *open = false;
                    events.push(StreamEvent::ToolCallEnd { index: *index });
                }
            }
            ConverseEvent::MessageStop(stop) => {
                for (index, open) in self.tool_blocks.values_mut() {
                    if *open {
                        *open = false;
                        events.push(StreamEvent::ToolCallEnd { index: *index });
                    }
                }
                self.stop_reason = stop.stop_reason;
            }
            ConverseEvent::Metadata(metadata) => {
                self.metadata_seen = true;
                if let Some(raw) = usage_object(metadata.usage) {
                    events.push(StreamEvent::Usage {
                        usage: RawUsage {
                            family: ApiFamily::Bedrock,
                            raw,
                        },
                    });
                }
                if let Some(reason) = self.stop_reason.take() {
                    events.push(StreamEvent::Finish {
                        reason: finish_reason(&reason),
                    });
                }
            }
            ConverseEvent::Other => {}
        }
        Ok(events)
    }

    fn on_end(&mut self) -> Result<Vec<StreamEvent>, ProviderError> {
        if self.metadata_seen {
            return Ok(Vec::new());
        }
        match self.stop_reason.take() {
            // messageStop arrived but the metadata event did not: the answer is whole, usage is unknown.
            Some(reason) => Ok(vec![StreamEvent::Finish {
                reason: finish_reason(&reason),
            }]),
            None => Err(cut_stream("Bedrock ConverseStream", "messageStop")),
        }
    }
}

#[async_trait]
impl LlmProvider for BedrockProvider {
    fn family(&self) -> ApiFamily {
        ApiFamily::Bedrock
    }

    async fn complete(
        &self,
        request: &LlmRequest,
        credential: Option<&Credential>,
    ) -> Result<LlmResponse, ProviderError> {
        let body = request_body(request);
        let builder = self.signed_post(&request.model, false, &body, credential)?;
        let response = send(builder, self.settings.request_timeout).await?;
        parse_response(&read_json(response, self.settings.request_timeout).await?)
    }

    async fn stream(
        &self,
        request: &LlmRequest,
        credential: Option<&Credential>,
    ) -> Result<LlmEventStream, ProviderError> {
        let body = request_body(request);
        let builder = self.signed_post(&request.model, true, &body, credential)?;
        let response = send(builder, self.settings.request_timeout).await?;
        Ok(decode_frames(
            eventstream_frames(response.bytes_stream().boxed()),
            BedrockStreamDecoder::new(),
        ))
    }
}
