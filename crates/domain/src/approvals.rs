//! The approval state machine over [`ApprovalRecord`] (FORGE-89/393/406/466).
//!
//! `awaiting_approval` is the only open state. A person moves it to `approved` or `rejected`; the
//! waiter closes it as `timed_out` or `canceled` (idempotently); a gateway restart marks it
//! `failed` as orphaned; and a read past the deadline (the waiter's timeout plus 30 s of grace)
//! expires it as `timed_out`. A decided hold is never overwritten: a second decision is a conflict
//! naming the state and its reason, so a decision landing as the window closes is read back and
//! honoured. The approver always comes from the decision record, never from tool arguments.

use chrono::Duration;
use metaforge_ports::{ApprovalKind, ApprovalRecord, ApprovalStatus, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The reason a hold left pending across a gateway restart is failed with.
pub const ORPHANED_REASON: &str = "orphaned: gateway restarted while this approval was pending";

/// Grace added to the waiter's timeout to form the deadline.
pub const DEADLINE_GRACE_SECONDS: i64 = 30;

/// Timeouts are capped at ten years so the deadline arithmetic can never overflow.
const MAX_TIMEOUT_SECONDS: i64 = 10 * 365 * 86_400;

/// The reason written when a read expires an overdue hold.
pub const DEADLINE_REASON: &str = "deadline passed with no decision (waiter timeout + 30 s grace)";

/// Errors of the approval rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// The hold is no longer awaiting a decision (HTTP 409).
    #[error("approval is already {state}: {reason}")]
    Conflict {
        /// Its current state.
        state: String,
        /// Why it is in that state.
        reason: String,
    },
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

/// Four eyes: under [`ApproverPolicy::Separate`] the identity recorded as the hold's caller (the
/// person who proposed a flow, saved an edit or parked a call) may not decide it. Caller classes
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
        ApproverPolicy::Separate if record.caller.trim() == approver.trim() => {
            Err(ApprovalError::SameApprover {
                approver: approver.trim().to_owned(),
                kind: record.kind.as_str().to_owned(),
            })
        }
        ApproverPolicy::Separate => Ok(()),
    }
}

/// A waiter's resolve (`timed_out`/`canceled`) may close only a held tool call: a flow proposal
/// or edit waits for a person, and closing it from the side would leave its version `proposed`
/// forever with no approver.
pub fn check_waiter_may_resolve(record: &ApprovalRecord) -> Result<(), ApprovalError> {
    match record.kind {
        ApprovalKind::ToolCall => Ok(()),
        // Proposals, edits and any kind added later fail closed: a person decides them.
        _ => Err(ApprovalError::PersonDecisionRequired {
            kind: record.kind.as_str().to_owned(),
        }),
    }
}

/// A person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// Let it run.
    Approve,
    /// Do not run it.
    Reject,
}

/// The decision record: who decided and what. The approver comes from here only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// approve or reject.
    pub verdict: Verdict,
    /// The authenticated person.
    pub approver: String,
    /// Their note.
    #[serde(default)]
    pub note: Option<String>,
}

/// How the waiter stopped waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WaiterOutcome {
    /// Its window closed.
    TimedOut,
    /// The call was cancelled.
    Canceled,
}

/// A new hold to park.
#[derive(Debug, Clone, PartialEq)]
pub struct NewHold {
    /// The record id (from the id port).
    pub id: String,
    /// What it is about.
    pub kind: ApprovalKind,
    /// The held tool.
    pub tool: String,
    /// Its arguments, shown to the person.
    pub arguments: Value,
    /// The caller class or identity.
    pub caller: String,
    /// The flow version it decides, if any.
    pub flow_version_id: Option<String>,
    /// The waiter's timeout; `None` = no deadline.
    pub timeout_seconds: Option<u64>,
}

/// Parks a hold at `now`; the deadline is `now + timeout + 30 s`.
pub fn park(hold: NewHold, now: Timestamp) -> ApprovalRecord {
    let deadline = hold.timeout_seconds.map(|t| {
        let secs = i64::try_from(t)
            .unwrap_or(MAX_TIMEOUT_SECONDS)
            .min(MAX_TIMEOUT_SECONDS);
        now + Duration::seconds(secs) + Duration::seconds(DEADLINE_GRACE_SECONDS)
    });
    ApprovalRecord {
        id: hold.id,
        kind: hold.kind,
        tool: hold.tool,
        arguments: hold.arguments,
        caller: hold.caller,
        status: ApprovalStatus::AwaitingApproval,
        reason: None,
        approver: None,
        flow_version_id: hold.flow_version_id,
        created_at: now,
        decided_at: None,
        deadline,
    }
}

