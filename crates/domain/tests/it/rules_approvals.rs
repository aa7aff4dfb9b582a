//! Table + properties: the approval state machine (FORGE-89/393/466), from
//! `fixtures/rules/approvals.json`.

#![expect(
    clippy::unwrap_used,
    reason = "fixture helpers: a malformed fixture must fail the test loudly"
)]

use chrono::{Duration, TimeZone, Utc};
use metaforge_domain::approvals::{
    ApprovalError, DecisionRecord, NewHold, Resolution, Verdict, WaiterOutcome, decide, expire_if_overdue,
    orphan_on_restart, park, resolve,
};
use metaforge_ports::{ApprovalKind, ApprovalRecord, ApprovalStatus, Timestamp};
use proptest::prelude::*;
use serde_json::{Value, json};

fn t0() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

fn parked(timeout: Option<u64>) -> ApprovalRecord {
    park(
        NewHold {
            id: "01890000-0000-7000-8000-000000000001".into(),
            kind: ApprovalKind::ToolCall,
            tool: "twin.commit_geometry".into(),
            arguments: json!({"path": "/tmp/a.step", "approver": "the-agent"}),
            caller: "remote".into(),
            flow_version_id: None,
            timeout_seconds: timeout,
        },
        t0(),
    )
}

/// Applies one fixture event; returns the outcome label.
fn apply(record: &mut ApprovalRecord, event: &Value) -> String {
    let now = t0() + Duration::seconds(event["at_s"].as_i64().unwrap());
    match event["op"].as_str().unwrap() {
        "decide" => {
            let decision = DecisionRecord {
                verdict: serde_json::from_value(event["verdict"].clone()).unwrap(),
                approver: event["approver"].as_str().unwrap().to_owned(),
                note: event["note"].as_str().map(str::to_owned),
            };
            match decide(record, &decision, now) {
                Ok(next) => {
                    *record = next;
                    "ok".into()
                }
                Err(ApprovalError::Conflict { state, .. }) => {
                    *record = expire_if_overdue(record, now).0;
                    format!("conflict:{state}")
                }
                Err(ApprovalError::MissingApprover) => "missing_approver".into(),
                Err(other) => format!("error:{other}"),
            }
        }
        "resolve" => {
            let outcome: WaiterOutcome = serde_json::from_value(event["outcome"].clone()).unwrap();
            match resolve(record, outcome, now) {
                Resolution::Closed(next) => {
                    *record = next;
                    "closed".into()
                }
                Resolution::AlreadyClosed(next) => {
                    *record = next;
                    "already_closed".into()
                }
                Resolution::AlreadyDecided(next) => {
                    *record = next;
                    "already_decided".into()
                }
                other => format!("unexpected:{other:?}"),
            }
        }
        "restart" => {
            let before = record.status;
            *record = orphan_on_restart(record, now);
            if before == record.status {
                "unchanged".into()
            } else {
                "orphaned".into()
            }
        }
        "read" => {
            let (next, changed) = expire_if_overdue(record, now);
            *record = next;
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
fn the_approver_comes_from_the_decision_never_from_the_arguments() {
    let record = parked(Some(60));
    let decided = decide(
        &record,
        &DecisionRecord {
            verdict: Verdict::Approve,
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
                    let d = DecisionRecord {
                        verdict: if approve { Verdict::Approve } else { Verdict::Reject },
                        approver: ["alice", "bob", " "][who as usize].into(),
                        note: None,
                    };
                    decide(&record, &d, now).unwrap_or_else(|_| expire_if_overdue(&record, now).0)
                }
                Event::Resolve(timed_out) => {
                    let outcome = if timed_out { WaiterOutcome::TimedOut } else { WaiterOutcome::Canceled };
                    match resolve(&record, outcome, now) {
                        Resolution::Closed(r) | Resolution::AlreadyClosed(r) | Resolution::AlreadyDecided(r) => r,
                        _ => record.clone(),
                    }
                }
                Event::Restart => orphan_on_restart(&record, now),
                Event::Read => expire_if_overdue(&record, now).0,
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
