//! The run ledger on SQLite (FORGE-485): a run's record and status history; a terminal run is
//! never reopened (checked in the transaction and by a trigger).

use std::path::Path;

use async_trait::async_trait;
use metaforge_ports::{
    PortError, PortErrorKind, RunLedger, RunRecord, RunStatus, RunStatusChange, Timestamp,
};
use sqlx::SqlitePool;

use crate::sqlite::{begin_write, db_error, label, not_found, open_pool, parse_label, parse_ts, ts};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/runs");

/// The run ledger in one SQLite file.
#[derive(Clone)]
pub struct SqliteRunLedger {
    pool: SqlitePool,
}

#[derive(sqlx::FromRow)]
struct RunRow {
    id: String,
    project_id: Option<String>,
    flow_engine: String,
    intelligence: String,
    template_id: String,
    template_version: String,
    flow_version_id: String,
    content_hash: String,
    status: String,
    reason: Option<String>,
    created_at: String,
    updated_at: String,
}

#[derive(sqlx::FromRow)]
struct HistoryRow {
    status: String,
    reason: Option<String>,
    at: String,
}

/// The conflict for an attempt to move a terminal run.
pub(crate) fn terminal_conflict(id: &str, from: RunStatus, to: RunStatus) -> PortError {
    PortError::new(
        PortErrorKind::Conflict,
        format!(
            "run {id} is {}, which is terminal; it cannot move to {}",
            from.as_str(),
            to.as_str()
        ),
    )
}

/// Refuses a run that cannot be created, naming the field.
pub(crate) fn validate_new_run(record: &RunRecord) -> Result<(), PortError> {
    for (field, value) in [
        ("id", &record.id),
        ("template_id", &record.template_id),
        ("flow_version_id", &record.flow_version_id),
        ("content_hash", &record.content_hash),
    ] {
        if value.trim().is_empty() {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                format!("run.{field}: must not be empty"),
            ));
        }
    }
    Ok(())
}

impl SqliteRunLedger {
    /// Opens (creating and migrating) the ledger at `path`.
    pub async fn open(path: &Path) -> Result<Self, PortError> {
        Ok(Self {
            pool: open_pool(path, &MIGRATOR).await?,
        })
    }

    async fn load(&self, row: RunRow) -> Result<RunRecord, PortError> {
        let history: Vec<HistoryRow> =
            sqlx::query_as("SELECT status, reason, at FROM run_status_history WHERE run_id = ? ORDER BY seq")
                .bind(&row.id)
                .fetch_all(&self.pool)
                .await
                .map_err(|e| db_error("read run history", e))?;
        Ok(RunRecord {
            project_id: row.project_id,
            flow_engine: parse_label("runs.flow_engine", &row.flow_engine)?,
            intelligence: parse_label("runs.intelligence", &row.intelligence)?,
            template_id: row.template_id,
            template_version: row.template_version,
            flow_version_id: row.flow_version_id,
            content_hash: row.content_hash,
            status: parse_label("runs.status", &row.status)?,
            reason: row.reason,
            history: history
                .into_iter()
                .map(|h| {
                    Ok(RunStatusChange {
                        status: parse_label("run_status_history.status", &h.status)?,
                        reason: h.reason,
                        at: parse_ts("run_status_history.at", &h.at)?,
                    })
                })
                .collect::<Result<_, PortError>>()?,
            created_at: parse_ts("runs.created_at", &row.created_at)?,
            updated_at: parse_ts("runs.updated_at", &row.updated_at)?,
            id: row.id,
        })
    }

    async fn row(&self, id: &str) -> Result<Option<RunRow>, PortError> {
        sqlx::query_as(
            "SELECT id, project_id, flow_engine, intelligence, template_id, template_version, \
             flow_version_id, content_hash, status, reason, created_at, updated_at \
             FROM runs WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("read a run", e))
    }
}

#[async_trait]
impl RunLedger for SqliteRunLedger {
    async fn create(&self, record: RunRecord) -> Result<RunRecord, PortError> {
        validate_new_run(&record)?;
        let mut tx = begin_write(&self.pool).await?;
        let inserted = sqlx::query(
            "INSERT INTO runs (id, project_id, flow_engine, intelligence, template_id, \
             template_version, flow_version_id, content_hash, status, reason, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&record.id)
        .bind(&record.project_id)
        .bind(label(&record.flow_engine)?)
        .bind(label(&record.intelligence)?)
        .bind(&record.template_id)
        .bind(&record.template_version)
        .bind(&record.flow_version_id)
        .bind(&record.content_hash)
        .bind(label(&record.status)?)
        .bind(&record.reason)
        .bind(ts(record.created_at))
        .bind(ts(record.created_at))
        .execute(&mut *tx)
        .await;
        if let Err(e) = inserted {
            let err = db_error("create a run", e);
            return Err(if err.kind == PortErrorKind::Conflict {
                PortError::new(
                    PortErrorKind::Conflict,
                    format!("run {} already exists", record.id),
                )
            } else {
                err
            });
        }
        sqlx::query("INSERT INTO run_status_history (run_id, status, reason, at) VALUES (?, ?, ?, ?)")
            .bind(&record.id)
            .bind(label(&record.status)?)
            .bind(&record.reason)
            .bind(ts(record.created_at))
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("record run history", e))?;
        tx.commit().await.map_err(|e| db_error("commit a run", e))?;
        self.get(&record.id).await
    }

    async fn get(&self, id: &str) -> Result<RunRecord, PortError> {
        let row = self.row(id).await?.ok_or_else(|| not_found("run", id))?;
        self.load(row).await
    }

    async fn list(&self, status: Option<RunStatus>) -> Result<Vec<RunRecord>, PortError> {
        let status = status.map(|s| label(&s)).transpose()?;
        let rows: Vec<RunRow> = sqlx::query_as(
            "SELECT id, project_id, flow_engine, intelligence, template_id, template_version, \
             flow_version_id, content_hash, status, reason, created_at, updated_at \
             FROM runs WHERE (?1 IS NULL OR status = ?1) ORDER BY created_at, id",
        )
        .bind(status)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("list runs", e))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            out.push(self.load(row).await?);
        }
        Ok(out)
    }

    async fn set_status(
        &self,
        id: &str,
        status: RunStatus,
        reason: Option<String>,
        at: Timestamp,
    ) -> Result<RunRecord, PortError> {
        let mut tx = begin_write(&self.pool).await?;
        let current: Option<(String, Option<String>)> =
            sqlx::query_as("SELECT status, reason FROM runs WHERE id = ?")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| db_error("read a run", e))?;
        let (current_status, current_reason) = current.ok_or_else(|| not_found("run", id))?;
        let current_status: RunStatus = parse_label("runs.status", &current_status)?;
        if current_status == status && current_reason == reason {
            drop(tx);
            return self.get(id).await;
        }
        if current_status.is_terminal() {
            return Err(terminal_conflict(id, current_status, status));
        }
        sqlx::query("UPDATE runs SET status = ?, reason = ?, updated_at = ? WHERE id = ?")
            .bind(label(&status)?)
            .bind(&reason)
            .bind(ts(at))
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("update a run", e))?;
        sqlx::query("INSERT INTO run_status_history (run_id, status, reason, at) VALUES (?, ?, ?, ?)")
            .bind(id)
            .bind(label(&status)?)
            .bind(&reason)
            .bind(ts(at))
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("record run history", e))?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit a run status", e))?;
        self.get(id).await
    }
}
