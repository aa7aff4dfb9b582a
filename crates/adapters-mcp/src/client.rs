//! The MCP client: one configured tool server as a [`ToolSource`].
//!
//! What it hardens, because users of other harnesses hit each of these:
//! - a stale tool list: `notifications/tools/list_changed` marks the cached list stale and
//!   re-lists it in the background, so the next `list_tools` sees the server's current tools;
//! - a stale session: rmcp's streamable HTTP transport re-initialises once on HTTP 404 and retries
//!   the POST; when the connection itself is gone (server killed, child exited) this client
//!   reconnects once and retries the call, transparently, and logs `mcp_session_reinitialised`;
//! - timeouts that ignore progress: the call timeout is an idle timeout, reset by every
//!   `notifications/progress` for the call;
//! - abandoned calls: a caller that drops the call future makes the client send
//!   `notifications/cancelled` for it;
//! - a crash loop: a server whose session is lost again and again is restarted after a delay
//!   that doubles each time (1 s … 60 s), and is `Unavailable` until then ([`restart_delay`]);
//! - a flood on stdout: rmcp's line codec drops any line over 16 MiB (`DEFAULT_MAX_LINE_LENGTH`)
//!   instead of buffering it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use metaforge_ports::{PortError, PortErrorKind, ToolDescriptor, ToolOutput, ToolSource};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientCapabilities, ClientConfig as ClientInfo, ClientRequest, ErrorCode, Implementation,
    ProtocolVersion, RequestId, ServerResult,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, Peer, PeerRequestOptions, RunningService,
};
use rmcp::{ClientHandler, RoleClient, ServiceError};
use serde_json::{Map, Value};
use tokio::sync::{Mutex, RwLock};

use crate::config::{ProtocolChoice, ServerConfig, ServerTransport};
use crate::convert::{descriptor_from_tool, output_from_result};
use crate::glob::tool_passes;
use crate::launch::{LaunchError, StdioLaunch};
use metaforge_sandbox::Sandbox;

/// Shared between the client and its notification handler.
#[derive(Default)]
struct ToolCache {
    /// The filtered list; `None` when it must be fetched again.
    tools: RwLock<Option<Vec<ToolDescriptor>>>,
    /// How many `tools/list_changed` notifications arrived (observability and tests).
    list_changed: AtomicU64,
    /// How many times the list was fetched from the server.
    fetches: AtomicU64,
    /// Told when a session opens and when a changed list was fetched, so whoever keeps the
    /// servers' statuses re-lists at once instead of at its next timed refresh.
    changed: Option<Arc<tokio::sync::Notify>>,
}

impl ToolCache {
    fn signal_change(&self) {
        if let Some(changed) = &self.changed {
            changed.notify_one();
        }
    }
}

/// The rmcp client handler: our identity, and the `tools/list_changed` reaction.
struct Handler {
    info: ClientInfo,
    server: String,
    filters: Arc<(Vec<String>, Vec<String>)>,
    cache: Arc<ToolCache>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientInfo {
        self.info.clone()
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        on_list_changed(&self.server, &self.cache, &self.filters, context.peer.clone()).await;
    }
}

async fn on_list_changed(
    server: &str,
    cache: &Arc<ToolCache>,
    filters: &Arc<(Vec<String>, Vec<String>)>,
    peer: Peer<RoleClient>,
) {
    cache.list_changed.fetch_add(1, Ordering::SeqCst);
    *cache.tools.write().await = None;
    tracing::info!(
        event = "mcp_tools_list_changed",
        server,
        "tool list changed; re-listing"
    );
    // Re-list off the notification path: a request issued from inside the handler must not
    // hold up the service loop that would deliver its response.
    let cache = Arc::clone(cache);
    let filters = Arc::clone(filters);
    let server = server.to_owned();
    tokio::spawn(async move {
        match fetch_tools(&peer, &cache, &filters).await {
            Ok(_) => cache.signal_change(),
            Err(e) => tracing::warn!(event = "mcp_tools_refresh_failed", server, error = %e),
        }
    });
}

