//! The live state of every configured MCP server, written by the registry (at start, on
//! refresh, after each call) and read by `/health`. A change to unavailable is logged loudly
//! (`mcp_server_unavailable` at ERROR), a recovery at INFO (`mcp_server_available`), so a dead
//! server is never skipped silently.

use std::collections::BTreeMap;
use std::sync::{PoisonError, RwLock};

/// One configured server's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerStatus {
    /// Listed and answering; `tools` offered after its include/exclude globs.
    Ok {
        /// How many tools it offers.
        tools: usize,
    },
    /// It could not start, list or be reached (the last call found it gone).
    Unavailable {
        /// Why, in the server client's words.
        reason: String,
    },
    /// Configured with `"disabled": true`: validated, never started.
    Disabled,
}

impl ServerStatus {
    /// `ok`, `unavailable` or `disabled`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Ok { .. } => "ok",
            Self::Unavailable { .. } => "unavailable",
            Self::Disabled => "disabled",
        }
    }
}

/// Every configured server's state by name; empty when no server is configured.
#[derive(Debug, Default)]
pub struct ServerStatuses {
    inner: RwLock<BTreeMap<String, ServerStatus>>,
    /// Each stdio server's sandbox, `on` or `off`.
    sandboxes: RwLock<BTreeMap<String, &'static str>>,
    /// Each listed server's tools counted by the class the gate gives them.
    classes: RwLock<BTreeMap<String, BTreeMap<&'static str, usize>>>,
}

impl ServerStatuses {
    /// No server configured (what a gateway without a servers file reports).
    pub fn none() -> Self {
        Self::default()
    }

    /// The states now, by server name.
    pub fn snapshot(&self) -> BTreeMap<String, ServerStatus> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// True when any configured server is unavailable (`/health` is then degraded).
    pub fn any_unavailable(&self) -> bool {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .any(|s| matches!(s, ServerStatus::Unavailable { .. }))
    }

    /// Records how `server` is isolated (`on` or `off` for a stdio server's sandbox), for
    /// `/health`.
    pub fn set_sandbox(&self, server: &str, sandbox: &'static str) {
        self.sandboxes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(server.to_owned(), sandbox);
    }

    /// Records how many of `server`'s tools the gate takes as each class (`read_only`,
    /// `additive`, `producing`, `destructive`), for `/health`.
    pub fn set_classes(&self, server: &str, classes: BTreeMap<&'static str, usize>) {
        self.classes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(server.to_owned(), classes);
    }

    /// Each listed server's tools by class, by name.
    pub fn classes(&self) -> BTreeMap<String, BTreeMap<&'static str, usize>> {
        self.classes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Each stdio server's sandbox (`on` or `off`), by name; an HTTP server has none here.
    pub fn sandboxes(&self) -> BTreeMap<String, &'static str> {
        self.sandboxes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records `status` for `server`, logging a change to or from unavailable; returns the
    /// previous state.
    pub fn set(&self, server: &str, status: ServerStatus) -> Option<ServerStatus> {
        let previous = self
            .inner
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(server.to_owned(), status.clone());
        let was_unavailable = matches!(previous, Some(ServerStatus::Unavailable { .. }));
        match &status {
            ServerStatus::Unavailable { reason } if !was_unavailable => {
                tracing::error!(
                    event = "mcp_server_unavailable",
                    server,
                    reason = %reason,
                    "an MCP server is unavailable: its tools fail until it answers again"
                );
            }
            ServerStatus::Unavailable { reason } => {
                tracing::debug!(event = "mcp_server_still_unavailable", server, reason = %reason);
            }
            ServerStatus::Ok { tools } if was_unavailable => {
                tracing::info!(
                    event = "mcp_server_available",
                    server,
                    tools,
                    "an MCP server answers again"
                );
            }
            ServerStatus::Ok { .. } | ServerStatus::Disabled => {}
        }
        previous
    }
}
