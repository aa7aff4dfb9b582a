//! Table + properties: the approval state machine (FORGE-89/393/466) on the ledger's record type,
//! from `fixtures/rules/approvals.json`. Every ledger engine and double computes transitions with
//! these methods, so this table pins what every engine does.

#![expect(
    clippy::unwrap_used,
    reason = "fixture helpers: a malformed fixture must fail the test loudly"
)]

use chrono::{Duration, TimeZone, Utc};
use metaforge_ports::{
    ApprovalDecision, ApprovalKind, ApprovalRecord, ApprovalStatus, PortErrorKind, ResolveOutcome, Timestamp,
    WaiterResolution, hold_deadline,
};
use proptest::prelude::*;
use serde_json::{Value, json};

fn t0() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

fn parked(timeout: Option<u64>) -> ApprovalRecord {
    let record = ApprovalRecord {
        id: "01890000-0000-7000-8000-000000000001".into(),
        kind: ApprovalKind::ToolCall,
        tool: "twin.commit_geometry".into(),
        arguments: json!({"path": "/tmp/a.step", "approver": "the-agent"}),
        caller: "remote".into(),
        status: ApprovalStatus::AwaitingApproval,
        reason: None,
        approver: None,
        flow_version_id: None,
        created_at: t0(),
        decided_at: None,
        deadline: hold_deadline(t0(), timeout).unwrap(),
        requested_by: None,
    };
    record.check_new().unwrap();
    record
}

/// The record after a read at `now` (a read expires an overdue hold).
fn read(record: &ApprovalRecord, now: Timestamp) -> ApprovalRecord {
    record.expired(now).unwrap_or_else(|| record.clone())
}

/// Applies one fixture event; returns the outcome label.
fn apply(record: &mut ApprovalRecord, event: &Value) -> String {
    let now = t0() + Duration::seconds(event["at_s"].as_i64().unwrap());
    match event["op"].as_str().unwrap() {
        "decide" => {
            let decision = ApprovalDecision {
                approve: event["verdict"].as_str().unwrap() == "approve",
                approver: event["approver"].as_str().unwrap().to_owned(),
                note: event["note"].as_str().map(str::to_owned),
            };
            match record.decided(&decision, now) {
                Ok(next) => {
                    *record = next;
                    "ok".into()
                }
                Err(err) if err.kind == PortErrorKind::Conflict => {
                    *record = read(record, now);
                    format!("conflict:{}", record.status.as_str())
                }
                Err(err) if err.kind == PortErrorKind::Invalid => "missing_approver".into(),
                Err(other) => format!("error:{other}"),
            }
        }
        "resolve" => {
            let outcome: WaiterResolution = serde_json::from_value(event["outcome"].clone()).unwrap();
            let reason = event.get("reason").and_then(Value::as_str).map(str::to_owned);
            match record.resolved(outcome, reason, now) {
                Ok(ResolveOutcome::Resolved { record: next }) => {
                    *record = next;
                    "closed".into()
                }
                Ok(ResolveOutcome::AlreadyClosed { record: next }) => {
                    *record = next;
                    "already_closed".into()
                }
                Err(err) if err.kind == PortErrorKind::Conflict => "already_decided".into(),
                Err(other) => format!("error:{other}"),
            }
        }
        "restart" => {
            let before = record.status;
            *record = read(record, now);
            *record = record.orphaned(now).unwrap_or_else(|| record.clone());
            if before == record.status {
                "unchanged".into()
            } else {
                "orphaned".into()
            }
        }
        "read" => {
            let next = record.expired(now);
            let changed = next.is_some();
            *record = next.unwrap_or_else(|| record.clone());
            if changed {
                "expired".into()
            } else {
                "unchanged".into()
            }
        }
        other => format!("unknown op {other}"),
    }
}

