//! Temporal's own replayer over recorded design-flow histories (issue 17, determinism): each file
//! in `tests/histories/` is a real run on `temporal server start-dev` — one per decision kind
//! (approve through every gate, retry with a reason, rework of an earlier phase, reject, cancel
//! at a gate, cancel mid-phase, gate expiry) — recorded by `runs_temporal`'s
//! `a_history_of_every_decision_kind_recorded_on_temporal_replays_on_this_build` with
//! `METAFORGE_RECORD_HISTORIES=crates/adapters-temporal/tests/histories`. This build's
//! `DesignFlowWorkflow` must issue exactly the recorded commands for every one of them; a change
//! that would decide an in-flight run differently fails here. A history altered to name another
//! activity must fail, so the check is known to be able to fail.
//!
//! No server is needed: the replayer feeds the recorded events to the workflow in-process.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "tests: a failure must stop the test loudly"
)]

use std::path::PathBuf;

use metaforge_adapters_temporal::replay::{ReplayVerdict, history_from_json, replay};

/// Every decision kind the recordings cover.
const KINDS: [&str; 7] = [
    "approve",
    "retry",
    "rework",
    "reject",
    "cancel_at_gate",
    "cancel_mid_phase",
    "gate_expired",
];

fn histories_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/histories")
}

fn recorded(kind: &str) -> String {
    std::fs::read_to_string(histories_dir().join(format!("{kind}.json")))
        .unwrap_or_else(|e| panic!("the recorded {kind} history: {e}"))
}

fn replay_texts(texts: Vec<(String, String)>) -> Vec<ReplayVerdict> {
    let histories = texts
        .into_iter()
        .map(|(name, text)| {
            let history = history_from_json(&name, text.as_bytes()).unwrap();
            (name, history)
        })
        .collect();
    // The SDK's replay worker is not Send: one current-thread runtime.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(replay(histories))
        .unwrap()
}

#[test]
fn every_recorded_decision_kind_replays_deterministically_on_this_build() {
    let verdicts = replay_texts(
        KINDS
            .iter()
            .map(|kind| ((*kind).to_owned(), recorded(kind)))
            .collect(),
    );
    assert_eq!(verdicts.len(), KINDS.len());
    for verdict in &verdicts {
        println!(
            "{}: {} events, {:?}",
            verdict.source_name, verdict.events, verdict.failure
        );
        assert!(verdict.events > 10, "a whole run was recorded: {verdict:?}");
        assert_eq!(verdict.failure, None, "{} replays", verdict.source_name);
    }
}

#[test]
fn a_history_that_names_another_activity_than_the_workflow_schedules_is_nondeterministic() {
    let original = recorded("approve");
    let altered = original.replacen(
        "\"PhaseActivities::run_phase\"",
        "\"PhaseActivities::other_phase\"",
        1,
    );
    assert_ne!(altered, original, "the recording schedules run_phase");
    let verdicts = replay_texts(vec![("altered".to_owned(), altered)]);
    let failure = verdicts[0].failure.clone().unwrap_or_default();
    assert!(
        failure.contains("nondeterministic"),
        "the replayer caught the difference: {verdicts:?}"
    );
}

#[test]
fn a_file_that_is_not_a_history_is_refused_by_name() {
    let refused = history_from_json("notes.json", b"{\"not\": \"a history\"}");
    let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("notes.json is not a Temporal workflow history"),
        "{message}"
    );
}
