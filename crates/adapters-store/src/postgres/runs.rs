//! The run ledger on PostgreSQL (FORGE-485), shared by every gateway and worker on the server: a
//! run's record and status history, and the embedded engine's transition log. Each write is one
//! transaction that locks the run's row (`SELECT … FOR UPDATE`) and checks the one rule set the
//! SQLite ledger checks (`RunTransition::check_follows`, `check_settle`, terminal runs final), so
//! two processes moving one run serialise: the first appends, the second reads the new sequence
//! and gets its conflict. A terminal run is never reopened (checked in the transaction and by a
//! trigger). The leases on the ledger's own duties (who drives its embedded runs) live in the
//! same schema.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use metaforge_ports::{
    Lease, LeaseStore, PortError, PortErrorKind, RunLedger, RunRecord, RunStatus, RunStatusChange,
    RunTransition, Timestamp, check_settle, terminal_run_conflict,
};
use sqlx::{PgPool, Postgres, Transaction};

use super::{db_error, open_pool, refuse_nul};
use crate::codec::{label, not_found, parse_json, parse_label, seq_i64, seq_u64, to_json};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres/runs");

/// The schema holding this ledger's tables and migration history.
const SCHEMA: &str = "metaforge_runs";

/// The columns every read of a run selects, in [`RunRow`]'s order.
macro_rules! run_columns {
    () => {
        "id, project_id, flow_engine, intelligence, template_id, template_version, \
         flow_version_id, content_hash, status, reason, created_at, updated_at"
    };
}

/// The columns every read of a transition selects, in [`TransitionRow`]'s order.
macro_rules! transition_columns {
    () => {
        "run_id, seq, event, state, commands, reason, at"
    };
}

/// The run ledger in the `metaforge_runs` schema of a PostgreSQL database.
#[derive(Clone)]
pub struct PgRunLedger {
    pool: PgPool,
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
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl RunRow {
    fn into_record(self, history: Vec<HistoryRow>) -> Result<RunRecord, PortError> {
        Ok(RunRecord {
            project_id: self.project_id,
            flow_engine: parse_label("runs.flow_engine", &self.flow_engine)?,
            intelligence: parse_label("runs.intelligence", &self.intelligence)?,
            template_id: self.template_id,
            template_version: self.template_version,
            flow_version_id: self.flow_version_id,
            content_hash: self.content_hash,
            status: parse_label("runs.status", &self.status)?,
            reason: self.reason,
            history: history
                .into_iter()
                .map(|h| {
                    Ok(RunStatusChange {
                        status: parse_label("run_status_history.status", &h.status)?,
                        reason: h.reason,
                        at: h.at,
                    })
                })
                .collect::<Result<_, PortError>>()?,
            created_at: self.created_at,
            updated_at: self.updated_at,
            id: self.id,
        })
    }
}

#[derive(sqlx::FromRow)]
struct HistoryRow {
    run_id: String,
    status: String,
    reason: Option<String>,
    at: Timestamp,
}

#[derive(sqlx::FromRow)]
struct TransitionRow {
    run_id: String,
    seq: i64,
    event: Option<String>,
    state: String,
    commands: String,
    reason: Option<String>,
    at: Timestamp,
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
            at: self.at,
            run_id: self.run_id,
        })
    }
}

/// Refuses the text PostgreSQL cannot hold in a new run's fields, naming the field.
fn refuse_nul_in_run(record: &RunRecord) -> Result<(), PortError> {
    for (field, value) in [
        ("run.id", Some(record.id.as_str())),
        ("run.project_id", record.project_id.as_deref()),
        ("run.template_id", Some(record.template_id.as_str())),
        ("run.template_version", Some(record.template_version.as_str())),
        ("run.flow_version_id", Some(record.flow_version_id.as_str())),
        ("run.content_hash", Some(record.content_hash.as_str())),
        ("run.reason", record.reason.as_deref()),
    ] {
        refuse_nul(field, value)?;
    }
    Ok(())
}

