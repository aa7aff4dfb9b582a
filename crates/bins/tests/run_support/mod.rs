//! What the run process tests (`run_crash_loop.rs`, `run_events_kafka.rs`) share: a scripted
//! OpenAI-compatible model that plays the three roles of a server-intelligence phase (planner,
//! the phase worker calling `twin.commit_work_product` for every deliverable its brief names,
//! evaluator), the environment that routes every role of a `metaforge gateway` to it, a gateway
//! started with its log kept, HTTP exchanges that report a dead gateway instead of failing the
//! test, and one driving step (answer every open gate, read the runs).
//!
//! Included with `mod run_support;` (after `mod common;`) from each test file that needs it.

#![expect(
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a process that cannot start must fail the test loudly"
)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use metaforge_test_support::upstream::{Received, Reply, Scripted};
use serde_json::{Value, json};

use crate::common::{self, KEY, Process};

/// The system prompt a phase worker's turn starts with (`metaforge_app::runs::PHASE_SYSTEM_PROMPT`).
const WORKER_PROMPT: &str = metaforge_app::runs::PHASE_SYSTEM_PROMPT;
/// How the planner's system prompt begins (`metaforge_agent::pge`).
const PLANNER_PROMPT: &str = "You are the planner.";
/// How the evaluator's system prompt begins (`metaforge_agent::pge`).
const EVALUATOR_PROMPT: &str = "You are the evaluator.";
/// The tool the worker records each deliverable with, as the registry names it for a provider
/// (a native tool's id with `.` → `_`).
pub(crate) const COMMIT_TOOL: &str = "twin_commit_work_product";
/// The route every role of the gateway takes to the scripted model.
const ROUTE: &str = "openai:gpt-4o-mini";

/// What the scripted model was asked, by role.
#[derive(Debug, Default, Clone)]
pub(crate) struct ModelCalls {
    /// Planner calls by phase attempt key (`run:phase:attempt`): one per time the phase brain
    /// took that attempt up, so a count above one is a phase re-run after a kill.
    pub(crate) planner_by_key: BTreeMap<String, usize>,
    /// Worker calls (each generator turn makes two: the tool calls, then the answer).
    pub(crate) worker: usize,
    /// Evaluator calls.
    pub(crate) evaluator: usize,
    /// Work products the worker asked to commit.
    pub(crate) commits: usize,
    /// Requests the script did not recognise (answered 500), each described.
    pub(crate) unexpected: Vec<String>,
}

impl ModelCalls {
    /// Phase attempts the brain took up more than once (a kill mid-phase), and how many extra
    /// times in all.
    pub(crate) fn reruns(&self) -> (usize, usize) {
        let rerun = self.planner_by_key.values().filter(|n| **n > 1).count();
        let extra = self.planner_by_key.values().map(|n| n.saturating_sub(1)).sum();
        (rerun, extra)
    }
}

/// The scripted model: a loopback OpenAI-compatible upstream living as long as the test's
/// runtime, answering each request from what it reads in it.
pub(crate) struct ScriptedModel {
    upstream: Scripted,
    calls: Arc<Mutex<ModelCalls>>,
}

impl ScriptedModel {
    /// Starts it on the current runtime.
    pub(crate) async fn start() -> Self {
        let calls = Arc::new(Mutex::new(ModelCalls::default()));
        let log = Arc::clone(&calls);
        let upstream = Scripted::respond(move |request| {
            let mut calls = log.lock().unwrap_or_else(PoisonError::into_inner);
            answer(request, &mut calls)
        })
        .await;
        Self { upstream, calls }
    }

