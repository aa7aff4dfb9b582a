//! The approval routes' bodies: the one ledger's holds as the dashboard lists and decides them,
//! and as a waiter (the sidecar in remote mode) parks and closes them.

use metaforge_ports::ApprovalRecord;
use serde::{Deserialize, Serialize};

/// Which holds to list: `pending` (the default) or `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ListStatus {
    /// Holds awaiting a person.
    Pending,
    /// Every recent hold.
    All,
}

/// A list of holds (`{approvals: [...]}`); the pending queue comes a page at a time.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalList {
    /// The holds, oldest first for pending, newest first for all.
    pub approvals: Vec<ApprovalRecord>,
    /// Pending only: every hold awaiting a person now, on every page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<usize>,
    /// Pending only: send as `after` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A person's answer. There is deliberately no approver field: it is the authenticated caller.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// `approve` or `reject`.
    pub decision: DecisionKind,
    /// Optional note kept as the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// approve or reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// Let it proceed.
    Approve,
    /// Do not let it proceed.
    Reject,
}

/// How a waiter closes its hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    /// `timed_out` or `canceled`.
    pub resolution: Resolution,
    /// Optional reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// timed_out or canceled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// The waiter's window closed.
    TimedOut,
    /// The waiting call was cancelled.
    Canceled,
}

/// The result of a resolve: what the hold is now and whether this call changed it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResolveResponse {
    /// `resolved` or `already_closed`.
    pub outcome: String,
    /// The hold as it stands.
    pub approval: ApprovalRecord,
}

/// A hold a waiter parks over HTTP. The caller class is not the body's to set: it comes from the
/// authenticated transport (`local` on an open loopback gateway, `remote` with a key).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ParkBody {
    /// The held tool.
    #[cfg_attr(feature = "openapi", schema(min_length = 1))]
    pub tool: String,
    /// Its arguments, shown to the person deciding.
    #[serde(default)]
    pub arguments: serde_json::Value,
    /// What a relaying waiter (the sidecar) saw. Only `untrusted` is honoured, since it can only
    /// lower trust; any other claim is replaced by the transport's class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// How long the waiter waits (at most a week); the deadline is this plus 30 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(maximum = 604_800))]
    pub timeout_seconds: Option<u64>,
}