fn conflict(record: &ApprovalRecord) -> ApprovalError {
    ApprovalError::Conflict {
        state: record.status.as_str().to_owned(),
        reason: record
            .reason
            .clone()
            .unwrap_or_else(|| "no reason recorded".to_owned()),
    }
}

/// Applied on every read: an open hold whose deadline has passed becomes `timed_out`.
/// Returns the record and whether it changed (count `trigger="deadline"` when it did).
pub fn expire_if_overdue(record: &ApprovalRecord, now: Timestamp) -> (ApprovalRecord, bool) {
    let overdue =
        record.status == ApprovalStatus::AwaitingApproval && record.deadline.is_some_and(|d| now > d);
    if !overdue {
        return (record.clone(), false);
    }
    let mut next = record.clone();
    next.status = ApprovalStatus::TimedOut;
    next.reason = Some(DEADLINE_REASON.to_owned());
    next.decided_at = Some(now);
    (next, true)
}

/// A person decides. Deadline expiry is applied first; a hold that is not open is a conflict
/// naming its state and reason, and is never overwritten.
pub fn decide(
    record: &ApprovalRecord,
    decision: &DecisionRecord,
    now: Timestamp,
) -> Result<ApprovalRecord, ApprovalError> {
    if decision.approver.trim().is_empty() {
        return Err(ApprovalError::MissingApprover);
    }
    let (current, _) = expire_if_overdue(record, now);
    if current.status.is_final() {
        return Err(conflict(&current));
    }
    let mut next = current;
    next.status = match decision.verdict {
        Verdict::Approve => ApprovalStatus::Approved,
        Verdict::Reject => ApprovalStatus::Rejected,
    };
    next.approver = Some(decision.approver.trim().to_owned());
    next.reason = Some(decision.note.clone().unwrap_or_else(|| {
        match decision.verdict {
            Verdict::Approve => "approved",
            Verdict::Reject => "rejected",
        }
        .to_owned()
    }));
    next.decided_at = Some(now);
    Ok(next)
}

/// What closing a hold from the waiter's side did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Resolution {
    /// It was open and is now closed with the waiter's outcome.
    Closed(ApprovalRecord),
    /// It was already closed by a waiter, the deadline or a restart; unchanged (idempotent).
    AlreadyClosed(ApprovalRecord),
    /// A person had already decided it (HTTP 409); the waiter reads the decision back and honours it.
    AlreadyDecided(ApprovalRecord),
}

/// The waiter closes a hold as timed out or canceled. Idempotent; never overwrites a decision.
pub fn resolve(record: &ApprovalRecord, outcome: WaiterOutcome, now: Timestamp) -> Resolution {
    let (current, _) = expire_if_overdue(record, now);
    match current.status {
        ApprovalStatus::AwaitingApproval => {
            let mut next = current;
            next.status = match outcome {
                WaiterOutcome::TimedOut => ApprovalStatus::TimedOut,
                WaiterOutcome::Canceled => ApprovalStatus::Canceled,
            };
            next.reason = Some(
                match outcome {
                    WaiterOutcome::TimedOut => "the waiter's window closed with no decision",
                    WaiterOutcome::Canceled => "the held call was cancelled",
                }
                .to_owned(),
            );
            next.decided_at = Some(now);
            Resolution::Closed(next)
        }
        ApprovalStatus::Approved | ApprovalStatus::Rejected => Resolution::AlreadyDecided(current),
        _ => Resolution::AlreadyClosed(current),
    }
}

/// On gateway start-up: an open hold's waiter died with the process, so it is failed as orphaned
/// (kept for audit, never actionable). Final records are returned unchanged.
pub fn orphan_on_restart(record: &ApprovalRecord, now: Timestamp) -> ApprovalRecord {
    if record.status != ApprovalStatus::AwaitingApproval {
        return record.clone();
    }
    let mut next = record.clone();
    next.status = ApprovalStatus::Failed;
    next.reason = Some(ORPHANED_REASON.to_owned());
    next.decided_at = Some(now);
    next
}
