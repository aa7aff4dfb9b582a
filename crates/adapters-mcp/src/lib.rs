//! MCP transports for MetaForge, built on rmcp.
//!
//! Two directions, one crate: the MCP *client* ([`McpToolServer`], a [`metaforge_ports::ToolSource`]
//! per configured server, stdio or streamable HTTP) that the central tool registry reaches tool
//! servers through, and the *server* half of the `metaforge mcp serve` sidecar
//! ([`SidecarServer`], [`serve_stdio`], [`bind_http`]) that hands every call to a
//! [`metaforge_ports::ToolHost`]. Protocol details (eras, elicitation, sessions) stay here;
//! adapters depend on `metaforge-ports` only.

// Every variant of our own enums is named: a new protocol era, tool class or outcome must not
// compile into a silent default (issue 11, W4).
#![deny(clippy::wildcard_enum_match_arm)]

mod client;
pub mod config;
mod convert;
mod glob;
mod http_client;
mod json_reply;
mod launch;
mod serve;
mod server;
mod skills;
mod trace_meta;

pub use client::{ClientStats, McpToolServer};
pub use config::{
    ConfigError, ProtocolChoice, ServerConfig, ServerTransport, load_servers_file, parse_servers,
};
pub use launch::StdioLaunch;
pub use serve::{
    ClientKey, HttpSidecar, MCP_PATH, METRICS_PATH, MetricsRender, ServeError, bind_http, serve_stdio,
};
pub use server::{
    ANSWERS_ARGUMENT, AuthenticatedIdentity, Connection, GrantsCell, PROJECT_HEADER, SERVICE_KEY_HEADER,
    SESSION_HEADER, SidecarServer, classify_http,
};
