//! The adapter → domain seam for cost accounting: each hand-written cache-token fixture (one or
//! more per family) goes through the family adapter's parser, then the domain's per-family
//! normalisation, and must give the hand-computed counts; priced calls get a non-zero cost.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns may panic"
)]

use bytes::Bytes;
use metaforge_adapters_llm::bedrock::{BedrockStreamDecoder, eventstream_frames};
use metaforge_adapters_llm::frames::{collect_stream, decode_frames, decode_sse_bytes};
use metaforge_adapters_llm::{anthropic, bedrock, codex, gemini, openai};
use metaforge_domain::usage::{PriceTable, normalize_usage, price_event};
use metaforge_ports::{LlmResponse, UsageEvent};
use serde_json::Value;

fn cases() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../adapters-llm/tests/fixtures/cache_usage_cases.json"
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
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
    let mut out = Vec::new();
    for frame in frames {
        let message = Message::new(Bytes::from(frame["data"].to_string()))
            .add_header(Header::new(
                ":event-type",
                HeaderValue::String(frame["event"].as_str().unwrap().to_owned().into()),
            ))
            .add_header(Header::new(":message-type", HeaderValue::String("event".into())));
        aws_smithy_eventstream::frame::write_message_to(&message, &mut out).unwrap();
    }
    out
}

async fn parse(case: &Value) -> LlmResponse {
    let frames = case["frames"].as_array().cloned().unwrap_or_default();
    match (case["family"].as_str().unwrap(), case["kind"].as_str().unwrap()) {
        ("openai_compatible", "json") => openai::parse_completion(&case["body"]).unwrap(),
        ("openai_compatible", "sse") => collect_stream(decode_sse_bytes(
            sse_body(&frames),
            openai::OpenAiStreamDecoder::new(),
        ))
        .await
        .unwrap(),
        ("anthropic", "json") => anthropic::parse_message(&case["body"]).unwrap(),
        ("anthropic", "sse") => collect_stream(decode_sse_bytes(
            sse_body(&frames),
            anthropic::AnthropicStreamDecoder::new(),
        ))
        .await
        .unwrap(),
        ("gemini", "sse") => collect_stream(decode_sse_bytes(
            sse_body(&frames),
            gemini::GeminiStreamDecoder::new(),
        ))
        .await
        .unwrap(),
        ("bedrock", "json") => bedrock::parse_response(&case["body"]).unwrap(),
        ("bedrock", "eventstream") => {
            let chunks = vec![Ok::<Bytes, std::io::Error>(Bytes::from(eventstream_body(
                &frames,
            )))];
            let events = decode_frames(
                eventstream_frames(futures::stream::iter(chunks)),
                BedrockStreamDecoder::new(),
            );
            collect_stream(events).await.unwrap()
        }
        ("openai_codex", "sse") => collect_stream(decode_sse_bytes(
            sse_body(&frames),
            codex::CodexStreamDecoder::new(),
        ))
        .await
        .unwrap(),
        other => panic!("no parser for {other:?}"),
    }
}

#[tokio::test]
async fn every_cache_fixture_normalises_to_its_hand_computed_counts() {
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let raw = parse(&case).await.usage.unwrap();
        let counts = serde_json::to_value(normalize_usage(raw.family, &raw.raw)).unwrap();
        assert_eq!(counts, case["normalized"], "{name}");
    }
}

#[tokio::test]
async fn cached_tokens_are_priced_at_the_cached_rate_never_as_zero() {
    let prices = PriceTable::shipped().unwrap();
    let case = cases()
        .into_iter()
        .find(|c| c["name"] == "anthropic_sse_cache_read_and_write")
        .unwrap();
    let raw = parse(&case).await.usage.unwrap();
    let n = normalize_usage(raw.family, &raw.raw);
    let event = UsageEvent {
        provider: "anthropic".into(),
        model: "claude-sonnet-4-5".into(),
        prompt_tokens: n.prompt_tokens,
        completion_tokens: n.completion_tokens,
        cached_input_tokens: n.cached_input_tokens,
        cache_write_tokens: n.cache_write_tokens,
        ..UsageEvent::default()
    };
    let cost = price_event(&event, &prices).cost_usd.unwrap();
    // 25 uncached × $3 + 8000 cached × $0.30 + 1200 writes × $3.75 + 150 out × $15, per 1M.
    let expected = (25.0 * 3.0 + 8000.0 * 0.3 + 1200.0 * 3.75 + 150.0 * 15.0) / 1e6;
    assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
}
