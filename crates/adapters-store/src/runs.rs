//! The run ledger on SQLite (FORGE-485): a run's record and status history, and the embedded
//! engine's transition log (each transition's event, state and commands, appended with
//! compare-and-set on the sequence in one `BEGIN IMMEDIATE` transaction with the record's status);
//! a terminal run is never reopened (checked in the transaction and by a trigger). The leases on
//! the ledger's own duties (who drives its embedded runs) live in the same file.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use metaforge_ports::{
    Lease, LeaseStore, PortError, PortErrorKind, RunLedger, RunRecord, RunStatus, RunStatusChange,
    RunTransition, Timestamp, check_settle, terminal_run_conflict,
};
use sqlx::{Sqlite, SqlitePool, Transaction};

use crate::codec::{seq_i64, seq_u64};
use crate::sqlite::{
    begin_write, db_error, label, not_found, open_pool, parse_json, parse_label, parse_ts, to_json, ts,
};

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

#[derive(sqlx::FromRow)]
struct TransitionRow {
    run_id: String,
    seq: i64,
    event: Option<String>,
    state: String,
    commands: String,
    reason: Option<String>,
    at: String,
}

impl TransitionRow {
    fn into_transition(self) -> Result<RunTransition, PortError> {
        Ok(RunTransition {
            seq: seq_u64("run_transitions.seq", self.seq)?,
            event: self
                .event
                .as_deref()
                .map(|e| parse_json("run_transitions.event", e))
                .transpose()?,
            state: parse_json("run_transitions.state", &self.state)?,
            commands: parse_json("run_transitions.commands", &self.commands)?,
            reason: self.reason,
            at: parse_ts("run_transitions.at", &self.at)?,
            run_id: self.run_id,
        })
    }
}

async fn insert_run(tx: &mut Transaction<'static, Sqlite>, record: &RunRecord) -> Result<(), PortError> {
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
    .execute(&mut **tx)
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
    record_history(
        tx,
        &record.id,
        record.status,
        record.reason.as_deref(),
        record.created_at,
    )
    .await
}

async fn record_history(
    tx: &mut Transaction<'static, Sqlite>,
    id: &str,
    status: RunStatus,
    reason: Option<&str>,
    at: Timestamp,
) -> Result<(), PortError> {
    sqlx::query("INSERT INTO run_status_history (run_id, status, reason, at) VALUES (?, ?, ?, ?)")
        .bind(id)
        .bind(label(&status)?)
        .bind(reason)
        .bind(ts(at))
        .execute(&mut **tx)
        .await
        .map_err(|e| db_error("record run history", e))?;
    Ok(())
}

