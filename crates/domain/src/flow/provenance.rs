//! Who wrote a proposal's operations, as the approval and the propose answer record it: the
//! caller and its model (FORGE-481), or the model that answered the server's generator
//! (FORGE-468). Plain values, shared by the service that records them and the wire contract that
//! carries them.

use serde::{Deserialize, Serialize};

/// Who proposed caller-written operations (FORGE-481): the client and its model, as they say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProposedBy {
    /// The harness or client (e.g. `claude-code`).
    #[serde(default)]
    pub client: Option<String>,
    /// The caller's model.
    #[serde(default)]
    pub model: Option<String>,
}

/// Which model wrote a generated proposal (FORGE-468): the configured primary and the model that
/// answered can differ when the pipeline fell back, and the person approving should see whose
/// tailoring it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GeneratedBy {
    /// Provider id that answered.
    pub provider: String,
    /// Model that answered.
    pub model: String,
    /// `<provider>:<model>` of the configured primary when a fallback answered, else null.
    #[serde(rename = "fellBackFrom")]
    pub fell_back_from: Option<String>,
}
