//! A client-intelligence run of `mech_v1` driven end to end by the official Python MCP client
//! (`tests/peers/mcp_run_driver.py`) against the real `metaforge up` process (issue 16, Tests):
//! `flow.start_run` → `phase.list_tasks` → `phase.claim` (held; a person approves it at the
//! gateway's `/v1/approvals`) → `twin.*` writes of the deliverables as the `client_task` caller
//! (`METAFORGE_CLIENT_TASK_WRITES=on`, a stable `X-MetaForge-Session`) → `phase.submit` →
//! `flow.await_gate` answered by the person through elicitation … to completion. Afterwards the
//! run reads completed at the gateway, every gate decision is recorded in the run ledger as the
//! key's identity with `surface: "chat"`, and the deliverables are merged into the twin's `main`.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "process test: a surprise must fail the test loudly"
)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use metaforge_adapters_store::{SqliteRunLedger, StorePaths};
use metaforge_ports::{DecisionSurface, RunEvent, RunLedger};
use metaforge_test_support::{ChildGuard, Peer, peers, require};
use serde_json::{Value, json};

use crate::common::{KEY, banner_address, http, server_command};

/// The identity [`KEY`] authenticates (`server_command` configures `ops:KEY`).
const KEY_IDENTITY: &str = "ops";

/// How long the whole run may take the Python client.
const DRIVE_WITHIN: Duration = Duration::from_secs(300);

/// `metaforge up` with client-task writes on; the gateway's `host:port` and the sidecar's URL.
fn start_up(home: &std::path::Path) -> (crate::common::Process, String, String) {
    let mut up = crate::common::spawn(
        server_command(
            &["up", "--bind", "127.0.0.1:0", "--mcp-bind", "127.0.0.1:0"],
            home,
        )
        .env("METAFORGE_CLIENT_TASK_WRITES", "on")
        .stderr(Stdio::inherit()),
        "up",
    );
    let mut lines = BufReader::new(up.child_mut().stdout.take().expect("stdout")).lines();
    let gateway_line = lines.next().expect("gateway banner").expect("utf-8");
    let mcp_line = lines.next().expect("mcp banner").expect("utf-8");
    let mcp_url = mcp_line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("mcp url")
        .to_owned();
    (up, banner_address(&gateway_line), mcp_url)
}

