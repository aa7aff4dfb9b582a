//! `cargo xtask bench mcp`: MCP `tools/call` over streamable HTTP with keep-alive, the MetaForge
//! sidecar (`flow.list`) against the Python MCP SDK (`pip install mcp==2.3.0`, a server with the
//! same read tool answering the same text, JSON responses), both protocol eras: 2025-11-25 (a
//! session: initialize once, then wrk posts `tools/call` with its session id) and 2026-07-28
//! (per-request metadata, no session). Servers on core 1, wrk on core 0, c = 1, 8, 64, 256.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::bench_kit::{
    Guard, Row, SUT_CORE, bench_seconds, free_port, measure_cells, pinned, print_table, release_binary,
    rss_kb, wait_listening, write_rpc_script,
};

/// One HTTP answer: status, headers (names lower-cased), body.
type Answer = (u16, Vec<(String, String)>, String);

/// One raw HTTP/1.1 POST.
fn post(port: u16, headers: &[(&str, String)], body: &Value) -> Result<Answer> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let body = body.to_string();
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line)?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("status line {status_line:?}"))?;
    let mut found = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            found.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let mut rest = String::new();
    let _ = reader.read_to_string(&mut rest);
    Ok((status, found, rest))
}

/// The per-request metadata a 2026-07-28 request carries.
fn meta_2026() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
           "io.modelcontextprotocol/clientCapabilities": {}})
}

/// The wrk script for one server and era (a 2025-11-25 session is opened here).
fn script_for(scratch: &Path, name: &str, port: u16, era: &str) -> Result<PathBuf> {
    let accept = ("Accept", "application/json, text/event-stream".to_owned());
    let content = ("Content-Type", "application/json".to_owned());
    if era == "2026-07-28" {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "flow.list", "arguments": {}, "_meta": meta_2026()}});
        return write_rpc_script(
            scratch,
            name,
            &body.to_string(),
            &[
                accept,
                content,
                ("MCP-Protocol-Version", era.to_owned()),
                ("Mcp-Method", "tools/call".to_owned()),
                ("Mcp-Name", "flow.list".to_owned()),
            ],
        );
    }
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": era, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}});
    let (status, headers, body) = post(port, &[], &init)?;
    if status != 200 {
        bail!("{name}: initialize answered {status}: {body}");
    }
    let session = headers
        .iter()
        .find(|(k, _)| k == "mcp-session-id")
        .map(|(_, v)| v.clone())
        .with_context(|| format!("{name}: no session id after initialize"))?;
    let session_headers = [
        ("Mcp-Session-Id", session.clone()),
        ("MCP-Protocol-Version", era.to_owned()),
    ];
    let (status, _, body) = post(
        port,
        &session_headers,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )?;
    if !(200..300).contains(&status) {
        bail!("{name}: notifications/initialized answered {status}: {body}");
    }
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "flow.list", "arguments": {}}});
    write_rpc_script(
        scratch,
        name,
        &call.to_string(),
        &[
            accept,
            content,
            ("Mcp-Session-Id", session),
            ("MCP-Protocol-Version", era.to_owned()),
        ],
    )
}

/// The text MetaForge's `flow.list` answers, so the peer's tool answers the same bytes.
fn flow_list_text(port: u16) -> Result<String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "flow.list", "arguments": {}, "_meta": meta_2026()}});
    let (status, _, text) = post(
        port,
        &[
            ("MCP-Protocol-Version", "2026-07-28".to_owned()),
            ("Mcp-Method", "tools/call".to_owned()),
            ("Mcp-Name", "flow.list".to_owned()),
        ],
        &body,
    )?;
    if status != 200 {
        bail!("flow.list answered {status}: {text}");
    }
    // One JSON body, or (an older sidecar) an SSE event carrying it: read the first message.
    let start = text
        .find("{\"jsonrpc\"")
        .context("flow.list answered no JSON-RPC message")?;
    let message: Value = serde_json::Deserializer::from_str(&text[start..])
        .into_iter::<Value>()
        .next()
        .context("flow.list answered no JSON-RPC message")?
        .context("flow.list's message is not JSON")?;
    message["result"]["content"][0]["text"]
        .as_str()
        .map(str::to_owned)
        .context("flow.list answered no text")
}

/// Runs the benchmark and prints the table.
pub(crate) fn run() -> Result<()> {
    let seconds = bench_seconds();
    let binary = release_binary()?;
    let scratch = std::env::temp_dir().join(format!("metaforge-bench-mcp-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = bench(&binary, &scratch, seconds);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn bench(binary: &Path, scratch: &Path, seconds: u64) -> Result<()> {
    let ours_port = free_port()?;
    let ours = Guard(
        pinned(SUT_CORE, binary)
            .args(["mcp", "serve", "--http", &format!("127.0.0.1:{ours_port}")])
            .env("METAFORGE_HOME", scratch.join("home"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start the sidecar")?,
    );
    wait_listening(ours_port, Duration::from_secs(20), "metaforge sidecar")?;
    let text_file = scratch.join("flow_list.txt");
    std::fs::write(&text_file, flow_list_text(ours_port)?)?;

    let peer_port = free_port()?;
    let server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers/mcp_bench_server.py");
    let peer = Guard(
        pinned(SUT_CORE, "python3")
            .arg(&server)
            .arg(peer_port.to_string())
            .arg(&text_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start the Python MCP SDK server (pip install mcp==2.3.0)")?,
    );
    wait_listening(peer_port, Duration::from_secs(30), "python mcp server")?;
    std::thread::sleep(Duration::from_secs(1));
    let idle = vec![
        ("metaforge sidecar".to_owned(), rss_kb(ours.0.id())),
        ("python mcp sdk".to_owned(), rss_kb(peer.0.id())),
    ];
    let mut rows = Vec::new();
    for era in ["2025-11-25", "2026-07-28"] {
        let targets = [
            (format!("metaforge sidecar {era}"), ours_port, ours.0.id()),
            (format!("python mcp sdk {era}"), peer_port, peer.0.id()),
        ];
        for (name, port, pid) in &targets {
            let script = script_for(scratch, &name.replace(' ', "_"), *port, era)?;
            let url = format!("http://127.0.0.1:{port}/mcp");
            measure_cells(&mut rows, name, &url, &script, seconds, Some(*pid))?;
        }
        print_table(
            &format!(
                "MCP tools/call flow.list, streamable HTTP keep-alive, era {era}, wrk {seconds}s per cell"
            ),
            &rows
                .iter()
                .filter(|r| r.target.ends_with(era))
                .map(|r| Row {
                    target: r.target.clone(),
                    connections: r.connections,
                    figures: r.figures,
                })
                .collect::<Vec<_>>(),
            None,
            &format!("metaforge sidecar {era}"),
            &format!("python mcp sdk {era}"),
            &idle,
        );
    }
    drop(peer);
    drop(ours);
    Ok(())
}
