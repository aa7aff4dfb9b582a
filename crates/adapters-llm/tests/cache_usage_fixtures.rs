//! Hand-written cost fixtures with non-zero cache tokens, one or more per family (no recording
//! carries any): every adapter must hand the provider's usage object over untouched, cache
//! fields included, whether it arrives in JSON, SSE or the Bedrock event-stream framing.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns may panic"
)]

use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use bytes::Bytes;
use futures::StreamExt;
use metaforge_adapters_llm::bedrock::{BedrockStreamDecoder, eventstream_frames};
use metaforge_adapters_llm::frames::{StreamDecoder, collect_stream, decode_frames, decode_sse_bytes};
use metaforge_adapters_llm::{anthropic, bedrock, codex, gemini, openai};
use metaforge_ports::{LlmResponse, ProviderErrorKind, RawUsage};
use serde_json::Value;

fn cases() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cache_usage_cases.json"
    );
    let file: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    file["cases"].as_array().unwrap().clone()
}

fn sse_body(frames: &[Value]) -> Bytes {
    let mut out = String::new();
    for frame in frames {
        if let Some(event) = frame["event"].as_str() {
            out.push_str(&format!("event: {event}\n"));
        }
        match frame.get("raw").and_then(Value::as_str) {
            Some(raw) => out.push_str(&format!("data: {raw}\n\n")),
            None => out.push_str(&format!("data: {}\n\n", frame["data"])),
        }
    }
    Bytes::from(out)
}

fn eventstream_body(frames: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for frame in frames {
        let message = Message::new(Bytes::from(frame["data"].to_string()))
            .add_header(Header::new(
                ":event-type",
                HeaderValue::String(frame["event"].as_str().unwrap().to_owned().into()),
            ))
            .add_header(Header::new(":message-type", HeaderValue::String("event".into())))
            .add_header(Header::new(
                ":content-type",
                HeaderValue::String("application/json".into()),
            ));
        aws_smithy_eventstream::frame::write_message_to(&message, &mut out).unwrap();
    }
    out
}

async fn sse<D: StreamDecoder>(frames: &[Value], decoder: D) -> LlmResponse {
    collect_stream(decode_sse_bytes(sse_body(frames), decoder))
        .await
        .unwrap()
}

async fn parse(case: &Value) -> LlmResponse {
    let frames = case["frames"].as_array().cloned().unwrap_or_default();
    match (case["family"].as_str().unwrap(), case["kind"].as_str().unwrap()) {
        ("openai_compatible", "json") => openai::parse_completion(&case["body"]).unwrap(),
        ("openai_compatible", "sse") => sse(&frames, openai::OpenAiStreamDecoder::new()).await,
        ("anthropic", "json") => anthropic::parse_message(&case["body"]).unwrap(),
        ("anthropic", "sse") => sse(&frames, anthropic::AnthropicStreamDecoder::new()).await,
        ("gemini", "sse") => sse(&frames, gemini::GeminiStreamDecoder::new()).await,
        ("bedrock", "json") => bedrock::parse_response(&case["body"]).unwrap(),
        ("bedrock", "eventstream") => {
            let bytes = eventstream_body(&frames);
            // Odd-sized chunks: frames straddle reads, as on a real socket.
            let chunks: Vec<Result<Bytes, std::io::Error>> =
                bytes.chunks(7).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
            let events = decode_frames(
                eventstream_frames(futures::stream::iter(chunks)),
                BedrockStreamDecoder::new(),
            );
            collect_stream(events).await.unwrap()
        }
        ("openai_codex", "sse") => sse(&frames, codex::CodexStreamDecoder::new()).await,
        other => panic!("no parser for {other:?}"),
    }
}

/// The raw usage object the fixture's wire answer carries (Anthropic: start usage merged with
/// the delta usage; streams: the last usage object sent).
fn expected_raw(case: &Value) -> Value {
    match case["kind"].as_str().unwrap() {
        "json" => {
            let body = &case["body"];
            body.get("usage")
                .or_else(|| body.get("usageMetadata"))
                .cloned()
                .unwrap()
        }
        _ => {
            let mut merged = serde_json::Map::new();
            for frame in case["frames"].as_array().unwrap() {
                let data = &frame["data"];
                let usage = data
                    .pointer("/message/usage")
                    .or_else(|| data.get("usage"))
                    .or_else(|| data.get("usageMetadata"))
                    .or_else(|| data.pointer("/response/usage"));
                if let Some(usage) = usage.and_then(Value::as_object) {
                    if case["family"] == "anthropic" {
                        merged.extend(usage.clone());
                    } else {
                        merged = usage.clone();
                    }
                }
            }
            Value::Object(merged)
        }
    }
}

#[tokio::test]
async fn every_family_hands_over_usage_with_its_cache_tokens_untouched() {
    let cases = cases();
    let families: std::collections::BTreeSet<_> =
        cases.iter().map(|c| c["family"].as_str().unwrap()).collect();
    assert_eq!(families.len(), 5, "one fixture per family at least: {families:?}");
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let response = parse(case).await;
        assert_eq!(response.text, "ok", "{name}");
        let RawUsage { family, raw } = response.usage.unwrap_or_else(|| panic!("{name}: no usage"));
        assert_eq!(serde_json::to_value(family).unwrap(), case["family"], "{name}");
        assert_eq!(raw, expected_raw(case), "{name}");
        let cached = case["normalized"]["cached_input_tokens"].as_u64().unwrap();
        assert!(cached > 0, "{name}: fixtures must carry non-zero cache tokens");
        assert!(
            raw.to_string().contains(&cached.to_string()),
            "{name}: cache count {cached} in {raw}"
        );
    }
}

#[tokio::test]
async fn a_bedrock_event_stream_cut_inside_a_frame_is_a_transport_error() {
    let case = cases().into_iter().find(|c| c["kind"] == "eventstream").unwrap();
    let mut bytes = eventstream_body(case["frames"].as_array().unwrap());
    bytes.truncate(bytes.len() - 10);
    let chunks = vec![Ok::<Bytes, std::io::Error>(Bytes::from(bytes))];
    let events: Vec<_> = decode_frames(
        eventstream_frames(futures::stream::iter(chunks)),
        BedrockStreamDecoder::new(),
    )
    .collect()
    .await;
    let last = events.last().unwrap().as_ref().unwrap_err();
    assert_eq!(last.kind, ProviderErrorKind::Transport, "{last}");
}

#[tokio::test]
async fn a_bedrock_exception_frame_becomes_a_typed_rate_limit_error() {
    let message = Message::new(Bytes::from(r#"{"message":"Too many requests"}"#))
        .add_header(Header::new(
            ":message-type",
            HeaderValue::String("exception".into()),
        ))
        .add_header(Header::new(
            ":exception-type",
            HeaderValue::String("throttlingException".into()),
        ));
    let mut bytes = Vec::new();
    aws_smithy_eventstream::frame::write_message_to(&message, &mut bytes).unwrap();
    let chunks = vec![Ok::<Bytes, std::io::Error>(Bytes::from(bytes))];
    let events: Vec<_> = decode_frames(
        eventstream_frames(futures::stream::iter(chunks)),
        BedrockStreamDecoder::new(),
    )
    .collect()
    .await;
    let err = events[0].as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::RateLimit);
    assert!(err.provider_message.contains("Too many requests"));
}
