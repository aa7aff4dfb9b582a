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
    /// The first message is a JSON-RPC response: where its bytes are.
    Result(Data),
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
    let mut scan = Scan::default();
    let deadline = tokio::time::sleep(PEEK);
    tokio::pin!(deadline);
    let start = loop {
        match scan.next_event(&buffered) {
            Some(Some(data)) => break classify(&buffered, data),
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
        Start::Result(data) => {
            parts
                .headers
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            parts.headers.remove(header::CACHE_CONTROL);
            parts.headers.remove("x-accel-buffering");
            parts.headers.remove(header::TRANSFER_ENCODING);
            Response::from_parts(parts, Body::from(data.into_bytes(buffered)))
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

/// Where the scan of a buffered SSE stream stands: the start of the next event, and how far the
/// search for its end has looked already (so each byte is searched once however the stream is
/// chunked).
#[derive(Default)]
struct Scan {
    event_start: usize,
    searched: usize,
}

/// The `data:` lines of one event, as ranges of the buffer (one line is the common case, and its
/// bytes are then answered without a copy).
struct Data(Vec<std::ops::Range<usize>>);

impl Data {
    /// The message the lines carry, joined with newlines as SSE joins them.
    fn into_bytes(self, buffered: BytesMut) -> Bytes {
        let buffered = buffered.freeze();
        match self.0.as_slice() {
            [only] => buffered.slice(only.clone()),
            lines => {
                let mut joined = BytesMut::new();
                for (i, line) in lines.iter().enumerate() {
                    if i > 0 {
                        joined.extend_from_slice(b"\n");
                    }
                    joined.extend_from_slice(&buffered[line.clone()]);
                }
                joined.freeze()
            }
        }
    }

    /// The message's bytes, borrowed when it is one line.
    fn view<'a>(&self, buffered: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        match self.0.as_slice() {
            [only] => std::borrow::Cow::Borrowed(&buffered[only.clone()]),
            lines => std::borrow::Cow::Owned(
                lines
                    .iter()
                    .map(|line| &buffered[line.clone()])
                    .collect::<Vec<_>>()
                    .join(&b'\n'),
            ),
        }
    }
}

impl Scan {
    /// The next complete event in `buffered`: `None` when no complete event is buffered yet,
    /// `Some(None)` for an event without data (a priming event, a keep-alive comment),
    /// `Some(Some(data))` for an event carrying a message.
    fn next_event(&mut self, buffered: &[u8]) -> Option<Option<Data>> {
        // A blank line may straddle the end of the last search: look again at its last 3 bytes.
        let from = self.searched.saturating_sub(3).max(self.event_start);
        let Some((end, separator)) = find_blank_line(buffered.get(from..)?) else {
            self.searched = buffered.len();
            return None;
        };
        let event_start = self.event_start;
        let event_end = from + end;
        self.event_start = event_end + separator;
        self.searched = self.event_start;
        let event = &buffered[event_start..event_end];
        let mut data = Vec::new();
        let mut line_start = 0;
        let ends = memchr::memchr_iter(b'\n', event).chain(std::iter::once(event.len()));
        for line_end in ends {
            let line = &event[line_start..line_end];
            let at = event_start + line_start;
            line_start = line_end + 1;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(value) = line.strip_prefix(b"data:") {
                let skip = usize::from(value.first() == Some(&b' '));
                data.push(at + 5 + skip..at + line.len());
            }
        }
        let blank = data
            .iter()
            .all(|line| buffered[line.clone()].iter().all(u8::is_ascii_whitespace));
        Some((!blank).then_some(Data(data)))
    }
}

/// Where the first blank line (`\n\n` or `\r\n\r\n`) starts, and its length.
fn find_blank_line(bytes: &[u8]) -> Option<(usize, usize)> {
    let lf = memchr::memmem::find(bytes, b"\n\n").map(|i| (i, 2));
    let crlf = memchr::memmem::find(bytes, b"\r\n\r\n").map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// A JSON-RPC response (an id and a result or an error, no method) ends the call; anything else
/// means the call streams.
fn classify(buffered: &[u8], data: Data) -> Start {
    let message = data.view(buffered);
    if is_response(&message) {
        Start::Result(data)
    } else {
        Start::Stream
    }
}

/// Whether `message` is a JSON-RPC response. rmcp writes `{"jsonrpc":"2.0","id":…,` and then
/// the member that says what the message is, so its start is read first and the whole message
/// (a tool's answer can be tens of kilobytes) is parsed only when the start is not that shape.
fn is_response(message: &[u8]) -> bool {
    match response_by_its_start(message) {
        Some(answer) => answer,
        None => response_by_its_members(message),
    }
}

/// `Some(true)` for `{"jsonrpc":"2.0","id":<integer or plain string>,"result":` (or `"error":`),
/// `Some(false)` for the same start followed by `"method":`, `None` for any other start.
fn response_by_its_start(message: &[u8]) -> Option<bool> {
    let rest = message.strip_prefix(b"{\"jsonrpc\":\"2.0\",\"id\":")?;
    let id_len = match rest.first()? {
        b'"' => 2 + memchr::memchr2(b'"', b'\\', rest.get(1..)?).filter(|i| rest[1 + i] == b'"')?,
        b'0'..=b'9' | b'-' => rest
            .iter()
            .take_while(|b| b.is_ascii_digit() || **b == b'-')
            .count(),
        _ => return None,
    };
    let member = rest.get(id_len..)?;
    if member.starts_with(b",\"result\":") || member.starts_with(b",\"error\":") {
        Some(true)
    } else if member.starts_with(b",\"method\":") {
        Some(false)
    } else {
        None
    }
}

/// The full check: an object with an id and a result or an error, and no method.
fn response_by_its_members(message: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Shape {
        id: Option<serde_json::Value>,
        method: Option<serde::de::IgnoredAny>,
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Shape>(message).is_ok_and(|shape| {
        shape.id.is_some() && shape.method.is_none() && (shape.result.is_some() || shape.error.is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event of `stream` fed in chunks of `chunk` bytes: the messages found, as text.
    fn events(stream: &[u8], chunk: usize) -> Vec<Option<String>> {
        let mut scan = Scan::default();
        let mut buffered = Vec::new();
        let mut found = Vec::new();
        for piece in stream.chunks(chunk) {
            buffered.extend_from_slice(piece);
            while let Some(event) = scan.next_event(&buffered) {
                found.push(event.map(|d| String::from_utf8(d.view(&buffered).into_owned()).unwrap()));
            }
        }
        found
    }

    #[test]
    fn a_priming_event_is_skipped_and_the_result_is_found_however_the_stream_is_chunked() {
        let stream = b"data: \nid: 0\nretry: 3000\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";
        for chunk in [1, 2, 3, 7, stream.len()] {
            assert_eq!(
                events(stream, chunk),
                vec![None, Some(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_owned())],
                "chunks of {chunk}"
            );
        }
    }

    #[test]
    fn data_lines_are_joined_with_newlines_and_crlf_ends_an_event() {
        let stream = b"data: {\"id\":1,\r\ndata:\"result\":1}\r\n\r\n";
        for chunk in [1, 5, stream.len()] {
            assert_eq!(
                events(stream, chunk),
                vec![Some("{\"id\":1,\n\"result\":1}".to_owned())]
            );
        }
        let mut scan = Scan::default();
        let buffered = BytesMut::from(&stream[..]);
        let Some(Some(data)) = scan.next_event(&buffered) else {
            panic!("no message");
        };
        assert_eq!(&data.into_bytes(buffered)[..], b"{\"id\":1,\n\"result\":1}");
    }

    #[test]
    fn a_request_or_notification_first_means_the_call_streams() {
        for first in [
            r#"{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":"a-7","method":"elicitation/create","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
            r#"{"method":"ping","jsonrpc":"2.0","id":1,"result":{}}"#,
            "not json",
        ] {
            assert!(!is_response(first.as_bytes()), "{first}");
        }
        for response in [
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":"s-1","result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":"q\"1","result":{}}"#,
            r#"{"result":{},"id":3,"jsonrpc":"2.0"}"#,
        ] {
            assert!(is_response(response.as_bytes()), "{response}");
        }
    }

    #[test]
    fn the_start_check_and_the_full_parse_agree_wherever_the_start_decides() {
        for message in [
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":-4,"error":{}}"#,
            r#"{"jsonrpc":"2.0","id":"x","result":[]}"#,
            r#"{"jsonrpc":"2.0","id":12,"method":"sampling/createMessage"}"#,
        ] {
            let start = response_by_its_start(message.as_bytes());
            assert_eq!(
                start,
                Some(response_by_its_members(message.as_bytes())),
                "{message}"
            );
        }
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
        let mut scan = Scan::default();
        assert!(scan.next_event(b"data: {\"jsonrpc\"").is_none());
        assert!(scan.next_event(b"data: {\"jsonrpc\"\n").is_none());
        assert!(matches!(
            scan.next_event(b"data: {\"jsonrpc\"\n\n"),
            Some(Some(_))
        ));
    }
}
