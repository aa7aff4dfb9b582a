//! The one error body of every gateway route.

use serde::{Deserialize, Serialize};

/// The JSON body of every error the gateway returns, so clients branch on `error` and show
/// `message`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// A stable machine-readable code (e.g. `unauthorized`, `invalid_request`, `conflict`).
    pub error: String,
    /// A sentence for people, naming the field or record involved.
    pub message: String,
    /// Structured detail: violations, the offending field, the current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}
