//! Running the sidecar: stdio for a harness that spawns it, streamable HTTP (axum) for one that
//! connects to it.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::response::IntoResponse as _;
use metaforge_ports::ToolHost;
use metaforge_ports::auth_failures::{AuthFailures, WrongKeyVerdict};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::server::{
    AuthenticatedIdentity, Connection, GrantsCell, SERVICE_KEY_HEADER, SidecarServer, bearer_credential,
};

/// The path the sidecar serves MCP on.
pub const MCP_PATH: &str = "/mcp";

/// Why the sidecar could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address is not a loopback address; the sidecar never listens beyond this machine.
    #[error("refusing to listen on {0}: the MCP sidecar binds loopback addresses only (127.0.0.1 or ::1)")]
    NotLoopback(SocketAddr),
    /// Binding or serving failed.
    #[error("mcp sidecar on {addr}: {source}")]
    Io {
        /// Where.
        addr: String,
        /// What.
        #[source]
        source: std::io::Error,
    },
    /// The MCP session over stdio failed.
    #[error("mcp sidecar on stdio: {0}")]
    Stdio(String),
}

/// Serves one MCP session on stdin/stdout until the client closes it. The caller is `local`.
pub async fn serve_stdio(host: Arc<dyn ToolHost>) -> Result<(), ServeError> {
    let server = SidecarServer::new(host, Connection::Stdio);
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ServeError::Stdio(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| ServeError::Stdio(e.to_string()))?;
    Ok(())
}

/// One client key the sidecar accepts and the identity it authenticates (the gateway's
/// `identity:key` entries; a bare key is `operator`, as the gateway names it).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientKey {
    /// Who presents it: recorded on what the call does for a person (a gate's approver).
    pub identity: String,
    /// The key.
    pub key: String,
}

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientKey")
            .field("identity", &self.identity)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// The identity the gateway gives a key configured without one.
const BARE_KEY_IDENTITY: &str = "operator";

impl From<String> for ClientKey {
    fn from(key: String) -> Self {
        Self {
            identity: BARE_KEY_IDENTITY.to_owned(),
            key,
        }
    }
}

impl From<(String, String)> for ClientKey {
    fn from((identity, key): (String, String)) -> Self {
        Self { identity, key }
    }
}

/// A bound HTTP sidecar: its address, and the future that serves it until `shutdown`.
pub struct HttpSidecar {
    /// The bound address (useful when the requested port was 0).
    pub local_addr: SocketAddr,
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: CancellationToken,
    client_keys: Option<Arc<[ClientKey]>>,
    service_key: Option<Arc<str>>,
    auth_failures: Option<Arc<dyn AuthFailures>>,
    grants: GrantsCell,
}

