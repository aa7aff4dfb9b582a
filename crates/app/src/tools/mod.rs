//! The central tool registry (issue 6): native and MCP tools under one naming scheme, domain
//! scoping, `search_tools`, argument pre-validation (`metaforge_domain::tool_gating`), and
//! schema selection under a provider's tools-array cap (`metaforge_domain::tool_cap`).

pub mod catalogue;
pub mod naming;
pub mod registry;

pub use catalogue::{
    CORE_SERVERS, CatalogueEntry, DomainScope, SEARCH_TOOLS_ID, SearchTools, ToolCatalogue, register_scoped,
};
pub use registry::{
    NativeTool, ProviderToolSchema, RegisteredTool, Registration, RegistryError, SchemaSelection, ToolOrigin,
    ToolRegistry,
};
