//! Every recorded real provider stream in `shared/upstream/recorded` parses into the expected
//! normalised events and raw usage (insta snapshots pin both).

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns may panic"
)]

use bytes::Bytes;
use futures::StreamExt;
use metaforge_adapters_llm::anthropic::AnthropicStreamDecoder;
use metaforge_adapters_llm::frames::{StreamDecoder, decode_sse_bytes};
use metaforge_adapters_llm::gemini::{self, GeminiStreamDecoder};
use metaforge_adapters_llm::openai::OpenAiStreamDecoder;
use metaforge_ports::StreamEvent;
use metaforge_test_support::{Peer, require};
use serde_json::{Value, json};

/// Events as JSON, with runs of text deltas folded into one entry (text + delta count).
async fn decode<D: StreamDecoder>(body: Vec<u8>, decoder: D) -> Value {
    let mut events = decode_sse_bytes(Bytes::from(body), decoder);
    let mut out: Vec<Value> = Vec::new();
    let mut text = String::new();
    let mut deltas = 0;
    while let Some(event) = events.next().await {
        match event {
            Ok(StreamEvent::TextDelta { text: t }) => {
                text.push_str(&t);
                deltas += 1;
            }
            other => {
                if deltas > 0 {
                    out.push(json!({"event": "text", "deltas": deltas, "text": text}));
                    text.clear();
                    deltas = 0;
                }
                match other {
                    Ok(event) => out.push(serde_json::to_value(event).unwrap()),
                    Err(err) => {
                        out.push(json!({"error": err.kind.as_str(), "message": err.provider_message}))
                    }
                }
            }
        }
    }
    if deltas > 0 {
        out.push(json!({"event": "text", "deltas": deltas, "text": text}));
    }
    Value::Array(out)
}

/// The SDK fixtures were stored without the blank line that ends the last SSE event on the wire
/// (an SSE parser rightly drops an unterminated final event), so it is restored here.
fn as_on_the_wire(mut body: Vec<u8>) -> Vec<u8> {
    while body.last().is_some_and(|b| b.is_ascii_whitespace()) {
        body.pop();
    }
    body.extend_from_slice(b"\n\n");
    body
}

fn sorted_files(upstream: &std::path::Path, dir: &str, ext: &str) -> Vec<std::path::PathBuf> {
    let dir = upstream.join("recorded").join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no recordings in {}", dir.display());
    files
}

fn stem(path: &std::path::Path) -> String {
    path.file_stem().unwrap().to_string_lossy().into_owned()
}

fn assert_finished_with_usage(name: &str, events: &Value) {
    let list = events.as_array().unwrap();
    assert!(
        list.iter().any(|e| e["event"] == "finish"),
        "{name}: no finish event in {events}"
    );
    assert!(
        list.iter().any(|e| e["event"] == "usage"),
        "{name}: no usage event"
    );
    assert!(
        list.iter().all(|e| e.get("error").is_none()),
        "{name}: error in {events}"
    );
}

#[tokio::test]
async fn every_recorded_openai_stream_parses_into_events_and_usage() {
    let Some(upstream) = require(Peer::Recordings) else {
        return;
    };
    for file in sorted_files(&upstream, "openai", "sse") {
        let events = decode(
            as_on_the_wire(std::fs::read(&file).unwrap()),
            OpenAiStreamDecoder::new(),
        )
        .await;
        assert_finished_with_usage(&stem(&file), &events);
        insta::assert_json_snapshot!(format!("openai__{}", stem(&file)), events);
    }
}

#[tokio::test]
async fn every_recorded_anthropic_stream_parses_into_events_and_merged_usage() {
    let Some(upstream) = require(Peer::Recordings) else {
        return;
    };
    for file in sorted_files(&upstream, "anthropic", "sse") {
        let events = decode(
            as_on_the_wire(std::fs::read(&file).unwrap()),
            AnthropicStreamDecoder::new(),
        )
        .await;
        assert_finished_with_usage(&stem(&file), &events);
        insta::assert_json_snapshot!(format!("anthropic__{}", stem(&file)), events);
    }
}

#[tokio::test]
async fn every_recorded_gemini_interaction_parses_into_events_and_usage_metadata() {
    let Some(upstream) = require(Peer::Recordings) else {
        return;
    };
    for file in sorted_files(&upstream, "gemini", "json") {
        let recording: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let mut parsed = Vec::new();
        for interaction in recording["interactions"].as_array().unwrap() {
            let url = interaction["request"]["url"].as_str().unwrap_or_default();
            let segments = interaction["response"]["bodySegments"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if interaction["response"]["statusCode"] != 200 {
                continue;
            }
            if url.contains("streamGenerateContent") {
                let body: String = segments.iter().map(|s| format!("data: {s}\r\n\r\n")).collect();
                let events = decode(body.into_bytes(), GeminiStreamDecoder::new()).await;
                assert_finished_with_usage(&stem(&file), &events);
                parsed.push(json!({"url": url, "stream": events}));
            } else {
                let response = gemini::parse_response(&segments[0]).unwrap();
                assert!(response.finish.is_some(), "{}: no finishReason", stem(&file));
                assert!(response.usage.is_some(), "{}: no usageMetadata", stem(&file));
                parsed.push(json!({"url": url, "response": response}));
            }
        }
        assert!(!parsed.is_empty(), "{}: no interaction parsed", stem(&file));
        insta::assert_json_snapshot!(format!("gemini__{}", stem(&file)), parsed);
    }
}

#[tokio::test]
async fn a_recorded_stream_cut_mid_way_ends_with_a_transport_error() {
    let Some(upstream) = require(Peer::Recordings) else {
        return;
    };
    let file = sorted_files(&upstream, "anthropic", "sse")
        .into_iter()
        .find(|f| stem(f) == "tool_use_response")
        .unwrap();
    let text = std::fs::read_to_string(file).unwrap();
    let cut = &text[..text.find("event: message_delta").unwrap()];
    let events = decode(cut.as_bytes().to_vec(), AnthropicStreamDecoder::new()).await;
    let last = events.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["error"], "transport", "{events}");

    let file = sorted_files(&upstream, "openai", "sse")
        .into_iter()
        .next()
        .unwrap();
    let text = std::fs::read_to_string(file).unwrap();
    let cut = &text[..text.len() / 2];
    let cut = &cut[..cut.rfind("\n\n").unwrap() + 2];
    let events = decode(cut.as_bytes().to_vec(), OpenAiStreamDecoder::new()).await;
    assert_eq!(
        events.as_array().unwrap().last().unwrap()["error"],
        "transport",
        "{events}"
    );
}
