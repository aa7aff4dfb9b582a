//! What the run process tests (`run_crash_loop.rs`, `run_events_kafka.rs`, `runs_process.rs`)
//! share: the scripted phase model of `metaforge_test_support::phase_model` (planner, the phase
//! worker calling `twin.commit_work_product` for every deliverable its brief names, evaluator)
//! told the product's worker prompt, the environment that routes every role of a
//! `metaforge gateway` to it, a gateway started with its log kept, HTTP exchanges that report a
//! dead gateway instead of failing the test, and reading a run's open gate, the runs, and whether
//! a run was merged into the twin's `main`.
//!
//! A module of the `it` test binary, and included with `mod run_support;` (after `mod common;`) by
//! the feature-gated binaries.

#![expect(
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a process that cannot start must fail the test loudly"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use metaforge_test_support::phase_model::{PhaseModelCalls, RolePrompts, ScriptedPhaseModel};
use serde_json::{Value, json};

use crate::common::{self, KEY, Process};

/// The scripted phase model (`metaforge_test_support::phase_model`) told the product's worker
/// prompt, living as long as the test's runtime.
pub(crate) struct ScriptedModel {
    model: ScriptedPhaseModel,
}

impl ScriptedModel {
    /// Starts it on the current runtime.
    pub(crate) async fn start() -> Self {
        let prompts = RolePrompts::with_worker(metaforge_app::runs::PHASE_SYSTEM_PROMPT);
        Self {
            model: ScriptedPhaseModel::start(prompts).await,
        }
    }

    /// What it was asked so far.
    pub(crate) fn calls(&self) -> PhaseModelCalls {
        self.model.calls()
    }

    /// Holds the first planner call of each attempt of `phase` for `delay`
    /// (`ScriptedPhaseModel::stall_first_planner_call`).
    pub(crate) fn stall_first_planner_call(&self, phase: &str, delay: Duration) {
        self.model.stall_first_planner_call(phase, delay);
    }

    /// From now on a summary quoting the simulation states its stress times `factor`
    /// (`ScriptedPhaseModel::misquote_stress`).
    pub(crate) fn misquote_stress(&self, factor: f64) {
        self.model.misquote_stress(factor);
    }

    /// [`gateway_env`] for this model.
    pub(crate) fn gateway_env(&self, home: &Path) -> Vec<(&'static str, String)> {
        gateway_env(&self.model.base_url(), home)
    }
}

/// The gateway environment that routes every role to the scripted phase model at `base_url`
/// (`phase_model::route_env`); the credentials file stays in `home`, and there is no rate limit
/// (the tests poll).
pub(crate) fn gateway_env(base_url: &str, home: &Path) -> Vec<(&'static str, String)> {
    let mut vars = metaforge_test_support::phase_model::route_env(base_url);
    vars.extend([
        (
            "METAFORGE_CREDENTIALS_PATH",
            home.join("credentials.json").display().to_string(),
        ),
        ("METAFORGE_GATEWAY_RATE_LIMIT_PER_MINUTE", "0".to_owned()),
    ]);
    vars
}

/// `metaforge gateway` on a free loopback port over `home` with `vars`, its stderr appended to
/// `log`; returns once it accepts connections, with its `host:port`.
pub(crate) fn start_gateway(home: &Path, vars: &[(&str, String)], log: &Path) -> (Process, String) {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("gateway log");
    let mut command = common::server_command(&["gateway", "--bind", "127.0.0.1:0"], home);
    command
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .stderr(Stdio::from(log));
    let mut gateway = common::spawn(&mut command, "gateway");
    let stdout = gateway.child_mut().stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read banner");
    assert!(
        line.contains("http://"),
        "the gateway did not start (banner {line:?}); see its log"
    );
    let addr = common::banner_address(&line);
    common::wait_until_listening(addr.as_str(), "gateway");
    (gateway, addr)
}

/// An HTTP request written to the gateway, its answer not read yet.
pub(crate) struct Sent {
    stream: TcpStream,
}

