//! An OTLP/HTTP receiver on loopback for the trace tests: every `POST /v1/traces` a process
//! exports is decoded and kept as (service, trace id, span name), and `tools/call` posted with a
//! chosen `_meta`, so a test can start a trace at a hop of its choice.
#![expect(
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns: a receiver that cannot run must fail the test loudly"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use serde_json::{Value, json};

use super::KEY;

/// One exported span: its service, trace id (hex) and name.
pub(crate) type Span = (String, String, String);

/// An OTLP/HTTP receiver on loopback: every `POST /v1/traces` body decoded and kept.
pub(crate) struct Receiver {
    /// The base URL a process's `OTEL_EXPORTER_OTLP_ENDPOINT` names.
    pub(crate) endpoint: String,
    /// Every span received so far.
    pub(crate) spans: Arc<Mutex<Vec<Span>>>,
}

impl Receiver {
    /// Listens on a free loopback port.
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        let endpoint = format!("http://{}", listener.local_addr().expect("its address"));
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&spans);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = Arc::clone(&kept);
                std::thread::spawn(move || serve(stream, &kept));
            }
        });
        Self { endpoint, spans }
    }

    /// Waits until some span satisfies `wanted`.
    pub(crate) fn wait_for(&self, what: &str, wanted: impl Fn(&Span) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.spans.lock().expect("spans").iter().any(&wanted) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "no span {what} arrived; received {:?}",
            self.spans.lock().expect("spans")
        );
    }
}

/// Answers the OTLP requests of one kept-alive connection.
fn serve(stream: TcpStream, kept: &Mutex<Vec<Span>>) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = None;
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse::<usize>().ok();
            }
        }
        let mut body = vec![0; length.unwrap_or(0)];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request = ExportTraceServiceRequest::decode(body.as_slice()).expect("an OTLP trace export");
        let mut spans = kept.lock().expect("spans");
        for resource in request.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|a| a.key == "service.name")
                .and_then(|a| match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(AnyValue::StringValue(name)) => Some(name.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for span in resource.scope_spans.iter().flat_map(|s| s.spans.iter()) {
                let trace: String = span.trace_id.iter().map(|b| format!("{b:02x}")).collect();
                spans.push((service.clone(), trace, span.name.clone()));
            }
        }
        drop(spans);
        let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if reader.get_mut().write_all(answer).is_err() {
            return;
        }
    }
}

/// The variables that point a process at the receiver, sending each batch within 100 ms.
pub(crate) fn exporting(receiver: &Receiver) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.clone()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
    ]
}

/// One 2026-07-28 `tools/call` posted to the sidecar at `url` with `meta` merged into its
/// `_meta`: the JSON-RPC answer.
pub(crate) fn call_tool(url: &str, tool: &str, arguments: Value, meta: Value) -> Value {
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let mut all_meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "trace-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    if let (Some(all), Some(extra)) = (all_meta.as_object_mut(), meta.as_object()) {
        all.extend(extra.clone());
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": all_meta}})
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: {tool}\r\nX-API-Key: {KEY}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(addr).expect("connect to the sidecar");
    stream.write_all(request.as_bytes()).expect("write");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read");
    let (_, payload) = raw.split_once("\r\n\r\n").expect("a response");
    serde_json::from_str(payload.trim()).unwrap_or_else(|_| {
        payload
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .find(|d| d.starts_with('{'))
            .and_then(|d| serde_json::from_str(d).ok())
            .unwrap_or_else(|| panic!("no JSON-RPC answer in {raw}"))
    })
}
