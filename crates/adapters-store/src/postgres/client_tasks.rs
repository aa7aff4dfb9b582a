//! Client tasks on PostgreSQL (FORGE-581/582), beside the run ledger on the same server. A task
//! is only opened for a run that exists and started in client mode, checked through the run
//! ledger port. Claims, submissions and withdrawals lock the task's row (`SELECT … FOR UPDATE`)
//! and apply the one state machine (`ClientTask::{claimed, submitted, withdrawn}`), so two
//! clients claiming one task through two gateways get one claim and one conflict.

use std::sync::Arc;

use async_trait::async_trait;
use metaforge_ports::{
    Claimant, ClientTask, ClientTaskStatus, ClientTaskStore, PortError, PortErrorKind, RunLedger, Timestamp,
    client_task_key,
};
use sqlx::{PgPool, Postgres, Transaction};

use super::{db_error, open_pool, refuse_nul};
use crate::codec::{label, not_found, parse_json, parse_label, to_json};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres/client_tasks");

/// The schema holding this store's table and migration history.
const SCHEMA: &str = "metaforge_client_tasks";

/// The columns every read selects, in [`TaskRow`]'s order.
macro_rules! columns {
    () => {
        "id, run_id, phase, attempt, brief, status, claimed_by, claim_session, submission, created_at, updated_at"
    };
}

/// The client-task store in the `metaforge_client_tasks` schema of a PostgreSQL database.
#[derive(Clone)]
pub struct PgClientTaskStore {
    pool: PgPool,
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
    created_at: Timestamp,
    updated_at: Timestamp,
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
            created_at: self.created_at,
            updated_at: self.updated_at,
            id: self.id,
        })
    }
}

impl PgClientTaskStore {
    /// Connects to the server at `url` (creating and migrating the store's schema), checking
    /// runs through `runs`.
    ///
    /// # Errors
    /// `Invalid` for a URL that does not parse, `Unavailable` when the server cannot be reached.
    pub async fn open(url: &str, runs: Arc<dyn RunLedger>) -> Result<Self, PortError> {
        Ok(Self {
            pool: open_pool(url, SCHEMA, &MIGRATOR).await?,
            runs,
        })
    }

    async fn begin(&self) -> Result<Transaction<'static, Postgres>, PortError> {
        self.pool
            .begin()
            .await
            .map_err(|e| db_error("begin a write transaction", e))
    }

    /// Reads one task and locks its row until the transaction ends.
    async fn lock(tx: &mut Transaction<'static, Postgres>, id: &str) -> Result<ClientTask, PortError> {
        if id.contains('\0') {
            return Err(not_found("client task", id));
        }
        let row: Option<TaskRow> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM client_tasks WHERE id = $1 FOR UPDATE"
        ))
        .bind(id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(|e| db_error("read a client task", e))?;
        row.ok_or_else(|| not_found("client task", id))?.into_task()
    }

    /// Locks the task, computes its next state with the one state machine, and stores it on
    /// the status that was read (compare-and-set). `None` from `next` changes nothing.
    async fn transition(
        &self,
        id: &str,
        next: impl FnOnce(&ClientTask) -> Result<Option<ClientTask>, PortError>,
    ) -> Result<ClientTask, PortError> {
        let mut tx = self.begin().await?;
        let current = Self::lock(&mut tx, id).await?;
        let Some(next) = next(&current)? else {
            return Ok(current);
        };
        refuse_nul("client_task.claimant", next.claimed_by.as_deref())?;
        refuse_nul("client_task.claim_session", next.claim_session.as_deref())?;
        let changed = sqlx::query(
            "UPDATE client_tasks SET status = $1, claimed_by = $2, claim_session = $3, submission = $4, \
             updated_at = $5 WHERE id = $6 AND status = $7",
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
        .bind(next.updated_at)
        .bind(id)
        .bind(current.status.as_str())
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("update a client task", e))?
        .rows_affected();
        if changed == 0 {
            // Unreachable while the row is locked (it was read in this transaction).
            return Err(current.state_conflict("changed concurrently"));
        }
        tx.commit()
            .await
            .map_err(|e| db_error("commit a client task", e))?;
        Ok(next)
    }
}

#[async_trait]
impl ClientTaskStore for PgClientTaskStore {
    async fn post(
        &self,
        run_id: &str,
        phase: &str,
        attempt: u32,
        brief: serde_json::Value,
        at: Timestamp,
    ) -> Result<ClientTask, PortError> {
        let id = client_task_key(run_id, phase, attempt)?;
        refuse_nul("client_task.run_id", Some(run_id))?;
        refuse_nul("client_task.phase", Some(phase))?;
        self.runs.get(run_id).await?.check_accepts_client_tasks()?;
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO client_tasks (id, run_id, phase, attempt, brief, status, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, 'open', $6, $6) ON CONFLICT (id) DO NOTHING",
        )
        .bind(&id)
        .bind(run_id)
        .bind(phase)
        .bind(i64::from(attempt))
        .bind(to_json("client_task.brief", &brief)?)
        .bind(at)
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("post a client task", e))?;
        let task = Self::lock(&mut tx, &id).await?;
        // A retry reopens a withdrawn task (with no claimant); anything else stays as it is.
        let task = match task.reposted(at) {
            Some(reopened) => {
                sqlx::query(
                    "UPDATE client_tasks SET status = $1, claimed_by = NULL, claim_session = NULL, updated_at = $2 \
                     WHERE id = $3 AND status = $4",
                )
                .bind(reopened.status.as_str())
                .bind(at)
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
        if id.contains('\0') {
            return Err(not_found("client task", id));
        }
        let row: Option<TaskRow> =
            sqlx::query_as(concat!("SELECT ", columns!(), " FROM client_tasks WHERE id = $1"))
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| db_error("read a client task", e))?;
        row.ok_or_else(|| not_found("client task", id))?.into_task()
    }

    async fn list(
        &self,
        run_id: Option<&str>,
        status: Option<ClientTaskStatus>,
    ) -> Result<Vec<ClientTask>, PortError> {
        // No stored run id holds a NUL, and the server would refuse the bind.
        if run_id.is_some_and(|r| r.contains('\0')) {
            return Ok(Vec::new());
        }
        let status = status.map(|s| label(&s)).transpose()?;
        let rows: Vec<TaskRow> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM client_tasks WHERE ($1::text IS NULL OR run_id = $1) \
             AND ($2::text IS NULL OR status = $2) ORDER BY created_at, id"
        ))
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
