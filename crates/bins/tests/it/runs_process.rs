//! Design-flow runs over HTTP against the real `metaforge gateway` (issue 16, "Process tests"): a
//! server-intelligence run of `design_v1` on the scripted phase model to completion, its
//! deliverables merged into the twin's `main`; a gate's `retry` (the phase re-runs with the
//! reason first), `rework` (an earlier phase and every later one re-run), and expiry
//! (`METAFORGE_GATE_TIMEOUT_SECONDS`, a rejection); the refused starts (409 for an unapproved
//! version, 422 for an unknown one, a bad `intelligence`, an unknown template) that record
//! nothing; and `flow-state` with no engine to ask (`METAFORGE_FLOW_ENGINE=temporal` over a home
//! whose run the embedded engine parked) reading `live: false`, every status `unknown`.
//!
//! The completion test runs the scripted phase model as the README walk-through does, the
//! `scripted_phase_model` example on its own port (`cargo build -p metaforge-bins --example
//! scripted_phase_model` first when this test is run alone); the others start it in-process to
//! read what each phase attempt was told.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "process tests: a failure must stop the test loudly"
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::run_support::{ScriptedModel, exchange, log_tail, merged_into_main, open_gate, start_gateway};
use metaforge_test_support::net;
use serde_json::{Value, json};

/// The template every run here walks: intent, needs, requirements, then four human gates
/// (feasibility, design, simulation, release).
const TEMPLATE: &str = "design_v1";
/// The human-gated phases of [`TEMPLATE`], in order.
const GATES: [&str; 4] = ["feasibility", "design", "simulation", "release"];
/// How long one wait for the engine may take (a phase is four model calls on loopback).
const WAIT: Duration = Duration::from_secs(30);

/// One gateway over a fresh home, with its log.
struct Gateway {
    _process: crate::common::Process,
    addr: String,
    log: PathBuf,
    home: tempfile::TempDir,
}

impl Gateway {
    fn start(vars: &[(&str, String)]) -> Self {
        let home = tempfile::tempdir().unwrap();
        Self::start_in(home, vars)
    }