    /// What it was asked so far.
    pub(crate) fn calls(&self) -> ModelCalls {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The gateway environment that routes the phase worker, the planner and the evaluator (and
    /// every other role, as the default route) to this model; the credentials file stays in
    /// `home`. Also: no rate limit (the test polls), the native tool loop.
    pub(crate) fn gateway_env(&self, home: &Path) -> Vec<(&'static str, String)> {
        vec![
            ("HARNESS_OPENAI_BASE_URL", format!("{}/v1", self.upstream.url())),
            ("OPENAI_API_KEY", "sk-test-scripted".to_owned()),
            (
                "METAFORGE_CREDENTIALS_PATH",
                home.join("credentials.json").display().to_string(),
            ),
            ("METAFORGE_LLM_PROVIDER", "openai".to_owned()),
            ("METAFORGE_LLM_MODEL", "gpt-4o-mini".to_owned()),
            ("METAFORGE_ROUTE_PHASE_BRAIN", ROUTE.to_owned()),
            ("METAFORGE_ROUTE_PLANNER", ROUTE.to_owned()),
            ("METAFORGE_ROUTE_EVALUATOR", ROUTE.to_owned()),
            ("METAFORGE_INTELLIGENCE", "server".to_owned()),
            ("METAFORGE_AGENT_LOOP", "native".to_owned()),
            ("METAFORGE_GATEWAY_RATE_LIMIT_PER_MINUTE", "0".to_owned()),
        ]
    }
}

/// The text of a chat message's `content` (a string or a list of text parts).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The comma-separated list after `label` on its own line of `brief` (`(none)` → empty).
fn listed(brief: &str, label: &str) -> Vec<String> {
    brief
        .lines()
        .find_map(|line| line.strip_prefix(label))
        .map(|rest| {
            rest.split(',')
                .map(|s| s.trim().trim_end_matches('.').to_owned())
                .filter(|s| !s.is_empty() && s != "(none)")
                .collect()
        })
        .unwrap_or_default()
}

/// The phase attempt key the brief names: `… (task run:phase:attempt).`
fn task_key(brief: &str) -> Option<String> {
    let start = brief.find("(task ")? + "(task ".len();
    let end = brief[start..].find(')')? + start;
    Some(brief[start..end].to_owned())
}

/// The phase id the brief names: `Phase: Title ('id'), …`.
fn phase_of(brief: &str) -> Option<String> {
    let line = brief.lines().find(|l| l.starts_with("Phase: "))?;
    let start = line.find("('")? + 2;
    let end = line[start..].find("')")? + start;
    Some(line[start..end].to_owned())
}

/// One chat completion answer in OpenAI's shape.
fn completion(message: Value, finish: &str) -> Reply {
    let body = json!({
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}
    });
    Reply::json(200, body.to_string())
}

fn unexpected(calls: &mut ModelCalls, what: String) -> Reply {
    calls.unexpected.push(what.clone());
    Reply::json(
        500,
        json!({"error": {"message": format!("the scripted model did not expect this: {what}")}}).to_string(),
    )
}

/// The script: the role is read from the system prompt, the phase from the brief in the user
/// message; the worker calls the commit tool once per deliverable (required and expected), and
/// answers once the tool results are in.
fn answer(request: &Received, calls: &mut ModelCalls) -> Reply {
    let body = &request.body;
    if body["stream"] == json!(true) {
        return unexpected(calls, "a streamed completion".to_owned());
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let system = messages
        .iter()
        .find(|m| m["role"] == "system")
        .map(|m| text_of(&m["content"]))
        .unwrap_or_default();
    let user = messages
        .iter()
        .find(|m| m["role"] == "user")
        .map(|m| text_of(&m["content"]))
        .unwrap_or_default();
    if system.starts_with(PLANNER_PROMPT) {
        let key = task_key(&user).unwrap_or_else(|| "(no key)".to_owned());
        *calls.planner_by_key.entry(key).or_default() += 1;
        return completion(
            json!({"role": "assistant", "content": "1. Record every deliverable in the twin. 2. Summarise."}),
            "stop",
        );
    }
    if system.starts_with(EVALUATOR_PROMPT) {
        calls.evaluator += 1;
        return completion(
            json!({"role": "assistant", "content": "{\"passed\": true, \"findings\": []}"}),
            "stop",
        );
    }
    if !system.starts_with(WORKER_PROMPT) {
        return unexpected(
            calls,
            format!(
                "a system prompt {:?}",
                system.chars().take(60).collect::<String>()
            ),
        );
    }
    calls.worker += 1;
    let mut deliverables = listed(
        &user,
        "Required deliverables (the gate checks these are recorded): ",
    );
    for artifact in listed(&user, "Expected artifacts: ") {
        if !deliverables.contains(&artifact) {
            deliverables.push(artifact);
        }
    }
    let results = messages.iter().filter(|m| m["role"] == "tool").count();
    if results > 0 {
        return completion(
            json!({"role": "assistant", "content": format!("Recorded {} in the twin.", deliverables.join(", "))}),
            "stop",
        );
    }
    let offered = body["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == COMMIT_TOOL));
    if !offered {
        return unexpected(
            calls,
            format!("a worker turn without {COMMIT_TOOL} among its tools"),
        );
    }
    let phase = phase_of(&user).unwrap_or_default();
    let tool_calls: Vec<Value> = deliverables
        .iter()
        .enumerate()
        .map(|(i, artifact)| {
            let arguments = json!({
                "artifact": artifact,
                "title": format!("{artifact} ({phase})"),
                "content": format!("{artifact} recorded by phase {phase}"),
            });
            json!({"id": format!("call_{i}"), "type": "function",
                   "function": {"name": COMMIT_TOOL, "arguments": arguments.to_string()}})
        })
        .collect();
    if tool_calls.is_empty() {
        return completion(
            json!({"role": "assistant", "content": "Nothing to record in this phase."}),
            "stop",
        );
    }
    calls.commits += tool_calls.len();
    completion(
        json!({"role": "assistant", "content": null, "tool_calls": tool_calls}),
        "tool_calls",
    )
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
