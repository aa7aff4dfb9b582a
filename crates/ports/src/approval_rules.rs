//! The approval state machine, once, on the ledger's own record type (FORGE-89/393/406/466).
//!
//! `awaiting_approval` is the only open state. A person moves it to `approved` or `rejected`; the
//! waiter closes it as `timed_out` or `canceled` (idempotently); a restart marks it `failed` as
//! orphaned; and a read past its deadline (the waiter's timeout plus 30 s of grace) expires
//! it as `timed_out`. A closed hold is never overwritten: a second decision is a conflict naming
//! the state and its reason. The approver comes from the decision, never from tool arguments.
//!
//! Every ledger engine (SQLite, the remote gateway, the test double) and the approvals service
//! compute the next record with these methods; an engine only persists it, guarded by
//! compare-and-set on `awaiting_approval`, so two racing deciders produce one winner. The rules
//! live in `ports` rather than the domain because adapters never depend on the domain.

use chrono::Duration;

use crate::approval::{ApprovalKind, ApprovalRecord, ApprovalStatus};
use crate::approval_ledger::{
    APPROVAL_DEADLINE_GRACE_SECONDS, ApprovalDecision, ApprovalTransition, ApprovalTrigger,
    ORPHANED_APPROVAL_REASON, ResolveOutcome, WaiterResolution,
};
use crate::clock::Timestamp;
use crate::error::{PortError, PortErrorKind};

/// The longest a waiter may ask to wait for a person (a week); longer is refused, never clamped.
pub const MAX_HOLD_TIMEOUT_SECONDS: u64 = 604_800;

/// The reason written on a hold a read found past its deadline.
pub const DEADLINE_REASON: &str = "deadline passed: no waiter resolved this approval before its deadline";

/// The stable code of [`GateDecisionRefused`], for a door's error body (the gateway's 409 answer
/// that points the caller at the run's approval route).
pub const GATE_DECISION_REFUSED_CODE: &str = "gate_decided_through_run";

/// A gate hold was given a generic approval decision. A gate is answered only through its run's
/// engine, which checks the decision against the gate (approve only when ready, retry and rework
/// with a reason, the rework cap) and records it here; a plain approve/reject on the hold would
/// skip all of that. Travels as the source of a `Conflict` [`PortError`], so a door can downcast it
/// and redirect (HTTP: `POST /v1/runs/{run_id}/approval`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "approval {approval_id} is the gate of run {run_id} (phase '{phase}'): a gate is answered through its run's gate decision, not a generic approval decision"
)]
pub struct GateDecisionRefused {
    /// The gate hold.
    pub approval_id: String,
    /// The run parked at it (empty when the hold does not name one).
    pub run_id: String,
    /// The gated phase (empty when the hold does not name one).
    pub phase: String,
}

impl GateDecisionRefused {
    /// [`GATE_DECISION_REFUSED_CODE`].
    pub fn code(&self) -> &'static str {
        GATE_DECISION_REFUSED_CODE
    }
}

/// The deadline of a hold parked at `now` whose waiter waits `timeout_seconds`: the timeout plus
/// [`APPROVAL_DEADLINE_GRACE_SECONDS`]; `None` waits for ever. Over a week is `Invalid`.
pub fn hold_deadline(now: Timestamp, timeout_seconds: Option<u64>) -> Result<Option<Timestamp>, PortError> {
    let Some(secs) = timeout_seconds else {
        return Ok(None);
    };
    if secs > MAX_HOLD_TIMEOUT_SECONDS {
        return Err(PortError::new(
            PortErrorKind::Invalid,
            format!("timeout_seconds must be at most {MAX_HOLD_TIMEOUT_SECONDS} (a week), not {secs}"),
        ));
    }
    let total = i64::try_from(secs)
        .unwrap_or(i64::MAX)
        .saturating_add(APPROVAL_DEADLINE_GRACE_SECONDS);
    Ok(Duration::try_seconds(total).and_then(|d| now.checked_add_signed(d)))
}

impl ApprovalDecision {
    /// Refuses a decision that names no person.
    pub fn check(&self) -> Result<(), PortError> {
        if self.approver.trim().is_empty() {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                "decision.approver: must not be empty",
            ));
        }
        Ok(())
    }
}

impl ApprovalRecord {
    /// Refuses a record that cannot be parked as a new hold, naming the field.
    pub fn check_new(&self) -> Result<(), PortError> {
        let invalid = |field: &str, why: &str| {
            Err(PortError::new(
                PortErrorKind::Invalid,
                format!("approval.{field}: {why}"),
            ))
        };
        if self.id.trim().is_empty() {
            return invalid("id", "must not be empty");
        }
        if self.tool.trim().is_empty() {
            return invalid("tool", "must not be empty");
        }
        if self.status != ApprovalStatus::AwaitingApproval {
            return invalid("status", "a new hold must be awaiting_approval");
        }
        if self.approver.is_some() {
            return invalid("approver", "a new hold has no approver");
        }
        if self.decided_at.is_some() {
            return invalid("decided_at", "a new hold is not decided");
        }
        if self.deadline.is_some_and(|d| d < self.created_at) {
            return invalid("deadline", "must not be before created_at");
        }
        Ok(())
    }

