//! The shared HTTP client: base URL, API key, and the mapping of gateway answers to port errors
//! (404 NotFound, 409 Conflict with the gateway's message, other 4xx Invalid, 5xx and
//! connection failures Unavailable).

use std::time::Duration;

use metaforge_ports::{PortError, PortErrorKind};
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// The header the gateway reads the API key from.
const API_KEY_HEADER: &str = "X-API-Key";

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum GatewayClientError {
    /// The base URL is not an absolute http(s) URL.
    #[error("METAFORGE_GATEWAY_URL must be an http:// or https:// URL, not {0:?}")]
    BadUrl(String),
    /// The HTTP client itself could not be built.
    #[error("cannot build the gateway HTTP client: {0}")]
    Build(#[from] reqwest::Error),
}

/// A client of one gateway: every remote port shares it (one connection pool, one key).
#[derive(Debug, Clone)]
pub struct GatewayClient {
    http: reqwest::Client,
    base: String,
    api_key: Option<String>,
}

/// Installs rustls' ring provider process-wide (reqwest is built with `rustls-no-provider`).
fn ensure_crypto_provider() {
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        // A provider is already installed process-wide; reqwest uses that one.
    }
}

impl GatewayClient {
    /// A client of the gateway at `base_url` (e.g. `http://127.0.0.1:8787`), sending `api_key`
    /// as `X-API-Key` on every request when given.
    pub fn new(base_url: &str, api_key: Option<String>) -> Result<Self, GatewayClientError> {
        let base = base_url.trim().trim_end_matches('/').to_owned();
        let host = base
            .strip_prefix("http://")
            .or_else(|| base.strip_prefix("https://"))
            .unwrap_or_default();
        if host.is_empty() {
            return Err(GatewayClientError::BadUrl(base_url.to_owned()));
        }
        ensure_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self { http, base, api_key })
    }

    /// The gateway's base URL, for logs.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// A request to `path` with the key set, for callers that read the answer themselves (a
    /// turn's event stream).
    pub(crate) fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.request_with_key(method, path, self.api_key.as_deref())
    }

    /// True when this client presents a key.
    pub(crate) fn has_key(&self) -> bool {
        self.api_key.is_some()
    }

    /// A request to `path` presenting `key` (another identity's key the sidecar was given, so
    /// the gateway records that identity), or none.
    fn request_with_key(&self, method: Method, path: &str, key: Option<&str>) -> reqwest::RequestBuilder {
        let request = with_trace_context(self.http.request(method, format!("{}{path}", self.base)));
        match key {
            Some(key) => request.header(API_KEY_HEADER, key),
            None => request,
        }
    }

    /// Sends one request and returns the JSON body, or the mapped port error.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, PortError> {
        self.send_or_refused(method.clone(), path, body)
            .await?
            .map_err(|text| map_status(StatusCode::UNPROCESSABLE_ENTITY, &method, path, &text))
    }

    /// Like [`send`](Self::send), but a 422 answer (the gateway refused the request, e.g. a
    /// tailoring that breaks an invariant; nothing was done) comes back as `Ok(Err(body text))`,
    /// the gateway's own `{error, message, details}`, so a caller can carry the refusal typed.
    pub(crate) async fn send_or_refused(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Result<Value, String>, PortError> {
        Ok(self
            .exchange(
                method,
                path,
                body,
                self.api_key.as_deref(),
                &[StatusCode::UNPROCESSABLE_ENTITY],
            )
            .await?
            .map_err(|(_, text)| text))
    }

    /// Sends one request presenting `key`; a success is its JSON body, an answer whose status is
    /// one of `refusals` comes back as `Ok(Err((status, body text)))`, anything else is the mapped
    /// port error.
    pub(crate) async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
        refusals: &[StatusCode],
    ) -> Result<Result<Value, (StatusCode, String)>, PortError> {
        let url = format!("{}{path}", self.base);
        let mut request = self.request_with_key(method.clone(), path, key);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| {
            PortError::with_source(
                PortErrorKind::Unavailable,
                format!("gateway unreachable: {method} {url}"),
                e,
            )
        })?;
        let status = response.status();
        let text = response.text().await.map_err(|e| {
            PortError::with_source(
                PortErrorKind::Unavailable,
                format!("gateway answer unreadable: {method} {url}"),
                e,
            )
        })?;
        if status.is_success() {
            return serde_json::from_str(&text).map(Ok).map_err(|e| {
                PortError::with_source(
                    PortErrorKind::Internal,
                    format!("gateway answered {method} {path} with non-JSON"),
                    e,
                )
            });
        }
        if refusals.contains(&status) {
            return Ok(Err((status, text)));
        }
        Err(map_status(status, &method, path, &text))
    }

    /// The key configured for this client (the sidecar's own).
    pub(crate) fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }
}

/// The port error for a gateway's non-success answer, keeping the gateway's own message.
pub(crate) fn map_status(status: StatusCode, method: &Method, path: &str, body: &str) -> PortError {
    let message = serde_json::from_str::<metaforge_api::ErrorBody>(body)
        .map_or_else(|_| body.chars().take(300).collect(), |error| error.message);
    let kind = match status {
        StatusCode::NOT_FOUND => PortErrorKind::NotFound,
        StatusCode::CONFLICT => PortErrorKind::Conflict,
        s if s.is_client_error() => PortErrorKind::Invalid,
        _ => PortErrorKind::Unavailable,
    };
    let message = if kind == PortErrorKind::Conflict {
        message
    } else {
        format!("gateway answered {method} {path} with {status}: {message}")
    };
    PortError::new(kind, message)
}

/// Percent-encodes one path segment (ids are uuids, but nothing else may break the path).
pub(crate) fn segment(id: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
    }
    out
}

/// A request body (one of `metaforge_api`'s types) as the JSON to send.
pub(crate) fn encode<T: serde::Serialize>(body: &T, what: &str) -> Result<Value, PortError> {
    serde_json::to_value(body)
        .map_err(|e| PortError::with_source(PortErrorKind::Internal, format!("cannot encode the {what}"), e))
}

/// Decodes a JSON value into `T`, or an `Internal` error naming what the gateway sent.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(value: Value, what: &str) -> Result<T, PortError> {
    serde_json::from_value(value).map_err(|e| {
        PortError::with_source(
            PortErrorKind::Internal,
            format!("gateway sent a malformed {what}"),
            e,
        )
    })
}

/// `request` carrying the current span's W3C trace context (`traceparent`, `tracestate`), so the
/// gateway's work joins the trace of the tool call that caused it; nothing is added when no
/// trace is being recorded (no OpenTelemetry layer, a no-op propagator).
fn with_trace_context(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let context = tracing::Span::current().context();
    let mut headers = reqwest::header::HeaderMap::new();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut opentelemetry_http::HeaderInjector(&mut headers));
    });
    if headers.is_empty() {
        request
    } else {
        request.headers(headers)
    }
}