/// Writes `method path` (with the operator key and `body`) to the gateway at `addr`; `Err` when
/// it cannot be reached.
pub(crate) fn send(addr: &str, method: &str, path: &str, body: Option<&Value>) -> Result<Sent, String> {
    let socket: SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let mut stream =
        TcpStream::connect_timeout(&socket, Duration::from_secs(2)).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    let payload = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nX-API-Key: {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    Ok(Sent { stream })
}

impl Sent {
    /// The status and JSON body (`Null` when not JSON); `Err` when the gateway died first.
    pub(crate) fn receive(mut self) -> Result<(u16, Value), String> {
        let mut raw = Vec::new();
        self.stream
            .read_to_end(&mut raw)
            .map_err(|e| format!("read: {e}"))?;
        let raw = String::from_utf8_lossy(&raw);
        let status: u16 = raw
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| "no answer (the connection closed)".to_owned())?;
        let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
        Ok((status, serde_json::from_str(body).unwrap_or(Value::Null)))
    }
}

/// [`send`] then [`Sent::receive`].
pub(crate) fn exchange(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    send(addr, method, path, body)?.receive()
}

/// A run as `GET /v1/runs` lists it.
#[derive(Debug, Clone)]
pub(crate) struct ListedRun {
    /// Its id.
    pub(crate) id: String,
    /// Its status.
    pub(crate) status: String,
}

impl ListedRun {
    /// Completed, failed or canceled.
    pub(crate) fn ended(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed" | "canceled")
    }
}

/// Every run, oldest first; `Err` when the gateway cannot answer.
pub(crate) fn list_runs(addr: &str) -> Result<Vec<ListedRun>, String> {
    let (status, body) = exchange(addr, "GET", "/v1/runs", None)?;
    if status != 200 {
        return Err(format!("GET /v1/runs answered {status}: {body}"));
    }
    Ok(body["runs"]
        .as_array()
        .map(|runs| {
            runs.iter()
                .map(|r| ListedRun {
                    id: r["id"].as_str().unwrap_or_default().to_owned(),
                    status: r["status"].as_str().unwrap_or_default().to_owned(),
                })
                .collect()
        })
        .unwrap_or_default())
}

/// The gate a run waits at now, as `GET /v1/runs/{id}/flow-state` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenGate {
    /// The gated phase.
    pub(crate) phase: String,
    /// Its hold in the approval ledger.
    pub(crate) approval_id: Option<String>,
    /// Whether `approve` is among the decisions it allows.
    pub(crate) approvable: bool,
}

/// The run's open gate, if any (`Ok(None)` when it waits at none); `Err` when the gateway
/// cannot answer.
pub(crate) fn open_gate(addr: &str, run: &str) -> Result<Option<OpenGate>, String> {
    let (status, body) = exchange(addr, "GET", &format!("/v1/runs/{run}/flow-state"), None)?;
    if status != 200 {
        return Err(format!("flow-state of {run} answered {status}: {body}"));
    }
    let gate = &body["gate"];
    if gate.is_null() || body["live"] != json!(true) {
        return Ok(None);
    }
    Ok(Some(OpenGate {
        phase: gate["phase"].as_str().unwrap_or_default().to_owned(),
        approval_id: gate["approval_id"].as_str().map(str::to_owned),
        approvable: gate["allowed"]
            .as_array()
            .is_some_and(|a| a.iter().any(|d| d == "approve")),
    }))
}

/// The approval request for `gate` of `run`, as a person's client sends it.
pub(crate) fn approve_body(gate: &OpenGate) -> Value {
    json!({"decision": "approve", "gate_phase": gate.phase, "reason": "looks right"})
}

/// Whether `main` of the twin holds work products of `run` (its branch was merged).
pub(crate) fn merged_into_main(addr: &str, run: &str) -> Result<bool, String> {
    let (status, body) = exchange(
        addr,
        "GET",
        &format!("/v1/twin/nodes?branch=main&type=WorkProduct&run_id={run}&limit=1"),
        None,
    )?;
    if status != 200 {
        return Err(format!("twin nodes of {run} answered {status}: {body}"));
    }
    Ok(body["nodes"].as_array().is_some_and(|n| !n.is_empty()))
}

/// The last lines of the gateway log at `path` (for a failure message).
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
