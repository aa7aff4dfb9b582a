//! Integration against aimock (a real multi-provider mock server): all five families, JSON and
//! streaming, plain text and tool calls. The test starts aimock itself from the npm install dir
//! (`METAFORGE_NODE_DIR`, default `/var/tmp/metaforge-node`) and kills its process group; without
//! aimock each test prints why it is skipped.

#![expect(clippy::unwrap_used, reason = "test helpers outside #[test] fns may panic")]

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use metaforge_adapters_llm::frames::collect_stream;
use metaforge_adapters_llm::{
    AnthropicProvider, BedrockProvider, CodexProvider, GeminiProvider, HttpSettings, OpenAiCompatibleProvider,
};
use metaforge_ports::{
    Credential, CredentialSecret, FinishReason, LlmMessage, LlmProvider, LlmRequest, ModelTool,
    ProviderErrorKind, StreamEvent,
};
use metaforge_test_support::peers::{self, Aimock};

/// aimock serving this crate's fixtures; `None` (skipped) when aimock is not installed.
fn start_aimock() -> Option<Aimock> {
    peers::start_aimock(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/aimock.json"))
}

fn key() -> Credential {
    Credential {
        id: "k".into(),
        secret: CredentialSecret::ApiKey {
            api_key: "mock-key".into(),
        },
    }
}

fn families(url: &str) -> Vec<(&'static str, Arc<dyn LlmProvider>, &'static str, Credential)> {
    let s = HttpSettings::default();
    let aws = Credential {
        id: "aws".into(),
        secret: CredentialSecret::Aws {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
            region: "us-east-1".into(),
        },
    };
    let chatgpt = Credential {
        id: "codex".into(),
        secret: CredentialSecret::ChatGpt {
            access_token: "tok".into(),
            account_id: Some("acct".into()),
        },
    };
    vec![
        (
            "openai",
            Arc::new(OpenAiCompatibleProvider::new(format!("{url}/v1"), s, true).unwrap()),
            "gpt-4o",
            key(),
        ),
        (
            "anthropic",
            Arc::new(AnthropicProvider::new(url, s).unwrap()),
            "claude-sonnet-4-5",
            key(),
        ),
        (
            "gemini",
            Arc::new(GeminiProvider::new(url, s).unwrap()),
            "gemini-2.5-flash",
            key(),
        ),
        (
            "bedrock",
            Arc::new(BedrockProvider::new(url, s).unwrap()),
            "anthropic.claude-3-5-sonnet-20240620-v1:0",
            aws,
        ),
        (
            "openai-codex",
            Arc::new(CodexProvider::new(format!("{url}/v1"), s).unwrap()),
            "gpt-5-codex",
            chatgpt,
        ),
    ]
}

fn request(model: &str, prompt: &str, tools: bool) -> LlmRequest {
    LlmRequest {
        model: model.into(),
        messages: vec![LlmMessage::user_text(prompt)],
        tools: if tools {
            vec![ModelTool {
                name: "get_weather".into(),
                description: "Current weather for a city".into(),
                parameters: serde_json::json!({"type": "object",
                    "properties": {"location": {"type": "string"}, "unit": {"type": "string"}},
                    "required": ["location"]}),
            }]
        } else {
            Vec::new()
        },
        max_tokens: Some(256),
        ..LlmRequest::default()
    }
}

#[tokio::test]
async fn every_family_completes_plain_text_and_tool_calls_as_json() {
    let Some(mock) = start_aimock() else {
        return;
    };
    for (name, provider, model, credential) in families(&mock.url) {
        let text = provider
            .complete(&request(model, "hi", false), Some(&credential))
            .await;
        let text = text.unwrap_or_else(|e| panic!("{name} plain: {e}"));
        assert_eq!(text.text, "Hello from aimock! How can I help?", "{name}");
        assert!(text.usage.is_some(), "{name}: usage reported");

        let tools = provider
            .complete(&request(model, "weather in Paris?", true), Some(&credential))
            .await;
        let tools = tools.unwrap_or_else(|e| panic!("{name} tools: {e}"));
        assert_eq!(tools.tool_calls.len(), 1, "{name}: {tools:?}");
        assert_eq!(tools.tool_calls[0].name, "get_weather", "{name}");
        assert_eq!(tools.tool_calls[0].arguments["location"], "Paris", "{name}");
        assert_eq!(tools.finish, Some(FinishReason::ToolCalls), "{name}");
    }
}

#[tokio::test]
async fn every_family_streams_text_deltas_usage_and_finish() {
    let Some(mock) = start_aimock() else {
        return;
    };
    for (name, provider, model, credential) in families(&mock.url) {
        let stream = provider
            .stream(&request(model, "hi", false), Some(&credential))
            .await;
        let events: Vec<_> = stream.unwrap_or_else(|e| panic!("{name}: {e}")).collect().await;
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                Ok(StreamEvent::TextDelta { text }) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "Hello from aimock! How can I help?", "{name}: {events:?}");
        assert!(events.iter().all(Result::is_ok), "{name}: {events:?}");
        assert!(
            events.iter().any(|e| matches!(e, Ok(StreamEvent::Usage { .. }))),
            "{name}: usage"
        );
        let finishes: Vec<_> = events
            .iter()
            .filter(|e| matches!(e, Ok(StreamEvent::Finish { .. })))
            .collect();
        assert_eq!(finishes.len(), 1, "{name}: exactly one finish in {events:?}");
        assert!(
            matches!(
                finishes[0],
                Ok(StreamEvent::Finish {
                    reason: FinishReason::Stop
                })
            ),
            "{name}"
        );
    }
}

#[tokio::test]
async fn every_family_streams_tool_calls_except_codex_which_declines_by_capability() {
    let Some(mock) = start_aimock() else {
        return;
    };
    for (name, provider, model, credential) in families(&mock.url) {
        let result = provider
            .stream(&request(model, "weather in Paris?", true), Some(&credential))
            .await;
        if name == "openai-codex" {
            let err = result.err().unwrap();
            assert_eq!(err.kind, ProviderErrorKind::CapabilityUnsupported);
            continue;
        }
        let events = result.unwrap_or_else(|e| panic!("{name}: {e}"));
        let answer = collect_stream(events)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(answer.tool_calls.len(), 1, "{name}: {answer:?}");
        assert_eq!(answer.tool_calls[0].name, "get_weather");
        assert_eq!(answer.tool_calls[0].arguments["unit"], "celsius", "{name}");
        assert_eq!(answer.finish, Some(FinishReason::ToolCalls), "{name}");
    }
}