async fn insert_run(tx: &mut Transaction<'static, Postgres>, record: &RunRecord) -> Result<(), PortError> {
    let inserted = sqlx::query(
        "INSERT INTO runs (id, project_id, flow_engine, intelligence, template_id, \
         template_version, flow_version_id, content_hash, status, reason, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)",
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
    .bind(record.created_at)
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
    tx: &mut Transaction<'static, Postgres>,
    id: &str,
    status: RunStatus,
    reason: Option<&str>,
    at: Timestamp,
) -> Result<(), PortError> {
    sqlx::query("INSERT INTO run_status_history (run_id, status, reason, at) VALUES ($1, $2, $3, $4)")
        .bind(id)
        .bind(label(&status)?)
        .bind(reason)
        .bind(at)
        .execute(&mut **tx)
        .await
        .map_err(|e| db_error("record run history", e))?;
    Ok(())
}

async fn set_status_in(
    tx: &mut Transaction<'static, Postgres>,
    id: &str,
    status: RunStatus,
    reason: Option<&str>,
    at: Timestamp,
) -> Result<(), PortError> {
    sqlx::query("UPDATE runs SET status = $1, reason = $2, updated_at = $3 WHERE id = $4")
        .bind(label(&status)?)
        .bind(reason)
        .bind(at)
        .bind(id)
        .execute(&mut **tx)
        .await
        .map_err(|e| db_error("update a run", e))?;
    record_history(tx, id, status, reason, at).await
}

async fn insert_transition(
    tx: &mut Transaction<'static, Postgres>,
    transition: &RunTransition,
) -> Result<(), PortError> {
    refuse_nul("transition.reason", transition.reason.as_deref())?;
    let event = transition
        .event
        .as_ref()
        .map(|e| to_json("transition.event", e))
        .transpose()?;
    let inserted = sqlx::query(
        "INSERT INTO run_transitions (run_id, seq, event, state, commands, reason, at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(&transition.run_id)
    .bind(seq_i64(transition.seq))
    .bind(event)
    .bind(to_json("transition.state", &transition.state)?)
    .bind(to_json("transition.commands", &transition.commands)?)
    .bind(&transition.reason)
    .bind(transition.at)
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
    sqlx::query("UPDATE runs SET last_seq = $1 WHERE id = $2")
        .bind(seq_i64(transition.seq))
        .bind(&transition.run_id)
        .execute(&mut **tx)
        .await
        .map_err(|e| db_error("advance a run's sequence", e))?;
    Ok(())
}

/// Reads a run's status, reason and sequences, locking its row until the transaction ends.
async fn lock_run(
    tx: &mut Transaction<'static, Postgres>,
    id: &str,
) -> Result<(RunStatus, Option<String>, u64), PortError> {
    if id.contains('\0') {
        return Err(not_found("run", id));
    }
    let current: Option<(String, Option<String>, i64)> =
        sqlx::query_as("SELECT status, reason, last_seq FROM runs WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| db_error("read a run", e))?;
    let (status, reason, last_seq) = current.ok_or_else(|| not_found("run", id))?;
    Ok((
        parse_label("runs.status", &status)?,
        reason,
        seq_u64("runs.last_seq", last_seq)?,
    ))
}

impl PgRunLedger {
    /// Connects to the server at `url` (creating and migrating the ledger's schema).
    ///
    /// # Errors
    /// `Invalid` for a URL that does not parse, `Unavailable` when the server cannot be reached.
    pub async fn open(url: &str) -> Result<Self, PortError> {
        Ok(Self {
            pool: open_pool(url, SCHEMA, &MIGRATOR).await?,
        })
    }

    async fn begin(&self) -> Result<Transaction<'static, Postgres>, PortError> {
        self.pool
            .begin()
            .await
            .map_err(|e| db_error("begin a write transaction", e))
    }

    /// Loads the records of `rows` with their histories, read in one statement.
    async fn load(&self, rows: Vec<RunRow>) -> Result<Vec<RunRecord>, PortError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = rows.iter().map(|row| row.id.as_str()).collect();
        let history: Vec<HistoryRow> = sqlx::query_as(
            "SELECT run_id, status, reason, at FROM run_status_history \
             WHERE run_id = ANY($1) ORDER BY run_id, seq",
        )
        .bind(&ids)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("read run history", e))?;
        let mut by_run: HashMap<String, Vec<HistoryRow>> = HashMap::with_capacity(rows.len());
        for change in history {
            by_run.entry(change.run_id.clone()).or_default().push(change);
        }
        rows.into_iter()
            .map(|row| {
                let history = by_run.remove(&row.id).unwrap_or_default();
                row.into_record(history)
            })
            .collect()
    }

    async fn row(&self, id: &str) -> Result<Option<RunRow>, PortError> {
        if id.contains('\0') {
            return Ok(None);
        }
        sqlx::query_as(concat!("SELECT ", run_columns!(), " FROM runs WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| db_error("read a run", e))
    }

    async fn require_run(&self, id: &str) -> Result<(), PortError> {
        match self.row(id).await? {
            Some(_) => Ok(()),
            None => Err(not_found("run", id)),
        }
    }
}

#[async_trait]
impl RunLedger for PgRunLedger {
    async fn create(&self, record: RunRecord) -> Result<RunRecord, PortError> {
        record.check_new()?;
        refuse_nul_in_run(&record)?;
        let mut tx = self.begin().await?;
        insert_run(&mut tx, &record).await?;
        tx.commit().await.map_err(|e| db_error("commit a run", e))?;
        self.get(&record.id).await
    }

    async fn get(&self, id: &str) -> Result<RunRecord, PortError> {
        let row = self.row(id).await?.ok_or_else(|| not_found("run", id))?;
        self.load(vec![row])
            .await?
            .pop()
            .ok_or_else(|| not_found("run", id))
    }

    async fn list(&self, status: Option<RunStatus>) -> Result<Vec<RunRecord>, PortError> {
        let status = status.map(|s| label(&s)).transpose()?;
        let rows: Vec<RunRow> = sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE ($1::text IS NULL OR status = $1) ORDER BY created_at, id"
        ))
        .bind(status)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("list runs", e))?;
        self.load(rows).await
    }

    async fn set_status(
        &self,
        id: &str,
        status: RunStatus,
        reason: Option<String>,
        at: Timestamp,
    ) -> Result<RunRecord, PortError> {
        refuse_nul("run.reason", reason.as_deref())?;
        let mut tx = self.begin().await?;
        let (current_status, current_reason, _) = lock_run(&mut tx, id).await?;
        if current_status == status && current_reason == reason {
            drop(tx);
            return self.get(id).await;
        }
        if current_status.is_terminal() {
            return Err(terminal_run_conflict(id, current_status, status));
        }
        set_status_in(&mut tx, id, status, reason.as_deref(), at).await?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit a run status", e))?;
        self.get(id).await
    }

    async fn create_started(&self, record: RunRecord, first: RunTransition) -> Result<RunRecord, PortError> {
        record.check_new()?;
        first.check_first_of(&record)?;
        refuse_nul_in_run(&record)?;
        let mut tx = self.begin().await?;
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
        let mut tx = self.begin().await?;
        let (status, reason, last_seq) = lock_run(&mut tx, &id).await?;
        transition.check_follows(last_seq, status)?;
        insert_transition(&mut tx, &transition).await?;
        let next_status = transition.state.status;
        if next_status != status || transition.reason != reason {
            set_status_in(
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
        self.require_run(run_id).await?;
        let row: Option<TransitionRow> = sqlx::query_as(concat!(
            "SELECT ",
            transition_columns!(),
            " FROM run_transitions WHERE run_id = $1 ORDER BY seq DESC LIMIT 1"
        ))
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("read a run's latest transition", e))?;
        row.map(TransitionRow::into_transition).transpose()
    }

    async fn transitions(&self, run_id: &str, after_seq: u64) -> Result<Vec<RunTransition>, PortError> {
        self.require_run(run_id).await?;
        let rows: Vec<TransitionRow> = sqlx::query_as(concat!(
            "SELECT ",
            transition_columns!(),
            " FROM run_transitions WHERE run_id = $1 AND seq > $2 ORDER BY seq"
        ))
        .bind(run_id)
        .bind(seq_i64(after_seq))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("read a run's transitions", e))?;
        rows.into_iter().map(TransitionRow::into_transition).collect()
    }

    async fn mark_settled(&self, run_id: &str, seq: u64) -> Result<(), PortError> {
        let mut tx = self.begin().await?;
        let (_, _, last_seq) = lock_run(&mut tx, run_id).await?;
        check_settle(run_id, seq, last_seq)?;
        sqlx::query("UPDATE runs SET settled_seq = GREATEST(settled_seq, $1) WHERE id = $2")
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
        let rows: Vec<RunRow> = sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE last_seq > 0 AND (status NOT IN ('completed', 'failed', 'canceled') \
             OR settled_seq < last_seq) ORDER BY created_at, id"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("list unsettled runs", e))?;
        self.load(rows).await
    }

    async fn claim_published(&self, run_id: &str, upto: u64) -> Result<Option<u64>, PortError> {
        if run_id.contains('\0') {
            return Err(not_found("run", run_id));
        }
        let mut tx = self.begin().await?;
        let current: Option<(i64,)> =
            sqlx::query_as("SELECT published_seq FROM runs WHERE id = $1 FOR UPDATE")
                .bind(run_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| db_error("read a run's published mark", e))?;
        let (published,) = current.ok_or_else(|| not_found("run", run_id))?;
        let published = seq_u64("runs.published_seq", published)?;
        let Some(from) = metaforge_ports::published_claim(published, upto) else {
            return Ok(None);
        };
        sqlx::query("UPDATE runs SET published_seq = $1 WHERE id = $2")
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
    acquired_at: Timestamp,
    expires_at: Timestamp,
}