async fn insert_transition(
    tx: &mut Transaction<'static, Sqlite>,
    transition: &RunTransition,
) -> Result<(), PortError> {
    let event = transition
        .event
        .as_ref()
        .map(|e| to_json("transition.event", e))
        .transpose()?;
    let inserted = sqlx::query(
        "INSERT INTO run_transitions (run_id, seq, event, state, commands, reason, at) \
         VALUES (?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&transition.run_id)
    .bind(seq_i64(transition.seq))
    .bind(event)
    .bind(to_json("transition.state", &transition.state)?)
    .bind(to_json("transition.commands", &transition.commands)?)
    .bind(&transition.reason)
    .bind(ts(transition.at))
    .execute(&mut **tx)
    .await;
    inserted.map_err(|e| {
        let err = db_error("append a run transition", e);
        if err.kind == PortErrorKind::Conflict {
            PortError::new(
                PortErrorKind::Conflict,
                format!(
                    "run {} already has transition {} (another writer moved the run)",
                    transition.run_id, transition.seq
                ),
            )
        } else {
            err
        }
    })?;
    sqlx::query("UPDATE runs SET last_seq = ? WHERE id = ?")
        .bind(seq_i64(transition.seq))
        .bind(&transition.run_id)
        .execute(&mut **tx)
        .await
        .map_err(|e| db_error("advance a run's sequence", e))?;
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
        record.check_new()?;
        let mut tx = begin_write(&self.pool).await?;
        insert_run(&mut tx, &record).await?;
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
            return Err(terminal_run_conflict(id, current_status, status));
        }
        sqlx::query("UPDATE runs SET status = ?, reason = ?, updated_at = ? WHERE id = ?")
            .bind(label(&status)?)
            .bind(&reason)
            .bind(ts(at))
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("update a run", e))?;
        record_history(&mut tx, id, status, reason.as_deref(), at).await?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit a run status", e))?;
        self.get(id).await
    }

    async fn create_started(&self, record: RunRecord, first: RunTransition) -> Result<RunRecord, PortError> {
        record.check_new()?;
        first.check_first_of(&record)?;
        let mut tx = begin_write(&self.pool).await?;
        insert_run(&mut tx, &record).await?;
        insert_transition(&mut tx, &first).await?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit a started run", e))?;
        self.get(&record.id).await
    }

    async fn append_transition(&self, transition: RunTransition) -> Result<RunRecord, PortError> {
        transition.check()?;
        let id = transition.run_id.clone();
        let mut tx = begin_write(&self.pool).await?;
        let current: Option<(String, Option<String>, i64)> =
            sqlx::query_as("SELECT status, reason, last_seq FROM runs WHERE id = ?")
                .bind(&id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| db_error("read a run", e))?;
        let (status, reason, last_seq) = current.ok_or_else(|| not_found("run", &id))?;
        let status: RunStatus = parse_label("runs.status", &status)?;
        transition.check_follows(seq_u64("runs.last_seq", last_seq)?, status)?;
        insert_transition(&mut tx, &transition).await?;
        let next_status = transition.state.status;
        if next_status != status || transition.reason != reason {
            sqlx::query("UPDATE runs SET status = ?, reason = ?, updated_at = ? WHERE id = ?")
                .bind(label(&next_status)?)
                .bind(&transition.reason)
                .bind(ts(transition.at))
                .bind(&id)
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error("update a run", e))?;
            record_history(
                &mut tx,
                &id,
                next_status,
                transition.reason.as_deref(),
                transition.at,
            )
            .await?;
        }
        tx.commit()
            .await
            .map_err(|e| db_error("commit a run transition", e))?;
        self.get(&id).await
    }

    async fn latest_transition(&self, run_id: &str) -> Result<Option<RunTransition>, PortError> {
        if self.row(run_id).await?.is_none() {
            return Err(not_found("run", run_id));
        }
        let row: Option<TransitionRow> = sqlx::query_as(
            "SELECT run_id, seq, event, state, commands, reason, at FROM run_transitions \
             WHERE run_id = ? ORDER BY seq DESC LIMIT 1",
        )
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("read a run's latest transition", e))?;
        row.map(TransitionRow::into_transition).transpose()
    }

    async fn transitions(&self, run_id: &str, after_seq: u64) -> Result<Vec<RunTransition>, PortError> {
        if self.row(run_id).await?.is_none() {
            return Err(not_found("run", run_id));
        }
        let rows: Vec<TransitionRow> = sqlx::query_as(
            "SELECT run_id, seq, event, state, commands, reason, at FROM run_transitions \
             WHERE run_id = ? AND seq > ? ORDER BY seq",
        )
        .bind(run_id)
        .bind(seq_i64(after_seq))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("read a run's transitions", e))?;
        rows.into_iter().map(TransitionRow::into_transition).collect()
    }

    async fn mark_settled(&self, run_id: &str, seq: u64) -> Result<(), PortError> {
        let mut tx = begin_write(&self.pool).await?;
        let current: Option<(i64,)> = sqlx::query_as("SELECT last_seq FROM runs WHERE id = ?")
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| db_error("read a run", e))?;
        let (last_seq,) = current.ok_or_else(|| not_found("run", run_id))?;
        check_settle(run_id, seq, seq_u64("runs.last_seq", last_seq)?)?;
        sqlx::query("UPDATE runs SET settled_seq = MAX(settled_seq, ?) WHERE id = ?")
            .bind(seq_i64(seq))
            .bind(run_id)
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("settle a run transition", e))?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit a settled transition", e))?;
        Ok(())
    }

    async fn unsettled(&self) -> Result<Vec<RunRecord>, PortError> {
        let rows: Vec<RunRow> = sqlx::query_as(
            "SELECT id, project_id, flow_engine, intelligence, template_id, template_version, \
             flow_version_id, content_hash, status, reason, created_at, updated_at \
             FROM runs WHERE last_seq > 0 AND (status NOT IN ('completed', 'failed', 'canceled') \
             OR settled_seq < last_seq) ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("list unsettled runs", e))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            out.push(self.load(row).await?);
        }
        Ok(out)
    }

    async fn claim_published(&self, run_id: &str, upto: u64) -> Result<Option<u64>, PortError> {
        let mut tx = begin_write(&self.pool).await?;
        let current: Option<(i64,)> = sqlx::query_as("SELECT published_seq FROM runs WHERE id = ?")
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| db_error("read a run's published mark", e))?;
        let (published,) = current.ok_or_else(|| not_found("run", run_id))?;
        let published = seq_u64("runs.published_seq", published)?;
        let Some(from) = metaforge_ports::published_claim(published, upto) else {
            return Ok(None);
        };
        sqlx::query("UPDATE runs SET published_seq = ? WHERE id = ?")
            .bind(seq_i64(upto))
            .bind(run_id)
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("move a run's published mark", e))?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit a run's published mark", e))?;
        Ok(Some(from))
    }
}

