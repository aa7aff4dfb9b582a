//! The native tool-calling loop: parallel batches, the duplicate guard, structured errors,
//! truncation, the tool cap, folding, the history budget, and the turn's limits.

use std::time::Duration;

use metaforge_agent::{CancellationToken, LoopMode, TurnConfig, TurnError, TurnEvent, TurnInput};
use metaforge_domain::compaction::ChatTurn;
use metaforge_ports::{ContentPart, LlmRequest, PortError, PortErrorKind, ToolOutput};
use metaforge_test_support::doubles::{FakeToolSource, ScriptStep, descriptor};
use serde_json::{Value, json};

use crate::common::{RigSpec, SLOW, drain, events, names, rig};

fn schema_x() -> Value {
    json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})
}

fn input(user: &str) -> TurnInput {
    TurnInput {
        system: "You are MetaForge.".to_owned(),
        history: Vec::new(),
        user: user.to_owned(),
    }
}

/// The tool results of a request's last message: `(call_id, content, is_error)`.
pub(crate) fn last_results(request: &LlmRequest) -> Vec<(String, String, bool)> {
    request
        .messages
        .last()
        .map(|m| {
            m.content
                .iter()
                .filter_map(|p| match p {
                    ContentPart::ToolResult {
                        call_id,
                        content,
                        is_error,
                        ..
                    } => Some((call_id.clone(), content.clone(), *is_error)),
                    ContentPart::Text { .. } | ContentPart::ToolCall { .. } => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_parallel_batch_runs_concurrently_and_answers_in_call_order() {
    let server = FakeToolSource::new("cad")
        .with_echo(descriptor("slow", schema_x(), true), SLOW)
        .with_echo(descriptor("fast", schema_x(), true), Duration::ZERO);
    let rig = rig(RigSpec::new(
        vec![
            ScriptStep::calls(&[
                ("c1", "mcp_cad_slow", json!({"x": 1})),
                ("c2", "mcp_cad_fast", json!({"x": 2})),
            ]),
            ScriptStep::text("Both read."),
        ],
        server,
    ))
    .await;
    let (sink, mut rx) = events();
    let outcome = rig
        .agent
        .run_turn(
            &TurnConfig::chat("t1"),
            &input("read both"),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    assert_eq!(rig.server.max_concurrency(), 2, "the batch ran in parallel");
    assert_eq!(
        rig.server.finished(),
        ["fast", "slow"],
        "the fast call finished first"
    );
    let requests = rig.llm.requests();
    let results = last_results(&requests[1]);
    assert_eq!(
        results.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["c1", "c2"],
        "results go back in the model's call order"
    );
    assert!(results[0].1.contains("\"x\":1"));
    assert_eq!(outcome.mode, LoopMode::Native);
    assert_eq!(outcome.reply, "Both read.");
    let events = drain(&mut rx);
    assert_eq!(
        names(&events),
        [
            "tool.call",
            "tool.call",
            "tool.result",
            "tool.result",
            "message.delta",
            "agent.done"
        ]
    );
    let TurnEvent::Done { usage } = &events[5] else {
        panic!("last event is agent.done");
    };
    assert_eq!(usage.total.calls, 2);
    assert_eq!(usage.total.prompt_tokens, Some(20));
}

#[tokio::test]
async fn one_failing_call_does_not_cancel_its_siblings() {
    let server = FakeToolSource::new("cad")
        .with_tool(descriptor("broken", schema_x(), true), Duration::ZERO, |_| {
            Err(PortError::new(PortErrorKind::Unavailable, "container down"))
        })
        .with_echo(descriptor("read", schema_x(), true), SLOW);
    let rig = rig(RigSpec::new(
        vec![
            ScriptStep::calls(&[
                ("c1", "mcp_cad_broken", json!({"x": 1})),
                ("c2", "mcp_cad_read", json!({"x": 2})),
            ]),
            ScriptStep::text("One failed."),
        ],
        server,
    ))
    .await;
    let (sink, _rx) = events();
    rig.agent
        .run_turn(
            &TurnConfig::chat("t1"),
            &input("go"),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    let results = last_results(&rig.llm.requests()[1]);
    assert!(results[0].2, "the failure is an error result");
    assert!(
        results[0].1.contains("\"error\":\"unavailable\""),
        "{}",
        results[0].1
    );
    assert!(!results[1].2, "the sibling still ran and succeeded");
}

#[tokio::test]
async fn a_repeated_call_is_served_from_the_turn_cache_and_failures_are_retried() {
    let flaky_calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = flaky_calls.clone();
    let server = FakeToolSource::new("cad")
        .with_echo(descriptor("read", schema_x(), true), Duration::ZERO)
        .with_tool(
            descriptor("flaky", json!({"type": "object"}), true),
            Duration::ZERO,
            move |_| {
                if counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    Ok(ToolOutput::error(json!({"status": "busy"})))
                } else {
                    Ok(ToolOutput::json(json!({"ok": true})))
                }
            },
        );
    let rig = rig(RigSpec::new(
        vec![
            ScriptStep::calls(&[
                ("c1", "mcp_cad_read", json!({"x": 1})),
                ("c2", "mcp_cad_read", json!({"x": 1})),
            ]),
            ScriptStep::calls(&[
                ("c3", "mcp_cad_read", json!({"x": 1})),
                ("c4", "mcp_cad_flaky", json!({})),
            ]),
            ScriptStep::calls(&[("c5", "mcp_cad_flaky", json!({}))]),
            ScriptStep::text("Done."),
        ],
        server,
    ))
    .await;
    let (sink, mut rx) = events();
    let outcome = rig
        .agent
        .run_turn(
            &TurnConfig::chat("t1"),
            &input("go"),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    assert_eq!(
        rig.server.calls_of("read"),
        1,
        "identical reads ran once in the turn"
    );
    assert_eq!(rig.server.calls_of("flaky"), 2, "a failure is never cached");
    let cached: Vec<(&str, bool)> = outcome
        .calls
        .iter()
        .map(|c| (c.call_id.as_str(), c.cached))
        .collect();
    assert_eq!(
        cached,
        [
            ("c1", false),
            ("c2", true),
            ("c3", true),
            ("c4", false),
            ("c5", false)
        ]
    );
    assert!(outcome.calls[1].content.contains("\"cached\":true"));
    assert!(outcome.calls[3].is_error && !outcome.calls[4].is_error);
    let cached_events = drain(&mut rx)
        .into_iter()
        .filter(|e| matches!(e, TurnEvent::ToolResult { cached: true, .. }))
        .count();
    assert_eq!(cached_events, 2);
}

#[tokio::test]
async fn a_failed_calls_server_payload_is_kept_under_details() {
    let server =
        FakeToolSource::new("cad").with_tool(descriptor("export", schema_x(), true), Duration::ZERO, |_| {
            Ok(ToolOutput::error(
                json!({"status": "down", "message": "container stopped", "hint": "stop trying"}),
            ))
        });
    let rig = rig(RigSpec::new(
        vec![
            ScriptStep::calls(&[("c1", "mcp_cad_export", json!({"x": 1}))]),
            ScriptStep::text("It is down."),
        ],
        server,
    ))
    .await;
    let (sink, _rx) = events();
    let outcome = rig
        .agent
        .run_turn(
            &TurnConfig::chat("t1"),
            &input("export"),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    let result = &outcome.calls[0].result;
    assert_eq!(result["error"], "tool_error");
    assert_eq!(result["details"]["status"], "down");
    assert_eq!(result["details"]["hint"], "stop trying");
}

#[tokio::test]
async fn a_long_observation_is_truncated_with_a_marker() {
    let server =
        FakeToolSource::new("cad").with_tool(descriptor("dump", schema_x(), true), Duration::ZERO, |_| {
            Ok(ToolOutput::json(Value::String("y".repeat(5_000))))
        });
    let rig = rig(RigSpec::new(
        vec![
            ScriptStep::calls(&[("c1", "mcp_cad_dump", json!({"x": 1}))]),
            ScriptStep::text("Long."),
        ],
        server,
    ))
    .await;
    let mut config = TurnConfig::chat("t1");
    config.max_observation_chars = 100;
    let (sink, _rx) = events();
    rig.agent
        .run_turn(&config, &input("dump"), &sink, &CancellationToken::new())
        .await
        .expect("turn");
    let results = last_results(&rig.llm.requests()[1]);
    assert!(
        results[0].1.ends_with("…[truncated 4900 chars]"),
        "{}",
        &results[0].1[90..]
    );
}

#[tokio::test]
async fn a_capped_provider_gets_at_most_its_tool_cap() {
    let mut server = FakeToolSource::new("cad");
    for name in ["a", "b", "c", "d"] {
        server = server.with_echo(descriptor(name, schema_x(), true), Duration::ZERO);
    }
    let mut spec = RigSpec::new(vec![ScriptStep::text("Hello.")], server);
    spec.profile.max_tools = Some(2);
    let rig = rig(spec).await;
    let logs = crate::common::LogCapture::start();
    let (sink, _rx) = events();
    rig.agent
        .run_turn(
            &TurnConfig::chat("t1"),
            &input("hi"),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    let request = &rig.llm.requests()[0];
    assert_eq!(request.tools.len(), 2);
    let note = request.system.volatile_suffix.as_deref().unwrap_or_default();
    assert!(note.starts_with("2 tool(s) were left out"), "{note}");
    assert_eq!(
        request.system.stable, "You are MetaForge.",
        "the cached prefix is untouched"
    );
    let logged = logs.events();
    assert!(logged.contains(&("WARN".to_owned(), "tool_schemas_truncated".to_owned())));
    assert!(logged.contains(&("INFO".to_owned(), "chat_tools_dropped".to_owned())));
}

#[tokio::test]
async fn the_iteration_cap_ends_the_turn_with_an_error_naming_it() {
    let server = FakeToolSource::new("cad").with_echo(descriptor("read", schema_x(), true), Duration::ZERO);
    let rig = rig(RigSpec::new(
        vec![
            ScriptStep::calls(&[("c1", "mcp_cad_read", json!({"x": 1}))]),
            ScriptStep::calls(&[("c2", "mcp_cad_read", json!({"x": 2}))]),
            ScriptStep::text("never reached"),
        ],
        server,
    ))
    .await;
    let mut config = TurnConfig::chat("t1");
    config.max_iterations = 2;
    let (sink, mut rx) = events();
    let failure = rig
        .agent
        .run_turn(&config, &input("loop"), &sink, &CancellationToken::new())
        .await
        .expect_err("capped");
    assert_eq!(failure.error, TurnError::IterationCap { limit: 2 });
    assert!(failure.error.to_string().contains("iteration cap of 2"));
    assert_eq!(
        rig.server.calls_of("read"),
        1,
        "the capped step's calls are not run"
    );
    let events = drain(&mut rx);
    let n = events.len();
    assert_eq!(names(&events[n - 2..]), ["notify_error", "agent.done"]);
    assert!(matches!(&events[n - 2], TurnEvent::NotifyError { code, .. } if code == "iteration_cap"));
}

#[tokio::test]
async fn the_token_budget_ends_the_turn_with_an_error_naming_it() {
    let server = FakeToolSource::new("cad").with_echo(descriptor("read", schema_x(), true), Duration::ZERO);
    let rig = rig(RigSpec::new(
        vec![
            ScriptStep::calls(&[("c1", "mcp_cad_read", json!({"x": 1}))]),
            ScriptStep::calls(&[("c2", "mcp_cad_read", json!({"x": 2}))]),
            ScriptStep::text("never reached"),
        ],
        server,
    ))
    .await;
    let mut config = TurnConfig::chat("t1");
    config.token_budget = Some(20);
    let (sink, _rx) = events();
    let failure = rig
        .agent
        .run_turn(&config, &input("loop"), &sink, &CancellationToken::new())
        .await
        .expect_err("over budget");
    assert_eq!(failure.error, TurnError::TokenBudget { limit: 20, used: 30 });
    assert!(failure.error.to_string().contains("token budget of 20"));
    assert_eq!(rig.llm.remaining(), 1, "no model call past the budget");
}

#[tokio::test]
async fn past_sixty_percent_of_the_context_older_exchanges_fold_into_a_synopsis() {
    let server =
        FakeToolSource::new("cad").with_tool(descriptor("dump", schema_x(), true), Duration::ZERO, |a| {
            Ok(ToolOutput::json(json!({"n": a["x"], "blob": "z".repeat(600)})))
        });
    let mut steps: Vec<ScriptStep> = (1..=4)
        .map(|i| ScriptStep::calls(&[(&*format!("c{i}"), "mcp_cad_dump", json!({"x": i}))]))
        .collect();
    steps.push(ScriptStep::text("Folded."));
    let mut spec = RigSpec::new(steps, server);
    spec.profile.context_window_tokens = 800; // trace budget 480 tokens
    let rig = rig(spec).await;
    let (sink, _rx) = events();
    rig.agent
        .run_turn(
            &TurnConfig::chat("t1"),
            &input("dump four"),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    let last = rig.llm.requests().pop().expect("requests");
    let texts: Vec<String> = last
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|p| match p {
            ContentPart::Text { text } => Some(text.clone()),
            ContentPart::ToolCall { .. } | ContentPart::ToolResult { .. } => None,
        })
        .collect();
    assert!(
        texts.iter().any(|t| t.starts_with("[context synopsis]")),
        "older exchanges folded: {texts:?}"
    );
    assert_eq!(texts[0], "dump four", "the user's message is kept");
    assert!(
        last.messages.len() < 9,
        "the request is shorter than the unfolded trace"
    );
}

#[tokio::test]
async fn history_past_its_budget_is_summarised_newest_turns_kept_whole() {
    let server = FakeToolSource::new("cad");
    let rig = rig(RigSpec::new(vec![ScriptStep::text("Hi again.")], server)).await;
    let history: Vec<ChatTurn> = (0..10)
        .map(|i| ChatTurn {
            role: if i % 2 == 0 { "user" } else { "assistant" }.to_owned(),
            content: format!("message {i} {}", "w".repeat(400)),
        })
        .collect();
    let mut config = TurnConfig::chat("t1");
    config.history_tokens = 250;
    let (sink, _rx) = events();
    rig.agent
        .run_turn(
            &config,
            &TurnInput {
                system: String::new(),
                history,
                user: "hello".to_owned(),
            },
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    let request = &rig.llm.requests()[0];
    let ContentPart::Text { text } = &request.messages[0].content[0] else {
        panic!("a text summary leads");
    };
    assert!(text.starts_with("Summary of 8 earlier message(s):"), "{text}");
    assert_eq!(
        request.messages.len(),
        5,
        "summary pair + two newest + the user's message"
    );
}