async fn fetch_tools(
    peer: &Peer<RoleClient>,
    cache: &ToolCache,
    filters: &(Vec<String>, Vec<String>),
) -> Result<Vec<ToolDescriptor>, ServiceError> {
    // A list fetched while a list_changed notification arrived may already be stale: keep it
    // for this answer but do not cache it (the notification's own refresh will).
    let changes_before = cache.list_changed.load(Ordering::SeqCst);
    let tools = peer.list_all_tools().await?;
    cache.fetches.fetch_add(1, Ordering::SeqCst);
    let list: Vec<ToolDescriptor> = tools
        .iter()
        .filter(|t| tool_passes(&filters.0, &filters.1, &t.name))
        .map(descriptor_from_tool)
        .collect();
    let mut slot = cache.tools.write().await;
    if cache.list_changed.load(Ordering::SeqCst) == changes_before {
        *slot = Some(list.clone());
    }
    Ok(list)
}

/// One live session with the server.
struct Connection {
    service: RunningService<RoleClient, Handler>,
    generation: u64,
    /// Holds the 2026-07-28 `subscriptions/listen` task, stopped when the session is dropped.
    _listener: Option<tokio::task::JoinHandle<()>>,
}

/// A configured MCP tool server, connected lazily and reconnected when its session is gone.
pub struct McpToolServer {
    config: ServerConfig,
    /// What a stdio server's process starts with (never the gateway's environment).
    launch: Arc<StdioLaunch>,
    cache: Arc<ToolCache>,
    filters: Arc<(Vec<String>, Vec<String>)>,
    connection: RwLock<Option<Arc<Connection>>>,
    connect_lock: Mutex<()>,
    generation: AtomicU64,
    reinitialisations: AtomicU64,
    /// Sessions the HTTP transport re-initialised itself (404 or an equivalent answer).
    transport_reinitialisations: Arc<AtomicU64>,
    /// Sessions lost in a row, and when the next start may be tried.
    crashes: std::sync::Mutex<Crashes>,
}

/// A server whose session keeps dying (a crashing child, a killed one) is restarted at once the
/// first time, then after a delay that doubles with each loss in a row ([`restart_delay`]);
/// until then every use is refused `Unavailable`, naming when it restarts. A call that succeeds
/// clears it.
#[derive(Debug, Default)]
struct Crashes {
    in_a_row: u32,
    next_start: Option<tokio::time::Instant>,
}

/// The longest a crashed server waits to be restarted.
pub const MAX_RESTART_DELAY: std::time::Duration = std::time::Duration::from_secs(60);

/// How long after its `in_a_row`-th lost session in a row a server is restarted: at once after
/// the first, then 1 s, 2 s, 4 s … up to [`MAX_RESTART_DELAY`].
pub fn restart_delay(in_a_row: u32) -> std::time::Duration {
    match in_a_row {
        0 | 1 => std::time::Duration::ZERO,
        n => std::time::Duration::from_secs(1u64 << (n - 2).min(6)).min(MAX_RESTART_DELAY),
    }
}

/// Counters describing what the client has done, for logs, health and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientStats {
    /// Sessions opened (1 after the first connect).
    pub sessions: u64,
    /// Times a lost session was re-initialised to retry a call (by this client after the
    /// connection died, or by the HTTP transport after the server forgot the session).
    pub reinitialisations: u64,
    /// `tools/list_changed` notifications received.
    pub list_changed: u64,
    /// Tool-list fetches from the server.
    pub tool_fetches: u64,
}

impl McpToolServer {
    /// A client for `config`, a stdio server starting as `launch` says; nothing connects until
    /// the first list or call.
    pub fn new(config: ServerConfig, launch: Arc<StdioLaunch>) -> Self {
        let filters = Arc::new((config.include.clone(), config.exclude.clone()));
        Self {
            config,
            launch,
            cache: Arc::new(ToolCache::default()),
            filters,
            connection: RwLock::new(None),
            connect_lock: Mutex::new(()),
            generation: AtomicU64::new(0),
            reinitialisations: AtomicU64::new(0),
            transport_reinitialisations: Arc::new(AtomicU64::new(0)),
            crashes: std::sync::Mutex::new(Crashes::default()),
        }
    }

