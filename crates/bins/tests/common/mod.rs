//! Helpers shared by the tests that run the `metaforge` binary as a real process: spawning the
//! gateway and the HTTP sidecar on loopback, waiting until they accept connections, killing them
//! with their process group when the test lets go, and the small HTTP exchanges a person's client
//! would make.
//!
//! A module of the `it` test binary (`tests/it/main.rs`), and included with `mod common;` by the
//! feature-gated binaries (`run_events_kafka`, `runs_temporal`), which put
//! `#[expect(dead_code, ...)]` on that line for the part they do not use.
#![expect(
    clippy::disallowed_methods,
    reason = "process tests read where peers live and the wall clock for their own waits"
)]
#![expect(
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns: a process that cannot start must fail the test loudly"
)]

pub(crate) mod otlp;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use metaforge_adapters_mcp::{McpToolServer, ProtocolChoice, ServerConfig, ServerTransport, StdioLaunch};
use metaforge_ports::{Clock, IdGen, Timestamp};
use metaforge_test_support::{ChildGuard, net, peers};
use serde_json::{Map, Value};

/// The operator key every gateway started here accepts (identity `ops`); [`http`] sends it.
pub(crate) const KEY: &str = "sk-ops-000001";

/// How long a process may take to accept connections before the test fails.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// A spawned process, killed with its process group and reaped when dropped, so a failing
/// assertion never leaves a server running behind the test.
pub(crate) type Process = ChildGuard;

/// Spawns `command` as a [`Process`]; fails the test naming `what` when it cannot start.
pub(crate) fn spawn(command: &mut Command, what: &str) -> Process {
    ChildGuard::spawn(command).unwrap_or_else(|e| panic!("spawn {what}: {e}"))
}

/// Real ids (UUID v7), as the binary makes them, for services a test composes itself.
pub(crate) struct Ids;

impl IdGen for Ids {
    fn new_id(&self) -> String {
        uuid::Uuid::now_v7().to_string()
    }
}

/// The wall clock, as the binary reads it, for services a test composes itself.
pub(crate) struct Wall;

impl Clock for Wall {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
    }
}

/// A command for the `metaforge` binary cargo built for these tests.
pub(crate) fn metaforge() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_metaforge"));
    // The engineering tool servers (on by default where their programs are installed) would start
    // beside every test's gateway; the tests that mean them turn them back on.
    command.env("METAFORGE_ENGINEERING_TOOL_SERVERS", "off");
    command
}

