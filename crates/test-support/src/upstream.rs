//! One scripted OpenAI-compatible upstream for the pipeline and gateway tests: a loopback HTTP/1.1
//! server (on a bound listener) whose every answer the test decides, either from a queue
//! ([`Scripted::queue`]: retries, rotation, fallbacks) or from the request ([`Scripted::respond`]:
//! JSON or SSE by the body's `stream` flag). It records every request it received, and can answer
//! slower than a timeout or cut an SSE stream mid-way, which a framework server cannot.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::net;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// This status, extra headers and a JSON body.
    Json(u16, Vec<(String, String)>, String),
    /// This reply, after this delay (a response slower than the client's timeout).
    Delayed(Duration, Box<Reply>),
    /// SSE headers and this whole body.
    Sse(String),
    /// SSE headers, then these bytes, then the connection is dropped (a stream cut mid-way).
    SseCut(String),
}

impl Reply {
    /// A JSON answer with this status and no extra headers.
    #[must_use]
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        Self::Json(status, Vec::new(), body.into())
    }

    /// A JSON answer with this status and these extra headers.
    #[must_use]
    pub fn json_with(status: u16, headers: &[(&str, &str)], body: impl Into<String>) -> Self {
        let headers = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Self::Json(status, headers, body.into())
    }
}

/// One request the upstream received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request target, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The `authorization` or `x-api-key` header value (empty when absent).
    pub auth: String,
    /// The JSON body (`Null` when the body is not JSON).
    pub body: Value,
}

type Responder = dyn Fn(&Received) -> Reply + Send + Sync;

/// A running scripted upstream; it serves until the test's runtime ends.
#[derive(Clone)]
pub struct Scripted {
    url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Scripted {
    /// Answers the queued replies in order, one per request; once they run out, a 500 "script
    /// exhausted".
    pub async fn queue(replies: Vec<Reply>) -> Self {
        let script = Mutex::new(VecDeque::from(replies));
        Self::respond(move |_| {
            script
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front()
                .unwrap_or_else(|| Reply::json(500, r#"{"error":{"message":"script exhausted"}}"#))
        })
        .await
    }

    /// Answers each request with what `responder` makes of it.
    pub async fn respond(responder: impl Fn(&Received) -> Reply + Send + Sync + 'static) -> Self {
        Self::respond_on(net::tokio_listener().await, responder)
    }

    /// [`Scripted::respond`] on a listener the caller bound (a program serving on a port it was
    /// told, such as the `scripted_phase_model` example).
    pub fn respond_on(
        listener: tokio::net::TcpListener,
        responder: impl Fn(&Received) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let url = listener
            .local_addr()
            .map(|addr| format!("http://{addr}"))
            .unwrap_or_default();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&received);
        let responder: Arc<Responder> = Arc::new(responder);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let log = Arc::clone(&log);
                let responder = Arc::clone(&responder);
                tokio::spawn(serve_one(socket, log, responder));
            }
        });
        Self { url, received }
    }

    /// The base URL, `http://127.0.0.1:<port>` (OpenAI-compatible clients add `/v1`).
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every request received so far, in order.
    #[must_use]
    pub fn received(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The JSON bodies received so far, in order.
    #[must_use]
    pub fn bodies(&self) -> Vec<Value> {
        self.received().into_iter().map(|r| r.body).collect()
    }

    /// The credential headers received so far, in order.
    #[must_use]
    pub fn auths(&self) -> Vec<String> {
        self.received().into_iter().map(|r| r.auth).collect()
    }
}

/// Reads one request from `socket`, records it, and writes the scripted reply.
async fn serve_one(mut socket: TcpStream, log: Arc<Mutex<Vec<Received>>>, responder: Arc<Responder>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        let n = socket.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < header_end + length {
        let n = socket.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head_raw = String::from_utf8_lossy(&buf[..header_end]).into_owned();
    let path = head_raw
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap_or_default()
        .to_owned();
    let auth = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("authorization:")
                .or_else(|| l.strip_prefix("x-api-key:"))
        })
        .map(|v| v.trim().to_owned())
        .unwrap_or_default();
    let end = (header_end + length).min(buf.len());
    let body = serde_json::from_slice(&buf[header_end..end]).unwrap_or(Value::Null);
    let request = Received { path, auth, body };
    let reply = responder(&request);
    log.lock().unwrap_or_else(PoisonError::into_inner).push(request);
    write_reply(&mut socket, reply).await;
    let _ = socket.shutdown().await;
}

/// Writes `reply` (after its delay, if any).
async fn write_reply(socket: &mut TcpStream, mut reply: Reply) {
    while let Reply::Delayed(wait, next) = reply {
        tokio::time::sleep(wait).await;
        reply = *next;
    }
    match reply {
        Reply::Json(status, headers, body) => {
            let mut out = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
            out.push_str("\r\n");
            out.push_str(&body);
            let _ = socket.write_all(out.as_bytes()).await;
        }
        Reply::Sse(body) => {
            let out = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{body}"
            );
            let _ = socket.write_all(out.as_bytes()).await;
        }
        Reply::SseCut(partial) => {
            let out = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{partial}"
            );
            let _ = socket.write_all(out.as_bytes()).await;
            let _ = socket.flush().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Reply::Delayed(..) => {}
    }
}
