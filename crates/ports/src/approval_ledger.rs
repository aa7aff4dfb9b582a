//! The one approval ledger (FORGE-89, FORGE-406/466): every held action waits here, whichever
//! process holds it, and every state change is one durable transition with an audit entry.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::approval::{ApprovalRecord, ApprovalStatus};
use crate::clock::Timestamp;
use crate::error::PortError;

/// The reason a hold left open by a dead process is given at start-up, verbatim from the seed,
/// so the record survives for audit without implying it is still actionable.
pub const ORPHANED_APPROVAL_REASON: &str = "orphaned: gateway restarted while this approval was pending";

/// The grace added to a waiter's timeout to form a hold's deadline (seconds), per FORGE-466.
pub const APPROVAL_DEADLINE_GRACE_SECONDS: i64 = 30;

/// What moved a hold out of `awaiting_approval`; the `trigger` label of
/// `metaforge_tool_approval_resolution_total` and the audit trail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalTrigger {
    /// The hold was parked (the first history entry).
    Park,
    /// A person approved or rejected it.
    Decision,
    /// The waiter closed it (its window closed, or its call was cancelled).
    Waiter,
    /// A read found its deadline passed and expired it.
    Deadline,
    /// The process restarted while it was pending; it was marked failed (orphaned).
    Restart,
}

impl ApprovalTrigger {
    /// The snake_case label used in metrics, logs and the history table.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Park => "park",
            Self::Decision => "decision",
            Self::Waiter => "waiter",
            Self::Deadline => "deadline",
            Self::Restart => "restart",
        }
    }

    /// Parses the label written by [`ApprovalTrigger::as_str`].
    pub fn parse(label: &str) -> Option<Self> {
        Some(match label {
            "park" => Self::Park,
            "decision" => Self::Decision,
            "waiter" => Self::Waiter,
            "deadline" => Self::Deadline,
            "restart" => Self::Restart,
            _ => return None,
        })
    }
}

/// A person's answer to a hold. The approver is taken from here and written onto the record,
/// never from the held call's own arguments (FORGE-393).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    /// True to approve, false to reject.
    pub approve: bool,
    /// Who decided (non-empty).
    pub approver: String,
    /// The person's note, kept as the record's reason.
    pub note: Option<String>,
}

/// How a waiter closes a hold it stopped waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaiterResolution {
    /// The waiter's window closed.
    TimedOut,
    /// The waiting call was cancelled.
    Canceled,
}

impl WaiterResolution {
    /// The status a hold takes when closed this way.
    pub fn status(self) -> ApprovalStatus {
        match self {
            Self::TimedOut => ApprovalStatus::TimedOut,
            Self::Canceled => ApprovalStatus::Canceled,
        }
    }
}

/// What a waiter's close did: the route is idempotent, so closing an already closed hold is not
/// an error, but the caller learns it changed nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ResolveOutcome {
    /// The hold was open and is now closed as asked.
    Resolved {
        /// The record after the change.
        record: ApprovalRecord,
    },
    /// The hold was already closed by a waiter, a deadline or a restart; nothing changed.
    AlreadyClosed {
        /// The record as it stands.
        record: ApprovalRecord,
    },
}

impl ResolveOutcome {
    /// The record, whichever way it went.
    pub fn record(&self) -> &ApprovalRecord {
        match self {
            Self::Resolved { record } | Self::AlreadyClosed { record } => record,
        }
    }
}

/// One append-only audit entry: a hold moved from one state to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalTransition {
    /// The hold.
    pub approval_id: String,
    /// The state before (`None` for the park entry).
    pub from: Option<ApprovalStatus>,
    /// The state after.
    pub to: ApprovalStatus,
    /// What caused it.
    pub trigger: ApprovalTrigger,
    /// The reason written with it.
    pub reason: Option<String>,
    /// The approver, for a decision.
    pub approver: Option<String>,
    /// When it happened.
    pub at: Timestamp,
}

/// The durable approval ledger. Every read first expires holds whose deadline has passed (as
/// `timed_out`, trigger `deadline`), so a waiter that died silently cannot leave a hold open.
#[async_trait]
pub trait ApprovalLedger: Send + Sync {
    /// Parks a new hold. It must be `awaiting_approval` with no decision fields; an existing id
    /// is a `Conflict`, a malformed record is `Invalid`, and nothing is written in either case.
    async fn park(&self, record: ApprovalRecord) -> Result<ApprovalRecord, PortError>;

    /// One hold by id (`NotFound` when absent).
    async fn get(&self, id: &str) -> Result<ApprovalRecord, PortError>;

    /// Every hold still awaiting a person, oldest first.
    async fn list_pending(&self) -> Result<Vec<ApprovalRecord>, PortError>;

    /// Every hold, newest first, at most `limit`.
    async fn list_recent(&self, limit: usize) -> Result<Vec<ApprovalRecord>, PortError>;

    /// A person's decision. Only an open hold can be decided: any other state is a `Conflict`
    /// whose message names the state and its reason. Exactly one of two racing deciders wins.
    async fn decide(&self, id: &str, decision: ApprovalDecision) -> Result<ApprovalRecord, PortError>;

    /// A waiter closes a hold it stopped waiting for. Idempotent for a hold already closed by a
    /// waiter, deadline or restart; a `Conflict` for a hold a person decided.
    async fn resolve(
        &self,
        id: &str,
        resolution: WaiterResolution,
        reason: Option<String>,
    ) -> Result<ResolveOutcome, PortError>;

    /// Run once at start-up: every hold still awaiting is marked `failed` with
    /// [`ORPHANED_APPROVAL_REASON`] (its waiter died with the process). Returns the holds marked.
    async fn restore(&self) -> Result<Vec<ApprovalRecord>, PortError>;

    /// The hold's audit trail, oldest first (`NotFound` when the hold does not exist).
    async fn history(&self, id: &str) -> Result<Vec<ApprovalTransition>, PortError>;
}
