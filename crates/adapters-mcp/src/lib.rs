//! MCP transports for MetaForge.
//!
//! What lands here (issue 6): the MCP client (stdio and streamable HTTP, built on rmcp) that the
//! central tool registry uses to reach tool servers, and the transport half of the
//! `metaforge mcp serve` sidecar. Adapters depend on `metaforge-ports` only.
