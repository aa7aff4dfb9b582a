//! The client-task state machine, once, on the store's own record type (FORGE-581/582).
//!
//! `open → claimed → submitted` (final); `open | claimed → withdrawn` (idempotent); a retry of the
//! same `run:phase:attempt` reopens a withdrawn task with no claimant. Only the claimant may
//! submit. Every store (SQLite, the test double) computes the next record here and only
//! persists it, guarded by compare-and-set on the status it read.

use crate::client_task_store::Claimant;
use crate::client_task_store::{ClientTask, ClientTaskStatus, client_task_id};
use crate::clock::Timestamp;
use crate::error::{PortError, PortErrorKind};
use crate::run_ledger::{IntelligenceMode, RunRecord};

/// The task id for `run:phase:attempt`, refusing a run or phase that is empty or holds `:`
/// (the id must split back into its parts).
pub fn client_task_key(run_id: &str, phase: &str, attempt: u32) -> Result<String, PortError> {
    for (field, value) in [("run_id", run_id), ("phase", phase)] {
        if value.trim().is_empty() || value.contains(':') {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                format!("client_task.{field}: must be non-empty and contain no ':'"),
            ));
        }
    }
    Ok(client_task_id(run_id, phase, attempt))
}

impl RunRecord {
    /// Only a run started in client mode has client tasks (`Conflict` otherwise).
    pub fn check_accepts_client_tasks(&self) -> Result<(), PortError> {
        match self.intelligence {
            IntelligenceMode::Client => Ok(()),
            IntelligenceMode::Server => Err(PortError::new(
                PortErrorKind::Conflict,
                format!(
                    "run {} was started in {} mode, so it has no client tasks",
                    self.id,
                    self.intelligence.as_str()
                ),
            )),
        }
    }
}

impl ClientTask {
    /// A new open task for `run:phase:attempt` posted at `at`.
    pub fn posted(
        run_id: &str,
        phase: &str,
        attempt: u32,
        brief: serde_json::Value,
        at: Timestamp,
    ) -> Result<Self, PortError> {
        Ok(Self {
            id: client_task_key(run_id, phase, attempt)?,
            run_id: run_id.to_owned(),
            phase: phase.to_owned(),
            attempt,
            brief,
            status: ClientTaskStatus::Open,
            claimed_by: None,
            claim_session: None,
            submission: None,
            created_at: at,
            updated_at: at,
        })
    }

    /// Posting the same attempt again: a withdrawn task reopens with no claimant; any other
    /// state is kept (`None`: nothing changes).
    pub fn reposted(&self, at: Timestamp) -> Option<Self> {
        (self.status == ClientTaskStatus::Withdrawn).then(|| Self {
            status: ClientTaskStatus::Open,
            claimed_by: None,
            claim_session: None,
            updated_at: at,
            ..self.clone()
        })
    }

    /// `claimant` takes an open task: its identity is the claimant, its session is kept beside.
    pub fn claimed(&self, claimant: &Claimant, at: Timestamp) -> Result<Self, PortError> {
        if claimant.identity.trim().is_empty() {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                "claim.claimant: must not be empty",
            ));
        }
        if self.status != ClientTaskStatus::Open {
            return Err(self.state_conflict("claimed"));
        }
        Ok(Self {
            status: ClientTaskStatus::Claimed,
            claimed_by: Some(claimant.identity.trim().to_owned()),
            claim_session: claimant
                .session
                .as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            updated_at: at,
            ..self.clone()
        })
    }

    /// The claimant hands its work back.
    pub fn submitted(
        &self,
        claimant: &str,
        submission: serde_json::Value,
        at: Timestamp,
    ) -> Result<Self, PortError> {
        if self.status != ClientTaskStatus::Claimed || self.claimed_by.as_deref() != Some(claimant) {
            return Err(self.state_conflict(&format!("submitted by {claimant}")));
        }
        Ok(Self {
            status: ClientTaskStatus::Submitted,
            submission: Some(submission),
            updated_at: at,
            ..self.clone()
        })
    }

    /// The worker stopped: an open or claimed task is withdrawn; withdrawing again changes
    /// nothing (`None`); a submitted task is a `Conflict`.
    pub fn withdrawn(&self, at: Timestamp) -> Result<Option<Self>, PortError> {
        match self.status {
            ClientTaskStatus::Withdrawn => Ok(None),
            ClientTaskStatus::Open | ClientTaskStatus::Claimed => Ok(Some(Self {
                status: ClientTaskStatus::Withdrawn,
                updated_at: at,
                ..self.clone()
            })),
            ClientTaskStatus::Submitted => Err(self.state_conflict("withdrawn")),
        }
    }

    /// The conflict for a task in the wrong state for `action`.
    pub fn state_conflict(&self, action: &str) -> PortError {
        PortError::new(
            PortErrorKind::Conflict,
            format!(
                "client task {} is {}, so it cannot be {action}",
                self.id,
                self.status.as_str()
            ),
        )
    }
}
