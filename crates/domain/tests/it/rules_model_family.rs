//! Table: provider/model family rules (FORGE-468), from `fixtures/rules/model_family.json`.

use metaforge_domain::providers::{max_tools_for, model_family_mismatch, resolve_provider};
use serde_json::Value;

fn table() -> Vec<Value> {
    metaforge_test_support::cases("model_family")
}

#[test]
fn every_model_family_case_holds() {
    let cases = table();
    assert!(cases.len() >= 20, "need at least 20 cases, have {}", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let provider = case["provider"].as_str().unwrap();
        let model = case["model"].as_str().unwrap();
        match (resolve_provider(provider), case.get("error")) {
            (Err(_), Some(_)) => continue,
            (Err(e), None) => failures.push(format!("{name}: unexpected error {e}")),
            (Ok(_), Some(_)) => failures.push(format!("{name}: expected an unknown-provider error")),
            (Ok(info), None) => {
                let got = model_family_mismatch(info, model);
                let want = case["mismatch"].as_bool().unwrap();
                if got.is_some() != want {
                    failures.push(format!("{name}: mismatch {got:?}, expected {want}"));
                }
                if let (Some(reason), Some(needle)) =
                    (&got, case.get("reason_contains").and_then(Value::as_str))
                    && !reason.contains(needle)
                {
                    failures.push(format!("{name}: reason '{reason}' lacks '{needle}'"));
                }
                if let Some(reason) = &got
                    && !reason.contains(model)
                {
                    failures.push(format!("{name}: reason '{reason}' does not name the model"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn openai_compatible_family_caps_tools_at_128_and_others_are_unbounded() {
    assert_eq!(max_tools_for(resolve_provider("openai").unwrap()), Some(128));
    assert_eq!(max_tools_for(resolve_provider("openrouter").unwrap()), Some(128));
    assert_eq!(max_tools_for(resolve_provider("anthropic").unwrap()), None);
    assert_eq!(max_tools_for(resolve_provider("gemini").unwrap()), None);
    assert_eq!(max_tools_for(resolve_provider("openai-codex").unwrap()), None);
}

#[test]
fn every_seed_provider_id_resolves() {
    for id in [
        "openrouter",
        "openai",
        "deepseek",
        "xai",
        "novita",
        "kimi",
        "moonshot",
        "kimi-cn",
        "zai",
        "glm",
        "alibaba",
        "dashscope",
        "alibaba-coding-plan",
        "minimax",
        "minimax-cn",
        "huggingface",
        "nvidia",
        "arcee",
        "gmi",
        "xiaomi",
        "tencent-tokenhub",
        "opencode-zen",
        "opencode-go",
        "kilocode",
        "stepfun",
        "azure-foundry",
        "ollama",
        "vllm",
        "sglang",
        "llama.cpp",
        "lmstudio",
        "litellm",
        "clawrouter",
        "custom",
        "anthropic",
        "claude",
        "gemini",
        "google-genai",
        "bedrock",
        "openai-codex",
        "codex",
        "google",
        "grok",
    ] {
        assert!(resolve_provider(id).is_ok(), "{id} does not resolve");
    }
}