/// A person at the approvals queue: approves every held `phase.claim` (letting the client take
/// the phase) and rejects any other held call — with client-task writes on, nothing else of
/// the run may wait for a person, and rejecting makes the client's call fail loudly instead of
/// hanging. Returns the claims approved and the other holds seen.
fn approver(gateway: String, stop: Arc<AtomicBool>) -> JoinHandle<(Vec<String>, Vec<Value>)> {
    std::thread::spawn(move || {
        let mut approved = Vec::new();
        let mut others = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let (status, body) = http(&gateway, "GET", "/v1/approvals", None);
            assert_eq!(status, 200, "{body}");
            for hold in body["approvals"].as_array().cloned().unwrap_or_default() {
                let id = hold["id"].as_str().unwrap().to_owned();
                let claim = hold["kind"] == "tool_call" && hold["tool"] == "phase.claim";
                if !claim && hold["kind"] == "gate" {
                    continue; // gates are answered in the chat, by the client's elicitation
                }
                let decision = if claim { "approve" } else { "reject" };
                let (status, answer) = http(
                    &gateway,
                    "POST",
                    &format!("/v1/approvals/{id}/decision"),
                    Some(&json!({"decision": decision})),
                );
                assert_eq!(status, 200, "{decision} {id}: {answer}");
                if claim {
                    approved.push(id);
                } else {
                    others.push(hold);
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        (approved, others)
    })
}

/// Runs the Python driver to its end (killed and failed after [`DRIVE_WITHIN`]).
fn drive(url: &str, project: &str) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/mcp_run_driver.py");
    let out_dir = tempfile::tempdir().unwrap();
    let stdout_path = out_dir.path().join("stdout.json");
    let stderr_path = out_dir.path().join("stderr.txt");
    let mut child = ChildGuard::spawn(
        Command::new(peers::python())
            .args([script, url, KEY, "s-chat-ana", project, "mech_v1"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout_path).unwrap())
            .stderr(std::fs::File::create(&stderr_path).unwrap()),
    )
    .expect("python with `pip install mcp` (METAFORGE_PYTHON)");
    let deadline = Instant::now() + DRIVE_WITHIN;
    let status = loop {
        if let Some(status) = child.child_mut().try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill();
            panic!(
                "the Python MCP client did not finish the run within {DRIVE_WITHIN:?}:\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = std::fs::read_to_string(&stdout_path).unwrap();
    assert!(
        status.success(),
        "the Python MCP client failed ({status}):\n{}\n{stdout}",
        std::fs::read_to_string(&stderr_path).unwrap_or_default()
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_mode_mech_v1_run_driven_by_the_python_mcp_client_completes_with_its_gates_answered_in_the_chat()
 {
    if require(Peer::PythonMcp).is_none() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let (mut up, gateway, url) = start_up(home.path());
    let stop = Arc::new(AtomicBool::new(false));
    let person = approver(gateway.clone(), Arc::clone(&stop));
    let project = "p-shelf";
    let driven = tokio::task::spawn_blocking({
        let url = url.clone();
        move || drive(&url, project)
    })
    .await
    .unwrap();
    stop.store(true, Ordering::SeqCst);
    let (claims, others) = person.join().unwrap();

    let tools: Vec<&str> = driven["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for tool in [
        "flow.start_run",
        "flow.status",
        "flow.await_gate",
        "run.list",
        "run.get",
        "phase.list_tasks",
        "phase.claim",
        "phase.submit",
        "twin.commit_work_product",
    ] {
        assert!(tools.contains(&tool), "{tool} is offered: {tools:?}");
    }
    assert!(
        !tools
            .iter()
            .any(|t| t.contains("approve") || t.contains("decide")),
        "no MCP tool approves anything: {tools:?}"
    );
    let run_id = driven["run_id"].as_str().unwrap().to_owned();
    assert_eq!(driven["state"]["status"], "completed", "{}", driven["state"]);
    assert!(
        others.is_empty(),
        "nothing but the claims waited for a person: {others:?}"
    );
    let steps = driven["steps"].as_array().unwrap();
    let count = |tool: &str| steps.iter().filter(|s| s["tool"] == tool).count();
    assert_eq!(claims.len(), 7, "one approved claim per mech_v1 phase");
    assert_eq!(count("phase.claim"), 7);
    assert_eq!(count("phase.submit"), 7);
    // The deliverables were written as the client_task caller, on the run's branch.
    for write in steps.iter().filter(|s| s["tool"] == "twin.commit_work_product") {
        assert_eq!(write["structured"]["branch"], format!("run/{run_id}"), "{write}");
        assert_eq!(write["structured"]["run_id"], run_id.as_str(), "{write}");
    }
    // Every gate asked the person with only the decisions it allows, and was decided by them.
    let asked = driven["elicitations"].as_array().unwrap();
    assert_eq!(
        asked.len(),
        4,
        "feasibility, design, simulation, release: {asked:?}"
    );
    for question in asked {
        let choices = &question["schema"]["properties"]["decision"]["enum"];
        assert!(
            choices.as_array().is_some_and(|c| c.contains(&json!("approve"))),
            "{question}"
        );
    }
    let decided: Vec<&Value> = steps
        .iter()
        .filter(|s| s["tool"] == "flow.await_gate" && s["structured"]["status"] == "decided")
        .collect();
    assert_eq!(decided.len(), 4, "{decided:?}");
    for answer in &decided {
        assert_eq!(answer["structured"]["approver"], KEY_IDENTITY, "{answer}");
        assert_eq!(answer["structured"]["surface"], "chat", "{answer}");
    }

    // The gateway's view: the run completed, its deliverables merged into main.
    let (status, run) = http(&gateway, "GET", &format!("/v1/runs/{run_id}"), None);
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["intelligence"], "client", "{run}");
    let (status, nodes) = http(
        &gateway,
        "GET",
        "/v1/twin/nodes?branch=main&type=WorkProduct&limit=100",
        None,
    );
    assert_eq!(status, 200, "{nodes}");
    let mut artifacts: Vec<&str> = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["properties"]["run_id"] == run_id.as_str())
        .filter_map(|n| n["properties"]["artifact"].as_str())
        .collect();
    artifacts.sort_unstable();
    artifacts.dedup();
    assert_eq!(
        artifacts,
        [
            "cad_model",
            "drawing",
            "feasibility_report",
            "release_package",
            "simulation_result",
            "verification_report"
        ],
        "{nodes}"
    );

    // The run ledger's record: each gate decided by the person, from the chat.
    up.kill();
    let home_path = home.path().to_path_buf();
    let paths = StorePaths::resolve(
        |name| (name == "METAFORGE_HOME").then(|| home_path.display().to_string()),
        None,
    )
    .unwrap();
    let ledger = SqliteRunLedger::open(paths.runs.as_ref().unwrap()).await.unwrap();
    let decisions: Vec<(String, String, DecisionSurface)> = ledger
        .transitions(&run_id, 0)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|t| {
            if let Some(RunEvent::GateDecided {
                phase,
                approver,
                surface,
                ..
            }) = t.event
            {
                Some((phase, approver, surface))
            } else {
                None
            }
        })
        .collect();
    let gates: Vec<&str> = decisions.iter().map(|(phase, ..)| phase.as_str()).collect();
    assert_eq!(gates, ["feasibility", "design", "simulation", "release"]);
    assert!(
        decisions
            .iter()
            .all(|(_, approver, surface)| approver == KEY_IDENTITY && *surface == DecisionSurface::Chat),
        "{decisions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_sidecar_pointed_at_the_gateway_starts_and_follows_runs_there_and_writes_nothing_locally()
 {
    use metaforge_ports::ToolSource as _;
    let root = tempfile::tempdir().unwrap();
    let (_gateway, gateway) = crate::common::start_gateway(&root.path().join("gateway"), &[]);
    let sidecar_home = root.path().join("sidecar");
    let (_sidecar, url) = crate::common::start_sidecar(&sidecar_home, |sidecar| {
        sidecar
            .env("METAFORGE_GATEWAY_URL", format!("http://{gateway}"))
            .env("METAFORGE_GATEWAY_API_KEY", format!("{KEY_IDENTITY}:{KEY}"))
            .env("METAFORGE_CLIENT_TASK_WRITES", "on")
            .env("RUST_LOG", "warn")
            .stderr(Stdio::null());
    });
    let client = crate::common::mcp_client(url);
    let started = client
        .call_tool(
            "flow.start_run",
            crate::common::args(
                json!({"template_id": "mech_v1", "intelligence": "client", "project_id": "p-shelf"}),
            ),
        )
        .await
        .unwrap()
        .structured
        .unwrap();
    assert_eq!(started["status"], "started", "{started}");
    let run_id = started["run"]["id"].as_str().unwrap().to_owned();
    // The run is the gateway's.
    let (status, run) = http(&gateway, "GET", &format!("/v1/runs/{run_id}"), None);
    assert_eq!(status, 200, "{run}");
    assert_eq!(
        (run["intelligence"].as_str(), run["project_id"].as_str()),
        (Some("client"), Some("p-shelf"))
    );
    // Its first phase's task is posted at the gateway and listed through the sidecar.
    let deadline = Instant::now() + Duration::from_secs(20);
    let task = loop {
        let listed = client
            .call_tool(
                "phase.list_tasks",
                crate::common::args(json!({"run_id": run_id, "status": "open"})),
            )
            .await
            .unwrap()
            .structured
            .unwrap();
        if let Some(task) = listed["tasks"].as_array().and_then(|t| t.first()).cloned() {
            break task;
        }
        assert!(Instant::now() < deadline, "no task posted for {run_id}: {listed}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(task["phase"], "intent", "{task}");
    let state = client
        .call_tool("flow.status", crate::common::args(json!({"run_id": run_id})))
        .await
        .unwrap()
        .structured
        .unwrap();
    assert_eq!(state["run_id"], run_id.as_str(), "{state}");
    assert_eq!(state["awaiting_gate"], false, "{state}");
    client.close().await;
    // Nothing of the run was written under the sidecar's own home.
    let sidecar_path = sidecar_home.clone();
    let paths = StorePaths::resolve(
        |name| (name == "METAFORGE_HOME").then(|| sidecar_path.display().to_string()),
        None,
    )
    .unwrap();
    for file in [
        paths.runs.clone().unwrap(),
        paths.client_tasks.clone(),
        paths.twin.clone(),
    ] {
        assert!(
            !file.exists(),
            "{} was written by a remote sidecar",
            file.display()
        );
    }
}

#[test]
fn client_task_writes_without_a_gateway_url_refuse_to_start_with_exit_2() {
    let home = tempfile::tempdir().unwrap();
    let out = crate::common::metaforge()
        .args(["mcp", "serve", "--http", "127.0.0.1:0"])
        .env("METAFORGE_HOME", home.path())
        .env("METAFORGE_CLIENT_TASK_WRITES", "on")
        .env_remove("METAFORGE_GATEWAY_URL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("METAFORGE_CLIENT_TASK_WRITES=on needs METAFORGE_GATEWAY_URL"),
        "{stderr}"
    );
    let typo = crate::common::metaforge()
        .args(["mcp", "serve", "--http", "127.0.0.1:0"])
        .env("METAFORGE_HOME", home.path())
        .env("METAFORGE_CLIENT_TASK_WRITES", "yes")
        .output()
        .unwrap();
    assert_eq!(typo.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&typo.stderr)
            .contains("METAFORGE_CLIENT_TASK_WRITES=yes: expected on or off")
    );
}
