//! The approval ledger double.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use metaforge_ports::{
    ApprovalDecision, ApprovalLedger, ApprovalRecord, ApprovalStatus, ApprovalTransition, ApprovalTrigger,
    Clock, GoneParkers, PortError, PortErrorKind, ResolveOutcome, WaiterResolution,
};

use super::{err, lock};

#[derive(Default)]
struct State {
    records: BTreeMap<String, ApprovalRecord>,
    parked_by: BTreeMap<String, String>,
    order: Vec<String>,
    history: Vec<ApprovalTransition>,
}

/// An approval ledger in memory (unit tests only).
pub struct MemoryApprovalLedger {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
    parker: Option<String>,
}

impl MemoryApprovalLedger {
    /// An empty ledger reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::default())),
            clock,
            parker: None,
        }
    }

    /// A second handle on the same holds for another process named `parker` (two processes on
    /// one ledger).
    #[must_use]
    pub fn shared_with(&self, parker: impl Into<String>) -> Self {
        Self {
            state: Arc::clone(&self.state),
            clock: Arc::clone(&self.clock),
            parker: Some(parker.into()),
        }
    }

    /// Names this ledger's process on every hold it parks, like the stores do.
    #[must_use]
    pub fn with_parker(mut self, holder: impl Into<String>) -> Self {
        self.parker = Some(holder.into());
        self
    }

    fn expire(&self, state: &mut State) {
        let now = self.clock.now();
        let expired: Vec<(ApprovalRecord, ApprovalRecord)> = state
            .records
            .values()
            .filter_map(|r| r.expired(now).map(|next| (r.clone(), next)))
            .collect();
        for (current, next) in expired {
            Self::store(state, &current, next, ApprovalTrigger::Deadline);
        }
    }

    /// Stores `next` (computed by the port's state machine) over the open `current` and appends
    /// the audit entry; the double only persists, like the SQLite engine.
    fn store(state: &mut State, current: &ApprovalRecord, next: ApprovalRecord, trigger: ApprovalTrigger) {
        state.history.push(current.transition_to(&next, trigger));
        state.records.insert(next.id.clone(), next);
    }

    fn current(state: &State, id: &str) -> Result<ApprovalRecord, PortError> {
        state
            .records
            .get(id)
            .cloned()
            .ok_or_else(|| err(PortErrorKind::NotFound, format!("approval {id:?} does not exist")))
    }
}

#[async_trait]
impl ApprovalLedger for MemoryApprovalLedger {
    async fn park(&self, record: ApprovalRecord) -> Result<ApprovalRecord, PortError> {
        record.check_new()?;
        let mut s = lock(&self.state);
        if s.records.contains_key(&record.id) {
            return Err(err(
                PortErrorKind::Conflict,
                format!("approval {} already exists", record.id),
            ));
        }
        s.history.push(record.park_transition());
        s.order.push(record.id.clone());
        if let Some(parker) = &self.parker {
            s.parked_by.insert(record.id.clone(), parker.clone());
        }
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

    async fn pending_page(
        &self,
        after: Option<&metaforge_ports::PendingCursor>,
        limit: usize,
    ) -> Result<metaforge_ports::PendingPage, PortError> {
        let pending = self.list_pending().await?;
        let total = pending.len();
        let rows = pending
            .into_iter()
            .filter(|r| after.is_none_or(|c| (r.created_at, &r.id) > (c.created_at, &c.id)))
            .take(limit.saturating_add(1))
            .collect();
        Ok(metaforge_ports::PendingPage::from_rows(rows, limit, total))
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
        decision.check()?;
        let mut s = lock(&self.state);
        self.expire(&mut s);
        let current = Self::current(&s, id)?;
        let next = current.decided(&decision, self.clock.now())?;
        Self::store(&mut s, &current, next.clone(), ApprovalTrigger::Decision);
        Ok(next)
    }

    async fn resolve(
        &self,
        id: &str,
        resolution: WaiterResolution,
        reason: Option<String>,
    ) -> Result<ResolveOutcome, PortError> {
        let mut s = lock(&self.state);
        self.expire(&mut s);
        let current = Self::current(&s, id)?;
        let outcome = current.resolved(resolution, reason, self.clock.now())?;
        if let ResolveOutcome::Resolved { record } = &outcome {
            Self::store(&mut s, &current, record.clone(), ApprovalTrigger::Waiter);
        }
        Ok(outcome)
    }

    async fn restore(&self, gone: &GoneParkers) -> Result<Vec<ApprovalRecord>, PortError> {
        let mut s = lock(&self.state);
        self.expire(&mut s);
        let now = self.clock.now();
        let mut out = Vec::new();
        for id in s.order.clone() {
            let Some(current) = s.records.get(&id).cloned() else {
                continue;
            };
            if !gone.covers(s.parked_by.get(&id).map(String::as_str)) {
                continue;
            }
            if let Some(next) = current.orphaned(now) {
                out.push(next.clone());
                Self::store(&mut s, &current, next, ApprovalTrigger::Restart);
            }
        }
        out.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(out)
    }

    async fn open_parkers(&self) -> Result<BTreeSet<String>, PortError> {
        let s = lock(&self.state);
        Ok(s.records
            .values()
            .filter(|r| r.status == ApprovalStatus::AwaitingApproval)
            .filter_map(|r| s.parked_by.get(&r.id).cloned())
            .collect())
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
