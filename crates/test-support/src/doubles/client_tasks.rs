//! The client-task store double; checks runs through a run ledger port like the real one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use metaforge_ports::{
    ClientTask, ClientTaskStatus, ClientTaskStore, PortError, PortErrorKind, RunLedger, Timestamp,
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

fn missing(id: &str) -> PortError {
    err(
        PortErrorKind::NotFound,
        format!("client task {id:?} does not exist"),
    )
}

impl MemoryClientTaskStore {
    /// Stores the next state the port's state machine computes (`None`: unchanged).
    fn transition(
        &self,
        id: &str,
        next: impl FnOnce(&ClientTask) -> Result<Option<ClientTask>, PortError>,
    ) -> Result<ClientTask, PortError> {
        let mut tasks = lock(&self.tasks);
        let task = tasks.get_mut(id).ok_or_else(|| missing(id))?;
        if let Some(next) = next(task)? {
            *task = next;
        }
        Ok(task.clone())
    }
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
        let new = ClientTask::posted(run_id, phase, attempt, brief, at)?;
        self.runs.get(run_id).await?.check_accepts_client_tasks()?;
        let mut tasks = lock(&self.tasks);
        let task = tasks.entry(new.id.clone()).or_insert(new);
        if let Some(reopened) = task.reposted(at) {
            *task = reopened;
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

    async fn claim(
        &self,
        id: &str,
        claimant: &metaforge_ports::Claimant,
        at: Timestamp,
    ) -> Result<ClientTask, PortError> {
        self.transition(id, |t| t.claimed(claimant, at).map(Some))
    }

    async fn submit(
        &self,
        id: &str,
        claimant: &str,
        submission: serde_json::Value,
        at: Timestamp,
    ) -> Result<ClientTask, PortError> {
        self.transition(id, |t| t.submitted(claimant, submission, at).map(Some))
    }

    async fn withdraw(&self, id: &str, at: Timestamp) -> Result<ClientTask, PortError> {
        self.transition(id, |t| t.withdrawn(at))
    }
}
