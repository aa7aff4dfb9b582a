//! The streamable HTTP client, with one correction for servers that report a lost session
//! the wrong way.
//!
//! The MCP spec says a server answers a request for a session it does not know with HTTP 404,
//! and rmcp then re-initialises once and retries. Some servers — the reference
//! `server-everything` among them — answer 400 with an id-less JSON-RPC error ("No valid session
//! ID provided") instead. rmcp cannot correlate that error with the request, so the call would
//! hang until its timeout. This wrapper recognises exactly that answer (a session id was sent,
//! the error has no id, and it is about the session) and reports it as the session expiring, so
//! the same one-time re-initialise-and-retry applies.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage};
use rmcp::transport::streamable_http_client::SseError;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream_rmcp::Sse;

/// `reqwest::Client` plus the lost-session correction, counting every expired session it reports
/// (each one makes rmcp re-initialise once and retry).
#[derive(Clone, Default)]
pub(crate) struct SessionAwareClient {
    inner: reqwest::Client,
    server: Arc<str>,
    expired: Arc<AtomicU64>,
}

impl SessionAwareClient {
    /// A client for `server` (names the log lines) adding to `expired` on every lost session.
    pub(crate) fn new(server: &str, expired: Arc<AtomicU64>) -> Self {
        Self {
            inner: reqwest::Client::default(),
            server: Arc::from(server),
            expired,
        }
    }

    fn correct(&self, result: PostResult, session_attached: bool) -> PostResult {
        let result = correct(result, session_attached);
        if matches!(result, Err(StreamableHttpError::SessionExpired)) {
            self.expired.fetch_add(1, Ordering::SeqCst);
            tracing::warn!(
                event = "mcp_session_reinitialised",
                server = %self.server,
                "server lost the session; re-initialising once and retrying"
            );
        }
        result
    }
}

type PostResult = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;

fn correct(result: PostResult, session_attached: bool) -> PostResult {
    match result {
        Ok(StreamableHttpPostResponse::Json(JsonRpcMessage::Error(error), _))
            if session_attached
                && error.id.is_none()
                && error.error.message.to_lowercase().contains("session") =>
        {
            tracing::info!(
                event = "mcp_session_unknown_to_server",
                message = %error.error.message,
                "server no longer knows the session; treating as expired"
            );
            Err(StreamableHttpError::SessionExpired)
        }
        other => other,
    }
}

impl StreamableHttpClient for SessionAwareClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> PostResult {
        let attached = session_id.is_some();
        self.correct(
            self.inner
                .post_message(uri, message, session_id, auth_header, custom_headers)
                .await,
            attached,
        )
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> PostResult {
        let attached = session_id.is_some();
        self.correct(
            self.inner
                .post_message_with_max_sse_event_size(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    max_sse_event_size,
                )
                .await,
            attached,
        )
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> PostResult {
        let attached = session_id.is_some();
        self.correct(
            self.inner
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await,
            attached,
        )
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}