    /// Refuses a generic (approve/reject) decision of a gate hold with a `Conflict` whose source is
    /// [`GateDecisionRefused`]; every other kind may be decided generically. The approvals
    /// service applies it to every decision a door relays; the run engine records a gate's
    /// decision on the ledger directly, after the run's state machine accepted it.
    pub fn check_generic_decision(&self) -> Result<(), PortError> {
        match self.kind {
            ApprovalKind::ToolCall | ApprovalKind::DesignFlowProposal | ApprovalKind::DesignFlowVersion => {
                Ok(())
            }
            ApprovalKind::Gate => {
                let text = |key: &str| {
                    self.arguments
                        .get(key)
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let refused = GateDecisionRefused {
                    approval_id: self.id.clone(),
                    run_id: text("run_id"),
                    phase: text("phase"),
                };
                Err(PortError::with_source(
                    PortErrorKind::Conflict,
                    refused.to_string(),
                    refused,
                ))
            }
        }
    }

    /// True when the hold is open and `now` is past its deadline (at the deadline itself a
    /// decision still lands).
    pub fn is_overdue(&self, now: Timestamp) -> bool {
        self.status == ApprovalStatus::AwaitingApproval && self.deadline.is_some_and(|d| d < now)
    }

    /// The hold expired at its deadline (`timed_out`), or `None` when it is not overdue.
    pub fn expired(&self, now: Timestamp) -> Option<Self> {
        self.is_overdue(now).then(|| {
            self.closed(
                ApprovalStatus::TimedOut,
                Some(DEADLINE_REASON.to_owned()),
                None,
                now,
            )
        })
    }

    /// A person's decision. The decision must name a person; a hold that is closed (or overdue,
    /// which a read would expire) is a `Conflict` naming its state and reason.
    pub fn decided(&self, decision: &ApprovalDecision, now: Timestamp) -> Result<Self, PortError> {
        decision.check()?;
        if let Some(expired) = self.expired(now) {
            return Err(expired.conflict());
        }
        if self.status.is_final() {
            return Err(self.conflict());
        }
        let status = if decision.approve {
            ApprovalStatus::Approved
        } else {
            ApprovalStatus::Rejected
        };
        Ok(self.closed(
            status,
            decision.note.clone(),
            Some(decision.approver.clone()),
            now,
        ))
    }

    /// The waiter closes the hold. Idempotent for a hold closed by a waiter, deadline or restart
    /// (`AlreadyClosed`, unchanged); a `Conflict` for a hold a person decided.
    pub fn resolved(
        &self,
        resolution: WaiterResolution,
        reason: Option<String>,
        now: Timestamp,
    ) -> Result<ResolveOutcome, PortError> {
        let current = self.expired(now).unwrap_or_else(|| self.clone());
        match current.status {
            ApprovalStatus::AwaitingApproval => Ok(ResolveOutcome::Resolved {
                record: current.closed(resolution.status(), reason, None, now),
            }),
            ApprovalStatus::Approved | ApprovalStatus::Rejected => Err(current.conflict()),
            ApprovalStatus::TimedOut | ApprovalStatus::Canceled | ApprovalStatus::Failed => {
                Ok(ResolveOutcome::AlreadyClosed { record: current })
            }
        }
    }

    /// At start-up an open hold's waiter died with the process: it is failed as orphaned (kept for
    /// audit, never actionable). `None` for a hold that is not open, and for a gate hold: its
    /// waiter is the run engine, which resumes the run still parked at the gate.
    pub fn orphaned(&self, now: Timestamp) -> Option<Self> {
        let waiter_died = match self.kind {
            ApprovalKind::ToolCall | ApprovalKind::DesignFlowProposal | ApprovalKind::DesignFlowVersion => {
                true
            }
            ApprovalKind::Gate => false,
        };
        (waiter_died && self.status == ApprovalStatus::AwaitingApproval).then(|| {
            self.closed(
                ApprovalStatus::Failed,
                Some(ORPHANED_APPROVAL_REASON.to_owned()),
                None,
                now,
            )
        })
    }

    /// The conflict a change to a closed hold gets (HTTP 409): names its state and reason.
    pub fn conflict(&self) -> PortError {
        PortError::new(
            PortErrorKind::Conflict,
            format!(
                "approval {} is {}, not awaiting_approval: {}",
                self.id,
                self.status.as_str(),
                self.reason.as_deref().unwrap_or("no reason recorded")
            ),
        )
    }

    /// The audit entry for moving this (open) hold to `next`.
    pub fn transition_to(&self, next: &Self, trigger: ApprovalTrigger) -> ApprovalTransition {
        ApprovalTransition {
            approval_id: self.id.clone(),
            from: Some(self.status),
            to: next.status,
            trigger,
            reason: next.reason.clone(),
            approver: next.approver.clone(),
            at: next.decided_at.unwrap_or(next.created_at),
        }
    }

    /// The park entry of a new hold's audit trail.
    pub fn park_transition(&self) -> ApprovalTransition {
        ApprovalTransition {
            approval_id: self.id.clone(),
            from: None,
            to: self.status,
            trigger: ApprovalTrigger::Park,
            reason: self.reason.clone(),
            approver: None,
            at: self.created_at,
        }
    }

    fn closed(
        &self,
        status: ApprovalStatus,
        reason: Option<String>,
        approver: Option<String>,
        now: Timestamp,
    ) -> Self {
        let mut next = self.clone();
        next.status = status;
        next.reason = reason;
        next.approver = approver;
        next.decided_at = Some(now);
        next
    }
}
