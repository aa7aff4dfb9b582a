//! The wire shape of every family's request, pinned byte for byte against a JSON fixture
//! (`fixtures/wire/<family>.json`): one request holding every part the normalised `LlmRequest`
//! can carry — system prefix and suffix, text, an empty text part, tool calls and their results
//! (one failed), tools, max tokens, temperature and stop — sent with each `ToolChoice`.
//!
//! A fixture holds `body` (the whole request, `ToolChoice::Tool`) and `tool_choice`: for each
//! choice, what the body holds at the family's tool-choice path (`null` where the family leaves it
//! out). The rest of the body must not change with the choice. Bytes are compared as the adapter
//! serialises them (key order and number text included), not as re-parsed values.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns may panic"
)]

use metaforge_adapters_llm::{anthropic, bedrock, codex, gemini, openai};
use metaforge_ports::{ContentPart, LlmMessage, LlmRequest, LlmRole, ModelTool, SystemPrompt, ToolChoice};
use serde::Serialize;
use serde_json::{Value, json};

/// Every part a request can carry; `tool_choice` is set per case.
fn every_part(tool_choice: ToolChoice) -> LlmRequest {
    LlmRequest {
        model: "model-x".into(),
        system: SystemPrompt {
            stable: "You are MetaForge.".into(),
            volatile_suffix: Some("Round note: 2 tools dropped.".into()),
        },
        messages: vec![
            LlmMessage {
                role: LlmRole::User,
                content: vec![
                    ContentPart::Text {
                        text: "weather in Paris and Oslo?".into(),
                    },
                    ContentPart::Text { text: String::new() },
                ],
            },
            LlmMessage {
                role: LlmRole::Assistant,
                content: vec![
                    ContentPart::Text {
                        text: "Checking.".into(),
                    },
                    ContentPart::ToolCall {
                        id: "call_1".into(),
                        name: "get_weather".into(),
                        arguments: json!({"location": "Paris"}),
                    },
                    ContentPart::ToolCall {
                        id: "call_2".into(),
                        name: "get_weather".into(),
                        arguments: json!({"location": "Oslo"}),
                    },
                ],
            },
            LlmMessage {
                role: LlmRole::User,
                content: vec![
                    ContentPart::ToolResult {
                        call_id: "call_1".into(),
                        name: "get_weather".into(),
                        content: "18C".into(),
                        is_error: false,
                    },
                    ContentPart::ToolResult {
                        call_id: "call_2".into(),
                        name: "get_weather".into(),
                        content: "station offline".into(),
                        is_error: true,
                    },
                    ContentPart::Text {
                        text: "Answer briefly.".into(),
                    },
                ],
            },
            LlmMessage {
                role: LlmRole::Assistant,
                content: vec![ContentPart::ToolCall {
                    id: "call_3".into(),
                    name: "get_time".into(),
                    arguments: json!({}),
                }],
            },
            LlmMessage {
                role: LlmRole::User,
                content: vec![ContentPart::ToolResult {
                    call_id: "call_3".into(),
                    name: "get_time".into(),
                    content: "12:00".into(),
                    is_error: false,
                }],
            },
        ],
        tools: vec![
            ModelTool {
                name: "get_time".into(),
                description: "Time".into(),
                parameters: json!({"type": "object"}),
            },
            ModelTool {
                name: "get_weather".into(),
                description: "Weather".into(),
                parameters: json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                    "properties": {"location": {"type": "string"}}, "required": ["location"],
                    "additionalProperties": false}),
            },
        ],
        tool_choice,
        max_tokens: Some(512),
        temperature: Some(0.2),
        stop: vec!["END".into(), "STOP".into()],
        prompt_cache_key: Some("mf-key".into()),
    }
}

