//! The one way the binary serves HTTP, for the gateway and the MCP sidecar alike: every accepted
//! socket gets `TCP_NODELAY` (a reply written in pieces on a kept-alive connection otherwise waits
//! for the client's delayed ACK, ~40 ms), and a slow or stalled client is cut off before it can hold
//! a connection: headers must arrive within [`Limits::header_read`], no gap in the body may exceed
//! [`Limits::body_idle`], the whole body must arrive within [`Limits::request_read`] of its
//! headers, and at most [`Limits::max_connections`] connections are served at once (the next one
//! waits in the kernel's accept queue). Handler time is not capped here: a held write legitimately
//! waits for a person, and a model call has its own deadlines.
//!
//! A request target or header section over the gateway's limits (`gateway::limits`) is answered
//! `414`/`431` with a JSON body on every listener, the MCP sidecar's included
//! (`crate::error::request_size_limits`); hyper's own bodiless `431` only answers four times
//! the header lines or a header block past its ~400 KiB buffer, where the connection is cut before
//! a request exists.
//!
//! `axum::serve` has no header-read timeout, so this is hyper-util's `auto::Builder` with a timer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::time::{Instant, Sleep};

use crate::SHUTDOWN_GRACE;

/// The slow-client limits of one listener (the binary reads the operator's overrides).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// A request's headers must arrive within this (`METAFORGE_HTTP_HEADER_TIMEOUT_SECS`, 10 s).
    pub header_read: Duration,
    /// The longest gap allowed between two pieces of a body (`METAFORGE_HTTP_BODY_TIMEOUT_SECS`,
    /// 30 s).
    pub body_idle: Duration,
    /// The whole body must arrive within this of the headers
    /// (`METAFORGE_HTTP_REQUEST_TIMEOUT_SECS`, 60 s).
    pub request_read: Duration,
    /// Connections served at once (`METAFORGE_HTTP_MAX_CONNECTIONS`, 1024).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read: Duration::from_secs(10),
            body_idle: Duration::from_secs(30),
            request_read: Duration::from_secs(60),
            max_connections: 1024,
        }
    }
}

/// Serves `router` on `listener` with `limits` until `shutdown` resolves, then stops accepting
/// and lets in-flight connections finish (up to 10 s).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = router
        .layer(axum::middleware::from_fn(
            move |request: Request, next: axum::middleware::Next| read_within(limits, request, next),
        ))
        .layer(axum::middleware::from_fn(crate::error::request_size_limits));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_headers(crate::limits::MAX_HEADER_COUNT * 4);
    builder.http2().timer(TokioTimer::new());
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A connection beyond the cap waits in the accept queue until one closes.
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(event = "http_accept_failed", error = %err);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(event = "tcp_nodelay_failed", error = %err);
        }
        // Each request carries its peer address, which failed-authentication throttling keys on.
        let service = TowerToHyperService::new(
            router
                .clone()
                .layer(axum::Extension(axum::extract::ConnectInfo(peer))),
        );
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(event = "http_connection_closed", error = %err);
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            event = "shutdown_grace_elapsed",
            "in-flight connections cut off after the grace period"
        );
    }
    Ok(())
}

/// Holds the request body to `limits` and answers `408` (and closes the connection) when the
/// client did not send it in time, whatever the handler made of the truncated body.
async fn read_within(limits: Limits, request: Request, next: axum::middleware::Next) -> Response {
    let timed_out = Arc::new(AtomicBool::new(false));
    let (parts, body) = request.into_parts();
    let body = Body::new(ReadDeadline::new(body, limits, Arc::clone(&timed_out)));
    let response = next.run(Request::from_parts(parts, body)).await;
    if !timed_out.load(Ordering::Acquire) {
        return response;
    }
    tracing::info!(
        event = "http_request_read_timeout",
        "the client did not send its request body in time; connection closed"
    );
    let body = serde_json::json!({
        "error": "request_timeout",
        "message": format!(
            "the request body did not arrive in time (at most {} s between pieces, {} s in all)",
            limits.body_idle.as_secs_f64(),
            limits.request_read.as_secs_f64()
        ),
    });
    let mut response = (StatusCode::REQUEST_TIMEOUT, axum::Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request body that fails once a gap between pieces exceeds the idle limit or the whole body
/// overruns its deadline, flagging `timed_out` so [`read_within`] answers 408.
struct ReadDeadline {
    inner: Body,
    idle: Duration,
    idle_sleep: Pin<Box<Sleep>>,
    deadline: Pin<Box<Sleep>>,
    timed_out: Arc<AtomicBool>,
}

impl ReadDeadline {
    fn new(inner: Body, limits: Limits, timed_out: Arc<AtomicBool>) -> Self {
        let now = Instant::now();
        Self {
            inner,
            idle: limits.body_idle,
            idle_sleep: Box::pin(tokio::time::sleep_until(now + limits.body_idle)),
            deadline: Box::pin(tokio::time::sleep_until(now + limits.request_read)),
            timed_out,
        }
    }
}

/// The error a body that arrived too slowly ends with.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
struct BodyTimeout;

impl HttpBody for ReadDeadline {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = Instant::now() + this.idle;
                this.idle_sleep.as_mut().reset(next);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                if this.idle_sleep.as_mut().poll(cx).is_ready() || this.deadline.as_mut().poll(cx).is_ready()
                {
                    this.timed_out.store(true, Ordering::Release);
                    return Poll::Ready(Some(Err(Box::new(BodyTimeout))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_default_to_ten_thirty_sixty_seconds_and_1024_connections() {
        let limits = Limits::default();
        assert_eq!(limits.header_read, Duration::from_secs(10));
        assert_eq!(limits.body_idle, Duration::from_secs(30));
        assert_eq!(limits.request_read, Duration::from_secs(60));
        assert_eq!(limits.max_connections, 1024);
    }
}
