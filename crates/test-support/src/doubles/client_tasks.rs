//! The client-task store double; checks runs through a run ledger port like the real one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use metaforge_ports::{
    ClientTask, ClientTaskStatus, ClientTaskStore, IntelligenceMode, PortError, PortErrorKind, RunLedger,
    Timestamp, client_task_id,
};

use super::{err, lock};

/// A client-task store in memory (unit tests only).
pub struct MemoryClientTaskStore {
    tasks: Mutex<BTreeMap<String, ClientTask>>,
    runs: Arc<dyn RunLedger>,
}

impl MemoryClientTaskStore {
    /// An empty store checking runs through `runs`.
    pub fn new(runs: Arc<dyn RunLedger>) -> Self {
        Self {
            tasks: Mutex::new(BTreeMap::new()),
            runs,
        }
    }
}

fn conflict(t: &ClientTask, action: &str) -> PortError {
    err(
        PortErrorKind::Conflict,
        format!(
            "client task {} is {}, so it cannot be {action}",
            t.id,
            t.status.as_str()
        ),
    )
}

fn missing(id: &str) -> PortError {
    err(
        PortErrorKind::NotFound,
        format!("client task {id:?} does not exist"),
    )
}

#[async_trait]
impl ClientTaskStore for MemoryClientTaskStore {
    async fn post(
        &self,
        run_id: &str,
        phase: &str,
        attempt: u32,
        brief: serde_json::Value,
        at: Timestamp,
    ) -> Result<ClientTask, PortError> {
        for (field, value) in [("run_id", run_id), ("phase", phase)] {
            if value.trim().is_empty() || value.contains(':') {
                return Err(err(
                    PortErrorKind::Invalid,
                    format!("client_task.{field}: must be non-empty and contain no ':'"),
                ));
            }
        }
        let run = self.runs.get(run_id).await?;
        if run.intelligence != IntelligenceMode::Client {
            return Err(err(
                PortErrorKind::Conflict,
                format!(
                    "run {run_id} was started in {} mode, so it has no client tasks",
                    run.intelligence.as_str()
                ),
            ));
        }
        let id = client_task_id(run_id, phase, attempt);
        let mut tasks = lock(&self.tasks);
        let task = tasks.entry(id.clone()).or_insert_with(|| ClientTask {
            id,
            run_id: run_id.to_owned(),
            phase: phase.to_owned(),
            attempt,
            brief,
            status: ClientTaskStatus::Open,
            claimed_by: None,
            submission: None,
            created_at: at,
            updated_at: at,
        });
        if task.status == ClientTaskStatus::Withdrawn {
            task.status = ClientTaskStatus::Open;
            task.claimed_by = None;
            task.updated_at = at;
        }
        Ok(task.clone())
    }

    async fn get(&self, id: &str) -> Result<ClientTask, PortError> {
        lock(&self.tasks).get(id).cloned().ok_or_else(|| missing(id))
    }

    async fn list(
        &self,
        run_id: Option<&str>,
        status: Option<ClientTaskStatus>,
    ) -> Result<Vec<ClientTask>, PortError> {
        let mut v: Vec<ClientTask> = lock(&self.tasks)
            .values()
            .filter(|t| run_id.is_none_or(|r| t.run_id == r) && status.is_none_or(|s| t.status == s))
            .cloned()
            .collect();
        v.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(v)
    }

    async fn claim(&self, id: &str, claimant: &str, at: Timestamp) -> Result<ClientTask, PortError> {
        if claimant.trim().is_empty() {
            return Err(err(PortErrorKind::Invalid, "claim.claimant: must not be empty"));
        }
        let mut tasks = lock(&self.tasks);
        let t = tasks.get_mut(id).ok_or_else(|| missing(id))?;
        if t.status != ClientTaskStatus::Open {
            return Err(conflict(t, "claimed"));
        }
        t.status = ClientTaskStatus::Claimed;
        t.claimed_by = Some(claimant.to_owned());
        t.updated_at = at;
        Ok(t.clone())
    }

    async fn submit(
        &self,
        id: &str,
        claimant: &str,
        submission: serde_json::Value,
        at: Timestamp,
    ) -> Result<ClientTask, PortError> {
        let mut tasks = lock(&self.tasks);
        let t = tasks.get_mut(id).ok_or_else(|| missing(id))?;
        if t.status != ClientTaskStatus::Claimed || t.claimed_by.as_deref() != Some(claimant) {
            return Err(conflict(t, &format!("submitted by {claimant}")));
        }
        t.status = ClientTaskStatus::Submitted;
        t.submission = Some(submission);
        t.updated_at = at;
        Ok(t.clone())
    }

    async fn withdraw(&self, id: &str, at: Timestamp) -> Result<ClientTask, PortError> {
        let mut tasks = lock(&self.tasks);
        let t = tasks.get_mut(id).ok_or_else(|| missing(id))?;
        match t.status {
            ClientTaskStatus::Withdrawn => {}
            ClientTaskStatus::Open | ClientTaskStatus::Claimed => {
                t.status = ClientTaskStatus::Withdrawn;
                t.updated_at = at;
            }
            ClientTaskStatus::Submitted => return Err(conflict(t, "withdrawn")),
        }
        Ok(t.clone())
    }
}