fn choices() -> [(&'static str, ToolChoice); 4] {
    [
        ("auto", ToolChoice::Auto),
        ("none", ToolChoice::None),
        ("required", ToolChoice::Required),
        ("tool", ToolChoice::Tool("get_weather".into())),
    ]
}

fn fixture(family: &str) -> Value {
    let path = format!("{}/tests/fixtures/wire/{family}.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The exact text the adapter puts on the wire (pretty-printed for a readable diff).
fn wire_text<T: Serialize>(body: &T) -> String {
    serde_json::to_string_pretty(body).unwrap()
}

/// Removes the value at `pointer` (a path of object keys) and returns it, `null` when absent.
fn take(body: &mut Value, pointer: &str) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    body.pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .and_then(|object| object.shift_remove(key))
        .unwrap_or(Value::Null)
}

/// Checks the wire text `build` gives for each tool choice against the family's fixture.
fn assert_pinned(family: &str, choice_path: &str, build: impl Fn(&LlmRequest) -> String) {
    let fixture = fixture(family);
    let tool = build(&every_part(ToolChoice::Tool("get_weather".into())));
    assert_eq!(
        tool,
        wire_text(&fixture["body"]),
        "{family}: the body differs from fixtures/wire/{family}.json"
    );
    let mut rest_expected = fixture["body"].clone();
    take(&mut rest_expected, choice_path);
    for (name, choice) in choices() {
        let mut body: Value = serde_json::from_str(&build(&every_part(choice))).unwrap();
        let sent = take(&mut body, choice_path);
        assert_eq!(
            wire_text(&sent),
            wire_text(&fixture["tool_choice"][name]),
            "{family}: tool choice {name} at {choice_path}"
        );
        assert_eq!(
            body, rest_expected,
            "{family}: tool choice {name} changed more than {choice_path}"
        );
    }
}

#[test]
fn openai_chat_completions_request_matches_its_fixture() {
    assert_pinned("openai", "/tool_choice", |r| {
        wire_text(&openai::request_body(r, true, true))
    });
    // Not streamed and for a self-hosted endpoint: the same body without the three fields.
    let mut streamed =
        serde_json::to_value(openai::request_body(&every_part(ToolChoice::Auto), true, true)).unwrap();
    for field in ["/stream", "/stream_options", "/prompt_cache_key"] {
        take(&mut streamed, field);
    }
    let plain =
        serde_json::to_value(openai::request_body(&every_part(ToolChoice::Auto), false, false)).unwrap();
    assert_eq!(plain, streamed);
}

#[test]
fn anthropic_messages_request_matches_its_fixture() {
    assert_pinned("anthropic", "/tool_choice", |r| {
        wire_text(&anthropic::request_body(r, true))
    });
    let mut uncapped = every_part(ToolChoice::Auto);
    uncapped.max_tokens = None;
    let body = serde_json::to_value(anthropic::request_body(&uncapped, false)).unwrap();
    assert_eq!(body["max_tokens"], anthropic::DEFAULT_MAX_TOKENS);
    assert!(body.get("stream").is_none());
}

#[test]
fn gemini_generate_content_request_matches_its_fixture() {
    assert_pinned("gemini", "/toolConfig", |r| wire_text(&gemini::request_body(r)));
}

#[test]
fn bedrock_converse_request_matches_its_fixture() {
    assert_pinned("bedrock", "/toolConfig/toolChoice", |r| {
        wire_text(&bedrock::request_body(r))
    });
}

#[test]
fn codex_responses_request_matches_its_fixture() {
    assert_pinned("codex", "/tool_choice", |r| wire_text(&codex::request_body(r)));
}

/// A request with nothing optional: no system, no tools, no caps — each family leaves every
/// optional field out (and Anthropic still sends its required `max_tokens`).
#[test]
fn a_bare_request_sends_only_the_required_fields() {
    let bare = LlmRequest {
        model: "model-x".into(),
        messages: vec![LlmMessage::user_text("hi")],
        ..LlmRequest::default()
    };
    let fixture = fixture("bare");
    let sent = json!({
        "openai": serde_json::to_value(openai::request_body(&bare, false, true)).unwrap(),
        "anthropic": serde_json::to_value(anthropic::request_body(&bare, false)).unwrap(),
        "gemini": serde_json::to_value(gemini::request_body(&bare)).unwrap(),
        "bedrock": serde_json::to_value(bedrock::request_body(&bare)).unwrap(),
        "codex": serde_json::to_value(codex::request_body(&bare)).unwrap(),
    });
    assert_eq!(wire_text(&sent), wire_text(&fixture));
}