#[derive(sqlx::FromRow)]
struct LeaseRow {
    duty: String,
    holder: String,
    acquired_at: String,
    expires_at: String,
}

impl LeaseRow {
    fn into_lease(self) -> Result<Lease, PortError> {
        Ok(Lease {
            acquired_at: parse_ts("leases.acquired_at", &self.acquired_at)?,
            expires_at: parse_ts("leases.expires_at", &self.expires_at)?,
            duty: self.duty,
            holder: self.holder,
        })
    }
}

/// The run ledger keeps the leases on its own duties (who drives its embedded runs), so every
/// process on this file sees one holder.
#[async_trait]
impl LeaseStore for SqliteRunLedger {
    async fn acquire(
        &self,
        duty: &str,
        holder: &str,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<Lease, PortError> {
        // BEGIN IMMEDIATE: the read and the write below are one step for every other writer.
        let mut tx = begin_write(&self.pool).await?;
        let current: Option<LeaseRow> =
            sqlx::query_as("SELECT duty, holder, acquired_at, expires_at FROM leases WHERE duty = ?")
                .bind(duty)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| db_error("read a lease", e))?;
        let current = current.map(LeaseRow::into_lease).transpose()?;
        let Some(next) = Lease::next(current.as_ref(), duty, holder, now, ttl)? else {
            return current.ok_or_else(|| not_found("lease", duty));
        };
        sqlx::query(
            "INSERT INTO leases (duty, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (duty) DO UPDATE SET holder = excluded.holder, \
             acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
        )
        .bind(&next.duty)
        .bind(&next.holder)
        .bind(ts(next.acquired_at))
        .bind(ts(next.expires_at))
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("store a lease", e))?;
        tx.commit().await.map_err(|e| db_error("commit a lease", e))?;
        Ok(next)
    }

    async fn release(&self, duty: &str, holder: &str, now: Timestamp) -> Result<(), PortError> {
        sqlx::query("UPDATE leases SET expires_at = ? WHERE duty = ? AND holder = ? AND expires_at > ?")
            .bind(ts(now))
            .bind(duty)
            .bind(holder)
            .bind(ts(now))
            .execute(&self.pool)
            .await
            .map_err(|e| db_error("release a lease", e))?;
        Ok(())
    }

    async fn lease(&self, duty: &str) -> Result<Option<Lease>, PortError> {
        let row: Option<LeaseRow> =
            sqlx::query_as("SELECT duty, holder, acquired_at, expires_at FROM leases WHERE duty = ?")
                .bind(duty)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| db_error("read a lease", e))?;
        row.map(LeaseRow::into_lease).transpose()
    }
}
