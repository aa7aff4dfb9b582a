//! The exact bodies each family's adapter sends for one tool-using turn (insta snapshots), and
//! the prompt-caching placement: Anthropic's three breakpoints, the volatile suffix outside the
//! cached system block, `prompt_cache_key` only where the endpoint honours it.

use metaforge_adapters_llm::{anthropic, bedrock, codex, gemini, openai};
use metaforge_ports::{ContentPart, LlmMessage, LlmRequest, LlmRole, ModelTool, SystemPrompt, ToolChoice};
use serde_json::json;

fn turn() -> LlmRequest {
    LlmRequest {
        model: "model-x".into(),
        system: SystemPrompt {
            stable: "You are MetaForge.".into(),
            volatile_suffix: Some("Round note: 2 tools dropped.".into()),
        },
        messages: vec![
            LlmMessage::user_text("weather in Paris?"),
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
                ],
            },
            LlmMessage {
                role: LlmRole::User,
                content: vec![ContentPart::ToolResult {
                    call_id: "call_1".into(),
                    name: "get_weather".into(),
                    content: "18C".into(),
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
                    "properties": {"location": {"type": "string"}}, "additionalProperties": false}),
            },
        ],
        tool_choice: ToolChoice::Auto,
        max_tokens: Some(512),
        temperature: None,
        stop: vec![],
        prompt_cache_key: Some("mf-key".into()),
    }
}

#[test]
fn openai_body_sends_prompt_cache_key_only_when_the_endpoint_honours_it() {
    let request = turn();
    let with_key = openai::request_body(&request, true, true);
    insta::assert_json_snapshot!("openai_tool_turn_streaming", with_key);
    let sent = serde_json::to_value(&with_key).unwrap();
    assert_eq!(sent["stream_options"]["include_usage"], true);
    assert_eq!(sent["prompt_cache_key"], "mf-key");
    let self_hosted = serde_json::to_value(openai::request_body(&request, true, false)).unwrap();
    assert!(self_hosted.get("prompt_cache_key").is_none());
}

#[test]
fn anthropic_body_places_three_cache_breakpoints_and_keeps_the_suffix_unmarked() {
    let request = turn();
    let body = anthropic::request_body(&request, true);
    insta::assert_json_snapshot!("anthropic_tool_turn_streaming", body);
    let body = serde_json::to_value(&body).unwrap();
    let marked = body.to_string().matches("cache_control").count();
    assert_eq!(marked, 3, "last tool, stable system block, last message block");
    assert!(body["tools"][1]["cache_control"].is_object());
    assert!(body["system"][0]["cache_control"].is_object());
    assert!(
        body["system"][1].get("cache_control").is_none(),
        "the per-round note is not cached"
    );
    assert!(body["messages"][2]["content"][0]["cache_control"].is_object());
}

#[test]
fn gemini_bedrock_and_codex_bodies_are_pinned() {
    insta::assert_json_snapshot!("gemini_tool_turn", gemini::request_body(&turn()));
    insta::assert_json_snapshot!("bedrock_tool_turn", bedrock::request_body(&turn()));
    insta::assert_json_snapshot!("codex_tool_turn", codex::request_body(&turn()));
}
