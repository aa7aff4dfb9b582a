//! Client tasks on SQLite (FORGE-581/582), beside the run ledger. A task is only opened for a
//! run that exists and started in client mode, checked through the run ledger port.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_ports::{
    ClientTask, ClientTaskStatus, ClientTaskStore, IntelligenceMode, PortError, PortErrorKind, RunLedger,
    Timestamp, client_task_id,
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

/// Checks that a task may be opened for `run_id`: the run exists (`NotFound`) and runs in
/// client mode (`Conflict`).
pub(crate) async fn check_client_run(runs: &dyn RunLedger, run_id: &str) -> Result<(), PortError> {
    let run = runs.get(run_id).await?;
    if run.intelligence != IntelligenceMode::Client {
        return Err(PortError::new(
            PortErrorKind::Conflict,
            format!(
                "run {run_id} was started in {} mode, so it has no client tasks",
                run.intelligence.as_str()
            ),
        ));
    }
    Ok(())
}

/// Refuses a post with an empty run or phase.
pub(crate) fn validate_post(run_id: &str, phase: &str) -> Result<(), PortError> {
    for (field, value) in [("run_id", run_id), ("phase", phase)] {
        if value.trim().is_empty() || value.contains(':') {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                format!("client_task.{field}: must be non-empty and contain no ':'"),
            ));
        }
    }
    Ok(())
}

/// The conflict for a task in the wrong state.
pub(crate) fn state_conflict(task: &ClientTask, action: &str) -> PortError {
    PortError::new(
        PortErrorKind::Conflict,
        format!(
            "client task {} is {}, so it cannot be {action}",
            task.id,
            task.status.as_str()
        ),
    )
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
            "SELECT id, run_id, phase, attempt, brief, status, claimed_by, submission, \
             created_at, updated_at FROM client_tasks WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(executor)
        .await
        .map_err(|e| db_error("read a client task", e))?;
        row.map(TaskRow::into_task).transpose()
    }

    /// Runs one conditional transition; on no match, reports NotFound or the state conflict.
    async fn transition(
        &self,
        id: &str,
        action: &str,
        update: sqlx::query::Query<'_, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
    ) -> Result<ClientTask, PortError> {
        let mut tx = begin_write(&self.pool).await?;
        let changed = update
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("update a client task", e))?
            .rows_affected();
        let task = Self::fetch(&mut *tx, id)
            .await?
            .ok_or_else(|| not_found("client task", id))?;
        if changed == 0 {
            return Err(state_conflict(&task, action));
        }
        tx.commit()
            .await
            .map_err(|e| db_error("commit a client task", e))?;
        Ok(task)
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
        validate_post(run_id, phase)?;
        check_client_run(self.runs.as_ref(), run_id).await?;
        let id = client_task_id(run_id, phase, attempt);
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
        // A retry reopens a withdrawn task (with no claimant); anything else stays as it is.
        sqlx::query(
            "UPDATE client_tasks SET status = 'open', claimed_by = NULL, updated_at = ? \
             WHERE id = ? AND status = 'withdrawn'",
        )
        .bind(ts(at))
        .bind(&id)
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("reopen a client task", e))?;
        let task = Self::fetch(&mut *tx, &id)
            .await?
            .ok_or_else(|| not_found("client task", &id))?;
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
            "SELECT id, run_id, phase, attempt, brief, status, claimed_by, submission, \
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

    async fn claim(&self, id: &str, claimant: &str, at: Timestamp) -> Result<ClientTask, PortError> {
        if claimant.trim().is_empty() {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                "claim.claimant: must not be empty",
            ));
        }
        let update = sqlx::query(
            "UPDATE client_tasks SET status = 'claimed', claimed_by = ?, updated_at = ? \
             WHERE id = ? AND status = 'open'",
        )
        .bind(claimant.to_owned())
        .bind(ts(at))
        .bind(id.to_owned());
        self.transition(id, "claimed", update).await
    }

    async fn submit(
        &self,
        id: &str,
        claimant: &str,
        submission: serde_json::Value,
        at: Timestamp,
    ) -> Result<ClientTask, PortError> {
        let update = sqlx::query(
            "UPDATE client_tasks SET status = 'submitted', submission = ?, updated_at = ? \
             WHERE id = ? AND status = 'claimed' AND claimed_by = ?",
        )
        .bind(to_json("client_task.submission", &submission)?)
        .bind(ts(at))
        .bind(id.to_owned())
        .bind(claimant.to_owned());
        self.transition(id, &format!("submitted by {claimant}"), update)
            .await
    }

    async fn withdraw(&self, id: &str, at: Timestamp) -> Result<ClientTask, PortError> {
        let current = self.get(id).await?;
        if current.status == ClientTaskStatus::Withdrawn {
            return Ok(current);
        }
        let update = sqlx::query(
            "UPDATE client_tasks SET status = 'withdrawn', updated_at = ? \
             WHERE id = ? AND status IN ('open', 'claimed')",
        )
        .bind(ts(at))
        .bind(id.to_owned());
        self.transition(id, "withdrawn", update).await
    }
}
