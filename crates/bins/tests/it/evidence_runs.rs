//! Evidence in the twin and numeric grounding through the real binary (issue 40, steps 5 and 6):
//! a `mech_v1` run on the scripted phase model whose simulation phase calls `fea.static` on the
//! gateway's own sandboxed fea tool server (real gmsh and CalculiX). MetaForge records the result
//! in the run's twin branch itself — the numbers with units, the programs and versions, the input
//! hash, the sandbox, the `.dat` and `.frd` files with their hashes — the gate card shows it, and
//! the run completes with it merged into `main`. A second run whose summary misquotes the stress
//! keeps the numeric banner in its phase summary and counts
//! `metaforge_chat_ungrounded_claim_total{kind="numeric"}`.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "process tests: a failure must stop the test loudly"
)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use metaforge_test_support::{Peer, require};
use serde_json::{Value, json};

use crate::run_support::{
    ScriptedModel, approve_body, exchange, log_tail, merged_into_main, open_gate, start_gateway,
};

/// A phase is a handful of model calls on loopback; the simulation adds a mesh and a solve.
const WAIT: Duration = Duration::from_secs(90);

struct Gateway {
    _process: crate::common::Process,
    addr: String,
    log: PathBuf,
    _home: tempfile::TempDir,
}

impl Gateway {
    /// A gateway on `model` offering MetaForge's own engineering servers, and the servers of
    /// `servers` (a servers file's `mcpServers`) when given.
    fn start(model: &ScriptedModel, servers: Option<Value>) -> Self {
        let home = tempfile::tempdir().unwrap();
        if let Some(servers) = servers {
            std::fs::write(
                home.path().join("mcp_servers.json"),
                json!({"mcpServers": servers}).to_string(),
            )
            .unwrap();
        }
        let mut vars = model.gateway_env(home.path());
        vars.push(("METAFORGE_ENGINEERING_TOOL_SERVERS", "on".to_owned()));
        let log = home.path().join("gateway.log");
        let (process, addr) = start_gateway(home.path(), &vars, &log);
        Self {
            _process: process,
            addr,
            log,
            _home: home,
        }
    }

    /// Approves `run`'s gates until it completes.
    fn approve_to_completion(&self, run: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let status = self.get(&format!("/v1/runs/{run}"))["status"].clone();
            if status == "completed" {
                return;
            }
            assert!(
                status != "failed" && Instant::now() < deadline,
                "{run} did not complete ({status})\n--- gateway log ---\n{}",
                log_tail(&self.log, 60)
            );
            if let Some(gate) = open_gate(&self.addr, run).unwrap().filter(|g| g.approvable) {
                let (status, body) = self.call(
                    "POST",
                    &format!("/v1/runs/{run}/approval"),
                    Some(&approve_body(&gate)),
                );
                assert_eq!(status, 200, "{body}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        exchange(&self.addr, method, path, body).unwrap_or_else(|e| {
            panic!(
                "{method} {path}: {e}\n--- gateway log ---\n{}",
                log_tail(&self.log, 40)
            )
        })
    }

