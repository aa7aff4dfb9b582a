//! The durable flow-version store (FORGE-482): versions are written through and restored at
//! start-up, and a version whose content no longer matches its hash is never served.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::error::PortError;
use crate::flow_version::{FlowVersionRecord, FlowVersionStatus};

/// A person's decision carried onto a version by the approval ledger (FORGE-462).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowVersionDecision {
    /// `Approved` or `Rejected` (anything else is `Invalid`).
    pub status: FlowVersionStatus,
    /// The approver, read from the approval record.
    pub approver: String,
    /// The approval that decided it.
    pub approval_id: Option<String>,
    /// When it was decided.
    pub at: Timestamp,
}

/// A stored row that failed its integrity check at restore and is therefore not served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedFlowVersion {
    /// The row's id.
    pub id: String,
    /// Why it was skipped (e.g. the hash mismatch, naming both hashes).
    pub reason: String,
}

/// What a start-up restore found.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FlowVersionRestore {
    /// The versions that verified and are served.
    pub restored: Vec<FlowVersionRecord>,
    /// The rows that did not verify and are never served.
    pub skipped: Vec<SkippedFlowVersion>,
}

/// The flow-version store. Every read verifies `sha256(frozen) == content_hash`.
#[async_trait]
pub trait FlowVersionStore: Send + Sync {
    /// Saves a new version (write-through). Its hash must match its frozen content and its id
    /// must be new (`Invalid` / `Conflict`, nothing written).
    async fn save(&self, record: FlowVersionRecord) -> Result<FlowVersionRecord, PortError>;

    /// One version by id: `NotFound` when absent, `Corrupt` when its hash no longer matches.
    async fn get(&self, id: &str) -> Result<FlowVersionRecord, PortError>;

    /// Every verified version (optionally of one template), oldest first; corrupt rows are left
    /// out and logged.
    async fn list(&self, template_id: Option<&str>) -> Result<Vec<FlowVersionRecord>, PortError>;

    /// Decides a proposed version. A decided version is immutable (`Conflict`).
    async fn decide(&self, id: &str, decision: FlowVersionDecision) -> Result<FlowVersionRecord, PortError>;

    /// Run at start-up: reads every row back, verifying each hash.
    async fn restore(&self) -> Result<FlowVersionRestore, PortError>;
}
