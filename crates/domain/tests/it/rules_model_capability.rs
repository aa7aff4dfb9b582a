//! Table: what the agent loop chooses from — native tool calls or JSON-ReAct, the context window
//! and the tool cap — from `fixtures/rules/model_capability.json`.

use metaforge_domain::providers::{
    DEFAULT_CONTEXT_WINDOW_TOKENS, context_window_tokens, model_capability, native_tools_enabled,
    resolve_provider,
};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    provider: String,
    model: String,
    native_tools: bool,
    context_window_tokens: usize,
    max_tools: Option<usize>,
}

#[test]
fn every_model_capability_case_holds() {
    let cases: Vec<Case> = metaforge_test_support::cases("model_capability");
    assert!(cases.len() >= 30, "need at least 30 cases, have {}", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let provider = resolve_provider(&case.provider).unwrap();
        let got = model_capability(provider, &case.model);
        if got.native_tools != case.native_tools {
            failures.push(format!(
                "{}: native_tools {}, expected {}",
                case.name, got.native_tools, case.native_tools
            ));
        }
        if got.context_window_tokens != case.context_window_tokens {
            failures.push(format!(
                "{}: context window {}, expected {}",
                case.name, got.context_window_tokens, case.context_window_tokens
            ));
        }
        if got.max_tools != case.max_tools {
            failures.push(format!(
                "{}: max_tools {:?}, expected {:?}",
                case.name, got.max_tools, case.max_tools
            ));
        }
        assert_eq!(got.native_tools, native_tools_enabled(provider, &case.model));
        assert_eq!(got.context_window_tokens, context_window_tokens(&case.model));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_family_of_the_workspace_speaks_native_tools_to_a_tool_model() {
    for (provider, model) in [
        ("openai", "gpt-4o"),
        ("anthropic", "claude-sonnet-4-5"),
        ("gemini", "gemini-2.5-flash"),
        ("bedrock", "anthropic.claude-3-haiku-20240307-v1:0"),
        ("openai-codex", "gpt-5-codex"),
    ] {
        assert!(
            native_tools_enabled(resolve_provider(provider).unwrap(), model),
            "{provider}:{model} should speak native tools"
        );
    }
}

#[test]
fn an_unknown_model_gets_the_conservative_default_window() {
    assert_eq!(
        context_window_tokens("zzz-unknown"),
        DEFAULT_CONTEXT_WINDOW_TOKENS
    );
    assert_eq!(context_window_tokens(""), DEFAULT_CONTEXT_WINDOW_TOKENS);
    assert_eq!(DEFAULT_CONTEXT_WINDOW_TOKENS, 8_192);
}
