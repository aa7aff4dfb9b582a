//! The JSON-ReAct loop for a model without native tool calls.

use std::time::Duration;

use metaforge_agent::{CancellationToken, LoopMode, TurnConfig, TurnInput};
use metaforge_ports::{ContentPart, LlmRole};
use metaforge_test_support::doubles::{FakeToolSource, ScriptStep, descriptor};
use serde_json::json;

use crate::common::{RigSpec, events, profile, rig};

fn input() -> TurnInput {
    TurnInput {
        system: "You are MetaForge.".to_owned(),
        history: Vec::new(),
        user: "read part 1".to_owned(),
    }
}

fn server() -> FakeToolSource {
    FakeToolSource::new("cad").with_echo(
        descriptor(
            "read",
            json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}),
            true,
        ),
        Duration::ZERO,
    )
}

#[tokio::test]
async fn a_model_without_native_tools_runs_the_react_loop_one_call_per_step() {
    let mut spec = RigSpec::new(
        vec![
            ScriptStep::text(
                r#"Thinking. {"thought": "need the part", "action": "mcp_cad_read", "action_input": {"x": 1}}"#,
            ),
            ScriptStep::text("```json\n{\"thought\": \"got it\", \"final_answer\": \"Part 1 read.\"}\n```"),
        ],
        server(),
    );
    spec.profile = profile("openai", false);
    let rig = rig(spec).await;
    let (sink, _rx) = events();
    let outcome = rig
        .agent
        .run_turn(
            &TurnConfig::chat("t1"),
            &input(),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    assert_eq!(outcome.mode, LoopMode::React);
    assert_eq!(outcome.reply, "Part 1 read.");
    assert_eq!(rig.server.calls_of("read"), 1);
    let requests = rig.llm.requests();
    assert!(requests[0].tools.is_empty(), "no native tools array");
    assert!(
        requests[0].system.stable.contains("- mcp_cad_read:"),
        "tools described in the prompt"
    );
    let last = requests[1].messages.last().expect("observation");
    assert_eq!(last.role, LlmRole::User);
    let ContentPart::Text { text } = &last.content[0] else {
        panic!("a text observation");
    };
    assert!(text.starts_with("Observation: {"), "{text}");
}

#[tokio::test]
async fn the_react_loop_keeps_the_duplicate_guard_and_schema_validation() {
    let mut spec = RigSpec::new(
        vec![
            ScriptStep::text(r#"{"action": "mcp_cad_read", "action_input": {"x": 1}}"#),
            ScriptStep::text(r#"{"action": "mcp_cad_read", "action_input": {"x": 1}}"#),
            ScriptStep::text(r#"{"action": "mcp_cad_read", "action_input": {"x": "one"}}"#),
            ScriptStep::text(r#"{"final_answer": "Read it."}"#),
        ],
        server(),
    );
    spec.profile = profile("openai", false);
    let rig = rig(spec).await;
    let (sink, _rx) = events();
    let outcome = rig
        .agent
        .run_turn(
            &TurnConfig::chat("t1"),
            &input(),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    assert_eq!(rig.server.calls_of("read"), 1);
    assert!(outcome.calls[1].cached);
    assert_eq!(outcome.calls[2].result["error"], "invalid_arguments");
}

#[tokio::test]
async fn configuration_can_force_the_react_loop_on_a_native_model() {
    let rig = rig(RigSpec::new(
        vec![ScriptStep::text(r#"{"final_answer": "Hello."}"#)],
        server(),
    ))
    .await;
    let mut config = TurnConfig::chat("t1");
    config.mode = LoopMode::React;
    let (sink, _rx) = events();
    let outcome = rig
        .agent
        .run_turn(&config, &input(), &sink, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.mode, LoopMode::React);
    assert_eq!(outcome.reply, "Hello.");
    assert!(rig.llm.requests()[0].tools.is_empty());
}
