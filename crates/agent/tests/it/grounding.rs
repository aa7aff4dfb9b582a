//! Grounding on every final reply.

use std::time::Duration;

use metaforge_agent::{CancellationToken, TurnConfig, TurnEvent, TurnInput};
use metaforge_domain::grounding::UNGROUNDED_BANNER;
use metaforge_ports::ToolOutput;
use metaforge_test_support::doubles::{FakeToolSource, ScriptStep, descriptor};
use serde_json::json;

use crate::common::{LogCapture, RigSpec, drain, events, rig};

fn input() -> TurnInput {
    TurnInput {
        system: "You are MetaForge.".to_owned(),
        history: Vec::new(),
        user: "commit the bracket".to_owned(),
    }
}

const NODE: &str = "0190a6f2-1c2b-7d3e-8f40-123456789abc";

fn twin() -> FakeToolSource {
    FakeToolSource::new("twin").with_tool(
        descriptor("commit_geometry", json!({"type": "object"}), false),
        Duration::ZERO,
        |_| Ok(ToolOutput::json(json!({"node_id": NODE}))),
    )
}

#[tokio::test]
async fn a_fabricated_completion_claim_gets_the_banner() {
    let rig = rig(RigSpec::new(
        vec![ScriptStep::text(
            "I created the bracket and committed it to the twin.",
        )],
        twin(),
    ))
    .await;
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _metrics = metrics::set_default_local_recorder(&recorder);
    let logs = LogCapture::start();
    let (sink, mut rx) = events();
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
    assert!(outcome.grounding.flagged);
    assert!(outcome.reply.starts_with(UNGROUNDED_BANNER), "{}", outcome.reply);
    let shown = drain(&mut rx)
        .into_iter()
        .find_map(|e| match e {
            TurnEvent::MessageDelta { text } => Some(text),
            _ => None,
        })
        .expect("message");
    assert!(shown.starts_with(UNGROUNDED_BANNER), "the person sees the banner");
    assert!(
        logs.events()
            .contains(&("WARN".to_owned(), "chat_ungrounded_claim".to_owned()))
    );
    let counted: Vec<(String, String)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "metaforge_chat_ungrounded_claim_total")
        .map(|(key, _, _, value)| {
            let kind = key
                .key()
                .labels()
                .find(|l| l.key() == "kind")
                .map(|l| l.value().to_owned());
            (kind.unwrap_or_default(), format!("{value:?}"))
        })
        .collect();
    assert_eq!(counted, [("no_tool_call".to_owned(), "Counter(1)".to_owned())]);
}

#[tokio::test]
async fn a_real_commit_gets_no_banner() {
    let rig = rig(RigSpec::new(
        vec![
            ScriptStep::calls(&[("c1", "mcp_twin_commit_geometry", json!({"name": "bracket"}))]),
            ScriptStep::text(format!("Committed the bracket to the twin as node id {NODE}.")),
        ],
        twin(),
    ))
    .await;
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
    assert!(!outcome.grounding.flagged, "{:?}", outcome.grounding);
    assert_eq!(
        outcome.reply,
        format!("Committed the bracket to the twin as node id {NODE}.")
    );
}

#[tokio::test]
async fn a_quoted_node_id_no_call_returned_is_flagged() {
    let rig = rig(RigSpec::new(
        vec![
            ScriptStep::calls(&[("c1", "mcp_twin_commit_geometry", json!({"name": "bracket"}))]),
            ScriptStep::text("Committed the bracket to the twin as node id assembly_4."),
        ],
        twin(),
    ))
    .await;
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
    assert_eq!(outcome.grounding.unverified_ids, ["assembly_4"]);
}
