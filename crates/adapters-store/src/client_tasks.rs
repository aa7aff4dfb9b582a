//! Client tasks on SQLite (FORGE-581/582), beside the run ledger. A task is only opened for a
//! run that exists and started in client mode, checked through the run ledger port.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_ports::{
    Claimant, ClientTask, ClientTaskStatus, ClientTaskStore, PortError, PortErrorKind, RunLedger, Timestamp,
    client_task_key,
};
use sqlx::SqlitePool;

use crate::sqlite::{
    begin_write, db_error, label, not_found, open_pool, parse_json, parse_label, parse_ts, to_json, ts,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/client_tasks");

/// The client-task store in one SQLite file (`client_tasks.db`).
#[derive(Clone)]
pub struct SqliteClientTaskStore {
    pool: SqlitePool,
    runs: Arc<dyn RunLedger>,
}

#[derive(sqlx::FromRow)]
struct TaskRow {
    id: String,
    run_id: String,
    phase: String,
    attempt: i64,
    brief: String,
    status: String,
    claimed_by: Option<String>,
    claim_session: Option<String>,
    submission: Option<String>,
    created_at: String,
    updated_at: String,
}

impl TaskRow {
    fn into_task(self) -> Result<ClientTask, PortError> {
        Ok(ClientTask {
            run_id: self.run_id,
            phase: self.phase,
            attempt: u32::try_from(self.attempt).map_err(|_| {
                PortError::new(
                    PortErrorKind::Corrupt,
                    format!("stored client_tasks.attempt {} is out of range", self.attempt),
                )
            })?,
            brief: parse_json("client_tasks.brief", &self.brief)?,
            status: parse_label("client_tasks.status", &self.status)?,
            claimed_by: self.claimed_by,
            claim_session: self.claim_session,
            submission: self
                .submission
                .map(|s| parse_json("client_tasks.submission", &s))
                .transpose()?,
            created_at: parse_ts("client_tasks.created_at", &self.created_at)?,
            updated_at: parse_ts("client_tasks.updated_at", &self.updated_at)?,
            id: self.id,
        })
    }
}

impl SqliteClientTaskStore {
    /// Opens (creating and migrating) the store at `path`, checking runs through `runs`.
    pub async fn open(path: &Path, runs: Arc<dyn RunLedger>) -> Result<Self, PortError> {
        Ok(Self {
            pool: open_pool(path, &MIGRATOR).await?,
            runs,
        })
    }

    async fn fetch<'e, E>(executor: E, id: &str) -> Result<Option<ClientTask>, PortError>
    where
        E: sqlx::Executor<'e, Database = sqlx::Sqlite>,
    {
        let row: Option<TaskRow> = sqlx::query_as(
            "SELECT id, run_id, phase, attempt, brief, status, claimed_by, claim_session, submission, \
             created_at, updated_at FROM client_tasks WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(executor)
        .await
        .map_err(|e| db_error("read a client task", e))?;
        row.map(TaskRow::into_task).transpose()
    }

    /// Reads the task, computes its next state with the one state machine
    /// (`ClientTask::{claimed, submitted, withdrawn}`), and stores it if the row still has the
    /// status that was read (compare-and-set). `None` from `next` changes nothing.
    async fn transition(
        &self,
        id: &str,
        next: impl FnOnce(&ClientTask) -> Result<Option<ClientTask>, PortError>,
    ) -> Result<ClientTask, PortError> {
        let mut tx = begin_write(&self.pool).await?;
        let current = Self::fetch(&mut *tx, id)
            .await?
            .ok_or_else(|| not_found("client task", id))?;
        let Some(next) = next(&current)? else {
            return Ok(current);
        };
        let changed = sqlx::query(
            "UPDATE client_tasks SET status = ?, claimed_by = ?, claim_session = ?, submission = ?, \
             updated_at = ? WHERE id = ? AND status = ?",
        )
        .bind(next.status.as_str())
        .bind(&next.claimed_by)
        .bind(&next.claim_session)
        .bind(
            next.submission
                .as_ref()
                .map(|v| to_json("client_task.submission", v))
                .transpose()?,
        )
        .bind(ts(next.updated_at))
        .bind(id)
        .bind(current.status.as_str())
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("update a client task", e))?
        .rows_affected();
        if changed == 0 {
            // Unreachable under BEGIN IMMEDIATE (the row was read in this transaction).
            return Err(current.state_conflict("changed concurrently"));
        }
        tx.commit()
            .await
            .map_err(|e| db_error("commit a client task", e))?;
        Ok(next)
    }
}

#[async_trait]
impl ClientTaskStore for SqliteClientTaskStore {
    async fn post(
        &self,
        run_id: &str,
        phase: &str,
        attempt: u32,
        brief: serde_json::Value,
        at: Timestamp,
    ) -> Result<ClientTask, PortError> {
        let id = client_task_key(run_id, phase, attempt)?;
        self.runs.get(run_id).await?.check_accepts_client_tasks()?;
        let mut tx = begin_write(&self.pool).await?;
        sqlx::query(
            "INSERT INTO client_tasks (id, run_id, phase, attempt, brief, status, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, 'open', ?, ?) ON CONFLICT (id) DO NOTHING",
        )
        .bind(&id)
        .bind(run_id)
        .bind(phase)
        .bind(i64::from(attempt))
        .bind(to_json("client_task.brief", &brief)?)
        .bind(ts(at))
        .bind(ts(at))
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("post a client task", e))?;
        let task = Self::fetch(&mut *tx, &id)
            .await?
            .ok_or_else(|| not_found("client task", &id))?;
        // A retry reopens a withdrawn task (with no claimant); anything else stays as it is.
        let task = match task.reposted(at) {
            Some(reopened) => {
                sqlx::query(
                    "UPDATE client_tasks SET status = ?, claimed_by = NULL, claim_session = NULL, updated_at = ? \
                     WHERE id = ? AND status = ?",
                )
                .bind(reopened.status.as_str())
                .bind(ts(at))
                .bind(&id)
                .bind(task.status.as_str())
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error("reopen a client task", e))?;
                reopened
            }
            None => task,
        };
        tx.commit()
            .await
            .map_err(|e| db_error("commit a client task", e))?;
        Ok(task)
    }

    async fn get(&self, id: &str) -> Result<ClientTask, PortError> {
        Self::fetch(&self.pool, id)
            .await?
            .ok_or_else(|| not_found("client task", id))
    }

    async fn list(
        &self,
        run_id: Option<&str>,
        status: Option<ClientTaskStatus>,
    ) -> Result<Vec<ClientTask>, PortError> {
        let status = status.map(|s| label(&s)).transpose()?;
        let rows: Vec<TaskRow> = sqlx::query_as(
            "SELECT id, run_id, phase, attempt, brief, status, claimed_by, claim_session, submission, \
             created_at, updated_at FROM client_tasks \
             WHERE (?1 IS NULL OR run_id = ?1) AND (?2 IS NULL OR status = ?2) \
             ORDER BY created_at, id",
        )
        .bind(run_id)
        .bind(status)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("list client tasks", e))?;
        rows.into_iter().map(TaskRow::into_task).collect()
    }

    async fn claim(&self, id: &str, claimant: &Claimant, at: Timestamp) -> Result<ClientTask, PortError> {
        self.transition(id, |task| task.claimed(claimant, at).map(Some))
            .await
    }

    async fn submit(
        &self,
        id: &str,
        claimant: &str,
        submission: serde_json::Value,
        at: Timestamp,
    ) -> Result<ClientTask, PortError> {
        self.transition(id, |task| task.submitted(claimant, submission, at).map(Some))
            .await
    }

    async fn withdraw(&self, id: &str, at: Timestamp) -> Result<ClientTask, PortError> {
        self.transition(id, |task| task.withdrawn(at)).await
    }
}
