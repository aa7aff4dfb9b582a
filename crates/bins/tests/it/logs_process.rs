//! Logs as an operator reads them: human lines by default, JSON with `METAFORGE_LOG_FORMAT=json`,
//! a person's decision logged with approver, item and decision, library chatter kept out.

#![expect(
    clippy::expect_used,
    reason = "test helpers: a process that does not start must fail the test loudly"
)]

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use serde_json::{Value, json};

use crate::common::{banner_address, http, server_command, wait_until_listening};

/// Starts `metaforge gateway` with `vars`, proposes a flow and approves it as `ops`, stops the
/// gateway and returns what it wrote on stderr and the approval id.
fn decide_once(vars: &[(&str, &str)]) -> (String, String) {
    let home = tempfile::tempdir().expect("tempdir");
    let log_path = home.path().join("stderr.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut command = server_command(&["gateway", "--bind", "127.0.0.1:0"], home.path());
    command.env_remove("RUST_LOG").stderr(Stdio::from(log));
    for (name, value) in vars {
        command.env(name, value);
    }
    let mut gateway = crate::common::spawn(&mut command, "gateway");
    let stdout = gateway.child_mut().stdout.take().expect("stdout");
    let mut banner = String::new();
    BufReader::new(stdout).read_line(&mut banner).expect("banner");
    let gw = banner_address(&banner);
    wait_until_listening(gw.as_str(), "gateway");
    let proposal = json!({
        "template": "mech_v1",
        "operations": [{"op": "add_deliverable", "phase": "design", "value": "test_plan", "rationale": "bench test"}],
        "manufacturingContext": {"route": "vendor"},
        "targetMaturity": "physically_validated",
        "loadsAndUse": "20 kg"
    });
    let (status, proposed) = http(&gw, "POST", "/v1/design-flows/propose", Some(&proposal));
    assert_eq!(status, 201, "{proposed}");
    let approval = proposed["approvalId"].as_str().expect("approval id").to_owned();
    let (status, decided) = http(
        &gw,
        "POST",
        &format!("/v1/approvals/{approval}/decision"),
        Some(&json!({"decision": "approve"})),
    );
    assert_eq!(status, 200, "{decided}");
    drop(gateway);
    (std::fs::read_to_string(&log_path).expect("read log"), approval)
}

#[test]
fn by_default_logs_are_human_lines_and_a_decision_names_approver_item_and_decision() {
    let (log, approval) = decide_once(&[]);
    assert!(!log.trim().is_empty(), "the gateway logged nothing");
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            !line.trim_start().starts_with('{'),
            "JSON on a default run: {line}"
        );
        assert!(line.len() < 400, "a log line for people stays short: {line}");
        assert!(
            !line.contains("\u{1b}["),
            "no colour when stderr is not a terminal: {line}"
        );
    }
    let decision = log
        .lines()
        .find(|l| l.contains("approval_decided"))
        .unwrap_or_else(|| panic!("no decision line in:\n{log}"));
    assert!(decision.contains("INFO"), "{decision}");
    for needle in [
        "approver=ops",
        "decision=\"approve\"",
        approval.as_str(),
        "design_flow_proposal",
    ] {
        assert!(decision.contains(needle), "{needle} missing from {decision}");
    }
}

#[test]
fn with_the_json_format_every_line_is_one_json_event() {
    let (log, approval) = decide_once(&[("METAFORGE_LOG_FORMAT", "json")]);
    let events: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let decision = events
        .iter()
        .find(|e| e["fields"]["event"] == "approval_decided")
        .unwrap_or_else(|| panic!("no decision event in:\n{log}"));
    assert_eq!(decision["level"], "INFO");
    assert_eq!(decision["fields"]["approver"], "ops");
    assert_eq!(decision["fields"]["decision"], "approve");
    assert_eq!(decision["fields"]["approval_id"], approval.as_str());
}

#[test]
fn a_bad_log_format_refuses_the_start_naming_the_variable_as_config_check_does() {
    // Issue 38 item 13: it used to print a line and carry on while `config check` said ok.
    let home = tempfile::tempdir().expect("tempdir");
    for args in [
        &["gateway", "--bind", "127.0.0.1:0"][..],
        &["config", "check"][..],
    ] {
        let out = crate::common::metaforge()
            .args(args)
            .env("METAFORGE_HOME", home.path())
            .env("METAFORGE_LOG_FORMAT", "yaml")
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("METAFORGE_LOG_FORMAT: 'yaml'"),
            "{args:?}: {stderr}"
        );
    }
}