/// Binds the HTTP sidecar on a loopback `addr`; `service_key` is `METAFORGE_MCP_SERVICE_KEY`.
pub async fn bind_http(
    host: Arc<dyn ToolHost>,
    addr: SocketAddr,
    service_key: Option<String>,
    shutdown: CancellationToken,
) -> Result<HttpSidecar, ServeError> {
    if !addr.ip().is_loopback() {
        return Err(ServeError::NotLoopback(addr));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Io {
            addr: addr.to_string(),
            source,
        })?;
    let local_addr = listener.local_addr().map_err(|source| ServeError::Io {
        addr: addr.to_string(),
        source,
    })?;
    let service_key: Option<Arc<str>> = service_key.filter(|k| !k.is_empty()).map(Arc::from);
    let service_key_for_auth = service_key.clone();
    let grants = GrantsCell::default();
    let session_grants = Arc::clone(&grants);
    // A call that emits nothing before its result (every read, and a held write that waits
    // silently) is answered as one `application/json` body when the client accepts it; rmcp falls
    // back to SSE as soon as the handler sends a request or notification first (elicitation).
    // Applies to the stateless 2026-07-28 path; 2025-11-25 sessions stay sessions (legacy mode on,
    // so their elicitation answers reach the session) and `json_reply` does the same for them.
    let mut config = StreamableHttpServerConfig::default().with_json_response(true);
    config.cancellation_token = shutdown.child_token();
    let service = StreamableHttpService::new(
        move || {
            Ok(SidecarServer::new(
                Arc::clone(&host),
                Connection::Http {
                    service_key: service_key.clone(),
                },
            )
            .with_grants(Arc::clone(&session_grants)))
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn(crate::json_reply::json_when_done))
        .layer(axum::middleware::from_fn(validate_envelope))
        .layer(axum::middleware::map_response(session_ended_is_no_content))
        .layer(axum::middleware::map_response(errors_as_json_rpc));
    Ok(HttpSidecar {
        local_addr,
        listener,
        router,
        shutdown,
        client_keys: None,
        service_key: service_key_for_auth,
        auth_failures: None,
        grants,
    })
}

/// A session `DELETE` that ended the session answers 204 No Content. rmcp answers 202 Accepted,
/// which the streamable-HTTP transport reserves for accepted notifications; clients check for 200
/// or 204 (the Python `mcp` client logs "Session termination failed: 202" otherwise).
async fn session_ended_is_no_content(
    method: axum::http::Method,
    response: axum::response::Response,
) -> axum::response::Response {
    if method == axum::http::Method::DELETE && response.status() == axum::http::StatusCode::ACCEPTED {
        return axum::http::StatusCode::NO_CONTENT.into_response();
    }
    response
}

/// Internal error (JSON-RPC 2.0).
const INTERNAL_ERROR: i64 = -32_603;

/// The longest plain-text error body the transport writes that is carried into the JSON one.
const TRANSPORT_ERROR_TEXT: usize = 4 * 1024;

/// Every error the sidecar answers has a JSON-RPC body: the transport's own plain-text refusals
/// (406 without the right `Accept`, 400 without a session, 404 for an unknown session or path,
/// 405) keep their status and headers and carry their text as the error message.
async fn errors_as_json_rpc(response: axum::response::Response) -> axum::response::Response {
    let status = response.status();
    let is_json_or_stream = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/event-stream"));
    if !(status.is_client_error() || status.is_server_error()) || is_json_or_stream {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, TRANSPORT_ERROR_TEXT)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let code = if status.is_server_error() {
        INTERNAL_ERROR
    } else {
        INVALID_REQUEST
    };
    let json = rpc_error(status, serde_json::Value::Null, code, message);
    let (json_parts, json_body) = json.into_parts();
    parts.headers.remove(http::header::CONTENT_LENGTH);
    for (name, value) in &json_parts.headers {
        parts.headers.insert(name.clone(), value.clone());
    }
    axum::response::Response::from_parts(parts, json_body)
}

/// The largest JSON-RPC message the sidecar reads (a tool call's arguments included).
pub(crate) const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// JSON-RPC 2.0 error codes the envelope check answers with.
const PARSE_ERROR: i64 = -32_700;
const INVALID_REQUEST: i64 = -32_600;
const INVALID_PARAMS: i64 = -32_602;
/// Implementation-defined server error: no valid key (MCP's HTTP authorization answers 401).
const UNAUTHORIZED: i64 = -32_001;
/// Implementation-defined server error: too many wrong keys from this address (HTTP 429).
const AUTH_THROTTLED: i64 = -32_002;

/// A JSON-RPC error response with `status`.
fn rpc_error(
    status: http::StatusCode,
    id: serde_json::Value,
    code: i64,
    message: String,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    });
    (status, axum::Json(body)).into_response()
}

/// Why a JSON-RPC envelope is refused: (HTTP status, id to answer with, code, message).
type Refusal = (http::StatusCode, serde_json::Value, i64, String);

