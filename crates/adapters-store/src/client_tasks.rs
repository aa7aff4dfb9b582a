//! Client tasks (FORGE-581/582), beside the run ledger, one engine on SQLite and on PostgreSQL.
//! A task is only opened for a run that exists and started in client mode, checked through the
//! run ledger port. Claims, submissions and withdrawals read the task inside a write transaction
//! (locking its row where the database needs it) and apply the one state machine
//! (`ClientTask::{claimed, submitted, withdrawn}`), so two clients claiming one task through two
//! gateways get one claim and one conflict.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_ports::{
    Claimant, ClientTask, ClientTaskStatus, ClientTaskStore, PortError, PortErrorKind, RunLedger, Timestamp,
    client_task_key,
};
use sqlx::{Pool, Sqlite, Transaction};

use crate::codec::{label, not_found, parse_json, parse_label, to_json};
use crate::sql::{Dialect, FromRecord, Record, pooled, sql, sql_locking, sql_owned};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/client_tasks");
#[cfg(feature = "postgres")]
static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres/client_tasks");

/// The schema holding this store's table and migration history on PostgreSQL.
#[cfg(feature = "postgres")]
const PG_SCHEMA: &str = "metaforge_client_tasks";

/// The columns every read selects.
const TASK_COLUMNS: &str = "id, run_id, phase, attempt, brief, status, claimed_by, claim_session, submission, created_at, updated_at";

/// The client-task store over database `E`.
pub struct SqlClientTaskStore<E: Dialect> {
    pool: Pool<E>,
    runs: Arc<dyn RunLedger>,
}

impl<E: Dialect> Clone for SqlClientTaskStore<E> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            runs: Arc::clone(&self.runs),
        }
    }
}

/// The client-task store in one SQLite file (`client_tasks.db`).
pub type SqliteClientTaskStore = SqlClientTaskStore<Sqlite>;

/// The client-task store in the `metaforge_client_tasks` schema of a PostgreSQL database.
#[cfg(feature = "postgres")]
pub type PgClientTaskStore = SqlClientTaskStore<sqlx::Postgres>;

impl SqlClientTaskStore<Sqlite> {
    /// Opens (creating and migrating) the store at `path`, checking runs through `runs`.
    pub async fn open(path: &Path, runs: Arc<dyn RunLedger>) -> Result<Self, PortError> {
        Ok(Self {
            pool: crate::sqlite::open_pool(path, &MIGRATOR).await?,
            runs,
        })
    }
}

#[cfg(feature = "postgres")]
impl SqlClientTaskStore<sqlx::Postgres> {
    /// Connects to the server at `url` (creating and migrating the store's schema), checking
    /// runs through `runs`.
    ///
    /// # Errors
    /// `Invalid` for a URL that does not parse, `Unavailable` when the server cannot be reached.
    pub async fn open(url: &str, runs: Arc<dyn RunLedger>) -> Result<Self, PortError> {
        Ok(Self {
            pool: crate::postgres::open_pool(url, PG_SCHEMA, &PG_MIGRATOR).await?,
            runs,
        })
    }
}

impl<E: Dialect> FromRecord<E> for ClientTask {
    fn from_record(row: &Record<'_, E>) -> Result<Self, PortError> {
        let attempt: i64 = row.get("attempt")?;
        let brief: String = row.get("brief")?;
        let status: String = row.get("status")?;
        let submission: Option<String> = row.get("submission")?;
        Ok(Self {
            id: row.get("id")?,
            run_id: row.get("run_id")?,
            phase: row.get("phase")?,
            attempt: u32::try_from(attempt).map_err(|_| {
                PortError::new(
                    PortErrorKind::Corrupt,
                    format!("stored client_tasks.attempt {attempt} is out of range"),
                )
            })?,
            brief: parse_json("client_tasks.brief", &brief)?,
            status: parse_label("client_tasks.status", &status)?,
            claimed_by: row.get("claimed_by")?,
            claim_session: row.get("claim_session")?,
            submission: submission
                .map(|s| parse_json("client_tasks.submission", &s))
                .transpose()?,
            created_at: row.time("created_at")?,
            updated_at: row.time("updated_at")?,
        })
    }
}

impl<E: Dialect> SqlClientTaskStore<E> {
    /// Reads one task inside `tx`, locking its row until the transaction ends.
    async fn lock(tx: &mut Transaction<'static, E>, id: &str) -> Result<ClientTask, PortError> {
        if !E::can_hold(id) {
            return Err(not_found("client task", id));
        }
        let task: Option<ClientTask> = sql_locking(
            format!("SELECT {TASK_COLUMNS} FROM client_tasks WHERE id = $1"),
            "read a client task",
        )
        .bind(id.to_owned())
        .fetch_optional(tx)
        .await?;
        task.ok_or_else(|| not_found("client task", id))
    }

