//! From bytes on the wire to normalised events: SSE framing, per-family decoders, and the
//! aggregation of a stream into one complete answer.
//!
//! Each family implements [`StreamDecoder`] over frames (SSE `event`/`data`, or an AWS
//! event-stream message's event type and payload). A decoder must notice a stream that ends
//! before the family's terminal marker: a cut stream ends with a typed `Transport` error, never
//! with a silently short answer.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use metaforge_ports::{
    FinishReason, LlmEventStream, LlmResponse, ProviderError, ProviderErrorKind, RawUsage, StreamEvent,
    ToolCall,
};

/// One framed message: an optional event name and its data text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// SSE `event:` field, or the event-stream `:event-type` header.
    pub event: Option<String>,
    /// SSE `data:` text, or the event-stream payload as UTF-8.
    pub data: String,
}

/// A family's stateful frame → event decoder.
pub trait StreamDecoder: Send + 'static {
    /// Decodes one frame into zero or more events; an error ends the stream.
    fn on_frame(&mut self, frame: Frame) -> Result<Vec<StreamEvent>, ProviderError>;
    /// Called once when the wire ends; returns trailing events, or an error for a cut stream.
    fn on_end(&mut self) -> Result<Vec<StreamEvent>, ProviderError>;
}

/// The error every decoder returns when the wire ends before the family's terminal marker.
pub(crate) fn cut_stream(family: &str, missing: &str) -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::Transport,
        format!("{family} stream ended before {missing} (stream cut mid-way)"),
    )
}

/// Parses an SSE byte stream into frames (sse-stream does the framing).
pub fn sse_frames<S, E>(bytes: S) -> impl Stream<Item = Result<Frame, ProviderError>> + Send
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    sse_stream::SseByteStream::new(bytes).filter_map(|item| async move {
        match item {
            Ok(sse) => sse.data.map(|data| {
                Ok(Frame {
                    event: sse.event,
                    data,
                })
            }),
            Err(err) => Some(Err(sse_error(&err))),
        }
    })
}

fn sse_error(err: &sse_stream::Error) -> ProviderError {
    let message = crate::http::error_chain(err);
    let kind = if message.contains("timed out") || message.contains("timeout") {
        ProviderErrorKind::Timeout
    } else {
        ProviderErrorKind::Transport
    };
    ProviderError::new(kind, format!("stream interrupted: {message}"))
}

/// Runs frames through a decoder, yielding normalised events; the first error ends the stream.
pub fn decode_frames<F, D>(frames: F, decoder: D) -> LlmEventStream
where
    F: Stream<Item = Result<Frame, ProviderError>> + Send + 'static,
    D: StreamDecoder,
{
    struct State<D> {
        frames: futures::stream::BoxStream<'static, Result<Frame, ProviderError>>,
        decoder: D,
        queue: VecDeque<Result<StreamEvent, ProviderError>>,
        finished: bool,
    }
    let state = State {
        frames: frames.boxed(),
        decoder,
        queue: VecDeque::new(),
        finished: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(item) = state.queue.pop_front() {
                return Some((item, state));
            }
            if state.finished {
                return None;
            }
            match state.frames.next().await {
                Some(Ok(frame)) => match state.decoder.on_frame(frame) {
                    Ok(events) => state.queue.extend(events.into_iter().map(Ok)),
                    Err(err) => {
                        state.queue.push_back(Err(err));
                        state.finished = true;
                    }
                },
                Some(Err(err)) => {
                    state.queue.push_back(Err(err));
                    state.finished = true;
                }
                None => {
                    state.finished = true;
                    match state.decoder.on_end() {
                        Ok(events) => state.queue.extend(events.into_iter().map(Ok)),
                        Err(err) => state.queue.push_back(Err(err)),
                    }
                }
            }
        }
    })
    .boxed()
}

/// Decodes a whole SSE body held in memory (recorded streams, tests, Codex `complete`).
pub fn decode_sse_bytes<D: StreamDecoder>(body: Bytes, decoder: D) -> LlmEventStream {
    let bytes = futures::stream::iter([Ok::<Bytes, std::io::Error>(body)]);
    decode_frames(sse_frames(bytes), decoder)
}

/// Tool arguments text as JSON; text that is not JSON is kept as a JSON string, never dropped.
pub(crate) fn parse_arguments(text: &str) -> serde_json::Value {
    if text.trim().is_empty() {
        return serde_json::Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_owned()))
}

/// Folds a whole event stream into one answer, so `complete` can ride a streaming endpoint.
pub async fn collect_stream(mut events: LlmEventStream) -> Result<LlmResponse, ProviderError> {
    let mut text = String::new();
    let mut calls: BTreeMap<u32, (String, String, String)> = BTreeMap::new();
    let mut finish = None;
    let mut usage: Option<RawUsage> = None;
    while let Some(event) = events.next().await {
        match event? {
            StreamEvent::TextDelta { text: delta } => text.push_str(&delta),
            StreamEvent::ToolCallStart { index, id, name } => {
                calls.insert(index, (id, name, String::new()));
            }
            StreamEvent::ToolCallArgumentsDelta { index, delta } => {
                if let Some(call) = calls.get_mut(&index) {
                    call.2.push_str(&delta);
                }
            }
            StreamEvent::Usage { usage: raw } => usage = Some(raw),
            StreamEvent::Finish { reason } => finish = Some(reason),
            // A call's end carries nothing its start and argument deltas did not.
            StreamEvent::ToolCallEnd { .. } => {}
        }
    }
    Ok(LlmResponse {
        text,
        tool_calls: calls
            .into_values()
            .map(|(id, name, args)| ToolCall {
                id,
                name,
                arguments: parse_arguments(&args),
            })
            .collect(),
        finish,
        usage,
        model: None,
    })
}

/// Maps the common finish-reason spellings (OpenAI, Anthropic, Bedrock, Gemini) to one enum.
pub(crate) fn finish_reason(raw: &str) -> FinishReason {
    match raw {
        "stop" | "end_turn" | "stop_sequence" | "STOP" | "completed" => FinishReason::Stop,
        "length" | "max_tokens" | "MAX_TOKENS" | "max_output_tokens" => FinishReason::Length,
        "tool_calls" | "function_call" | "tool_use" | "FUNCTION_CALL" => FinishReason::ToolCalls,
        "content_filter"
        | "refusal"
        | "content_filtered"
        | "guardrail_intervened"
        | "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}
