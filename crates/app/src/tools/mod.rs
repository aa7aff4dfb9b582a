//! The central tool registry (issue 15 item 2): the one place the agent loop gets its tools.
//!
//! [`ToolRegistry`] holds the native tools of a [`metaforge_ports::ToolHost`] (the sidecar's
//! `flow.*` and `approvals.list`), the native `search_tools`, and the MCP tools of every
//! connected [`metaforge_ports::ToolSource`] (their include/exclude globs applied by the
//! source), named by one rule (`metaforge_domain::tool_naming`). It implements
//! [`metaforge_agent::ToolBoxes`]: each turn gets a view for its caller, scoped to the turn's
//! disciplines ([`DomainScope`]), with what `search_tools` registered and pinned for the caller's
//! session. The rules of a call — the provider's tool cap, schema validation, gating, holds,
//! error envelopes — are the agent loop's (`metaforge_agent`), never repeated here. The
//! per-server state ([`ServerStatuses`]) is what `/health` reports.

pub mod naming;
pub mod registry;
pub mod scope;
pub mod search;
pub mod skill_tools;
pub mod status;

pub use registry::{CatalogueTool, RegistryError, ToolRegistry, ToolRegistryBuilder};
pub use scope::{CORE_SERVERS, DomainScope};
pub use search::{SEARCH_TOOLS_ID, search_tools_descriptor};
pub use skill_tools::{ACTIVATE_COMMITTING_ID, ACTIVATE_ID};
pub use status::{ServerStatus, ServerStatuses};
