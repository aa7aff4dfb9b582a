//! The HTTP MCP sidecar answers a kept-alive client fast (issue 13): a `tools/call` that does not
//! stream is one `application/json` body in both eras (2026-07-28 through rmcp's JSON mode, a
//! 2025-11-25 session through `json_reply`), and an answer written in pieces (SSE) does not pay
//! the ~40 ms that Nagle's algorithm and a delayed ACK add on a kept-alive connection: the one
//! listener both servers use sets `TCP_NODELAY`, pinned here with the gateway's streamed chat
//! completion (several SSE writes per answer).

#![expect(
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns: a failed exchange must fail the test loudly"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::{KEY, aimock_provider_env, start_aimock, start_gateway, start_sidecar};
use serde_json::{Value, json};

/// One HTTP/1.1 response read off a kept-alive connection.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC message: the body itself, or the first `data:` event that carries one.
    fn message(&self) -> Value {
        if self
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json"))
        {
            return serde_json::from_str(&self.body).expect("a JSON body");
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .find(|d| !d.is_empty())
            .map(|d| serde_json::from_str(d).expect("a JSON event"))
            .unwrap_or_else(|| panic!("no message in {:?}", self.body))
    }
}

/// A kept-alive connection to the sidecar.
struct Conn {
    reader: BufReader<TcpStream>,
    addr: String,
}

impl Conn {
    fn open(url: &str) -> Self {
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_owned();
        let stream = TcpStream::connect(&addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        Self {
            reader: BufReader::new(stream),
            addr,
        }
    }

    fn post(&mut self, headers: &[(&str, &str)], body: &Value) -> Reply {
        self.post_accepting("application/json, text/event-stream", headers, body)
    }

    fn post_accepting(&mut self, accept: &str, headers: &[(&str, &str)], body: &Value) -> Reply {
        let body = body.to_string();
        let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: {accept}\r\n{extra}Content-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.reader
            .get_mut()
            .write_all(request.as_bytes())
            .expect("write");
        self.read_reply()
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read line");
        line.trim_end_matches(['\r', '\n']).to_owned()
    }

    fn read_reply(&mut self) -> Reply {
        let status_line = self.line();
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("status line {status_line:?}"));
        let mut headers = Vec::new();
        loop {
            let line = self.line();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.push((k.trim().to_owned(), v.trim().to_owned()));
            }
        }
        let find = |name: &str| {
            headers
                .iter()
                .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        if let Some(length) = find("content-length") {
            let length: usize = length.parse().expect("content-length");
            body.resize(length, 0);
            self.reader.read_exact(&mut body).expect("body");
        } else if find("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
            loop {
                let size = usize::from_str_radix(self.line().trim(), 16).expect("chunk size");
                let mut chunk = vec![0; size];
                self.reader.read_exact(&mut chunk).expect("chunk");
                let _ = self.line();
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk);
            }
        }
        Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }
}

fn sidecar() -> (tempfile::TempDir, crate::common::Process, String) {
    let home = tempfile::tempdir().expect("home");
    let (process, url) = start_sidecar(home.path(), |command| {
        command.stderr(std::process::Stdio::null());
    });
    (home, process, url)
}

/// The fastest of `calls` timed exchanges: with Nagle's algorithm on, every kept-alive exchange
/// written in pieces waits for the delayed ACK (~40 ms), so even the fastest one does; a loaded
/// machine slows some exchanges, rarely all of them.
fn fastest_of(calls: usize, mut exchange: impl FnMut()) -> Duration {
    let times: Vec<Duration> = (0..calls)
        .map(|_| {
            let started = Instant::now();
            exchange();
            started.elapsed()
        })
        .collect();
    times.into_iter().min().unwrap_or_default()
}

/// Far below the ~40 ms a delayed ACK costs, far above a loaded debug build's round trip.
const KEPT_ALIVE_CALL_WITHIN: Duration = Duration::from_millis(25);

#[test]
fn a_2026_07_28_read_is_one_json_body_and_kept_alive_calls_pay_no_delayed_ack() {
    let (_home, _sidecar, url) = sidecar();
    let mut conn = Conn::open(&url);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "flow.list", "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "flow.list"),
    ];
    let reply = conn.post(&headers, &call);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert!(reply.header("content-length").is_some(), "one body, not a stream");
    let message = reply.message();
    assert_eq!(message["id"], 1);
    assert!(
        message["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("design_v1"))
    );
    let fastest = fastest_of(15, || {
        let reply = conn.post(&headers, &call);
        assert_eq!(reply.status, 200);
    });
    assert!(
        fastest < KEPT_ALIVE_CALL_WITHIN,
        "the fastest kept-alive call took {fastest:?}"
    );
}

#[test]
fn a_2025_11_25_session_call_is_one_json_body_on_a_kept_alive_connection() {
    let (_home, _sidecar, url) = sidecar();
    let mut conn = Conn::open(&url);
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    let reply = conn.post(&[], &initialize);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let session = reply
        .header("mcp-session-id")
        .expect("a 2025-11-25 client gets a session")
        .to_owned();
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(conn.post(&headers, &initialized).status, 202);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "flow.list", "arguments": {}}});
    let reply = conn.post(&headers, &call);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.message()["id"], 1);
    let fastest = fastest_of(15, || {
        let reply = conn.post(&headers, &call);
        assert_eq!(reply.status, 200);
    });
    assert!(
        fastest < KEPT_ALIVE_CALL_WITHIN,
        "the fastest kept-alive JSON call took {fastest:?}"
    );
}

#[test]
fn a_streamed_answer_written_in_pieces_pays_no_delayed_ack_on_a_kept_alive_connection() {
    let Some((_mock, port)) = start_aimock("../adapters-llm/tests/fixtures/aimock.json") else {
        return;
    };
    let home = tempfile::tempdir().expect("home");
    let mut vars = aimock_provider_env(port, home.path());
    vars.push(("METAFORGE_ROUTE_CHAT", "openai:gpt-4o-mini".to_owned()));
    vars.push(("METAFORGE_GATEWAY_RATE_LIMIT_PER_MINUTE", "0".to_owned()));
    let (_gateway, addr) = start_gateway(home.path(), &vars);
    let stream = TcpStream::connect(&addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut conn = Conn {
        reader: BufReader::new(stream),
        addr: addr.clone(),
    };
    let body = r#"{"model":"chat","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut exchange = || {
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nX-API-Key: {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        conn.reader
            .get_mut()
            .write_all(request.as_bytes())
            .expect("write");
        let reply = conn.read_reply();
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.header("content-type"), Some("text/event-stream"));
        assert!(reply.body.contains("[DONE]"), "{}", reply.body);
    };
    exchange();
    let fastest = fastest_of(15, exchange);
    assert!(
        fastest < KEPT_ALIVE_CALL_WITHIN,
        "the fastest kept-alive streamed answer took {fastest:?}"
    );
}