#[test]
fn every_approval_case_holds() {
    let mut failures = Vec::new();
    for case in &metaforge_test_support::cases::<Value>("approvals") {
        let name = case["name"].as_str().unwrap();
        let mut record = parked(case["timeout_seconds"].as_u64());
        let outcomes: Vec<String> = case["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| apply(&mut record, e))
            .collect();
        let expect = &case["expect"];
        if record.status.as_str() != expect["status"].as_str().unwrap() {
            failures.push(format!(
                "{name}: status {}, expected {}",
                record.status.as_str(),
                expect["status"]
            ));
        }
        if let Some(needle) = expect.get("reason_contains").and_then(Value::as_str)
            && !record.reason.as_deref().unwrap_or_default().contains(needle)
        {
            failures.push(format!("{name}: reason {:?} lacks '{needle}'", record.reason));
        }
        if let Some(approver) = expect.get("approver")
            && record.approver.as_deref() != approver.as_str()
        {
            failures.push(format!(
                "{name}: approver {:?}, expected {approver}",
                record.approver
            ));
        }
        if let Some(want) = expect.get("outcomes") {
            let want: Vec<String> = serde_json::from_value(want.clone()).unwrap();
            if outcomes != want {
                failures.push(format!("{name}: outcomes {outcomes:?}, expected {want:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_deadline_is_the_timeout_plus_thirty_seconds() {
    assert_eq!(parked(Some(1800)).deadline, Some(t0() + Duration::seconds(1830)));
    assert_eq!(parked(None).deadline, None);
}

#[test]
fn a_timeout_over_a_week_is_refused_never_clamped() {
    let err = hold_deadline(t0(), Some(604_801)).unwrap_err();
    assert_eq!(err.kind, PortErrorKind::Invalid);
    assert!(err.message.contains("timeout_seconds"), "{err}");
    assert!(hold_deadline(t0(), Some(604_800)).unwrap().is_some());
}

#[test]
fn the_approver_comes_from_the_decision_never_from_the_arguments() {
    let record = parked(Some(60));
    let decided = record
        .decided(
            &ApprovalDecision {
                approve: true,
                approver: "alice".into(),
                note: None,
            },
            t0(),
        )
        .unwrap();
    assert_eq!(decided.approver.as_deref(), Some("alice"));
    assert_eq!(decided.arguments["approver"], "the-agent");
}

#[derive(Debug, Clone)]
enum Event {
    Decide(bool, u8),
    Resolve(bool),
    Restart,
    Read,
}

fn arb_event() -> impl Strategy<Value = (Event, i64)> {
    (
        prop_oneof![
            (any::<bool>(), 0u8..3).prop_map(|(a, who)| Event::Decide(a, who)),
            any::<bool>().prop_map(Event::Resolve),
            Just(Event::Restart),
            Just(Event::Read),
        ],
        0i64..200,
    )
}

proptest! {
    #[test]
    fn a_decided_hold_stays_decided_and_the_first_decision_wins(
        events in prop::collection::vec(arb_event(), 0..25), timeout in prop::option::of(0u64..120)
    ) {
        let mut record = parked(timeout);
        let mut first_final: Option<(ApprovalStatus, Option<String>, Option<String>)> = None;
        let mut clock = 0i64;
        for (event, step) in events {
            clock += step;
            let now = t0() + Duration::seconds(clock);
            record = match event {
                Event::Decide(approve, who) => {
                    let d = ApprovalDecision {
                        approve,
                        approver: ["alice", "bob", " "][who as usize].into(),
                        note: None,
                    };
                    record.decided(&d, now).unwrap_or_else(|_| read(&record, now))
                }
                Event::Resolve(timed_out) => {
                    let outcome = if timed_out { WaiterResolution::TimedOut } else { WaiterResolution::Canceled };
                    match record.resolved(outcome, Some("closed by the waiter".into()), now) {
                        Ok(ResolveOutcome::Resolved { record: r } | ResolveOutcome::AlreadyClosed { record: r }) => r,
                        Err(_) => read(&record, now),
                    }
                }
                Event::Restart => {
                    let current = read(&record, now);
                    current.orphaned(now).unwrap_or(current)
                }
                Event::Read => read(&record, now),
            };
            match &first_final {
                None if record.status.is_final() => {
                    prop_assert!(record.decided_at.is_some());
                    first_final = Some((record.status, record.approver.clone(), record.reason.clone()));
                }
                None => prop_assert!(record.approver.is_none()),
                Some((status, approver, reason)) => {
                    prop_assert_eq!(record.status, *status);
                    prop_assert_eq!(&record.approver, approver);
                    prop_assert_eq!(&record.reason, reason);
                }
            }
        }
    }
}

#[test]
fn a_gate_hold_survives_a_restart_and_refuses_a_generic_decision() {
    let mut gate = parked(None);
    gate.id = "gate:r-1:design:1".into();
    gate.kind = ApprovalKind::Gate;
    gate.arguments = json!({"run_id": "r-1", "phase": "design"});
    assert_eq!(
        gate.orphaned(t0()),
        None,
        "its engine resumes the run parked at it"
    );
    let refused = gate.check_generic_decision().unwrap_err();
    assert_eq!(refused.kind, PortErrorKind::Conflict);
    let source = refused
        .source
        .as_deref()
        .and_then(|s| s.downcast_ref::<metaforge_ports::GateDecisionRefused>())
        .unwrap();
    assert_eq!(source.code(), metaforge_ports::GATE_DECISION_REFUSED_CODE);
    assert_eq!((source.run_id.as_str(), source.phase.as_str()), ("r-1", "design"));
    assert!(refused.message.contains("run r-1"), "{}", refused.message);

    let tool_call = parked(None);
    assert!(tool_call.check_generic_decision().is_ok());
    assert!(
        tool_call.orphaned(t0()).is_some(),
        "other kinds are still orphaned"
    );
}