    /// Tells `changed` whenever a session opens or a changed tool list was fetched (a server
    /// whose first start outlasted the handshake timeout, then connected on a later use, is
    /// listed at once rather than at the next timed refresh).
    #[must_use]
    pub fn with_change_signal(mut self, changed: Arc<tokio::sync::Notify>) -> Self {
        self.cache = Arc::new(ToolCache {
            changed: Some(changed),
            ..ToolCache::default()
        });
        self
    }

    /// Connects now (instead of on first use), so a bad server fails at start-up.
    pub async fn connect(&self) -> Result<(), PortError> {
        self.live_connection().await.map(|_| ())
    }

    /// What the client has done so far.
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            sessions: self.generation.load(Ordering::SeqCst),
            reinitialisations: self.reinitialisations.load(Ordering::SeqCst)
                + self.transport_reinitialisations.load(Ordering::SeqCst),
            list_changed: self.cache.list_changed.load(Ordering::SeqCst),
            tool_fetches: self.cache.fetches.load(Ordering::SeqCst),
        }
    }

    /// The protocol version negotiated with the server, when connected.
    pub async fn protocol_version(&self) -> Option<String> {
        let conn = self.connection.read().await.clone()?;
        conn.service
            .peer()
            .peer_info()
            .map(|info| info.protocol_version.as_str().to_owned())
    }

    /// Closes the session (stops a stdio child).
    pub async fn close(&self) {
        let taken = self.connection.write().await.take();
        if let Some(Ok(conn)) = taken.map(Arc::try_unwrap) {
            let mut service = conn.service;
            let _closed = service.close().await;
        }
    }

    async fn live_connection(&self) -> Result<Arc<Connection>, PortError> {
        if let Some(conn) = self.current().await {
            return Ok(conn);
        }
        let _guard = self.connect_lock.lock().await;
        if let Some(conn) = self.current().await {
            return Ok(conn);
        }
        if let Some(wait) = self.restart_wait() {
            return Err(PortError::new(
                PortErrorKind::Unavailable,
                format!(
                    "mcp server {}: its session was lost {} times in a row; it is restarted in {:.1} s",
                    self.config.name,
                    self.crashes_in_a_row(),
                    wait.as_secs_f64()
                ),
            ));
        }
        let conn = Arc::new(self.open().await?);
        *self.connection.write().await = Some(Arc::clone(&conn));
        *self.cache.tools.write().await = None;
        Ok(conn)
    }

    /// The current session, unless it has closed.
    async fn current(&self) -> Option<Arc<Connection>> {
        self.connection
            .read()
            .await
            .clone()
            .filter(|conn| !conn.service.is_closed())
    }

    /// Drops the session `generation` (if it is still current), so the next use reconnects.
    async fn forget(&self, generation: u64) {
        let mut slot = self.connection.write().await;
        if slot.as_ref().is_some_and(|c| c.generation == generation) {
            *slot = None;
        }
    }

    async fn open(&self) -> Result<Connection, PortError> {
        let name = self.config.name.clone();
        let mut info = ClientInfo::new(
            ClientCapabilities::default(),
            Implementation::new("metaforge", env!("CARGO_PKG_VERSION")),
        );
        let lifecycle = match self.config.protocol {
            ProtocolChoice::Initialize => {
                info.protocol_version = ProtocolVersion::V_2025_11_25;
                ClientLifecycleMode::Initialize
            }
            ProtocolChoice::Discover => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
            ProtocolChoice::Auto => {
                info.protocol_version = ProtocolVersion::V_2025_11_25;
                ClientLifecycleMode::Auto {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    legacy_version: Some(ProtocolVersion::V_2025_11_25),
                }
            }
        };
        let handler = Handler {
            info,
            server: name.clone(),
            filters: Arc::clone(&self.filters),
            cache: Arc::clone(&self.cache),
        };
        let unavailable = |what: &str, e: &dyn std::fmt::Display| {
            PortError::new(
                PortErrorKind::Unavailable,
                format!("mcp server {name}: {what}: {e}"),
            )
        };
        let connecting = async {
            match &self.config.transport {
                ServerTransport::Stdio { command, args, env } => {
                    let home = self.launch.home_of(&name);
                    tokio::fs::create_dir_all(&home).await.map_err(|e| {
                        unavailable(&format!("cannot create its directory {}", home.display()), &e)
                    })?;
                    let sandbox = &self.config.sandbox;
                    let cmd =
                        self.launch
                            .command(&name, command, args, env, sandbox)
                            .map_err(|e| match e {
                                LaunchError::NotFound { .. } => {
                                    unavailable(&format!("cannot start {command}"), &e)
                                }
                                LaunchError::Sandbox(_) => unavailable("sandbox unavailable", &e),
                            })?;
                    match sandbox {
                        Sandbox::On(_) => {
                            tracing::info!(event = "mcp_server_sandboxed", server = %name, "starting a tool server in its sandbox");
                        }
                        Sandbox::Off => {
                            tracing::warn!(event = "mcp_server_unsandboxed", server = %name, "starting a tool server WITHOUT a sandbox (\"sandbox\": \"off\" in its entry): it sees this machine's files and network");
                        }
                    }
                    let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .map_err(|e| unavailable(&format!("cannot start {command}"), &e))?;
                    if let Some(stderr) = stderr {
                        tokio::spawn(crate::stderr_log::forward(name.clone(), stderr));
                    }
                    handler
                        .serve_with_lifecycle(transport, lifecycle)
                        .await
                        .map_err(|e| unavailable("handshake failed", &e))
                }
                ServerTransport::Http { url, headers } => {
                    let mut custom = std::collections::HashMap::new();
                    for (k, v) in headers {
                        let key = http::HeaderName::from_bytes(k.as_bytes())
                            .map_err(|e| unavailable("bad header name", &e))?;
                        let value = http::HeaderValue::from_str(v)
                            .map_err(|e| unavailable("bad header value", &e))?;
                        custom.insert(key, value);
                    }
                    let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                        url.as_str(),
                    )
                    .custom_headers(custom)
                    .reinit_on_expired_session(true);
                    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                        crate::http_client::SessionAwareClient::new(
                            &name,
                            Arc::clone(&self.transport_reinitialisations),
                        ),
                        config,
                    );
                    handler
                        .serve_with_lifecycle(transport, lifecycle)
                        .await
                        .map_err(|e| unavailable("handshake failed", &e))
                }
            }
        };
        let service = tokio::time::timeout(self.config.connect_timeout, connecting)
            .await
            .map_err(|_elapsed| {
                PortError::new(
                    PortErrorKind::Unavailable,
                    format!(
                        "mcp server {name}: no handshake within {:?}",
                        self.config.connect_timeout
                    ),
                )
            })??;
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let version = service
            .peer()
            .peer_info()
            .map(|info| info.protocol_version.clone());
        tracing::info!(
            event = "mcp_server_connected",
            server = %name,
            protocol = version.as_ref().map(|v| v.as_str()).unwrap_or("unknown"),
            generation,
        );
        self.cache.signal_change();
        let listener = if version.as_ref().is_some_and(|v| !v.has_initialize()) {
            Some(self.spawn_list_changed_listener(service.peer().clone()))
        } else {
            None
        };
        Ok(Connection {
            service,
            generation,
            _listener: listener,
        })
    }

    /// On a 2026-07-28 session list changes arrive only on a `subscriptions/listen` stream.
    fn spawn_list_changed_listener(&self, peer: Peer<RoleClient>) -> tokio::task::JoinHandle<()> {
        let cache = Arc::clone(&self.cache);
        let filters = Arc::clone(&self.filters);
        let server = self.config.name.clone();
        tokio::spawn(async move {
            let filter = rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build();
            let mut subscription = match peer.listen(filter).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(event = "mcp_subscription_failed", server, error = %e);
                    return;
                }
            };
            while let Ok(Some(notification)) = subscription.next().await {
                if matches!(
                    notification,
                    rmcp::model::ServerNotification::ToolListChangedNotification(_)
                ) {
                    on_list_changed(&server, &cache, &filters, peer.clone()).await;
                }
            }
        })
    }

    #[expect(
        clippy::wildcard_enum_match_arm,
        reason = "rmcp's ServerResult is #[non_exhaustive]: any answer but a tool result is a protocol error"
    )]
    async fn call_once(
        &self,
        conn: &Connection,
        tool: &str,
        arguments: &Map<String, Value>,
    ) -> Result<ToolOutput, CallFailure> {
        let peer = conn.service.peer();
        let request = CallToolRequest::new(
            CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments.clone()),
        );
        let mut options = PeerRequestOptions::with_timeout(self.config.call_timeout);
        options.reset_timeout_on_progress = true;
        options.meta = crate::trace_meta::current_trace_meta();
        let handle = peer
            .send_request_with_option(ClientRequest::CallToolRequest(request), options)
            .await
            .map_err(CallFailure::from_service)?;
        let guard = CancelOnDrop {
            peer: Some(peer.clone()),
            id: handle.id.clone(),
        };
        let response = handle.await_response().await;
        guard.disarm();
        match response.map_err(CallFailure::from_service)? {
            ServerResult::CallToolResult(result) => output_from_result(result).map_err(CallFailure::Final),
            other => Err(CallFailure::Final(PortError::new(
                PortErrorKind::Internal,
                format!(
                    "mcp server {}: unexpected answer to tools/call: {other:?}",
                    self.config.name
                ),
            ))),
        }
    }
}