    fn get(&self, path: &str) -> Value {
        let (status, body) = self.call("GET", path, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    /// Approves every gate of `run` until it parks at `phase`'s (or ends).
    fn approve_until(&self, run: &str, phase: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(gate) = open_gate(&self.addr, run).unwrap().filter(|g| g.approvable) {
                if gate.phase == phase {
                    return;
                }
                let (status, body) = self.call(
                    "POST",
                    &format!("/v1/runs/{run}/approval"),
                    Some(&approve_body(&gate)),
                );
                assert_eq!(status, 200, "{body}");
            }
            assert!(
                Instant::now() < deadline,
                "waited {WAIT:?} for {run} to reach the {phase} gate\n--- gateway log ---\n{}",
                log_tail(&self.log, 60)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn phase(&self, run: &str, phase: &str) -> Value {
        let state = self.get(&format!("/v1/runs/{run}/flow-state"));
        state["phases"]
            .as_array()
            .and_then(|phases| phases.iter().find(|p| p["id"] == phase).cloned())
            .unwrap_or_else(|| panic!("no phase {phase} in {state}"))
    }

    fn start_mech_run(&self) -> String {
        let (status, run) = self.call("POST", "/v1/runs", Some(&json!({"template_id": "mech_v1"})));
        assert_eq!(status, 201, "{run}");
        run["id"].as_str().unwrap().to_owned()
    }
}

/// The `metaforge_chat_ungrounded_claim_total{kind="numeric"}` count in `/metrics` text.
fn numeric_claims(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("metaforge_chat_ungrounded_claim_total") && l.contains("kind=\"numeric\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_mech_v1_simulation_phase_records_a_real_fea_result_as_evidence_and_a_misquoted_stress_is_flagged() {
    if require(Peer::Bubblewrap).is_none()
        || require(Peer::Gmsh).is_none()
        || require(Peer::Calculix).is_none()
    {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let model = runtime.block_on(ScriptedModel::start());
    let gw = Gateway::start(&model, None);

    // Run 1: the simulation phase's evidence, recorded by MetaForge.
    let run = gw.start_mech_run();
    gw.approve_until(&run, "simulation");
    assert_eq!(
        model.calls().simulations,
        1,
        "the worker asked for one simulation"
    );
    let branch = format!("run/{run}");
    let nodes = gw.get(&format!(
        "/v1/twin/nodes?branch={branch}&type=WorkProduct&run_id={run}&phase=simulation&limit=50"
    ));
    let nodes = nodes["nodes"].as_array().unwrap();
    let result = nodes
        .iter()
        .find(|n| n["properties"]["artifact"] == "simulation_result")
        .unwrap_or_else(|| panic!("no simulation_result in {nodes:?}"));
    let evidence = &result["properties"]["evidence"];
    assert_eq!(evidence["tool"], "fea.static", "{evidence}");
    assert_eq!(evidence["server"], "fea", "{evidence}");
    let quantity = |name: &str| {
        evidence["quantities"]
            .as_array()
            .and_then(|qs| qs.iter().find(|q| q["name"] == name))
            .unwrap_or_else(|| panic!("no {name} in {evidence}"))
            .clone()
    };
    let stress = quantity("max_von_mises_stress");
    assert_eq!(stress["unit"], "MPa");
    let stress = stress["value"].as_f64().unwrap();
    // Mc/I for 100 N on a 100 mm steel cantilever of 10 × 10 mm: 60 MPa.
    assert!(
        (stress - 60.0).abs() / 60.0 < 0.10,
        "stress {stress} MPa against Mc/I = 60 MPa"
    );
    let safety = quantity("safety_factor")["value"].as_f64().unwrap();
    assert!((safety - 235.0 / stress).abs() < 1e-9, "S235: {safety}");
    let programs: Vec<&str> = evidence["programs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(programs, ["gmsh", "calculix"]);
    assert_eq!(evidence["input_sha256"].as_str().map(str::len), Some(64));
    assert_eq!(evidence["sandbox"]["sandboxed"], true);
    // The files: one node each, linked from the result, their text hashed as the evidence says.
    let result_id = result["id"].as_str().unwrap();
    let edges = gw.get(&format!(
        "/v1/twin/nodes/{result_id}/edges?branch={branch}&direction=outgoing&type=CONTAINS"
    ));
    let linked: Vec<&str> = edges["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["to"].as_str())
        .collect();
    assert_eq!(linked.len(), 2, "{edges}");
    for (file, id) in evidence["files"].as_array().unwrap().iter().zip(&linked) {
        let node = gw.get(&format!("/v1/twin/nodes/{id}?branch={branch}"));
        let props = &node["node"]["properties"];
        let props = if props.is_null() {
            &node["properties"]
        } else {
            props
        };
        assert_eq!(props["file_name"], file["name"], "{props}");
        assert_eq!(props["content_hash"], file["sha256"]);
        let text = props["content"].as_str().unwrap();
        assert_eq!(
            metaforge_ports::sha256_hex(text),
            file["sha256"].as_str().unwrap()
        );
        println!(
            "evidence file {} {} bytes sha256 {}",
            file["name"], file["bytes"], file["sha256"]
        );
    }
    // The phase summary quotes the numbers and carries no banner; the model did not commit the
    // simulation result itself (MetaForge did), only the verification report.
    let simulation = gw.phase(&run, "simulation");
    let summary = simulation["summary"].as_str().unwrap();
    assert!(summary.contains("MPa") && !summary.contains('⚠'), "{summary}");
    assert_eq!(
        simulation["deliverables"],
        json!([
            "simulation_result",
            "simulation_result_file",
            "verification_report"
        ])
    );
    println!("run 1 simulation summary: {summary}");
    println!(
        "evidence: stress {stress:.2} MPa (Mc/I 60 MPa), safety factor {safety:.3}, input sha256 {}",
        evidence["input_sha256"]
    );
    gw.approve_until(&run, "release");
    let gate = open_gate(&gw.addr, &run).unwrap().unwrap();
    let (status, body) = gw.call(
        "POST",
        &format!("/v1/runs/{run}/approval"),
        Some(&approve_body(&gate)),
    );
    assert_eq!(status, 200, "{body}");
    let deadline = Instant::now() + WAIT;
    while gw.get(&format!("/v1/runs/{run}"))["status"] != "completed" {
        assert!(Instant::now() < deadline, "run 1 did not complete");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        merged_into_main(&gw.addr, &run).unwrap(),
        "the evidence reached main"
    );

    // Run 2: the summary misquotes the stress (twice the tool's); the banner stays in it.
    let before = numeric_claims(&metrics_text(&gw.addr));
    model.misquote_stress(2.0);
    let second = gw.start_mech_run();
    gw.approve_until(&second, "simulation");
    let summary = gw.phase(&second, "simulation")["summary"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        summary.starts_with("⚠ Numbers that differ from what the tools returned this turn:")
            && summary.contains("MPa"),
        "{summary}"
    );
    println!("run 2 simulation summary: {summary}");
    let metrics = metrics_text(&gw.addr);
    assert!(
        numeric_claims(&metrics) > before,
        "the numeric claim was counted:\n{metrics}"
    );
    let (status, body) = gw.call(
        "POST",
        &format!("/v1/runs/{second}/cancel"),
        Some(&json!({"reason": "test done"})),
    );
    assert!(status == 200 || status == 202, "{body}");
}

/// `/metrics` as text.
fn metrics_text(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nX-API-Key: {}\r\nConnection: close\r\n\r\n",
        crate::common::KEY
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    raw
}

#[test]
fn a_hardware_v1_electronics_phase_checks_the_demo_board_and_records_the_drc_report_and_bom() {
    if require(Peer::Bubblewrap).is_none() {
        return;
    }
    let Some(demos) = require(Peer::Kicad) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let model = runtime.block_on(ScriptedModel::start());
    // The demo project: kicad-demos' pic_programmer as the project's board.
    let workspace = tempfile::tempdir().unwrap();
    let workspace_path = workspace.path().canonicalize().unwrap();
    let board = workspace_path.join("board");
    std::fs::create_dir(&board).unwrap();
    for file in [
        "pic_programmer.kicad_pcb",
        "pic_programmer.kicad_pro",
        "pic_programmer.kicad_sch",
        "pic_sockets.kicad_sch",
    ] {
        std::fs::copy(demos.join("pic_programmer").join(file), board.join(file)).unwrap();
    }
    let gw = Gateway::start(
        &model,
        Some(json!({"kicad": {
            "command": env!("CARGO_BIN_EXE_metaforge"),
            "args": ["tool-server", "kicad", "--workspace", workspace_path],
            "workspace": workspace_path, "domains": ["electrical", "electronics"]
        }})),
    );
    let (status, run) = gw.call("POST", "/v1/runs", Some(&json!({"template_id": "hardware_v1"})));
    assert_eq!(status, 201, "{run}");
    let run = run["id"].as_str().unwrap().to_owned();
    gw.approve_to_completion(&run);
    let calls = model.calls();
    println!("engineering calls: {:?}", calls.engineering);
    assert!(
        calls.engineering.iter().any(|t| t.ends_with("kicad_drc")),
        "{calls:?}"
    );
    assert!(
        calls.engineering.iter().any(|t| t.ends_with("kicad_bom")),
        "{calls:?}"
    );
    // The electronics phase's evidence, recorded by MetaForge, merged into main with the run.
    let nodes = gw.get(&format!(
        "/v1/twin/nodes?branch=main&type=WorkProduct&run_id={run}&phase=electronics&limit=50"
    ));
    let nodes = nodes["nodes"].as_array().unwrap();
    let by_artifact = |artifact: &str| {
        nodes
            .iter()
            .find(|n| n["properties"]["artifact"] == artifact)
            .unwrap_or_else(|| panic!("no {artifact} in {nodes:?}"))
            .clone()
    };
    let drc = by_artifact("drc_report");
    let evidence = &drc["properties"]["evidence"];
    assert_eq!(evidence["tool"], "kicad.drc", "{evidence}");
    assert_eq!(evidence["server"], "kicad", "{evidence}");
    assert_eq!(evidence["files"][0]["name"], "out/drc.rpt", "{evidence}");
    assert_eq!(evidence["sandbox"]["sandboxed"], true, "{evidence}");
    // A node's content comes with the node itself.
    let content = |node: &Value| {
        let id = node["id"].as_str().unwrap();
        let node = gw.get(&format!("/v1/twin/nodes/{id}?branch=main"));
        let props = if node["node"].is_null() {
            &node["properties"]
        } else {
            &node["node"]["properties"]
        };
        props["content"].as_str().unwrap_or_default().to_owned()
    };
    let text = content(&by_artifact("drc_report_file"));
    assert!(text.contains("** Found"), "KiCad's own report: {text}");
    let bom = by_artifact("bom");
    assert_eq!(bom["properties"]["evidence"]["tool"], "kicad.bom");
    let groups: Value = serde_json::from_str(&content(&by_artifact("bom_file"))).unwrap();
    let parts: u64 = groups
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["quantity"].as_u64().unwrap())
        .sum();
    assert_eq!(parts, 63, "the demo board's 63 parts");
    assert!(merged_into_main(&gw.addr, &run).unwrap());
    // The worker committed only what the tools did not record.
    let electronics = gw.phase(&run, "electronics");
    println!("electronics deliverables: {}", electronics["deliverables"]);
    println!("hardware_v1 run {run} completed with KiCad evidence in main");
}
