//! The run value types' wire shapes: what the approval route, `flow.await_gate`, the run ledger
//! and a replaying engine read and write. A rename here breaks stored runs, so it is pinned.

use metaforge_ports::{
    GateDecision, GateDecisionKind, PhaseFailureKind, RunCommand, RunEvent, RunSettings, client_task_id,
    phase_attempt_key,
};
use serde_json::json;

/// A gate decision is `{"decision": …}` with the reason (and a rework's phase) beside it.
#[test]
fn gate_decisions_read_as_a_tagged_object_with_their_reason() {
    let rework: GateDecision =
        serde_json::from_value(json!({"decision": "rework", "phase": "design", "reason": "safety factor"}))
            .unwrap();
    assert_eq!(rework.kind(), GateDecisionKind::Rework);
    assert_eq!(rework.reason(), Some("safety factor"));
    let approve: GateDecision = serde_json::from_value(json!({"decision": "approve"})).unwrap();
    assert_eq!(
        serde_json::to_value(&approve).unwrap(),
        json!({"decision": "approve"})
    );
    assert!(serde_json::from_value::<GateDecision>(json!({"decision": "retry"})).is_err());
    assert!(serde_json::from_value::<GateDecision>(json!({"decision": "maybe"})).is_err());
}

/// Events and commands carry their name as `event`/`command`, so a stored transition says what
/// it was without the reader knowing the Rust type.
#[test]
fn events_and_commands_are_tagged_with_their_snake_case_name() {
    let event: RunEvent = serde_json::from_value(json!({
        "event": "phase_failed", "flow_version_id": "v1", "phase": "design", "attempt": 2,
        "failure": "configuration", "reason": "no key", "at": "2026-01-01T00:00:00Z"
    }))
    .unwrap();
    assert_eq!(event.name(), "phase_failed");
    assert!(matches!(
        event,
        RunEvent::PhaseFailed {
            failure: PhaseFailureKind::Configuration,
            ..
        }
    ));
    let command = RunCommand::CompleteRun { run_id: "r".into() };
    assert_eq!(
        serde_json::to_value(&command).unwrap(),
        json!({"command": "complete_run", "run_id": "r"})
    );
}

/// A phase attempt's key is the client task id, so a re-run finds the task the first one posted.
#[test]
fn the_phase_attempt_key_is_the_client_task_id() {
    assert_eq!(phase_attempt_key("run-1", "design", 2), "run-1:design:2");
    assert_eq!(phase_attempt_key("r", "p", 1), client_task_id("r", "p", 1));
}

/// Runs default to the seed's three retries and a bounded rework loop, with no gate deadline.
#[test]
fn run_settings_default_to_three_retries_and_a_rework_cap() {
    let settings = RunSettings::default();
    assert_eq!(settings.phase_retries, 3);
    assert_eq!(settings.rework_cap, RunSettings::DEFAULT_REWORK_CAP);
    assert_eq!(settings.gate_timeout_seconds, None);
}
