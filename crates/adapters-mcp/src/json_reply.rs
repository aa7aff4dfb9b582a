//! One `application/json` body for a 2025-11-25 session call that does not stream.
//!
//! rmcp answers every POST of a 2025-11-25 session as an SSE stream (a priming event, the result,
//! the end of the body) and has no JSON mode for sessions; the 2026-07-28 path already answers
//! JSON (`with_json_response`). This layer reads the start of such a stream: when the first
//! message is the call's result and it arrives within [`PEEK`], the client (which said it
//! accepts `application/json`) gets that message as one JSON body. Anything else — a request or
//! notification first (elicitation, progress), a result slower than [`PEEK`] (a held write
//! waiting for a person), a stream that ends without a message — is passed on as the SSE stream
//! it was, bytes already read included, so streaming calls keep streaming.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;

/// How long a call may take to produce its result and still be answered as JSON.
pub(crate) const PEEK: Duration = Duration::from_millis(100);

/// What the start of an SSE stream turned out to be.
enum Start {
    /// The first message is a JSON-RPC response: its bytes.
    Result(Bytes),
    /// Anything else: pass the stream on.
    Stream,
}

/// The middleware (see the module docs).
pub(crate) async fn json_when_done(request: Request, next: Next) -> Response {
    let wants_json = request.method() == Method::POST
        && request
            .headers()
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(accepts_json);
    let response = next.run(request).await;
    let is_sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !wants_json || response.status() != StatusCode::OK || !is_sse {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let mut stream = body.into_data_stream();
    let mut buffered = BytesMut::new();
    let mut scanned = 0;
    let deadline = tokio::time::sleep(PEEK);
    tokio::pin!(deadline);
    let start = loop {
        match next_event(&buffered, &mut scanned) {
            Some(Some(message)) => break classify(message),
            Some(None) => continue,
            None => {}
        }
        tokio::select! {
            () = &mut deadline => break Start::Stream,
            chunk = stream.next() => match chunk {
                Some(Ok(bytes)) => buffered.extend_from_slice(&bytes),
                Some(Err(_)) | None => break Start::Stream,
            },
        }
    };
    match start {
        Start::Result(message) => {
            parts
                .headers
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            parts.headers.remove(header::CACHE_CONTROL);
            parts.headers.remove("x-accel-buffering");
            parts.headers.remove(header::TRANSFER_ENCODING);
            Response::from_parts(parts, Body::from(message))
        }
        Start::Stream => {
            let head = futures::stream::once(std::future::ready(Ok::<Bytes, axum::Error>(buffered.freeze())));
            Response::from_parts(parts, Body::from_stream(head.chain(stream)))
        }
    }
}

/// Whether one `Accept` media range takes `application/json` (a `q=0` refuses it, RFC 9110).
fn accepts_json(range: &str) -> bool {
    let mut parts = range.split(';').map(str::trim);
    let essence = parts.next().unwrap_or_default();
    essence.eq_ignore_ascii_case("application/json")
        && !parts.any(|p| {
            p.split_once('=').is_some_and(|(k, v)| {
                k.trim().eq_ignore_ascii_case("q") && v.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
            })
        })
}

/// The next complete event after `scanned` in `buffered`: `None` when no complete event is
/// buffered yet, `Some(None)` for an event without data (a priming event, a keep-alive comment),
/// `Some(Some(data))` for an event carrying a message. Advances `scanned` past the event.
fn next_event(buffered: &[u8], scanned: &mut usize) -> Option<Option<Bytes>> {
    let rest = buffered.get(*scanned..)?;
    let (end, separator) = find_blank_line(rest)?;
    let event = &rest[..end];
    *scanned += end + separator;
    let mut data = Vec::new();
    for line in event.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(value) = line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if !data.is_empty() {
                data.push(b'\n');
            }
            data.extend_from_slice(value);
        }
    }
    Some((!data.iter().all(u8::is_ascii_whitespace)).then(|| Bytes::from(data)))
}

/// Where the first blank line (`\n\n` or `\r\n\r\n`) starts, and its length.
fn find_blank_line(bytes: &[u8]) -> Option<(usize, usize)> {
    (0..bytes.len()).find_map(|i| {
        if bytes[i..].starts_with(b"\n\n") {
            Some((i, 2))
        } else if bytes[i..].starts_with(b"\r\n\r\n") {
            Some((i, 4))
        } else {
            None
        }
    })
}

/// A JSON-RPC response (an id and a result or an error, no method) ends the call; anything else
/// means the call streams.
fn classify(message: Bytes) -> Start {
    #[derive(serde::Deserialize)]
    struct Shape {
        id: Option<serde_json::Value>,
        method: Option<serde::de::IgnoredAny>,
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    match serde_json::from_slice::<Shape>(&message) {
        Ok(shape)
            if shape.id.is_some()
                && shape.method.is_none()
                && (shape.result.is_some() || shape.error.is_some()) =>
        {
            Start::Result(message)
        }
        Ok(_) | Err(_) => Start::Stream,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_priming_event_is_skipped_and_the_result_is_found() {
        let stream = b"data: \nid: 0\nretry: 3000\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";
        let mut scanned = 0;
        assert!(matches!(next_event(stream, &mut scanned), Some(None)));
        let Some(Some(message)) = next_event(stream, &mut scanned) else {
            panic!("no message");
        };
        assert!(matches!(classify(message), Start::Result(_)));
        assert!(next_event(stream, &mut scanned).is_none());
    }

    #[test]
    fn a_request_or_notification_first_means_the_call_streams() {
        for first in [
            r#"{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
            "not json",
        ] {
            assert!(matches!(classify(Bytes::from(first)), Start::Stream), "{first}");
        }
        assert!(matches!(
            classify(Bytes::from(
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x"}}"#
            )),
            Start::Result(_)
        ));
    }

    #[test]
    fn json_is_wanted_unless_refused_with_q_0() {
        assert!(accepts_json("application/json"));
        assert!(accepts_json(" Application/JSON ; q=0.5"));
        assert!(!accepts_json("application/json;q=0"));
        assert!(!accepts_json("text/event-stream"));
    }

    #[test]
    fn an_incomplete_event_waits_for_more_bytes() {
        let mut scanned = 0;
        assert!(next_event(b"data: {\"jsonrpc\"", &mut scanned).is_none());
        assert_eq!(scanned, 0);
        let crlf = b"data: {\"id\":1,\"result\":1}\r\n\r\n";
        assert!(matches!(next_event(crlf, &mut scanned), Some(Some(_))));
    }
}
