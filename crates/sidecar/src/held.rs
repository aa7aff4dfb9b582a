//! Where a held write waits (FORGE-406/466): in the one approval ledger, for at most its timeout.
//!
//! The call parks a hold (deadline = timeout + the ledger's grace), then polls the ledger. A
//! person's decision ends the wait; when the window closes the waiter resolves the hold
//! `timed_out` itself — and if a person decided in that same instant, the ledger answers with a
//! conflict and the decision is read back and honoured, never overwritten. A call that is
//! cancelled while waiting resolves its hold `canceled`.

use std::sync::Arc;
use std::time::Duration;

use metaforge_ports::{
    ApprovalRecord, ApprovalStatus, CallerContext, PortError, PortErrorKind, WaiterResolution,
};
use serde_json::Value;

use metaforge_app::approvals::{ApprovalService, ParkRequest};

/// How long a held call waits, and how often it looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldPolicy {
    /// The waiter's window.
    pub timeout: Duration,
    /// The poll interval.
    pub poll: Duration,
}

/// The approvals service a held call parks in, and its window.
#[derive(Clone)]
pub struct HeldWrites {
    /// The approvals service over the one ledger.
    pub approvals: Arc<ApprovalService>,
    /// The window.
    pub policy: HoldPolicy,
}

/// How a held call's wait ended.
#[derive(Debug, Clone, PartialEq)]
pub enum HeldOutcome {
    /// A person approved: run the call.
    Approved(ApprovalRecord),
    /// A person rejected it, or it closed another way (deadline, restart): do not run it.
    NotApproved(ApprovalRecord),
    /// The window closed and the waiter resolved the hold `timed_out`.
    TimedOut(ApprovalRecord),
}

/// Resolves the hold `canceled` if the waiting future is dropped before it finished.
struct CancelOnDrop {
    approvals: Option<Arc<ApprovalService>>,
    id: String,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(approvals) = self.approvals.take() else {
            return;
        };
        let id = std::mem::take(&mut self.id);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = approvals
                    .resolve(
                        &id,
                        None,
                        WaiterResolution::Canceled,
                        Some("the held call was cancelled".into()),
                    )
                    .await
                {
                    tracing::warn!(event = "tool_approval_resolution_failed", approval_id = %id, error = %e);
                }
            });
        }
    }
}

impl HeldWrites {
    /// True only when `id` is a hold this ledger reads approved, for `tool` with exactly
    /// `arguments` — the in-process agent loop's own ask tier already asked a person, so the
    /// call runs without a second hold ([`metaforge_ports::CallFacts::approved_hold`]). An
    /// unknown id is `false`, never an error: the call is then held as usual.
    pub async fn approved_for(&self, id: &str, tool: &str, arguments: &Value) -> Result<bool, PortError> {
        match self.approvals.get(id).await {
            Ok(record) => Ok(record.status == ApprovalStatus::Approved
                && record.tool == tool
                && record.arguments == *arguments),
            Err(e) if e.kind == PortErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Parks `tool`'s call and waits for a person, at most the policy's timeout.
    pub async fn hold_and_wait(
        &self,
        tool: &str,
        arguments: Value,
        caller: &CallerContext,
        reason: &str,
    ) -> Result<HeldOutcome, PortError> {
        let parked = self
            .approvals
            .park(ParkRequest {
                tool: tool.to_owned(),
                arguments,
                caller: caller.class.as_str().to_owned(),
                // The identity the transport authenticated (four eyes keep it from approving its
                // own hold); through a gateway (remote mode) the gateway records the key that
                // parked it.
                requested_by: caller.identity.clone(),
                timeout_seconds: Some(self.policy.timeout.as_secs().max(1)),
            })
            .await?;
        tracing::info!(event = "tool_call_held", tool, approval_id = %parked.id, caller = caller.class.as_str(), requested_by = ?caller.identity, reason);
        let mut guard = CancelOnDrop {
            approvals: Some(Arc::clone(&self.approvals)),
            id: parked.id.clone(),
        };
        let started = tokio::time::Instant::now();
        loop {
            // A gateway that cannot be reached for a moment does not end the wait: the window
            // does. Any other failure is raised (and the hold closed `canceled` on the way out).
            let current = match self.approvals.get(&parked.id).await {
                Ok(current) => Some(current),
                Err(e) if e.kind == PortErrorKind::Unavailable => {
                    tracing::warn!(event = "tool_approval_poll_failed", approval_id = %parked.id, error = %e);
                    None
                }
                Err(e) => return Err(e),
            };
            if let Some(current) = current
                && current.status.is_final()
            {
                guard.approvals = None;
                return Ok(match current.status {
                    ApprovalStatus::Approved => HeldOutcome::Approved(current),
                    ApprovalStatus::AwaitingApproval
                    | ApprovalStatus::Rejected
                    | ApprovalStatus::TimedOut
                    | ApprovalStatus::Canceled
                    | ApprovalStatus::Failed => HeldOutcome::NotApproved(current),
                });
            }
            if started.elapsed() >= self.policy.timeout {
                guard.approvals = None;
                let resolved = self
                    .approvals
                    .resolve(
                        &parked.id,
                        None,
                        WaiterResolution::TimedOut,
                        Some(format!("no decision within {}s", self.policy.timeout.as_secs())),
                    )
                    .await;
                return match resolved {
                    Ok(outcome) => Ok(HeldOutcome::TimedOut(outcome.record().clone())),
                    // A person decided as the window closed: read it back and honour it.
                    Err(e) if e.kind == PortErrorKind::Conflict => {
                        let decided = self.approvals.get(&parked.id).await?;
                        Ok(match decided.status {
                            ApprovalStatus::Approved => HeldOutcome::Approved(decided),
                            ApprovalStatus::AwaitingApproval
                            | ApprovalStatus::Rejected
                            | ApprovalStatus::TimedOut
                            | ApprovalStatus::Canceled
                            | ApprovalStatus::Failed => HeldOutcome::NotApproved(decided),
                        })
                    }
                    // Closing is best-effort (FORGE-466): the failure is logged and counted
                    // (`result="failed"`), never raised into the tool call; the ledger's
                    // deadline expires the hold as a backstop.
                    Err(e) => {
                        tracing::warn!(
                            event = "tool_approval_resolution_failed",
                            approval_id = %parked.id,
                            error = %e,
                        );
                        Ok(HeldOutcome::TimedOut(parked))
                    }
                };
            }
            tokio::time::sleep(self.policy.poll).await;
        }
    }
}
