//! Slow and stalled clients are cut off by the real `metaforge` listener (issue 12 item 4), on the
//! gateway and on the HTTP MCP sidecar alike: half a header, a body that stops after 8 of 1,000
//! bytes, a body trickled past the whole-request deadline, and a connection cap that makes the
//! next client wait. The limits are shortened through their `METAFORGE_HTTP_*` variables.

#![expect(
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns: a failed exchange must fail the test loudly"
)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::{KEY, Process, start_gateway, start_sidecar};

/// What the server did with a connection the test stopped writing to.
struct Closed {
    /// After how long the server closed it.
    after: Duration,
    /// What it wrote before closing (empty when it just hung up).
    reply: String,
}

/// Writes `sent` on a fresh connection to `addr`, then only reads, until the server closes the
/// connection; fails if it is still open after `within`.
fn send_then_wait_for_close(addr: &str, sent: &[u8], within: Duration) -> Closed {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.write_all(sent).expect("write");
    let started = Instant::now();
    stream.set_read_timeout(Some(within)).expect("read timeout");
    let mut reply = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!(
                    "the connection is still open {within:?} after the client stalled (read so far: {:?})",
                    String::from_utf8_lossy(&reply)
                )
            }
            Err(e) => panic!("read: {e}"),
        }
    }
    Closed {
        after: started.elapsed(),
        reply: String::from_utf8_lossy(&reply).into_owned(),
    }
}

fn gateway_with(vars: &[(&str, &str)]) -> (tempfile::TempDir, Process, String) {
    let home = tempfile::tempdir().expect("home");
    let vars: Vec<(&str, String)> = vars.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    let (process, addr) = start_gateway(home.path(), &vars);
    (home, process, addr)
}

#[test]
fn a_connection_sending_half_a_header_is_closed_within_the_header_timeout() {
    let (_home, _gateway, addr) = gateway_with(&[("METAFORGE_HTTP_HEADER_TIMEOUT_SECS", "1")]);
    let closed = send_then_wait_for_close(
        &addr,
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ",
        Duration::from_secs(5),
    );
    assert!(
        closed.after >= Duration::from_millis(800) && closed.after < Duration::from_secs(4),
        "closed after {:?}",
        closed.after
    );
    // The listener still serves a client that behaves.
    let (status, _) = crate::common::http(&addr, "GET", "/health", None);
    assert_eq!(status, 200);
}

#[test]
fn a_body_stopping_after_8_of_1000_bytes_is_answered_408_and_closed_before_and_after_auth() {
    let (_home, _gateway, addr) = gateway_with(&[("METAFORGE_HTTP_BODY_TIMEOUT_SECS", "1")]);
    for key in [Some(KEY), None] {
        let auth = key.map(|k| format!("X-API-Key: {k}\r\n")).unwrap_or_default();
        let request = format!(
            "POST /v1/design-flows/validate HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"flow\":"
        );
        assert_eq!(request.split("\r\n\r\n").nth(1).map(str::len), Some(8));
        let closed = send_then_wait_for_close(&addr, request.as_bytes(), Duration::from_secs(5));
        assert!(
            closed.after < Duration::from_secs(4),
            "closed after {:?}",
            closed.after
        );
        if key.is_some() {
            assert!(closed.reply.starts_with("HTTP/1.1 408"), "{}", closed.reply);
            assert!(
                closed.reply.contains("\"error\":\"request_timeout\""),
                "{}",
                closed.reply
            );
        }
    }
}

#[test]
fn a_body_trickled_past_the_whole_request_deadline_is_cut_off() {
    let (_home, _gateway, addr) = gateway_with(&[
        ("METAFORGE_HTTP_BODY_TIMEOUT_SECS", "2"),
        ("METAFORGE_HTTP_REQUEST_TIMEOUT_SECS", "1.5"),
    ]);
    let mut stream = TcpStream::connect(&addr).expect("connect");
    let head = format!(
        "POST /v1/design-flows/validate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {KEY}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).expect("write head");
    let started = Instant::now();
    // One byte every 200 ms never trips the 2 s gap limit; only the 1.5 s deadline can stop it.
    let mut cut_off = false;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(200));
        if stream.write_all(b" ").is_err() {
            cut_off = true;
            break;
        }
    }
    let mut reply = String::new();
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("read timeout");
    let _ = stream.read_to_string(&mut reply);
    assert!(
        cut_off || reply.starts_with("HTTP/1.1 408"),
        "still accepted body bytes after {:?}: {reply}",
        started.elapsed()
    );
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
}

#[test]
fn connections_beyond_the_cap_wait_until_one_closes() {
    let (_home, _gateway, addr) = gateway_with(&[
        ("METAFORGE_HTTP_MAX_CONNECTIONS", "2"),
        ("METAFORGE_HTTP_HEADER_TIMEOUT_SECS", "30"),
    ]);
    let first = TcpStream::connect(&addr).expect("first");
    let _second = TcpStream::connect(&addr).expect("second");
    std::thread::sleep(Duration::from_millis(300));
    let mut third = TcpStream::connect(&addr).expect("third connects to the accept queue");
    third
        .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .expect("write");
    third
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .expect("read timeout");
    let mut buf = [0_u8; 64];
    match third.read(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("a third connection was served past a cap of 2: {other:?}"),
    }
    drop(first);
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    let mut reply = String::new();
    third
        .read_to_string(&mut reply)
        .expect("served once a slot frees");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

#[test]
fn the_mcp_sidecar_closes_a_connection_sending_half_a_header() {
    let home = tempfile::tempdir().expect("home");
    let (_sidecar, url) = start_sidecar(home.path(), |command| {
        command
            .env("METAFORGE_HTTP_HEADER_TIMEOUT_SECS", "1")
            .stderr(std::process::Stdio::null());
    });
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let closed = send_then_wait_for_close(
        &addr,
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: appl",
        Duration::from_secs(5),
    );
    assert!(
        closed.after < Duration::from_secs(4),
        "closed after {:?}",
        closed.after
    );
}
