//! The run ledger double.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use metaforge_ports::{
    PortError, PortErrorKind, RunLedger, RunRecord, RunStatus, RunStatusChange, RunTransition, Timestamp,
    check_settle, terminal_run_conflict,
};

use super::{err, lock};

/// One run: its record, its transition log and the last settled transition.
struct Entry {
    record: RunRecord,
    log: Vec<RunTransition>,
    settled: u64,
    published: u64,
}

impl Entry {
    fn last_seq(&self) -> u64 {
        self.log.last().map_or(0, |t| t.seq)
    }
}

/// A run ledger in memory (unit tests only).
#[derive(Default)]
pub struct MemoryRunLedger {
    runs: Mutex<BTreeMap<String, Entry>>,
}

impl MemoryRunLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }
}

fn missing(id: &str) -> PortError {
    err(PortErrorKind::NotFound, format!("run {id:?} does not exist"))
}

fn new_entry(mut record: RunRecord) -> Entry {
    record.history = vec![RunStatusChange {
        status: record.status,
        reason: record.reason.clone(),
        at: record.created_at,
    }];
    record.updated_at = record.created_at;
    Entry {
        record,
        log: Vec::new(),
        settled: 0,
        published: 0,
    }
}

/// Moves the record to `status`/`reason`, entering the history when either changes.
fn move_record(record: &mut RunRecord, status: RunStatus, reason: Option<String>, at: Timestamp) {
    if record.status == status && record.reason == reason {
        return;
    }
    record.status = status;
    record.reason = reason.clone();
    record.updated_at = at;
    record.history.push(RunStatusChange { status, reason, at });
}

#[async_trait]
impl RunLedger for MemoryRunLedger {
    async fn create(&self, record: RunRecord) -> Result<RunRecord, PortError> {
        record.check_new()?;
        let mut runs = lock(&self.runs);
        if runs.contains_key(&record.id) {
            return Err(err(
                PortErrorKind::Conflict,
                format!("run {} already exists", record.id),
            ));
        }
        let entry = new_entry(record);
        let out = entry.record.clone();
        runs.insert(out.id.clone(), entry);
        Ok(out)
    }

    async fn get(&self, id: &str) -> Result<RunRecord, PortError> {
        lock(&self.runs)
            .get(id)
            .map(|e| e.record.clone())
            .ok_or_else(|| missing(id))
    }

    async fn list(&self, status: Option<RunStatus>) -> Result<Vec<RunRecord>, PortError> {
        let mut v: Vec<RunRecord> = lock(&self.runs)
            .values()
            .map(|e| &e.record)
            .filter(|r| status.is_none_or(|s| r.status == s))
            .cloned()
            .collect();
        v.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(v)
    }

    async fn set_status(
        &self,
        id: &str,
        status: RunStatus,
        reason: Option<String>,
        at: Timestamp,
    ) -> Result<RunRecord, PortError> {
        let mut runs = lock(&self.runs);
        let r = &mut runs.get_mut(id).ok_or_else(|| missing(id))?.record;
        if r.status == status && r.reason == reason {
            return Ok(r.clone());
        }
        if r.status.is_terminal() {
            return Err(terminal_run_conflict(id, r.status, status));
        }
        move_record(r, status, reason, at);
        Ok(r.clone())
    }

    async fn create_started(&self, record: RunRecord, first: RunTransition) -> Result<RunRecord, PortError> {
        record.check_new()?;
        first.check_first_of(&record)?;
        let mut runs = lock(&self.runs);
        if runs.contains_key(&record.id) {
            return Err(err(
                PortErrorKind::Conflict,
                format!("run {} already exists", record.id),
            ));
        }
        let mut entry = new_entry(record);
        entry.log.push(first);
        let out = entry.record.clone();
        runs.insert(out.id.clone(), entry);
        Ok(out)
    }

    async fn append_transition(&self, transition: RunTransition) -> Result<RunRecord, PortError> {
        transition.check()?;
        let mut runs = lock(&self.runs);
        let entry = runs
            .get_mut(&transition.run_id)
            .ok_or_else(|| missing(&transition.run_id))?;
        transition.check_follows(entry.last_seq(), entry.record.status)?;
        move_record(
            &mut entry.record,
            transition.state.status,
            transition.reason.clone(),
            transition.at,
        );
        entry.log.push(transition);
        Ok(entry.record.clone())
    }

    async fn latest_transition(&self, run_id: &str) -> Result<Option<RunTransition>, PortError> {
        let runs = lock(&self.runs);
        let entry = runs.get(run_id).ok_or_else(|| missing(run_id))?;
        Ok(entry.log.last().cloned())
    }

    async fn transitions(&self, run_id: &str, after_seq: u64) -> Result<Vec<RunTransition>, PortError> {
        let runs = lock(&self.runs);
        let entry = runs.get(run_id).ok_or_else(|| missing(run_id))?;
        Ok(entry.log.iter().filter(|t| t.seq > after_seq).cloned().collect())
    }

    async fn mark_settled(&self, run_id: &str, seq: u64) -> Result<(), PortError> {
        let mut runs = lock(&self.runs);
        let entry = runs.get_mut(run_id).ok_or_else(|| missing(run_id))?;
        check_settle(run_id, seq, entry.last_seq())?;
        entry.settled = entry.settled.max(seq);
        Ok(())
    }

    async fn unsettled(&self) -> Result<Vec<RunRecord>, PortError> {
        let mut v: Vec<RunRecord> = lock(&self.runs)
            .values()
            .filter(|e| e.last_seq() > 0 && (!e.record.status.is_terminal() || e.settled < e.last_seq()))
            .map(|e| e.record.clone())
            .collect();
        v.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(v)
    }

    async fn claim_published(&self, run_id: &str, upto: u64) -> Result<Option<u64>, PortError> {
        let mut runs = lock(&self.runs);
        let entry = runs.get_mut(run_id).ok_or_else(|| missing(run_id))?;
        let claim = metaforge_ports::published_claim(entry.published, upto);
        if claim.is_some() {
            entry.published = upto;
        }
        Ok(claim)
    }
}
