//! A held action waiting for a person: the record the one approval ledger keeps.

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;

/// The state of a hold. Only `AwaitingApproval` is open; every other state is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Parked, waiting for a person.
    AwaitingApproval,
    /// A person approved it.
    Approved,
    /// A person rejected it.
    Rejected,
    /// The waiter's window closed (or the deadline passed) before anyone decided.
    TimedOut,
    /// The waiter gave up (the call was cancelled).
    Canceled,
    /// The hold can no longer be acted on (e.g. orphaned by a gateway restart).
    Failed,
}

impl ApprovalStatus {
    /// The snake_case name used in JSON, metrics and error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AwaitingApproval => "awaiting_approval",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::TimedOut => "timed_out",
            Self::Canceled => "canceled",
            Self::Failed => "failed",
        }
    }

    /// True for every state but `AwaitingApproval`.
    pub fn is_final(self) -> bool {
        !matches!(self, Self::AwaitingApproval)
    }
}

/// What a hold is about; approving some kinds carries the decision on (e.g. to a flow version).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// A held MCP or chat tool call.
    ToolCall,
    /// A tailored flow proposal; approving it approves the stored version.
    DesignFlowProposal,
    /// A saved flow edit; approving it approves the stored version.
    DesignFlowVersion,
    /// A design-flow run parked at a gate (FORGE-401/489). Listed with every other hold, but
    /// decided only through the run's engine (`FlowEngine::decide_gate`), which records the
    /// decision here; a generic decision is refused ([`crate::approval_rules::GateDecisionRefused`]),
    /// and a restart never orphans it (the engine resumes the run parked at it).
    Gate,
}

impl ApprovalKind {
    /// The snake_case name used in JSON, metrics labels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToolCall => "tool_call",
            Self::DesignFlowProposal => "design_flow_proposal",
            Self::DesignFlowVersion => "design_flow_version",
            Self::Gate => "gate",
        }
    }
}

/// One hold in the approval ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalRecord {
    /// uuid v7.
    pub id: String,
    /// What the hold is about.
    pub kind: ApprovalKind,
    /// The tool whose call is held (for proposals, the tool or route that created it).
    pub tool: String,
    /// The held call's arguments or the proposal payload, shown to the person deciding.
    pub arguments: serde_json::Value,
    /// The caller class or identity that asked (local, remote, untrusted, service, client_task, …).
    pub caller: String,
    /// Current state.
    pub status: ApprovalStatus,
    /// Why the state is what it is (decision note, timeout, orphaning).
    pub reason: Option<String>,
    /// The person who decided, taken from the decision record.
    pub approver: Option<String>,
    /// The flow version this hold decides, when it is about one.
    pub flow_version_id: Option<String>,
    /// When it was parked.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When it left `AwaitingApproval`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub decided_at: Option<Timestamp>,
    /// The waiter's timeout plus grace; a read after it expires the hold as timed out.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub deadline: Option<Timestamp>,
    /// The authenticated identity (a person's or a service's key) that parked or proposed it,
    /// when one did; `caller` stays the transport's class. Four eyes compares the approver with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
}
