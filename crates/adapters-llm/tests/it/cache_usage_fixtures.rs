//! Hand-written cost fixtures with non-zero cache tokens, one or more per family (no recording
//! carries any): every adapter must hand the provider's usage object over untouched, cache
//! fields included, whether it arrives in JSON, SSE or the Bedrock event-stream framing.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns may panic"
)]

#[path = "../support/cache_cases.rs"]
mod cache_cases;

use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use bytes::Bytes;
use cache_cases::{cases, eventstream_body, parse};
use futures::StreamExt;
use metaforge_adapters_llm::bedrock::{BedrockStreamDecoder, eventstream_frames};
use metaforge_adapters_llm::frames::decode_frames;
use metaforge_ports::{ProviderErrorKind, RawUsage};
use serde_json::Value;

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