/// Sends `notifications/cancelled` for a request whose caller stopped waiting.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
}

impl CancelOnDrop {
    fn disarm(mut self) {
        self.peer = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let id = self.id.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let notification = CancelledNotification::new(CancelledNotificationParam::new(
                    Some(id),
                    Some("caller gave up".to_owned()),
                ));
                if let Err(e) = peer.send_notification(notification.into()).await {
                    tracing::debug!(event = "mcp_cancel_not_sent", error = %e);
                }
            });
        }
    }
}

enum CallFailure {
    /// The session is gone; reconnecting may help.
    ConnectionLost(PortError),
    /// Retrying would not help.
    Final(PortError),
}

impl CallFailure {
    #[expect(
        clippy::wildcard_enum_match_arm,
        reason = "rmcp's ServiceError is #[non_exhaustive]: every other failure is internal"
    )]
    fn from_service(e: ServiceError) -> Self {
        match e {
            ServiceError::TransportSend(_) | ServiceError::TransportClosed => Self::ConnectionLost(
                PortError::with_source(PortErrorKind::Unavailable, "mcp session lost", e),
            ),
            ServiceError::McpError(data) => {
                let kind = if data.code == ErrorCode::METHOD_NOT_FOUND {
                    PortErrorKind::NotFound
                } else if data.code == ErrorCode::INVALID_PARAMS {
                    PortErrorKind::Invalid
                } else {
                    PortErrorKind::Internal
                };
                let mut message = data.message.to_string();
                if let Some(extra) = &data.data {
                    message.push_str(&format!(" (data: {extra})"));
                }
                Self::Final(PortError::new(kind, message))
            }
            ServiceError::Timeout { timeout } => Self::Final(PortError::new(
                PortErrorKind::Unavailable,
                format!("no response or progress within {timeout:?}; the call was cancelled"),
            )),
            other => Self::Final(PortError::with_source(
                PortErrorKind::Internal,
                "mcp call failed",
                other,
            )),
        }
    }
}