/// Waits until `addr` accepts TCP connections; fails the test naming `what` if it never does.
pub(crate) fn wait_until_listening(addr: impl ToSocketAddrs + std::fmt::Debug, what: &str) {
    let deadline = Instant::now() + READY_WITHIN;
    while TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {addr:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `host:port` a start-up banner line names after `http://`.
pub(crate) fn banner_address(line: &str) -> String {
    line.split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the banner names the address")
        .to_owned()
}

/// `metaforge <args>` as an operator starts a server: over `home`, accepting [`KEY`], logging
/// warnings only (discarded), its start-up banner readable on stdout.
pub(crate) fn server_command(args: &[&str], home: &Path) -> Command {
    let mut command = metaforge();
    command
        .args(args)
        .env("METAFORGE_HOME", home)
        .env("METAFORGE_GATEWAY_API_KEY", format!("ops:{KEY}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    command
}

/// `metaforge gateway` on a free loopback port over `home`, accepting [`KEY`], with `vars` added
/// to its environment; returns once it accepts connections, with its `host:port`.
pub(crate) fn start_gateway(home: &Path, vars: &[(&str, String)]) -> (Process, String) {
    let mut gateway = spawn(
        server_command(&["gateway", "--bind", "127.0.0.1:0"], home)
            .envs(vars.iter().map(|(k, v)| (*k, v.as_str()))),
        "gateway",
    );
    let stdout = gateway.child_mut().stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read banner");
    let addr = banner_address(&line);
    wait_until_listening(addr.as_str(), "gateway");
    (gateway, addr)
}

/// `metaforge mcp serve --http` on a free loopback port over `home`, its stdout discarded;
/// `configure` adds what the test needs (environment, where stderr goes). Returns once it accepts
/// connections, with its MCP endpoint URL.
pub(crate) fn start_sidecar(home: &Path, configure: impl FnOnce(&mut Command)) -> (Process, String) {
    let port = net::unused_port();
    let mut command = metaforge();
    command
        .args(["mcp", "serve", "--http", &format!("127.0.0.1:{port}")])
        .env("METAFORGE_HOME", home)
        .stdout(Stdio::null());
    configure(&mut command);
    let sidecar = spawn(&mut command, "sidecar");
    wait_until_listening(("127.0.0.1", port), "sidecar");
    (sidecar, format!("http://127.0.0.1:{port}/mcp"))
}

/// The project's own MCP client for the sidecar endpoint at `url`, negotiating the protocol era.
/// It presents [`KEY`] as `X-API-Key`: a sidecar with the gateway's keys configured requires it,
/// and an open one ignores that header (its caller stays `remote`).
pub(crate) fn mcp_client(url: String) -> McpToolServer {
    let mut config = ServerConfig::new(
        "metaforge",
        ServerTransport::Http {
            url,
            headers: [("x-api-key".to_owned(), KEY.to_owned())].into(),
        },
    );
    config.protocol = ProtocolChoice::Auto;
    // Over HTTP: no process is started, so nothing of the launch is used.
    McpToolServer::new(config, Arc::new(StdioLaunch::new([], std::env::temp_dir())))
}

/// A minimal HTTP/1.1 exchange with the gateway at `addr` carrying [`KEY`], as a person's client
/// would make it (the test crate carries no HTTP client): the status and the JSON body
/// (`Null` when the body is not JSON).
pub(crate) fn http(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let (status, text) = http_raw(addr, method, path, body, &[]);
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// [`http`] with extra request headers, answering the raw body text (e.g. `/metrics`).
pub(crate) fn http_raw(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let payload = body.map(Value::to_string).unwrap_or_default();
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nX-API-Key: {KEY}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    stream.write_all(request.as_bytes()).expect("write");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read");
    let status: u16 = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    (status, body.to_owned())
}

/// Tool-call arguments from a `json!` object literal.
pub(crate) fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("tool arguments are a JSON object")
}

/// `flow.propose` arguments with caller operations on the `mech_v1` template, so no model is
/// called: one added deliverable, a vendor route, sim-validated maturity.
pub(crate) fn proposal_arguments() -> Map<String, Value> {
    args(serde_json::json!({
        "template_id": "mech_v1",
        "operations": [{"op": "add_deliverable", "phase": "design", "value": "test_plan",
                        "rationale": "load-tested before release"}],
        "context": {"manufacturing_context": {"route": "vendor"},
                    "target_maturity": "sim_validated", "loads_and_use": "20 kg"}
    }))
}

/// aimock serving `fixtures` (a path relative to this crate) and its port; `None` (skipped, the
/// reason printed) when aimock is not installed.
pub(crate) fn start_aimock(fixtures: &str) -> Option<(peers::Aimock, u16)> {
    let mock = peers::start_aimock(&std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(fixtures))?;
    let port = mock.port;
    Some((mock, port))
}

/// The environment that points a `metaforge` process's `openai` provider at aimock on `port` and
/// routes `flow_generator` there (credentials file kept inside `home`).
pub(crate) fn aimock_provider_env(port: u16, home: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("HARNESS_OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1")),
        ("OPENAI_API_KEY", "sk-test-aimock".to_owned()),
        ("METAFORGE_ROUTE_FLOW_GENERATOR", "openai:gpt-4o-mini".to_owned()),
        (
            "METAFORGE_CREDENTIALS_PATH",
            home.join("credentials.json").display().to_string(),
        ),
    ]
}
