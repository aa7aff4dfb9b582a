//! Who may answer a hold (FORGE-393/466): the policy rules the approvals service applies before
//! it asks the ledger to change a record. The state machine itself (park, decide, resolve,
//! expire, orphan) lives on the ledger's record type in `metaforge_ports::approval_rules`, where
//! every ledger engine can call it; these rules are about people and kinds, which only the
//! service knows.

use metaforge_ports::{ApprovalKind, ApprovalRecord};

/// Why a person or waiter may not answer a hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    /// A decision without a person.
    #[error("a decision must name the person who made it")]
    MissingApprover,
    /// Four eyes (`METAFORGE_APPROVALS_SEPARATE_APPROVER=on`): the person deciding is the one who
    /// proposed or parked the item (HTTP 403).
    #[error(
        "'{approver}' proposed or parked this {kind} and cannot also decide it: a different person must (four eyes, {SEPARATE_APPROVER_ENV}=on)"
    )]
    SameApprover {
        /// The identity that tried to decide.
        approver: String,
        /// What the hold is about.
        kind: String,
    },
    /// A waiter may close only a held tool call it waits on; a proposal or an edit needs a
    /// person's decision (HTTP 409).
    #[error(
        "a {kind} approval is closed only by a person's decision (approve or reject), never by a waiter's resolve"
    )]
    PersonDecisionRequired {
        /// What the hold is about.
        kind: String,
    },
    /// A waiter's resolve from a door that authenticated `caller`: only the identity that parked
    /// the hold waits on it (HTTP 403).
    #[error(
        "'{caller}' did not park this hold and so does not wait on it; only its requester ({requested_by}) closes it as timed out or canceled"
    )]
    NotTheWaiter {
        /// The identity that tried to resolve.
        caller: String,
        /// Who parked it (`nobody named` when the hold records no requester).
        requested_by: String,
    },
}

/// The setting that turns on four eyes: a decision by the identity that proposed or parked the
/// item is refused. Read by the binary, parsed by [`ApproverPolicy::from_setting`].
pub const SEPARATE_APPROVER_ENV: &str = "METAFORGE_APPROVALS_SEPARATE_APPROVER";

/// Who may decide a hold: anyone authenticated (the default), or anyone but its requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApproverPolicy {
    /// Any authenticated person may decide (no anchor enforces four eyes by default).
    #[default]
    Any,
    /// The identity recorded as the hold's caller (who proposed or parked it) may not decide it.
    Separate,
}

impl ApproverPolicy {
    /// Parses the setting's value: unset, `off`, `false`, `0`, `no` → [`ApproverPolicy::Any`];
    /// `on`, `true`, `1`, `yes` → [`ApproverPolicy::Separate`]; anything else is an error naming
    /// the value, so a typo never silently turns four eyes off.
    pub fn from_setting(value: Option<&str>) -> Result<Self, String> {
        let Some(raw) = value else {
            return Ok(Self::Any);
        };
        match raw.trim().to_ascii_lowercase().as_str() {
            "" | "off" | "false" | "0" | "no" => Ok(Self::Any),
            "on" | "true" | "1" | "yes" => Ok(Self::Separate),
            other => Err(format!("{SEPARATE_APPROVER_ENV}={other:?}: expected on or off")),
        }
    }
}

/// Four eyes: under [`ApproverPolicy::Separate`] the identity recorded as the hold's caller or
/// requester (the person who proposed a flow, saved an edit, or whose key parked a call) may not
/// decide it. Caller classes
/// (`local`, `remote`, …) are never identities a key can carry, so an agent's hold is decidable.
pub fn check_approver(
    record: &ApprovalRecord,
    approver: &str,
    policy: ApproverPolicy,
) -> Result<(), ApprovalError> {
    if approver.trim().is_empty() {
        return Err(ApprovalError::MissingApprover);
    }
    match policy {
        ApproverPolicy::Any => Ok(()),
        ApproverPolicy::Separate
            if record.caller.trim() == approver.trim()
                || record.requested_by.as_deref().map(str::trim) == Some(approver.trim()) =>
        {
            Err(ApprovalError::SameApprover {
                approver: approver.trim().to_owned(),
                kind: record.kind.as_str().to_owned(),
            })
        }
        ApproverPolicy::Separate => Ok(()),
    }
}

/// A resolve through a door that authenticated `caller` closes only a hold `caller` parked: a
/// waiter is the process that parked the hold, never another key. A hold that names no requester
/// was parked in process, and only that process (which calls the service directly) closes it.
pub fn check_waiter_identity(record: &ApprovalRecord, caller: &str) -> Result<(), ApprovalError> {
    match record.requested_by.as_deref().map(str::trim) {
        Some(requested_by) if requested_by == caller.trim() => Ok(()),
        requested_by => Err(ApprovalError::NotTheWaiter {
            caller: caller.trim().to_owned(),
            requested_by: requested_by.unwrap_or("nobody named").to_owned(),
        }),
    }
}

/// A waiter's resolve (`timed_out`/`canceled`) may close only a held tool call: a flow proposal
/// or edit waits for a person, and closing it from the side would leave its version `proposed`
/// forever with no approver; a run's gate is closed only by its engine (a decision, an expiry,
/// the run's cancel), never by a waiter from outside.
pub fn check_waiter_may_resolve(record: &ApprovalRecord) -> Result<(), ApprovalError> {
    match record.kind {
        ApprovalKind::ToolCall => Ok(()),
        ApprovalKind::DesignFlowProposal | ApprovalKind::DesignFlowVersion | ApprovalKind::Gate => {
            Err(ApprovalError::PersonDecisionRequired {
                kind: record.kind.as_str().to_owned(),
            })
        }
    }
}
