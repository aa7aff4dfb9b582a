//! `metaforge gateway` composing its MCP tool servers from the servers file
//! (`METAFORGE_MCP_SERVERS_PATH`, the `mcpServers` shape): MetaForge's own sidecar process as a
//! tool server, one that cannot start and one disabled, reported per server in `/health`; a bad
//! file, or a missing one at an explicitly set path, refuses start naming the field or variable.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a process that misbehaves must fail the test loudly"
)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;

use metaforge_test_support::process;
use serde_json::{Value, json};

use crate::common::{http, server_command, start_gateway, start_sidecar};

/// `GET /health` with no key at all: the public view.
fn public_health(addr: &str) -> Value {
    let mut stream = TcpStream::connect(addr).expect("connect");
    write!(
        stream,
        "GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    serde_json::from_str(body).unwrap_or(Value::Null)
}

#[test]
fn the_gateway_reports_each_configured_mcp_server_in_health() {
    let sidecar_home = tempfile::tempdir().unwrap();
    let (_sidecar, sidecar_url) = start_sidecar(sidecar_home.path(), |c| {
        c.env("RUST_LOG", "warn").stderr(Stdio::null());
    });
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("tools.json");
    std::fs::write(
        &file,
        json!({"mcpServers": {
            "metaforge": {"type": "http", "url": sidecar_url},
            "broken": {"command": "/nonexistent/mcp-server"},
            "off": {"command": "node", "args": ["server.js"], "disabled": true}
        }})
        .to_string(),
    )
    .unwrap();
    let (_gateway, addr) = start_gateway(
        home.path(),
        &[("METAFORGE_MCP_SERVERS_PATH", file.display().to_string())],
    );
    let (status, health) = http(&addr, "GET", "/health", None);
    println!("{}", serde_json::to_string_pretty(&health).unwrap());
    assert_eq!(status, 200);
    assert_eq!(health["status"], "degraded", "a server is unavailable: {health}");
    let servers = &health["mcp_servers"]["servers"];
    assert_eq!(health["mcp_servers"]["status"], "degraded");
    assert_eq!(servers["metaforge"]["status"], "ok", "{servers}");
    assert!(
        servers["metaforge"]["tools"].as_u64().unwrap() >= 2,
        "the sidecar's flow tools: {servers}"
    );
    assert_eq!(servers["broken"]["status"], "unavailable");
    assert!(
        servers["broken"]["reason"]
            .as_str()
            .unwrap()
            .contains("mcp server broken: cannot start /nonexistent/mcp-server"),
        "{servers}"
    );
    assert_eq!(servers["off"], json!({"status": "disabled"}));
    let public = public_health(&addr);
    assert_eq!(public["status"], "degraded");
    assert_eq!(
        public["mcp_servers"],
        json!({"status": "degraded"}),
        "no names or reasons without a key: {public}"
    );
}

#[test]
fn a_gateway_without_a_servers_file_reports_no_servers_and_stays_ok() {
    let home = tempfile::tempdir().unwrap();
    let (_gateway, addr) = start_gateway(home.path(), &[]);
    let (_, health) = http(&addr, "GET", "/health", None);
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["mcp_servers"], json!({"status": "ok", "servers": {}}));
}

/// Runs `metaforge gateway` to its exit with `vars`; (exit code, stderr).
fn refused_start(home: &std::path::Path, vars: &[(&str, String)]) -> (Option<i32>, String) {
    let mut command = server_command(&["gateway", "--bind", "127.0.0.1:0"], home);
    command.envs(vars.iter().map(|(k, v)| (*k, v.as_str())));
    let out = process::output(&mut command).unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_bad_servers_file_or_a_missing_explicit_one_refuses_start_naming_it() {
    let home = tempfile::tempdir().unwrap();
    // At the default place, $METAFORGE_HOME/mcp_servers.json.
    let default_file = home.path().join("mcp_servers.json");
    std::fs::write(
        &default_file,
        json!({"mcpServers": {"cad": {"url": "ftp://cad.example"}}}).to_string(),
    )
    .unwrap();
    let (code, stderr) = refused_start(home.path(), &[]);
    println!("{stderr}");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}: mcpServers.cad.url: must start with http://",
            default_file.display()
        )),
        "{stderr}"
    );
    std::fs::remove_file(&default_file).unwrap();

    let missing = home.path().join("elsewhere.json");
    let (code, stderr) = refused_start(
        home.path(),
        &[("METAFORGE_MCP_SERVERS_PATH", missing.display().to_string())],
    );
    println!("{stderr}");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "METAFORGE_MCP_SERVERS_PATH={}: no such file",
            missing.display()
        )),
        "{stderr}"
    );
}

/// The sandbox probe the adapter's tests drive (`crates/adapters-mcp/tests/fixtures`).
fn sandbox_probe() -> String {
    metaforge_test_support::peers::manifest_dir()
        .join("../adapters-mcp/tests/fixtures/sandbox_probe.py")
        .display()
        .to_string()
}

#[test]
fn a_stdio_server_runs_in_its_sandbox_and_one_written_off_is_warned_and_shown_in_health() {
    use metaforge_test_support::{Peer, require};
    if require(Peer::Bubblewrap).is_none() {
        return;
    }
    let Some(python) = require(Peer::PythonMcp) else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("tools.json");
    let python = python.display().to_string();
    std::fs::write(
        &file,
        json!({"mcpServers": {
            "probe": {"command": python, "args": [sandbox_probe()], "protocol": "2025-11-25"},
            "loose": {"command": python, "args": [sandbox_probe()], "protocol": "2025-11-25",
                      "sandbox": "off"}
        }})
        .to_string(),
    )
    .unwrap();
    let log = home.path().join("gateway.log");
    let mut command = crate::common::server_command(&["gateway", "--bind", "127.0.0.1:0"], home.path());
    command
        .env("METAFORGE_MCP_SERVERS_PATH", file.display().to_string())
        .env("RUST_LOG", "info")
        .env("METAFORGE_LOG_FORMAT", "json")
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
    let mut gateway = crate::common::spawn(&mut command, "gateway");
    let stdout = gateway.child_mut().stdout.take().expect("stdout");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).expect("banner");
    let addr = crate::common::banner_address(&line);
    crate::common::wait_until_listening(addr.as_str(), "gateway");
    let (status, health) = http(&addr, "GET", "/health", None);
    println!(
        "{}",
        serde_json::to_string_pretty(&health["mcp_servers"]).unwrap()
    );
    assert_eq!(status, 200);
    let servers = &health["mcp_servers"]["servers"];
    assert_eq!(servers["probe"]["status"], "ok", "{servers}");
    assert_eq!(servers["probe"]["sandbox"], "on", "{servers}");
    assert_eq!(servers["loose"]["status"], "ok", "{servers}");
    assert_eq!(servers["loose"]["sandbox"], "off", "{servers}");
    let text = std::fs::read_to_string(&log).unwrap();
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let event = |name: &str, server: &str| {
        events
            .iter()
            .find(|e| e["fields"]["event"] == name && e["fields"]["server"] == server)
    };
    let warned = event("mcp_server_unsandboxed", "loose").expect("the unsandboxed start is warned");
    assert_eq!(warned["level"], "WARN", "{warned}");
    assert!(event("mcp_server_sandboxed", "probe").is_some(), "{text}");
    assert!(event("mcp_server_unsandboxed", "probe").is_none(), "{text}");
}