    /// A gateway over a fresh home routed to `model`, with `extra` set; also returns its
    /// environment (for a restart over the same home).
    fn on_model(
        model: &ScriptedModel,
        extra: &[(&'static str, &str)],
    ) -> (Self, Vec<(&'static str, String)>) {
        let home = tempfile::tempdir().unwrap();
        let mut vars = model.gateway_env(home.path());
        vars.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        (Self::start_in(home, &vars), vars)
    }

    fn start_in(home: tempfile::TempDir, vars: &[(&str, String)]) -> Self {
        let log = home.path().join("gateway.log");
        let (process, addr) = start_gateway(home.path(), vars, &log);
        Self {
            _process: process,
            addr,
            log,
            home,
        }
    }

    /// Stops the process, keeping the home.
    fn stop(self) -> tempfile::TempDir {
        self.home
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        exchange(&self.addr, method, path, body).unwrap_or_else(|e| {
            panic!(
                "{method} {path}: {e}\n--- gateway log ---\n{}",
                log_tail(&self.log, 40)
            )
        })
    }

    /// Starts a run of [`TEMPLATE`] and returns its id.
    fn start_run(&self) -> String {
        let (status, run) = self.call("POST", "/v1/runs", Some(&json!({"template_id": TEMPLATE})));
        assert_eq!(status, 201, "{run}");
        assert_eq!(run["flow_engine"], "embedded", "{run}");
        run["id"].as_str().unwrap().to_owned()
    }

    /// Waits until `run` is parked at the gate of `phase` and returns its hold id.
    fn wait_for_gate(&self, run: &str, phase: &str) -> String {
        self.wait(&format!("{run} parked at the {phase} gate"), || {
            let gate = open_gate(&self.addr, run).ok()??;
            (gate.phase == phase && gate.approvable).then_some(gate.approval_id)?
        })
    }

    /// Waits until `run` has ended, and returns it as `GET /v1/runs/{id}` shows it.
    fn wait_for_end(&self, run: &str) -> Value {
        self.wait(&format!("{run} ended"), || {
            let (status, body) = exchange(&self.addr, "GET", &format!("/v1/runs/{run}"), None).ok()?;
            (status == 200 && matches!(body["status"].as_str(), Some("completed" | "failed" | "canceled")))
                .then_some(body)
        })
    }

    fn decide(&self, run: &str, body: &Value) -> (u16, Value) {
        self.call("POST", &format!("/v1/runs/{run}/approval"), Some(body))
    }

    fn wait<T>(&self, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(found) = probe() {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "waited {WAIT:?} for {what}\n--- gateway log ---\n{}",
                log_tail(&self.log, 40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The runtime the in-process scripted model lives on.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// The `scripted_phase_model` example, built next to this test's binary.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug_dir = exe.parent().and_then(Path::parent).unwrap();
    let path = debug_dir.join("examples/scripted_phase_model");
    assert!(
        path.exists(),
        "{} missing: cargo build -p metaforge-bins --example scripted_phase_model",
        path.display()
    );
    path
}

#[test]
fn a_server_mode_run_on_the_scripted_phase_model_example_completes_and_its_deliverables_reach_main() {
    let port = net::unused_port();
    let mut model = crate::common::spawn(
        Command::new(example_binary())
            .args(["--port", &port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
        "scripted_phase_model",
    );
    let mut ready = String::new();
    BufReader::new(model.child_mut().stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    let base_url = format!("http://127.0.0.1:{port}/v1");
    assert!(ready.contains(&base_url), "the example's ready line: {ready:?}");
    let home = tempfile::tempdir().unwrap();
    let vars = crate::run_support::gateway_env(&base_url, home.path());
    let gw = Gateway::start_in(home, &vars);

    let run = gw.start_run();
    for phase in GATES {
        let hold = gw.wait_for_gate(&run, phase);
        if phase == GATES[0] {
            let (status, approvals) = gw.call("GET", "/v1/approvals", None);
            assert_eq!(status, 200, "{approvals}");
            let listed = approvals["approvals"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["id"] == json!(hold))
                .cloned()
                .unwrap_or(Value::Null);
            assert_eq!(
                listed["kind"], "gate",
                "the gate's hold among the approvals: {approvals}"
            );
        }
        let (status, state) = gw.decide(
            &run,
            &json!({"decision": "approve", "gate_phase": phase, "reason": "looks right"}),
        );
        assert_eq!(status, 200, "approve {phase}: {state}");
    }
    let ended = gw.wait_for_end(&run);
    assert_eq!(ended["status"], "completed", "{ended}");
    assert_eq!(ended["flow_engine"], "embedded", "{ended}");
    assert!(
        ended["usage"].is_object(),
        "the run's model usage by phase, role and model: {ended}"
    );
    let merged = gw.wait(&format!("{run} merged into main"), || {
        merged_into_main(&gw.addr, &run).ok().filter(|m| *m)
    });
    assert!(merged);
    let (_, state) = gw.call("GET", &format!("/v1/runs/{run}/flow-state"), None);
    let statuses: Vec<&str> = state["phases"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["status"].as_str())
        .collect();
    assert_eq!(statuses, ["passed"; 7], "{state}");
}

#[test]
fn a_retry_with_a_reason_reruns_the_gated_phase_with_that_reason_first_and_a_reject_fails_the_run() {
    let runtime = runtime();
    let model = runtime.block_on(ScriptedModel::start());
    let (gw, _) = Gateway::on_model(&model, &[]);
    let run = gw.start_run();
    let first = gw.wait_for_gate(&run, "feasibility");

    let (status, refused) = gw.decide(&run, &json!({"decision": "retry", "gate_phase": "feasibility"}));
    assert_eq!(status, 422, "a retry without a reason: {refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("reason"),
        "{refused}"
    );

    let reason = "cite the load case for the bracket";
    let (status, state) = gw.decide(
        &run,
        &json!({"decision": "retry", "gate_phase": "feasibility", "reason": reason}),
    );
    assert_eq!(status, 200, "{state}");
    let second = gw.wait_for_gate(&run, "feasibility");
    assert_ne!(second, first, "the re-run phase parks at a new hold");
    let calls = model.calls();
    let key = format!("{run}:feasibility:2");
    assert_eq!(
        calls.feedback_by_key.get(&key).map(String::as_str),
        Some(reason),
        "attempt 2 of feasibility was told the retry's reason first: {calls:?}"
    );
    assert_eq!(
        calls.attempts_of(&run),
        [
            format!("{run}:feasibility:1"),
            key,
            format!("{run}:intent:1"),
            format!("{run}:needs:1"),
            format!("{run}:requirements:1"),
        ],
        "only the gated phase re-ran"
    );

    let (status, state) = gw.decide(
        &run,
        &json!({"decision": "reject", "gate_phase": "feasibility", "reason": "not feasible"}),
    );
    assert_eq!(status, 200, "{state}");
    let ended = gw.wait_for_end(&run);
    assert_eq!(ended["status"], "failed", "{ended}");
    assert!(calls.unexpected.is_empty(), "{:?}", calls.unexpected);
}

#[test]
fn a_rework_naming_an_earlier_phase_reruns_it_and_every_later_phase_with_the_reason() {
    let runtime = runtime();
    let model = runtime.block_on(ScriptedModel::start());
    let (gw, _) = Gateway::on_model(&model, &[]);
    let run = gw.start_run();
    gw.wait_for_gate(&run, "feasibility");
    let (status, state) = gw.decide(
        &run,
        &json!({"decision": "approve", "gate_phase": "feasibility", "reason": "ok"}),
    );
    assert_eq!(status, 200, "{state}");
    gw.wait_for_gate(&run, "design");

    let (status, refused) = gw.decide(
        &run,
        &json!({"decision": "rework", "gate_phase": "design", "phase": "release", "reason": "later"}),
    );
    assert_eq!(status, 422, "a rework naming a later phase: {refused}");
    assert_eq!(refused["error"], "rework_target", "{refused}");

    let reason = "the needs missed the outdoor use case";
    let (status, state) = gw.decide(
        &run,
        &json!({"decision": "rework", "gate_phase": "design", "phase": "needs", "reason": reason}),
    );
    assert_eq!(status, 200, "{state}");
    // needs, requirements and feasibility re-run; feasibility's gate opens again.
    gw.wait_for_gate(&run, "feasibility");
    let calls = model.calls();
    let attempts = calls.attempts_of(&run);
    for rerun in ["needs", "requirements", "feasibility"] {
        assert!(
            attempts.contains(&format!("{run}:{rerun}:2")),
            "{rerun} re-ran: {attempts:?}"
        );
    }
    assert!(
        !attempts.contains(&format!("{run}:intent:2")),
        "the phase before the rework target stands: {attempts:?}"
    );
    assert_eq!(
        calls
            .feedback_by_key
            .get(&format!("{run}:needs:2"))
            .map(String::as_str),
        Some(reason),
        "the rework target was told the reason first: {calls:?}"
    );

    let (status, state) = gw.call(
        "POST",
        &format!("/v1/runs/{run}/cancel"),
        Some(&json!({"reason": "done looking"})),
    );
    assert_eq!(status, 200, "{state}");
    assert_eq!(gw.wait_for_end(&run)["status"], "canceled");
    assert!(calls.unexpected.is_empty(), "{:?}", calls.unexpected);
}

#[test]
fn a_gate_past_its_deadline_expires_as_a_rejection_and_the_run_fails() {
    let runtime = runtime();
    let model = runtime.block_on(ScriptedModel::start());
    let (gw, _) = Gateway::on_model(&model, &[("METAFORGE_GATE_TIMEOUT_SECONDS", "1")]);
    let run = gw.start_run();
    let ended = gw.wait_for_end(&run);
    assert_eq!(ended["status"], "failed", "{ended}");
    let reason = ended["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("Gate 'G3 Feasibility Review' expired at")
            && reason.ends_with("without a decision: treated as a rejection"),
        "the run says its gate expired: {ended}"
    );
    let (status, refused) = gw.decide(
        &run,
        &json!({"decision": "approve", "gate_phase": "feasibility", "reason": "too late"}),
    );
    assert_eq!(status, 409, "an expired gate cannot be approved: {refused}");
    assert_eq!(
        model.calls().attempts_of(&run).len(),
        4,
        "nothing ran past the expired gate"
    );
}

#[test]
fn a_refused_start_records_no_run_and_no_hold() {
    let gw = Gateway::start(&[]);
    let proposal = json!({
        "template": "mech_v1",
        "operations": [{"op": "add_deliverable", "phase": "design", "value": "test_plan", "rationale": "process test"}],
        "manufacturingContext": {"route": "vendor"},
        "targetMaturity": "physically_validated",
        "loadsAndUse": "20 kg"
    });
    let (status, proposed) = gw.call("POST", "/v1/design-flows/propose", Some(&proposal));
    assert_eq!(status, 201, "{proposed}");
    let version = proposed["version_id"].as_str().unwrap().to_owned();
    let (_, holds_before) = gw.call("GET", "/v1/approvals", None);

    let refusals = [
        (json!({"flow_version_id": version}), 409, "not_approved"),
        (
            json!({"flow_version_id": "no-such-version"}),
            422,
            "unknown_flow_version",
        ),
        (
            json!({"template_id": TEMPLATE, "intelligence": "llm"}),
            422,
            "invalid_field",
        ),
        (
            json!({"template_id": "no_such_template"}),
            422,
            "unknown_template",
        ),
        (
            json!({"flow_version_id": version, "template_id": TEMPLATE}),
            422,
            "invalid_field",
        ),
    ];
    for (body, want, code) in refusals {
        let (status, refused) = gw.call("POST", "/v1/runs", Some(&body));
        assert_eq!(
            (status, refused["error"].as_str()),
            (want, Some(code)),
            "{body}: {refused}"
        );
    }
    let (_, bad_mode) = gw.call(
        "POST",
        "/v1/runs",
        Some(&json!({"template_id": TEMPLATE, "intelligence": "llm"})),
    );
    assert_eq!(bad_mode["details"]["field"], "intelligence", "{bad_mode}");

    let (status, runs) = gw.call("GET", "/v1/runs", None);
    assert_eq!(status, 200);
    assert_eq!(runs["runs"], json!([]), "no refused start recorded a run");
    let (_, holds_after) = gw.call("GET", "/v1/approvals", None);
    assert_eq!(holds_after, holds_before, "no refused start parked a hold");
}

#[test]
fn flow_state_with_no_engine_to_ask_reads_live_false_and_the_parked_gate_survives() {
    let runtime = runtime();
    let model = runtime.block_on(ScriptedModel::start());
    let (gw, vars) = Gateway::on_model(&model, &[]);
    let run = gw.start_run();
    let hold = gw.wait_for_gate(&run, "feasibility");
    let home = gw.stop();

    let mut temporal = vars.clone();
    temporal.push(("METAFORGE_FLOW_ENGINE", "temporal".to_owned()));
    let gw = Gateway::start_in(home, &temporal);
    let (status, state) = gw.call("GET", &format!("/v1/runs/{run}/flow-state"), None);
    assert_eq!(status, 200, "{state}");
    assert_eq!(state["live"], false, "{state}");
    assert!(
        state["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "live: false says why: {state}"
    );
    let phases = state["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 7, "the frozen version's phases still list: {state}");
    assert!(
        phases.iter().all(|p| p["status"] == "unknown"),
        "nothing unknown reads as pending: {state}"
    );
    let (status, refused) = gw.call("POST", "/v1/runs", Some(&json!({"template_id": TEMPLATE})));
    assert_eq!(status, 503, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("METAFORGE_FLOW_ENGINE")),
        "{refused}"
    );
    let home = gw.stop();

    let gw = Gateway::start_in(home, &vars);
    assert_eq!(
        gw.wait_for_gate(&run, "feasibility"),
        hold,
        "the embedded engine resumes the run parked at the same hold"
    );
}