    /// Reads the task, computes its next state with the one state machine, and stores it on
    /// the status that was read (compare-and-set). `None` from `next` changes nothing.
    async fn transition(
        &self,
        id: &str,
        next: impl FnOnce(&ClientTask) -> Result<Option<ClientTask>, PortError>,
    ) -> Result<ClientTask, PortError> {
        let mut tx = E::begin_write(&self.pool).await?;
        let current = Self::lock(&mut tx, id).await?;
        let Some(next) = next(&current)? else {
            return Ok(current);
        };
        E::check_text("client_task.claimant", next.claimed_by.as_deref())?;
        E::check_text("client_task.claim_session", next.claim_session.as_deref())?;
        let changed = sql(
            "UPDATE client_tasks SET status = $1, claimed_by = $2, claim_session = $3, submission = $4, \
             updated_at = $5 WHERE id = $6 AND status = $7",
            "update a client task",
        )
        .bind(next.status.as_str().to_owned())
        .bind(next.claimed_by.clone())
        .bind(next.claim_session.clone())
        .bind(
            next.submission
                .as_ref()
                .map(|v| to_json("client_task.submission", v))
                .transpose()?,
        )
        .bind_time(next.updated_at)
        .bind(id.to_owned())
        .bind(current.status.as_str().to_owned())
        .execute(&mut tx)
        .await?;
        if changed == 0 {
            // Unreachable while the write transaction holds the row (it was read in it).
            return Err(current.state_conflict("changed concurrently"));
        }
        tx.commit()
            .await
            .map_err(|e| E::db_error("commit a client task", e))?;
        Ok(next)
    }
}

#[async_trait]
impl<E: Dialect> ClientTaskStore for SqlClientTaskStore<E> {
    async fn post(
        &self,
        run_id: &str,
        phase: &str,
        attempt: u32,
        brief: serde_json::Value,
        at: Timestamp,
    ) -> Result<ClientTask, PortError> {
        let id = client_task_key(run_id, phase, attempt)?;
        E::check_text("client_task.run_id", Some(run_id))?;
        E::check_text("client_task.phase", Some(phase))?;
        self.runs.get(run_id).await?.check_accepts_client_tasks()?;
        let mut tx = E::begin_write(&self.pool).await?;
        sql(
            "INSERT INTO client_tasks (id, run_id, phase, attempt, brief, status, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, 'open', $6, $6) ON CONFLICT (id) DO NOTHING",
            "post a client task",
        )
        .bind(id.clone())
        .bind(run_id.to_owned())
        .bind(phase.to_owned())
        .bind(i64::from(attempt))
        .bind(to_json("client_task.brief", &brief)?)
        .bind_time(at)
        .execute(&mut tx)
        .await?;
        let task = Self::lock(&mut tx, &id).await?;
        // A retry reopens a withdrawn task (with no claimant); anything else stays as it is.
        let task = match task.reposted(at) {
            Some(reopened) => {
                sql(
                    "UPDATE client_tasks SET status = $1, claimed_by = NULL, claim_session = NULL, updated_at = $2 \
                     WHERE id = $3 AND status = $4",
                    "reopen a client task",
                )
                .bind(reopened.status.as_str().to_owned())
                .bind_time(at)
                .bind(id.clone())
                .bind(task.status.as_str().to_owned())
                .execute(&mut tx)
                .await?;
                reopened
            }
            None => task,
        };
        tx.commit()
            .await
            .map_err(|e| E::db_error("commit a client task", e))?;
        Ok(task)
    }

    async fn get(&self, id: &str) -> Result<ClientTask, PortError> {
        if !E::can_hold(id) {
            return Err(not_found("client task", id));
        }
        let mut conn = pooled(&self.pool).await?;
        let task: Option<ClientTask> = sql_owned(
            format!("SELECT {TASK_COLUMNS} FROM client_tasks WHERE id = $1"),
            "read a client task",
        )
        .bind(id.to_owned())
        .fetch_optional(&mut conn)
        .await?;
        task.ok_or_else(|| not_found("client task", id))
    }

    async fn list(
        &self,
        run_id: Option<&str>,
        status: Option<ClientTaskStatus>,
    ) -> Result<Vec<ClientTask>, PortError> {
        // No stored run id holds text the database cannot hold.
        if run_id.is_some_and(|r| !E::can_hold(r)) {
            return Ok(Vec::new());
        }
        let status = status.map(|s| label(&s)).transpose()?;
        let mut conn = pooled(&self.pool).await?;
        sql_owned(
            format!(
                "SELECT {TASK_COLUMNS} FROM client_tasks \
                 WHERE (CAST($1 AS TEXT) IS NULL OR run_id = $1) \
                 AND (CAST($2 AS TEXT) IS NULL OR status = $2) ORDER BY created_at, id"
            ),
            "list client tasks",
        )
        .bind(run_id.map(str::to_owned))
        .bind(status)
        .fetch_all(&mut conn)
        .await
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
