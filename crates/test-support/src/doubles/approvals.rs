//! The approval ledger double.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use metaforge_ports::{
    ApprovalDecision, ApprovalLedger, ApprovalRecord, ApprovalStatus, ApprovalTransition, ApprovalTrigger,
    Clock, ORPHANED_APPROVAL_REASON, PortError, PortErrorKind, ResolveOutcome, WaiterResolution,
};

use super::{err, lock};

/// Mirrors the reason the SQLite ledger writes at deadline expiry.
const DEADLINE_REASON: &str = "deadline passed: no waiter resolved this approval before its deadline";

#[derive(Default)]
struct State {
    records: BTreeMap<String, ApprovalRecord>,
    order: Vec<String>,
    history: Vec<ApprovalTransition>,
}

/// An approval ledger in memory (unit tests only).
pub struct MemoryApprovalLedger {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
}

impl MemoryApprovalLedger {
    /// An empty ledger reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            clock,
        }
    }

    fn expire(&self, state: &mut State) {
        let now = self.clock.now();
        let overdue: Vec<String> = state
            .records
            .values()
            .filter(|r| r.status == ApprovalStatus::AwaitingApproval && r.deadline.is_some_and(|d| d <= now))
            .map(|r| r.id.clone())
            .collect();
        for id in overdue {
            if let Some(r) = state.records.get_mut(&id) {
                r.status = ApprovalStatus::TimedOut;
                r.reason = Some(DEADLINE_REASON.to_owned());
                r.decided_at = Some(now);
            }
            state.history.push(ApprovalTransition {
                approval_id: id,
                from: Some(ApprovalStatus::AwaitingApproval),
                to: ApprovalStatus::TimedOut,
                trigger: ApprovalTrigger::Deadline,
                reason: Some(DEADLINE_REASON.to_owned()),
                approver: None,
                at: now,
            });
        }
    }
}

fn closed_conflict(r: &ApprovalRecord) -> PortError {
    err(
        PortErrorKind::Conflict,
        format!(
            "approval {} is {}, not awaiting_approval: {}",
            r.id,
            r.status.as_str(),
            r.reason.as_deref().unwrap_or("no reason recorded")
        ),
    )
}

#[async_trait]
impl ApprovalLedger for MemoryApprovalLedger {
    async fn park(&self, record: ApprovalRecord) -> Result<ApprovalRecord, PortError> {
        if record.id.trim().is_empty() || record.tool.trim().is_empty() {
            return Err(err(PortErrorKind::Invalid, "approval.id/tool: must not be empty"));
        }
        if record.status != ApprovalStatus::AwaitingApproval
            || record.approver.is_some()
            || record.decided_at.is_some()
        {
            return Err(err(
                PortErrorKind::Invalid,
                "approval.status: a new hold must be awaiting_approval",
            ));
        }
        if record.deadline.is_some_and(|d| d < record.created_at) {
            return Err(err(
                PortErrorKind::Invalid,
                "approval.deadline: must not be before created_at",
            ));
        }
        let mut s = lock(&self.state);
        if s.records.contains_key(&record.id) {
            return Err(err(
                PortErrorKind::Conflict,
                format!("approval {} already exists", record.id),
            ));
        }
        s.history.push(ApprovalTransition {
            approval_id: record.id.clone(),
            from: None,
            to: ApprovalStatus::AwaitingApproval,
            trigger: ApprovalTrigger::Park,
            reason: record.reason.clone(),
            approver: None,
            at: record.created_at,
        });
        s.order.push(record.id.clone());
        s.records.insert(record.id.clone(), record.clone());
        Ok(record)
    }

    async fn get(&self, id: &str) -> Result<ApprovalRecord, PortError> {
        let mut s = lock(&self.state);
        self.expire(&mut s);
        s.records
            .get(id)
            .cloned()
            .ok_or_else(|| err(PortErrorKind::NotFound, format!("approval {id:?} does not exist")))
    }

    async fn list_pending(&self) -> Result<Vec<ApprovalRecord>, PortError> {
        let mut s = lock(&self.state);
        self.expire(&mut s);
        let mut out: Vec<ApprovalRecord> = s
            .records
            .values()
            .filter(|r| r.status == ApprovalStatus::AwaitingApproval)
            .cloned()
            .collect();
        out.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(out)
    }

