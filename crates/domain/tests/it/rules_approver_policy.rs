//! Table: who may answer a hold — four eyes and the waiter's resolve — from
//! `fixtures/rules/approver_policy.json`.

use chrono::{TimeZone, Utc};
use metaforge_domain::approvals::{
    ApprovalError, ApproverPolicy, check_approver, check_waiter_identity, check_waiter_may_resolve,
};
use metaforge_ports::{ApprovalKind, ApprovalRecord, ApprovalStatus};
use serde_json::{Value, json};

fn parked(_timeout: Option<u64>) -> ApprovalRecord {
    ApprovalRecord {
        id: "01890000-0000-7000-8000-000000000001".into(),
        kind: ApprovalKind::ToolCall,
        tool: "twin.commit_geometry".into(),
        arguments: json!({}),
        caller: "remote".into(),
        status: ApprovalStatus::AwaitingApproval,
        reason: None,
        approver: None,
        flow_version_id: None,
        created_at: Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap(),
        decided_at: None,
        deadline: None,
        requested_by: None,
    }
}

/// Four eyes and who may close a hold, from `fixtures/rules/approver_policy.json`.
#[test]
fn every_approver_policy_case_holds() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/rules/approver_policy.json"
    ))
    .unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let label = |result: Result<(), ApprovalError>| match result {
        Ok(()) => "ok".to_owned(),
        Err(ApprovalError::SameApprover { .. }) => "same_approver".to_owned(),
        Err(ApprovalError::MissingApprover) => "missing_approver".to_owned(),
        Err(ApprovalError::PersonDecisionRequired { .. }) => "person_decision_required".to_owned(),
        Err(ApprovalError::NotTheWaiter { .. }) => "not_the_waiter".to_owned(),
    };
    let mut failures = Vec::new();
    for case in doc["decide"].as_array().unwrap() {
        let mut record = parked(Some(60));
        record.kind = serde_json::from_value(case["kind"].clone()).unwrap();
        record.caller = case["caller"].as_str().unwrap().to_owned();
        record.requested_by = case
            .get("requested_by")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let policy = ApproverPolicy::from_setting(case["policy"].as_str()).unwrap();
        let got = label(check_approver(
            &record,
            case["approver"].as_str().unwrap(),
            policy,
        ));
        if got != case["expect"].as_str().unwrap() {
            failures.push(format!("{}: {got}", case["name"]));
        }
    }
    for case in doc["waiter_resolve"].as_array().unwrap() {
        let mut record = parked(Some(60));
        record.kind = serde_json::from_value(case["kind"].clone()).unwrap();
        let got = label(check_waiter_may_resolve(&record));
        if got != case["expect"].as_str().unwrap() {
            failures.push(format!("waiter on {}: {got}", case["kind"]));
        }
    }
    for case in doc["waiter_identity"].as_array().unwrap() {
        let mut record = parked(Some(60));
        record.requested_by = case
            .get("requested_by")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let got = label(check_waiter_identity(&record, case["caller"].as_str().unwrap()));
        if got != case["expect"].as_str().unwrap() {
            failures.push(format!("{}: {got}", case["name"]));
        }
    }
    for case in doc["settings"].as_array().unwrap() {
        let got = match ApproverPolicy::from_setting(case["value"].as_str()) {
            Ok(ApproverPolicy::Any) => "any",
            Ok(ApproverPolicy::Separate) => "separate",
            Err(_) => "error",
        };
        if got != case["expect"].as_str().unwrap() {
            failures.push(format!("setting {}: {got}", case["value"]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
