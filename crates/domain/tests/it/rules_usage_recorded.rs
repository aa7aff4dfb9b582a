//! Usage normalisation against recorded real provider responses and the Bedrock contract in
//! `shared/upstream` (read in place, never copied).

#![expect(
    clippy::unwrap_used,
    reason = "fixture helpers: a missing or malformed recording must fail the test loudly"
)]

use std::path::Path;

use metaforge_domain::usage::{NormalizedUsage, normalize_usage};
use metaforge_ports::ApiFamily;
use metaforge_test_support::{Peer, require};
use serde_json::{Map, Value};

fn sse_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// message_start's usage with message_delta's fields laid over it, as the adapter merges them.
fn merged_anthropic_usage(events: &[Value]) -> Value {
    let mut usage = Map::new();
    for event in events {
        let part = match event["type"].as_str() {
            Some("message_start") => &event["message"]["usage"],
            Some("message_delta") => &event["usage"],
            _ => continue,
        };
        if let Some(fields) = part.as_object() {
            usage.extend(fields.clone());
        }
    }
    Value::Object(usage)
}

#[test]
fn anthropic_recorded_stream_normalises_to_full_prompt_and_final_output() {
    let Some(upstream) = require(Peer::Recordings) else {
        return;
    };
    let events = sse_events(&upstream.join("recorded/anthropic/basic_response.sse"));
    let usage = normalize_usage(ApiFamily::Anthropic, &merged_anthropic_usage(&events));
    assert_eq!(
        usage,
        NormalizedUsage {
            prompt_tokens: Some(11),
            completion_tokens: Some(6),
            ..NormalizedUsage::default()
        }
    );
}

#[test]
fn every_anthropic_recording_reports_usage() {
    let Some(upstream) = require(Peer::Recordings) else {
        return;
    };
    let dir = upstream.join("recorded/anthropic");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let events = sse_events(&entry.unwrap().path());
        if events.iter().any(|e| e["type"] == "message_start") {
            let usage = normalize_usage(ApiFamily::Anthropic, &merged_anthropic_usage(&events));
            assert!(
                usage.prompt_tokens.is_some() && usage.completion_tokens.is_some(),
                "{usage:?}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} recordings checked");
}

#[test]
fn openai_recorded_usage_chunk_normalises_with_reasoning() {
    let Some(upstream) = require(Peer::Recordings) else {
        return;
    };
    let events = sse_events(&upstream.join("recorded/openai/173417d553406f03.sse"));
    let usage = events.iter().rev().find(|e| e["usage"].is_object()).unwrap();
    let got = normalize_usage(ApiFamily::OpenaiCompatible, &usage["usage"]);
    assert_eq!(got.prompt_tokens, Some(79));
    assert_eq!(got.completion_tokens, Some(11));
    assert_eq!(got.reasoning_tokens, Some(0));
    assert_eq!(
        got.cached_input_tokens, None,
        "not reported, so unknown rather than 0"
    );
}

#[test]
fn gemini_recorded_usage_metadata_normalises() {
    let Some(upstream) = require(Peer::Recordings) else {
        return;
    };
    let path = upstream.join("recorded/gemini/Chats_Tests_sendMessage_Google_AI_with_text.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let body = &doc["interactions"][0]["response"]["bodySegments"][0];
    let meta = &body["usageMetadata"];
    let got = normalize_usage(ApiFamily::Gemini, meta);
    assert_eq!(got.prompt_tokens, meta["promptTokenCount"].as_u64());
    assert_eq!(
        got.completion_tokens,
        Some(
            meta["candidatesTokenCount"].as_u64().unwrap() + meta["thoughtsTokenCount"].as_u64().unwrap_or(0)
        )
    );
}

#[test]
fn bedrock_contract_declares_every_usage_field_read() {
    let Some(upstream) = require(Peer::Recordings) else {
        return;
    };
    let path = upstream.join("contracts/bedrock-runtime-service-2.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let members = &doc["shapes"]["TokenUsage"]["members"];
    for field in [
        "inputTokens",
        "outputTokens",
        "cacheReadInputTokens",
        "cacheWriteInputTokens",
    ] {
        assert!(members.get(field).is_some(), "TokenUsage has no {field}");
    }
}
