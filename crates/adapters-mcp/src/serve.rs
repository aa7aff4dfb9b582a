//! Running the sidecar: stdio for a harness that spawns it, streamable HTTP (axum) for one that
//! connects to it.

use std::net::SocketAddr;
use std::sync::Arc;

use metaforge_ports::ToolHost;
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::server::{Connection, SidecarServer};

/// The path the sidecar serves MCP on.
pub const MCP_PATH: &str = "/mcp";

/// Why the sidecar could not serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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

/// A bound HTTP sidecar: its address, and the future that serves it until `shutdown`.
pub struct HttpSidecar {
    /// The bound address (useful when the requested port was 0).
    pub local_addr: SocketAddr,
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: CancellationToken,
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
            ))
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn(crate::json_reply::json_when_done));
    Ok(HttpSidecar {
        local_addr,
        listener,
        router,
        shutdown,
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

    /// The bound listener and the router, for a caller that serves them itself (the `metaforge`
    /// binary serves every listener through one function with its slow-client limits).
    pub fn into_parts(self) -> (tokio::net::TcpListener, axum::Router) {
        (self.listener, self.router)
    }

    /// Serves until the shutdown token is cancelled, with `TCP_NODELAY` on every accepted socket
    /// (embedding and tests; the binary uses [`HttpSidecar::into_parts`] and its own listener).
    pub async fn run(self) -> Result<(), ServeError> {
        use axum::serve::ListenerExt as _;
        let addr = self.local_addr.to_string();
        let shutdown = self.shutdown;
        let listener = self.listener.tap_io(|stream| {
            if let Err(err) = stream.set_nodelay(true) {
                tracing::debug!(event = "tcp_nodelay_failed", error = %err);
            }
        });
        axum::serve(listener, self.router)
            .with_graceful_shutdown(async move { shutdown.cancelled_owned().await })
            .await
            .map_err(|source| ServeError::Io { addr, source })
    }
}