#[async_trait::async_trait]
impl ToolSource for McpToolServer {
    fn server_name(&self) -> &str {
        &self.config.name
    }

    async fn list_tools(&self) -> Result<Vec<ToolDescriptor>, PortError> {
        if let Some(tools) = self.cache.tools.read().await.clone() {
            return Ok(tools);
        }
        for attempt in 0..2 {
            let conn = self.live_connection().await?;
            match fetch_tools(conn.service.peer(), &self.cache, &self.filters).await {
                Ok(list) => return Ok(list),
                Err(e) => match CallFailure::from_service(e) {
                    CallFailure::ConnectionLost(e) => {
                        self.lost(conn.generation, "tools/list").await;
                        if attempt > 0 {
                            return Err(self.named(e));
                        }
                    }
                    CallFailure::Final(e) => return Err(self.named(e)),
                },
            }
        }
        Err(PortError::new(
            PortErrorKind::Unavailable,
            format!(
                "mcp server {}: tools/list failed after re-initialising",
                self.config.name
            ),
        ))
    }

    async fn list_skills(&self) -> Result<Vec<metaforge_ports::ServedSkill>, PortError> {
        let conn = self.live_connection().await?;
        crate::skills::fetch(conn.service.peer(), &self.config.name).await
    }

    async fn call_tool(&self, tool: &str, arguments: Map<String, Value>) -> Result<ToolOutput, PortError> {
        for attempt in 0..2 {
            let conn = self.live_connection().await?;
            match self.call_once(&conn, tool, &arguments).await {
                Ok(out) => {
                    *self.crash_state() = Crashes::default();
                    return Ok(out);
                }
                Err(CallFailure::ConnectionLost(e)) => {
                    self.lost(conn.generation, tool).await;
                    if attempt > 0 {
                        let mut e = self.named(e);
                        if let Some(wait) = self.restart_wait() {
                            e.message
                                .push_str(&format!("; restarted in {:.1} s", wait.as_secs_f64()));
                        }
                        return Err(e);
                    }
                }
                Err(CallFailure::Final(e)) => return Err(self.named(e)),
            }
        }
        Err(PortError::new(
            PortErrorKind::Unavailable,
            format!(
                "mcp server {}: {tool} failed after re-initialising",
                self.config.name
            ),
        ))
    }
}

