//! Opt-in real inference (`cargo xtask e2e --real-model`): the OpenAI-compatible adapter against
//! llama-cpp-python serving SmolLM2-135M — one chat turn and one forced tool call. Ignored in the
//! everyday run because the server needs a ~10-minute native build; xtask starts it and sets
//! `METAFORGE_E2E_OPENAI_BASE_URL`.
#![expect(
    clippy::disallowed_methods,
    reason = "the opt-in real-model test reads where the model server is"
)]
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helper outside #[test] fns"
)]

use metaforge_adapters_llm::{HttpSettings, OpenAiCompatibleProvider};
use metaforge_ports::{LlmMessage, LlmProvider, LlmRequest, ModelTool, ToolChoice};

fn provider() -> OpenAiCompatibleProvider {
    let url = std::env::var("METAFORGE_E2E_OPENAI_BASE_URL")
        .expect("run through `cargo xtask e2e --real-model`, which sets METAFORGE_E2E_OPENAI_BASE_URL");
    OpenAiCompatibleProvider::new(url, HttpSettings::default(), false).unwrap()
}

#[tokio::test]
#[ignore = "needs a local llama-cpp-python server: cargo xtask e2e --real-model"]
async fn a_real_small_model_answers_a_chat_turn() {
    let request = LlmRequest {
        model: "smollm2".into(),
        messages: vec![LlmMessage::user_text("Say hello in one short sentence.")],
        max_tokens: Some(32),
        temperature: Some(0.0),
        ..LlmRequest::default()
    };
    let answer = provider().complete(&request, None).await.unwrap();
    assert!(!answer.text.trim().is_empty(), "{answer:?}");
    assert!(answer.usage.is_some(), "llama.cpp reports usage");
}

#[tokio::test]
#[ignore = "needs a local llama-cpp-python server: cargo xtask e2e --real-model"]
async fn a_real_small_model_makes_a_forced_tool_call() {
    let request = LlmRequest {
        model: "smollm2".into(),
        messages: vec![LlmMessage::user_text("What is the weather in Paris?")],
        tools: vec![ModelTool {
            name: "get_weather".into(),
            description: "Current weather for a city".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}),
        }],
        tool_choice: ToolChoice::Tool("get_weather".into()),
        max_tokens: Some(64),
        temperature: Some(0.0),
        ..LlmRequest::default()
    };
    let answer = provider().complete(&request, None).await.unwrap();
    assert_eq!(answer.tool_calls.len(), 1, "{answer:?}");
    assert_eq!(answer.tool_calls[0].name, "get_weather");
}