/// Checks one JSON-RPC 2.0 message before rmcp sees it, so malformed input gets a JSON-RPC error
/// instead of a transport-level 415: not JSON → -32700; a batch, a non-object, `jsonrpc` other
/// than "2.0", a bad `id` or `method` → -32600 (HTTP 400); `tools/call` without an object
/// `params`, with a non-string `name` or non-object `arguments` → -32602 (HTTP 200, answering
/// the request's id).
fn check_envelope(bytes: &[u8]) -> Result<(), Refusal> {
    use http::StatusCode;
    use serde_json::Value;
    let bad =
        |id: Value, code: i64, message: &str| Err((StatusCode::BAD_REQUEST, id, code, message.to_owned()));
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(e) => return bad(Value::Null, PARSE_ERROR, &format!("Parse error: {e}")),
    };
    let message = match value {
        Value::Object(map) => map,
        Value::Array(_) => {
            return bad(
                Value::Null,
                INVALID_REQUEST,
                "Invalid Request: JSON-RPC batches are not supported; send one message per request",
            );
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            return bad(
                Value::Null,
                INVALID_REQUEST,
                "Invalid Request: a message must be a JSON object",
            );
        }
    };
    let id = match message.get("id") {
        None => Value::Null,
        Some(id @ Value::String(_)) => id.clone(),
        Some(id @ Value::Number(n)) if n.is_i64() || n.is_u64() => id.clone(),
        Some(_) => {
            return bad(
                Value::Null,
                INVALID_REQUEST,
                "Invalid Request: id must be a string or an integer",
            );
        }
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return bad(
            id,
            INVALID_REQUEST,
            "Invalid Request: jsonrpc must be exactly \"2.0\"",
        );
    }
    let method = match message.get("method") {
        None if message.contains_key("result") || message.contains_key("error") => return Ok(()),
        None => return bad(id, INVALID_REQUEST, "Invalid Request: method is missing"),
        Some(Value::String(method)) => method.as_str(),
        Some(_) => return bad(id, INVALID_REQUEST, "Invalid Request: method must be a string"),
    };
    if method == "tools/call" && message.contains_key("id") {
        let invalid = |text: &str| {
            Err((
                StatusCode::OK,
                id.clone(),
                INVALID_PARAMS,
                format!("Invalid params: {text}"),
            ))
        };
        let Some(params) = message.get("params") else {
            return invalid("tools/call needs params {name, arguments}");
        };
        let Some(params) = params.as_object() else {
            return invalid("params must be an object");
        };
        if !params.get("name").is_some_and(Value::is_string) {
            return invalid("params.name must be the tool's name (a string)");
        }
        if params
            .get("arguments")
            .is_some_and(|a| !a.is_object() && !a.is_null())
        {
            return invalid("params.arguments must be an object");
        }
    }
    Ok(())
}

/// Middleware in front of rmcp's service: a POST that is not JSON is a 415 with a JSON-RPC error
/// body; a JSON POST is read (at most [`MAX_MESSAGE_BYTES`]),
/// its envelope checked by [`check_envelope`], and passed on unchanged when it is well formed.
async fn validate_envelope(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if request.method() != http::Method::POST {
        return next.run(request).await;
    }
    let is_json = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if !is_json {
        // Still a JSON-RPC answer, so a client's error handling reads one shape.
        return rpc_error(
            http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            serde_json::Value::Null,
            INVALID_REQUEST,
            "Invalid Request: send a JSON-RPC message with Content-Type: application/json".to_owned(),
        );
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_MESSAGE_BYTES).await else {
        return rpc_error(
            http::StatusCode::PAYLOAD_TOO_LARGE,
            serde_json::Value::Null,
            INVALID_REQUEST,
            format!("Invalid Request: a message is at most {MAX_MESSAGE_BYTES} bytes"),
        );
    };
    if let Err((status, id, code, message)) = check_envelope(&bytes) {
        tracing::debug!(event = "mcp_envelope_refused", code, %message);
        return rpc_error(status, id, code, message);
    }
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}

/// The keys a client must present when keys are configured (the gateway's
/// `METAFORGE_GATEWAY_API_KEY`), plus the service key.
#[derive(Clone)]
struct RequiredKeys {
    clients: Arc<[ClientKey]>,
    service: Option<Arc<str>>,
    failures: Option<Arc<dyn AuthFailures>>,
}

/// Every credential a request presents: `X-API-Key`, `Authorization: Bearer` (scheme
/// case-insensitive) and the service-key header.
fn presented(headers: &http::HeaderMap) -> Vec<(http::HeaderName, String)> {
    let mut found = Vec::new();
    for name in [
        http::HeaderName::from_static("x-api-key"),
        http::HeaderName::from_static(SERVICE_KEY_HEADER),
    ] {
        for value in headers.get_all(&name) {
            found.push((name.clone(), value.to_str().unwrap_or_default().trim().to_owned()));
        }
    }
    for value in headers.get_all(http::header::AUTHORIZATION) {
        found.push((
            http::header::AUTHORIZATION,
            bearer_credential(value.to_str().unwrap_or_default()).to_owned(),
        ));
    }
    found
}

