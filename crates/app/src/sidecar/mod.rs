//! The `metaforge mcp serve` sidecar's use cases: the tools and resources it exposes to
//! external harnesses, served through the [`ToolHost`] port by the MCP adapter.
//!
//! The sidecar never offers a tool that approves anything (FORGE-400): approving happens where a
//! person is, through the one approval ledger. Tools see the caller class the transport decided
//! from the connection; arguments never choose it.

pub mod host;

pub use host::{SidecarHost, SidecarResource, SidecarTool};
