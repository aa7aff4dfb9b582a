//! Shared HTTP plumbing: one rustls client per adapter, error classification and Retry-After.
//!
//! Every family maps transport failures and HTTP error answers the same way, so the pipeline's
//! retry rules see one vocabulary (`ProviderErrorKind`) whichever provider failed.

use std::time::Duration;

use metaforge_ports::{ProviderError, ProviderErrorKind};
use reqwest::header::HeaderMap;

/// Timeouts for one adapter's client. The defaults suit interactive calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpSettings {
    /// Longest wait for a TCP/TLS connection.
    pub connect_timeout: Duration,
    /// Longest wait for a whole non-streamed answer, and for a stream's response headers.
    pub request_timeout: Duration,
    /// Longest silence between two reads of a streamed body.
    pub stream_idle_timeout: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(300),
            stream_idle_timeout: Duration::from_secs(120),
        }
    }
}

/// Installs rustls's ring crypto provider process-wide (reqwest is built without one, so no C
/// crypto build and no OpenSSL). Idempotent: a provider already installed is kept.
pub fn ensure_crypto_provider() {
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        // A provider is already installed process-wide; reqwest uses that one.
    }
}

/// Builds the shared client: rustls with the ring provider (no OpenSSL anywhere).
pub(crate) fn build_client(settings: HttpSettings) -> Result<reqwest::Client, ProviderError> {
    ensure_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(settings.connect_timeout)
        .read_timeout(settings.stream_idle_timeout)
        .build()
        .map_err(|e| {
            ProviderError::new(
                ProviderErrorKind::Transport,
                format!("cannot build HTTP client: {e}"),
            )
        })
}

/// Maps a reqwest failure (no HTTP answer, or a body cut) to a provider error kind.
pub(crate) fn transport_error(err: &reqwest::Error) -> ProviderError {
    let kind = if err.is_timeout() {
        ProviderErrorKind::Timeout
    } else {
        ProviderErrorKind::Transport
    };
    ProviderError::new(kind, error_chain(err))
}

/// An error and each of its sources, joined by `: ` (a transport error's own text rarely says
/// what failed underneath).
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        message.push_str(": ");
        message.push_str(&inner.to_string());
        source = inner.source();
    }
    message
}

/// Sends a request with the total time limit and turns a non-2xx answer into a typed error.
pub(crate) async fn send(
    request: reqwest::RequestBuilder,
    timeout: Duration,
) -> Result<reqwest::Response, ProviderError> {
    let response = match tokio::time::timeout(timeout, request.send()).await {
        Ok(Ok(response)) => response,
        Ok(Err(err)) => return Err(transport_error(&err)),
        Err(_) => {
            return Err(ProviderError::new(
                ProviderErrorKind::Timeout,
                format!("no response within {} ms", timeout.as_millis()),
            ));
        }
    };
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = parse_retry_after(response.headers());
    let body = match tokio::time::timeout(timeout, response.text()).await {
        Ok(Ok(body)) => body,
        Ok(Err(err)) => format!("(error body unreadable: {err})"),
        Err(_) => "(error body timed out)".to_owned(),
    };
    Err(ProviderError::from_http(
        status.as_u16(),
        retry_after,
        &provider_message(&body),
    ))
}

/// Reads a whole JSON body within the time limit.
pub(crate) async fn read_json(
    response: reqwest::Response,
    timeout: Duration,
) -> Result<serde_json::Value, ProviderError> {
    let bytes = match tokio::time::timeout(timeout, response.bytes()).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(err)) => return Err(transport_error(&err)),
        Err(_) => {
            return Err(ProviderError::new(
                ProviderErrorKind::Timeout,
                format!("response body not complete within {} ms", timeout.as_millis()),
            ));
        }
    };
    serde_json::from_slice(&bytes).map_err(|e| {
        ProviderError::new(
            ProviderErrorKind::Server,
            format!("provider answered with invalid JSON: {e}"),
        )
    })
}

/// `Retry-After` (seconds or HTTP date) or `retry-after-ms`, whichever the provider sent.
#[expect(
    clippy::disallowed_methods,
    reason = "an HTTP-date Retry-After is relative to the provider's wall clock, not to the Clock port's"
)]
pub(crate) fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = headers.get("retry-after")?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let delta = when.with_timezone(&chrono::Utc) - chrono::Utc::now();
    delta.to_std().ok().or(Some(Duration::ZERO))
}

/// The provider's own error message from a JSON error body, else the body itself (bounded).
pub(crate) fn provider_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        let v = if v.is_array() { v.get(0)? } else { v };
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("Message"))
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .and_then(|m| m.as_str())
            .map(str::to_owned)
    });
    from_json.unwrap_or_else(|| body.chars().take(2000).collect())
}

/// A provider's URL joined and parsed once, when the adapter is built: a request then clones it
/// instead of parsing a string (URL parsing, IDNA included, showed in the gateway's profile).
#[derive(Debug, Clone)]
pub(crate) enum Endpoint {
    /// The parsed URL.
    Parsed(reqwest::Url),
    /// A URL that does not parse: handed to reqwest as text, so each request fails as it would
    /// have (a builder error naming the URL) rather than the adapter failing to build.
    Unparsed(String),
}

impl Endpoint {
    /// `base` and `path` joined with exactly one slash.
    pub(crate) fn new(base: &str, path: &str) -> Self {
        let joined = join_url(base, path);
        match reqwest::Url::parse(&joined) {
            Ok(url) => Self::Parsed(url),
            Err(_) => Self::Unparsed(joined),
        }
    }

    /// A POST to this endpoint.
    pub(crate) fn post(&self, client: &reqwest::Client) -> reqwest::RequestBuilder {
        match self {
            Self::Parsed(url) => client.post(url.clone()),
            Self::Unparsed(text) => client.post(text.as_str()),
        }
    }
}

/// Joins a base URL and a path with exactly one slash.
pub(crate) fn join_url(base: &str, path: &str) -> String {
    format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'))
}
