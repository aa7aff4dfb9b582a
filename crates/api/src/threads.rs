//! The chat-thread routes' request bodies.

use serde::{Deserialize, Serialize};

/// A new thread.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateThread {
    /// A title for lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The project the thread is scoped to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Fork of this thread (lineage is kept; history is not copied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    /// Most model calls in one turn of this thread (default: the deployment's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000))]
    pub max_iterations: Option<u32>,
    /// Most prompt + completion tokens one turn of this thread may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1_000_000_000))]
    pub token_budget: Option<u64>,
}

/// A person's message: one agent turn.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PostMessage {
    /// The text.
    #[cfg_attr(feature = "openapi", schema(min_length = 1))]
    pub content: String,
}