/// Middleware when keys are configured: every request presents a key and every key it presents
/// is a client key or the service key, else 401 before anything is read; client keys naming two
/// identities are refused too (as the gateway refuses them). A client key's header is then
/// removed, so the caller class is `remote` (only the service key earns `service`), and its
/// identity is put on the request ([`AuthenticatedIdentity`]) for what the call records.
async fn require_key(
    axum::extract::State(keys): axum::extract::State<RequiredKeys>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let eq = |a: &str, b: &str| crate::server::constant_time_eq(a.as_bytes(), b.as_bytes());
    let found = presented(request.headers());
    let mut client_headers = Vec::new();
    let mut identities: Vec<&str> = Vec::new();
    let valid = !found.is_empty()
        && found.iter().all(|(name, given)| {
            let service = keys.service.as_deref().is_some_and(|k| eq(k, given));
            let client = keys.clients.iter().find(|k| eq(&k.key, given));
            if let Some(client) = client.filter(|_| !service) {
                client_headers.push(name.clone());
                identities.push(client.identity.as_str());
            }
            service || client.is_some()
        });
    let identity = identities.first().copied();
    let valid = valid && identities.iter().all(|i| Some(*i) == identity);
    if !valid {
        tracing::warn!(
            event = "mcp_sidecar_unauthorized",
            "a request without a valid key was refused"
        );
        // Only a presented credential is a guess; a request with none is just 401.
        let verdict = match (&keys.failures, found.is_empty()) {
            (Some(failures), false) => failures.wrong_key(client_address(&request)),
            _ => WrongKeyVerdict::Unauthorized,
        };
        return match verdict {
            WrongKeyVerdict::Unauthorized => {
                let mut response = rpc_error(
                    http::StatusCode::UNAUTHORIZED,
                    serde_json::Value::Null,
                    UNAUTHORIZED,
                    "a valid key is required (Authorization: Bearer <key> or X-API-Key): the gateway's keys are configured".to_owned(),
                );
                response.headers_mut().insert(
                    http::header::WWW_AUTHENTICATE,
                    http::HeaderValue::from_static("Bearer"),
                );
                response
            }
            WrongKeyVerdict::Throttled { retry_after_secs, .. } => {
                let mut response = rpc_error(
                    http::StatusCode::TOO_MANY_REQUESTS,
                    serde_json::Value::Null,
                    AUTH_THROTTLED,
                    format!(
                        "too many wrong keys from this address; retry in {retry_after_secs}s (a valid key is still admitted)"
                    ),
                );
                response.headers_mut().insert(
                    http::header::RETRY_AFTER,
                    http::HeaderValue::from(retry_after_secs),
                );
                response
            }
        };
    }
    let identity = identity.map(Arc::<str>::from);
    for name in client_headers {
        request.headers_mut().remove(name);
    }
    if let Some(identity) = identity {
        request.extensions_mut().insert(AuthenticatedIdentity(identity));
    }
    next.run(request).await
}

/// The peer address the listener recorded; a router served without connect info (embedding,
/// tests) counts every client as one address.
fn client_address(request: &axum::extract::Request) -> std::net::IpAddr {
    request
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |info| {
            info.0.ip()
        })
}

/// Renders the process's Prometheus exposition text (the composition root owns the recorder).
pub type MetricsRender = Arc<dyn Fn() -> String + Send + Sync>;

/// The path the sidecar serves its process metrics on, next to [`MCP_PATH`].
pub const METRICS_PATH: &str = "/metrics";

