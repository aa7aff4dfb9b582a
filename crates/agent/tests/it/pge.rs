//! Planner → Generator → Evaluator.

use std::time::Duration;

use metaforge_agent::{CancellationToken, PgeConfig, TurnConfig, TurnEvent, Verdict, parse_evaluation};
use metaforge_ports::{ContentPart, UsageStore};
use metaforge_test_support::doubles::{FakeToolSource, ScriptStep, descriptor};
use serde_json::json;

use crate::common::{LogCapture, RigSpec, drain, events, names, rig};

fn config(max_iterations: usize) -> PgeConfig {
    PgeConfig {
        turn: TurnConfig::chat("run-1"),
        max_iterations,
    }
}

fn server() -> FakeToolSource {
    FakeToolSource::new("cad").with_echo(
        descriptor("read", json!({"type": "object"}), true),
        Duration::ZERO,
    )
}

#[tokio::test]
async fn the_evaluator_runs_on_a_second_provider_and_passes_the_result() {
    let mut spec = RigSpec::new(
        vec![
            ScriptStep::text("1. read the part"),
            ScriptStep::calls(&[("c1", "mcp_cad_read", json!({}))]),
            ScriptStep::text("The part is 10 mm."),
        ],
        server(),
    );
    spec.second_steps = vec![ScriptStep::text(r#"{"passed": true, "findings": []}"#)];
    let rig = rig(spec).await;
    let (sink, mut rx) = events();
    let outcome = rig
        .agent
        .run_pge(
            &config(3),
            "You are MetaForge.",
            "measure the part",
            &sink,
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(outcome.verdict, Verdict::Passed);
    assert_eq!(outcome.iterations, 1);
    assert_eq!(outcome.plan.as_deref(), Some("1. read the part"));
    assert_eq!(outcome.generator_provider.as_deref(), Some("openai"));
    assert_eq!(
        outcome.evaluator_provider.as_deref(),
        Some("anthropic"),
        "bias independence"
    );
    assert_eq!(rig.second.requests().len(), 1);
    let usage = outcome.usage();
    for role in ["planner", "generator", "evaluator"] {
        assert!(usage.by_role.contains_key(role), "usage attributed to {role}");
    }
    assert_eq!(usage.by_model.len(), 2, "two providers served");
    let events = drain(&mut rx);
    assert_eq!(names(&events).iter().filter(|n| **n == "agent.done").count(), 1);
    assert_eq!(events.last().map(TurnEvent::name), Some("agent.done"));
}

#[tokio::test]
async fn the_run_is_exhausted_after_the_cap_with_the_evaluators_findings() {
    let mut spec = RigSpec::new(
        vec![
            ScriptStep::text("1. draw the bracket"),
            ScriptStep::text("Here is a bracket."),
            ScriptStep::text("Here is a better bracket."),
        ],
        server(),
    );
    spec.second_steps = vec![
        ScriptStep::text(r#"{"passed": false, "findings": ["the bolt hole is missing"]}"#),
        ScriptStep::text(r#"{"passed": false, "findings": ["the bolt hole is still missing"]}"#),
    ];
    let rig = rig(spec).await;
    let (sink, _rx) = events();
    let outcome = rig
        .agent
        .run_pge(
            &config(2),
            "",
            "design a bracket",
            &sink,
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(outcome.verdict, Verdict::Exhausted);
    assert_eq!(outcome.iterations, 2);
    assert_eq!(outcome.findings, ["the bolt hole is still missing"]);
    let second_round = &rig.llm.requests()[2];
    let ContentPart::Text { text } = &second_round.messages[0].content[0] else {
        panic!("text");
    };
    assert!(
        text.contains("- the bolt hole is missing"),
        "findings go back to the generator: {text}"
    );
}

#[tokio::test]
async fn a_failed_model_call_makes_the_run_errored() {
    let rig = rig(RigSpec::new(Vec::new(), server())).await;
    let (sink, mut rx) = events();
    let outcome = rig
        .agent
        .run_pge(&config(2), "", "anything", &sink, &CancellationToken::new())
        .await;
    assert_eq!(outcome.verdict, Verdict::Errored);
    assert!(
        outcome.findings[0].contains("exhausted"),
        "{:?}",
        outcome.findings
    );
    assert_eq!(names(&drain(&mut rx)), ["notify_error", "agent.done"]);
}

#[test]
fn an_evaluator_reply_that_is_not_a_verdict_never_passes() {
    let evaluation = parse_evaluation("Looks great to me!");
    assert!(!evaluation.passed);
    assert!(evaluation.findings[0].contains("not a verdict"));
    let evaluation = parse_evaluation("Verdict: {\"passed\": true, \"findings\": []}");
    assert!(evaluation.passed);
}

#[tokio::test]
async fn without_a_second_provider_the_evaluator_shares_the_generators_and_says_so() {
    let mut spec = RigSpec::new(
        vec![
            ScriptStep::text("1. answer"),
            ScriptStep::text("42."),
            ScriptStep::text(r#"{"passed": true, "findings": []}"#),
        ],
        server(),
    );
    spec.second_evaluator = false;
    let rig = rig(spec).await;
    let logs = LogCapture::start();
    let (sink, _rx) = events();
    let outcome = rig
        .agent
        .run_pge(&config(1), "", "answer", &sink, &CancellationToken::new())
        .await;
    assert_eq!(outcome.verdict, Verdict::Passed);
    assert_eq!(outcome.evaluator_provider.as_deref(), Some("openai"));
    assert!(
        logs.events()
            .contains(&("WARN".to_owned(), "evaluator_provider_not_independent".to_owned())),
        "{:?}",
        logs.events()
    );
}

/// (phase, role, caller, provider) of one usage event.
type Scope<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>, &'a str);

#[tokio::test]
async fn every_model_call_is_recorded_with_its_run_phase_role_and_caller() {
    let mut spec = RigSpec::new(
        vec![ScriptStep::text("1. answer"), ScriptStep::text("42.")],
        server(),
    );
    spec.second_steps = vec![ScriptStep::text(r#"{"passed": true, "findings": []}"#)];
    let rig = rig(spec).await;
    let mut config = config(1);
    config.turn.run_id = Some("run-7".to_owned());
    config.turn.phase = Some("design".to_owned());
    let (sink, _rx) = events();
    rig.agent
        .run_pge(&config, "", "answer", &sink, &CancellationToken::new())
        .await;
    let recorded = rig.usage.events_for_run("run-7").await.expect("events");
    let scopes: Vec<Scope<'_>> = recorded
        .iter()
        .map(|e| {
            (
                e.phase.as_deref(),
                e.role.as_deref(),
                e.caller.as_deref(),
                e.provider.as_str(),
            )
        })
        .collect();
    assert_eq!(
        scopes,
        [
            (Some("design"), Some("planner"), Some("local"), "openai"),
            (Some("design"), Some("generator"), Some("local"), "openai"),
            (Some("design"), Some("evaluator"), Some("local"), "anthropic"),
        ]
    );
    assert_eq!(
        recorded[0].prompt_tokens,
        Some(10),
        "usage normalised by the domain"
    );
}