impl McpToolServer {
    /// The session `generation` was lost during `during`: counted as a loss in a row, forgotten,
    /// and the next start put off by [`restart_delay`].
    async fn lost(&self, generation: u64, during: &str) {
        self.reinitialisations.fetch_add(1, Ordering::SeqCst);
        let (in_a_row, delay) = {
            let mut crashes = self.crash_state();
            crashes.in_a_row = crashes.in_a_row.saturating_add(1);
            let delay = restart_delay(crashes.in_a_row);
            crashes.next_start = Some(tokio::time::Instant::now() + delay);
            (crashes.in_a_row, delay)
        };
        if delay.is_zero() {
            tracing::warn!(
                event = "mcp_session_reinitialised",
                server = %self.config.name,
                during,
                "session lost; re-initialising once and retrying"
            );
        } else {
            tracing::error!(
                event = "mcp_server_restart_backoff",
                server = %self.config.name,
                during,
                in_a_row,
                restart_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "the server's session was lost again; it is unavailable until its restart"
            );
        }
        self.forget(generation).await;
    }

    fn crash_state(&self) -> std::sync::MutexGuard<'_, Crashes> {
        self.crashes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn crashes_in_a_row(&self) -> u32 {
        self.crash_state().in_a_row
    }

    /// How long until the server may be started again, when it must wait.
    fn restart_wait(&self) -> Option<std::time::Duration> {
        let next = self.crash_state().next_start?;
        let now = tokio::time::Instant::now();
        (next > now).then(|| next - now)
    }

    fn named(&self, e: PortError) -> PortError {
        PortError {
            message: format!("mcp server {}: {}", self.config.name, e.message),
            ..e
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_session_restarts_at_once_then_after_a_doubling_delay_up_to_a_minute() {
        let delays: Vec<u64> = (0..=10).map(|n| restart_delay(n).as_secs()).collect();
        assert_eq!(delays, [0, 0, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(restart_delay(u32::MAX), MAX_RESTART_DELAY);
    }
}