    async fn list_recent(&self, limit: usize) -> Result<Vec<ApprovalRecord>, PortError> {
        let mut s = lock(&self.state);
        self.expire(&mut s);
        let mut out: Vec<ApprovalRecord> = s.records.values().cloned().collect();
        out.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        out.truncate(limit);
        Ok(out)
    }

    async fn decide(&self, id: &str, decision: ApprovalDecision) -> Result<ApprovalRecord, PortError> {
        if decision.approver.trim().is_empty() {
            return Err(err(
                PortErrorKind::Invalid,
                "decision.approver: must not be empty",
            ));
        }
        let mut s = lock(&self.state);
        self.expire(&mut s);
        let now = self.clock.now();
        let r = s
            .records
            .get_mut(id)
            .ok_or_else(|| err(PortErrorKind::NotFound, format!("approval {id:?} does not exist")))?;
        if r.status != ApprovalStatus::AwaitingApproval {
            return Err(closed_conflict(r));
        }
        r.status = if decision.approve {
            ApprovalStatus::Approved
        } else {
            ApprovalStatus::Rejected
        };
        r.reason = decision.note.clone();
        r.approver = Some(decision.approver.clone());
        r.decided_at = Some(now);
        let record = r.clone();
        s.history.push(ApprovalTransition {
            approval_id: id.to_owned(),
            from: Some(ApprovalStatus::AwaitingApproval),
            to: record.status,
            trigger: ApprovalTrigger::Decision,
            reason: decision.note,
            approver: Some(decision.approver),
            at: now,
        });
        Ok(record)
    }

    async fn resolve(
        &self,
        id: &str,
        resolution: WaiterResolution,
        reason: Option<String>,
    ) -> Result<ResolveOutcome, PortError> {
        let mut s = lock(&self.state);
        self.expire(&mut s);
        let now = self.clock.now();
        let r = s
            .records
            .get_mut(id)
            .ok_or_else(|| err(PortErrorKind::NotFound, format!("approval {id:?} does not exist")))?;
        match r.status {
            ApprovalStatus::AwaitingApproval => {}
            ApprovalStatus::Approved | ApprovalStatus::Rejected => return Err(closed_conflict(r)),
            ApprovalStatus::TimedOut | ApprovalStatus::Canceled | ApprovalStatus::Failed => {
                return Ok(ResolveOutcome::AlreadyClosed { record: r.clone() });
            }
        }
        r.status = resolution.status();
        r.reason = reason.clone();
        r.decided_at = Some(now);
        let record = r.clone();
        s.history.push(ApprovalTransition {
            approval_id: id.to_owned(),
            from: Some(ApprovalStatus::AwaitingApproval),
            to: record.status,
            trigger: ApprovalTrigger::Waiter,
            reason,
            approver: None,
            at: now,
        });
        Ok(ResolveOutcome::Resolved { record })
    }

    async fn restore(&self) -> Result<Vec<ApprovalRecord>, PortError> {
        let mut s = lock(&self.state);
        self.expire(&mut s);
        let now = self.clock.now();
        let mut out = Vec::new();
        let ids: Vec<String> = s.order.clone();
        for id in ids {
            let Some(r) = s.records.get_mut(&id) else { continue };
            if r.status != ApprovalStatus::AwaitingApproval {
                continue;
            }
            r.status = ApprovalStatus::Failed;
            r.reason = Some(ORPHANED_APPROVAL_REASON.to_owned());
            r.decided_at = Some(now);
            out.push(r.clone());
            s.history.push(ApprovalTransition {
                approval_id: id,
                from: Some(ApprovalStatus::AwaitingApproval),
                to: ApprovalStatus::Failed,
                trigger: ApprovalTrigger::Restart,
                reason: Some(ORPHANED_APPROVAL_REASON.to_owned()),
                approver: None,
                at: now,
            });
        }
        out.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(out)
    }

    async fn history(&self, id: &str) -> Result<Vec<ApprovalTransition>, PortError> {
        let mut s = lock(&self.state);
        self.expire(&mut s);
        if !s.records.contains_key(id) {
            return Err(err(
                PortErrorKind::NotFound,
                format!("approval {id:?} does not exist"),
            ));
        }
        Ok(s.history
            .iter()
            .filter(|h| h.approval_id == id)
            .cloned()
            .collect())
    }
}