impl LeaseRow {
    /// The stored lease; the placeholder row (empty holder) an acquisition locks is no lease.
    fn into_lease(self) -> Option<Lease> {
        (!self.holder.is_empty()).then_some(Lease {
            duty: self.duty,
            holder: self.holder,
            acquired_at: self.acquired_at,
            expires_at: self.expires_at,
        })
    }
}

/// The run ledger keeps the leases on its own duties (who drives its embedded runs), so every
/// gateway on the server sees one holder.
#[async_trait]
impl LeaseStore for PgRunLedger {
    async fn acquire(
        &self,
        duty: &str,
        holder: &str,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<Lease, PortError> {
        refuse_nul("lease.duty", Some(duty))?;
        refuse_nul("lease.holder", Some(holder))?;
        let mut tx = self.begin().await?;
        // A row to lock even for the first acquisition: two processes inserting the duty at
        // once meet the primary key, and the second then waits on the first's row lock.
        sqlx::query(
            "INSERT INTO leases (duty, holder, acquired_at, expires_at) \
             VALUES ($1, '', $2, $2) ON CONFLICT (duty) DO NOTHING",
        )
        .bind(duty)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("create a lease", e))?;
        let row: Option<LeaseRow> = sqlx::query_as(
            "SELECT duty, holder, acquired_at, expires_at FROM leases WHERE duty = $1 FOR UPDATE",
        )
        .bind(duty)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| db_error("read a lease", e))?;
        let current = row.and_then(LeaseRow::into_lease);
        let Some(next) = Lease::next(current.as_ref(), duty, holder, now, ttl)? else {
            return current.ok_or_else(|| not_found("lease", duty));
        };
        sqlx::query("UPDATE leases SET holder = $1, acquired_at = $2, expires_at = $3 WHERE duty = $4")
            .bind(&next.holder)
            .bind(next.acquired_at)
            .bind(next.expires_at)
            .bind(duty)
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("store a lease", e))?;
        tx.commit().await.map_err(|e| db_error("commit a lease", e))?;
        Ok(next)
    }

    async fn release(&self, duty: &str, holder: &str, now: Timestamp) -> Result<(), PortError> {
        if duty.contains('\0') || holder.contains('\0') {
            return Ok(());
        }
        sqlx::query("UPDATE leases SET expires_at = $1 WHERE duty = $2 AND holder = $3 AND expires_at > $1")
            .bind(now)
            .bind(duty)
            .bind(holder)
            .execute(&self.pool)
            .await
            .map_err(|e| db_error("release a lease", e))?;
        Ok(())
    }

    async fn lease(&self, duty: &str) -> Result<Option<Lease>, PortError> {
        if duty.contains('\0') {
            return Ok(None);
        }
        let row: Option<LeaseRow> =
            sqlx::query_as("SELECT duty, holder, acquired_at, expires_at FROM leases WHERE duty = $1")
                .bind(duty)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| db_error("read a lease", e))?;
        Ok(row.and_then(LeaseRow::into_lease))
    }
}
