//! The HTTP MCP sidecar answers a kept-alive client fast (issue 13): a 2026-07-28 `tools/call`
//! that does not stream is one `application/json` body, and neither era pays the ~40 ms that
//! Nagle's algorithm and a delayed ACK add to a reply written in pieces (the listener sets
//! `TCP_NODELAY`). A 2025-11-25 session keeps SSE, so elicitation still reaches it.

#![expect(
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns: a failed exchange must fail the test loudly"
)]

#[expect(dead_code, reason = "shared process helpers; this test starts no gateway")]
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::start_sidecar;
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
        let body = body.to_string();
        let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{extra}Content-Length: {}\r\n\r\n{body}",
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

fn sidecar() -> (tempfile::TempDir, common::Process, String) {
    let home = tempfile::tempdir().expect("home");
    let (process, url) = start_sidecar(home.path(), |command| {
        command.stderr(std::process::Stdio::null());
    });
    (home, process, url)
}

/// The median of `calls` timed exchanges.
fn median_of(calls: usize, mut exchange: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..calls)
        .map(|_| {
            let started = Instant::now();
            exchange();
            started.elapsed()
        })
        .collect();
    times.sort();
    times[calls / 2]
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
    let median = median_of(15, || {
        let reply = conn.post(&headers, &call);
        assert_eq!(reply.status, 200);
    });
    assert!(
        median < KEPT_ALIVE_CALL_WITHIN,
        "median kept-alive call took {median:?}"
    );
}

#[test]
fn a_2025_11_25_session_keeps_sse_and_kept_alive_calls_pay_no_delayed_ack() {
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
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    assert_eq!(reply.message()["id"], 1);
    let median = median_of(15, || {
        let reply = conn.post(&headers, &call);
        assert_eq!(reply.status, 200);
    });
    assert!(
        median < KEPT_ALIVE_CALL_WITHIN,
        "median kept-alive call took {median:?}"
    );
}
