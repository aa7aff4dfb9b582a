//! A stored, frozen flow version: the record the flow-version store keeps and runs pin.

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;

/// Where a version is in its approval life. Decided versions (approved, rejected) are immutable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FlowVersionStatus {
    /// Saved and held for a person's decision.
    Proposed,
    /// A person approved it; runs may start on it.
    Approved,
    /// A person rejected it; it is kept for audit only.
    Rejected,
}

impl FlowVersionStatus {
    /// The snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proposed => "proposed",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
        }
    }

    /// True once a person has decided; a decided version never changes again.
    pub fn is_decided(self) -> bool {
        !matches!(self, Self::Proposed)
    }
}

/// Who wrote the operations that produced the version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FlowVersionOrigin {
    /// The server's own generator (or an edit saved through the gateway).
    Server,
    /// The caller's model proposed the operations (caller-proposed tailoring).
    Caller,
    /// A shipped template run as it is: frozen into an approved version the first time a run
    /// starts from it, so every run pins a stored, hash-verified version (issue 16).
    Template,
}

/// One immutable flow version. `frozen` is the canonical JSON whose SHA-256 is `content_hash`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FlowVersionRecord {
    /// uuid v7.
    pub id: String,
    /// The template the version was derived from.
    pub template_id: String,
    /// The template's version at derivation time.
    pub template_version: String,
    /// Approval state.
    pub status: FlowVersionStatus,
    /// Canonical JSON of the frozen flow (sorted keys, no whitespace).
    pub frozen: String,
    /// Lower-case hex SHA-256 of `frozen`.
    pub content_hash: String,
    /// Who proposed it.
    pub origin: FlowVersionOrigin,
    /// The held approval deciding this version, if any.
    pub approval_id: Option<String>,
    /// Who decided it, read from the approval record, never from a request field.
    pub approver: Option<String>,
    /// When it was saved.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When it was decided.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub decided_at: Option<Timestamp>,
}
