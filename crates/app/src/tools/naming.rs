//! Registry ids and provider-facing tool names: the rule lives in
//! [`metaforge_domain::tool_naming`] (the grounding check needs it too); re-exported here for the
//! registry.

pub use metaforge_domain::tool_naming::{
    MAX_PROVIDER_NAME_LEN, hashed_name, is_valid_provider_name, mcp_tool_id, names_for_id,
    preferred_provider_name, same_tool,
};
