//! The run ledger double.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use metaforge_ports::{
    PortError, PortErrorKind, RunLedger, RunRecord, RunStatus, RunStatusChange, Timestamp,
};

use super::{err, lock};

/// A run ledger in memory (unit tests only).
#[derive(Default)]
pub struct MemoryRunLedger {
    runs: Mutex<BTreeMap<String, RunRecord>>,
}

impl MemoryRunLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl RunLedger for MemoryRunLedger {
    async fn create(&self, mut record: RunRecord) -> Result<RunRecord, PortError> {
        for (field, value) in [
            ("id", &record.id),
            ("template_id", &record.template_id),
            ("flow_version_id", &record.flow_version_id),
            ("content_hash", &record.content_hash),
        ] {
            if value.trim().is_empty() {
                return Err(err(
                    PortErrorKind::Invalid,
                    format!("run.{field}: must not be empty"),
                ));
            }
        }
        let mut runs = lock(&self.runs);
        if runs.contains_key(&record.id) {
            return Err(err(
                PortErrorKind::Conflict,
                format!("run {} already exists", record.id),
            ));
        }
        record.history = vec![RunStatusChange {
            status: record.status,
            reason: record.reason.clone(),
            at: record.created_at,
        }];
        record.updated_at = record.created_at;
        runs.insert(record.id.clone(), record.clone());
        Ok(record)
    }

    async fn get(&self, id: &str) -> Result<RunRecord, PortError> {
        lock(&self.runs)
            .get(id)
            .cloned()
            .ok_or_else(|| err(PortErrorKind::NotFound, format!("run {id:?} does not exist")))
    }

    async fn list(&self, status: Option<RunStatus>) -> Result<Vec<RunRecord>, PortError> {
        let mut v: Vec<RunRecord> = lock(&self.runs)
            .values()
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
        let r = runs
            .get_mut(id)
            .ok_or_else(|| err(PortErrorKind::NotFound, format!("run {id:?} does not exist")))?;
        if r.status == status && r.reason == reason {
            return Ok(r.clone());
        }
        if r.status.is_terminal() {
            return Err(err(
                PortErrorKind::Conflict,
                format!(
                    "run {id} is {}, which is terminal; it cannot move to {}",
                    r.status.as_str(),
                    status.as_str()
                ),
            ));
        }
        r.status = status;
        r.reason = reason.clone();
        r.updated_at = at;
        r.history.push(RunStatusChange { status, reason, at });
        Ok(r.clone())
    }
}