impl HttpSidecar {
    /// Also serves `GET /metrics` on the same loopback listener, so a standalone sidecar's own
    /// counters (held-write resolutions, holds no approver can reach) can be scraped.
    #[must_use]
    pub fn with_metrics(mut self, render: MetricsRender) -> Self {
        let route = axum::routing::get(move || {
            let render = Arc::clone(&render);
            async move {
                (
                    [(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    render(),
                )
            }
        });
        self.router = self.router.route(METRICS_PATH, route);
        self
    }

    /// Requires a key on every request (MCP and `/metrics`): one of `keys` (the gateway's keys,
    /// when configured, each with the identity it authenticates) or the service key; a loopback
    /// client with none is refused 401. An empty list leaves the sidecar open to loopback
    /// clients, as before keys are configured.
    #[must_use]
    pub fn require_keys<K: Into<ClientKey>>(mut self, keys: Vec<K>) -> Self {
        let keys: Vec<ClientKey> = keys
            .into_iter()
            .map(Into::into)
            .filter(|k| !k.key.is_empty())
            .collect();
        self.client_keys = (!keys.is_empty()).then(|| Arc::from(keys));
        self
    }

    /// Counts wrong keys with `failures` (the gateway's throttle when both run in one process,
    /// so an address has one count across both doors): past its limit a wrong key is answered
    /// 429; a valid key is always admitted.
    #[must_use]
    pub fn with_auth_failures(mut self, failures: Option<Arc<dyn AuthFailures>>) -> Self {
        self.auth_failures = failures;
        self
    }

    /// Confirms, before every call, a service-key caller's run (FORGE-487) and a client-task
    /// session's claim (FORGE-584) with `grants`; without them a service-key caller is
    /// `untrusted` and no session is a client task (fail closed). Set once; a second call is
    /// ignored with a warning.
    #[must_use]
    pub fn with_caller_grants(self, grants: Arc<dyn metaforge_ports::CallerGrants>) -> Self {
        if self.grants.set(grants).is_err() {
            tracing::warn!(
                event = "mcp_caller_grants_already_set",
                "the sidecar's caller grants were set twice; the first stays"
            );
        }
        self
    }

    /// The bound listener and the router (with the key check when keys are required), for a
    /// caller that serves them itself (the `metaforge` binary serves every listener through one
    /// function with its slow-client limits).
    pub fn into_parts(self) -> (tokio::net::TcpListener, axum::Router) {
        let router = keyed(
            self.router,
            self.client_keys,
            self.service_key,
            self.auth_failures,
        );
        (self.listener, router)
    }

    /// Serves until the shutdown token is cancelled, with `TCP_NODELAY` on every accepted socket
    /// (embedding and tests; the binary uses [`HttpSidecar::into_parts`] and its own listener).
    pub async fn run(self) -> Result<(), ServeError> {
        use axum::serve::ListenerExt as _;
        let addr = self.local_addr.to_string();
        let shutdown = self.shutdown;
        let router = keyed(
            self.router,
            self.client_keys,
            self.service_key,
            self.auth_failures,
        );
        let listener = self.listener.tap_io(|stream| {
            if let Err(err) = stream.set_nodelay(true) {
                tracing::debug!(event = "tcp_nodelay_failed", error = %err);
            }
        });
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { shutdown.cancelled_owned().await })
            .await
            .map_err(|source| ServeError::Io { addr, source })
    }
}

/// `router` behind the key check when client keys are required; unchanged otherwise.
fn keyed(
    router: axum::Router,
    clients: Option<Arc<[ClientKey]>>,
    service: Option<Arc<str>>,
    failures: Option<Arc<dyn AuthFailures>>,
) -> axum::Router {
    match clients {
        Some(clients) => router.layer(axum::middleware::from_fn_with_state(
            RequiredKeys {
                clients,
                service,
                failures,
            },
            require_key,
        )),
        None => router,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(bytes: &str) -> Option<(u16, i64)> {
        check_envelope(bytes.as_bytes())
            .err()
            .map(|(status, _, code, _)| (status.as_u16(), code))
    }

    #[test]
    fn malformed_envelopes_get_json_rpc_codes() {
        assert_eq!(code("{not json"), Some((400, PARSE_ERROR)));
        assert_eq!(
            code(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            Some((400, INVALID_REQUEST))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
            Some((400, INVALID_REQUEST))
        );
        assert_eq!(code(r#"{"id":1,"method":"ping"}"#), Some((400, INVALID_REQUEST)));
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#),
            Some((400, INVALID_REQUEST))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":7}"#),
            Some((400, INVALID_REQUEST))
        );
        assert_eq!(code("42"), Some((400, INVALID_REQUEST)));
    }

    #[test]
    fn bad_tool_call_params_are_invalid_params_answering_the_id() {
        for body in [
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":[]}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":5}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"flow.list","arguments":"x"}}"#,
        ] {
            let (status, id, code, _) = check_envelope(body.as_bytes()).unwrap_err();
            assert_eq!((status.as_u16(), code), (200, INVALID_PARAMS), "{body}");
            assert_eq!(id, serde_json::json!(3));
        }
    }

    #[test]
    fn the_bearer_scheme_is_read_case_insensitively() {
        for value in ["Bearer k-1", "bearer k-1", "BEARER k-1"] {
            assert_eq!(bearer_credential(value), "k-1", "{value}");
        }
        assert_eq!(bearer_credential("Basic k-1"), "");
    }

    #[test]
    fn well_formed_messages_pass() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"flow.list","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"flow.list"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        ] {
            assert!(check_envelope(body.as_bytes()).is_ok(), "{body}");
        }
    }
}
