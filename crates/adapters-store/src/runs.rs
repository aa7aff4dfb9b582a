//! The run ledger (FORGE-485), one engine on SQLite and on PostgreSQL (shared by every gateway and
//! worker on the server): a run's record and status history, and the embedded engine's transition
//! log (each transition's event, state and commands, appended with compare-and-set on the
//! sequence in the same write transaction as the record's status). Each write reads the run
//! inside one write transaction (locking its row where the database needs it) and checks the one
//! rule set (`RunTransition::check_follows`, `check_settle`, terminal runs final), so two
//! processes moving one run serialise: the first appends, the second reads the new sequence and
//! gets its conflict. A terminal run is never reopened (checked in the transaction and by a
//! trigger). The leases on the ledger's own duties (who drives its embedded runs) live beside it.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use metaforge_ports::{
    Lease, LeaseStore, PortError, RunLedger, RunRecord, RunStatus, RunStatusChange, RunTransition, Timestamp,
    check_settle, terminal_run_conflict,
};
use sqlx::{Pool, Sqlite, Transaction};

use crate::codec::{label, not_found, parse_json, parse_label, seq_i64, seq_u64, to_json};
use crate::sql::{Dialect, FromRecord, Record, on_conflict, pooled, sql, sql_locking, sql_owned};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/runs");
#[cfg(feature = "postgres")]
static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres/runs");

/// The schema holding this ledger's tables and migration history on PostgreSQL.
#[cfg(feature = "postgres")]
const PG_SCHEMA: &str = "metaforge_runs";

/// The columns every read of a run selects.
const RUN_COLUMNS: &str = "id, project_id, flow_engine, intelligence, template_id, template_version, \
     flow_version_id, content_hash, status, reason, created_at, updated_at";

/// The columns every read of a transition selects.
const TRANSITION_COLUMNS: &str = "run_id, seq, event, state, commands, reason, at";

/// The run ledger over database `E`.
pub struct SqlRunLedger<E: Dialect> {
    pool: Pool<E>,
}

impl<E: Dialect> Clone for SqlRunLedger<E> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
        }
    }
}

/// The run ledger in one SQLite file.
pub type SqliteRunLedger = SqlRunLedger<Sqlite>;

/// The run ledger in the `metaforge_runs` schema of a PostgreSQL database.
#[cfg(feature = "postgres")]
pub type PgRunLedger = SqlRunLedger<sqlx::Postgres>;

impl SqlRunLedger<Sqlite> {
    /// Opens (creating and migrating) the ledger at `path`.
    pub async fn open(path: &Path) -> Result<Self, PortError> {
        Ok(Self {
            pool: crate::sqlite::open_pool(path, &MIGRATOR).await?,
        })
    }
}

#[cfg(feature = "postgres")]
impl SqlRunLedger<sqlx::Postgres> {
    /// Connects to the server at `url` (creating and migrating the ledger's schema).
    ///
    /// # Errors
    /// `Invalid` for a URL that does not parse, `Unavailable` when the server cannot be reached.
    pub async fn open(url: &str) -> Result<Self, PortError> {
        Ok(Self {
            pool: crate::postgres::open_pool(url, PG_SCHEMA, &PG_MIGRATOR).await?,
        })
    }
}

/// A run's record without its history.
struct RunRow(RunRecord);

impl<E: Dialect> FromRecord<E> for RunRow {
    fn from_record(row: &Record<'_, E>) -> Result<Self, PortError> {
        let flow_engine: String = row.get("flow_engine")?;
        let intelligence: String = row.get("intelligence")?;
        let status: String = row.get("status")?;
        Ok(Self(RunRecord {
            id: row.get("id")?,
            project_id: row.get("project_id")?,
            flow_engine: parse_label("runs.flow_engine", &flow_engine)?,
            intelligence: parse_label("runs.intelligence", &intelligence)?,
            template_id: row.get("template_id")?,
            template_version: row.get("template_version")?,
            flow_version_id: row.get("flow_version_id")?,
            content_hash: row.get("content_hash")?,
            status: parse_label("runs.status", &status)?,
            reason: row.get("reason")?,
            history: Vec::new(),
            created_at: row.time("created_at")?,
            updated_at: row.time("updated_at")?,
        }))
    }
}

/// One entry of a run's status history.
struct HistoryRow {
    run_id: String,
    change: RunStatusChange,
}

impl<E: Dialect> FromRecord<E> for HistoryRow {
    fn from_record(row: &Record<'_, E>) -> Result<Self, PortError> {
        let status: String = row.get("status")?;
        Ok(Self {
            run_id: row.get("run_id")?,
            change: RunStatusChange {
                status: parse_label("run_status_history.status", &status)?,
                reason: row.get("reason")?,
                at: row.time("at")?,
            },
        })
    }
}

impl<E: Dialect> FromRecord<E> for RunTransition {
    fn from_record(row: &Record<'_, E>) -> Result<Self, PortError> {
        let seq: i64 = row.get("seq")?;
        let event: Option<String> = row.get("event")?;
        let state: String = row.get("state")?;
        let commands: String = row.get("commands")?;
        Ok(Self {
            run_id: row.get("run_id")?,
            seq: seq_u64("run_transitions.seq", seq)?,
            event: event
                .as_deref()
                .map(|e| parse_json("run_transitions.event", e))
                .transpose()?,
            state: parse_json("run_transitions.state", &state)?,
            commands: parse_json("run_transitions.commands", &commands)?,
            reason: row.get("reason")?,
            at: row.time("at")?,
        })
    }
}

/// A run's status, reason and sequences as a write transaction reads them.
struct RunHead {
    status: String,
    reason: Option<String>,
    last_seq: i64,
    published_seq: i64,
}

impl<E: Dialect> FromRecord<E> for RunHead {
    fn from_record(row: &Record<'_, E>) -> Result<Self, PortError> {
        Ok(Self {
            status: row.get("status")?,
            reason: row.get("reason")?,
            last_seq: row.get("last_seq")?,
            published_seq: row.get("published_seq")?,
        })
    }
}

/// Refuses the text the database cannot hold in a new run's fields, naming the field.
fn check_run_text<E: Dialect>(record: &RunRecord) -> Result<(), PortError> {
    for (field, value) in [
        ("run.id", Some(record.id.as_str())),
        ("run.project_id", record.project_id.as_deref()),
        ("run.template_id", Some(record.template_id.as_str())),
        ("run.template_version", Some(record.template_version.as_str())),
        ("run.flow_version_id", Some(record.flow_version_id.as_str())),
        ("run.content_hash", Some(record.content_hash.as_str())),
        ("run.reason", record.reason.as_deref()),
    ] {
        E::check_text(field, value)?;
    }
    Ok(())
}

async fn insert_run<E: Dialect>(
    tx: &mut Transaction<'static, E>,
    record: &RunRecord,
) -> Result<(), PortError> {
    let inserted = sql(
        "INSERT INTO runs (id, project_id, flow_engine, intelligence, template_id, \
         template_version, flow_version_id, content_hash, status, reason, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)",
        "create a run",
    )
    .bind(record.id.clone())
    .bind(record.project_id.clone())
    .bind(label(&record.flow_engine)?)
    .bind(label(&record.intelligence)?)
    .bind(record.template_id.clone())
    .bind(record.template_version.clone())
    .bind(record.flow_version_id.clone())
    .bind(record.content_hash.clone())
    .bind(label(&record.status)?)
    .bind(record.reason.clone())
    .bind_time(record.created_at)
    .execute(tx)
    .await;
    inserted.map_err(|err| on_conflict(err, || format!("run {} already exists", record.id)))?;
    record_history(
        tx,
        &record.id,
        Entered {
            status: record.status,
            reason: record.reason.as_deref(),
            at: record.created_at,
        },
    )
    .await
}

/// A status a run entered, as one history row and the run's own columns record it.
#[derive(Clone, Copy)]
struct Entered<'a> {
    status: RunStatus,
    reason: Option<&'a str>,
    at: Timestamp,
}

async fn record_history<E: Dialect>(
    tx: &mut Transaction<'static, E>,
    id: &str,
    entered: Entered<'_>,
) -> Result<(), PortError> {
    sql(
        "INSERT INTO run_status_history (run_id, status, reason, at) VALUES ($1, $2, $3, $4)",
        "record run history",
    )
    .bind(id.to_owned())
    .bind(label(&entered.status)?)
    .bind(entered.reason.map(str::to_owned))
    .bind_time(entered.at)
    .execute(tx)
    .await?;
    Ok(())
}

/// Moves the run to the status `entered` and records it in the run's history.
async fn set_status_in<E: Dialect>(
    tx: &mut Transaction<'static, E>,
    id: &str,
    entered: Entered<'_>,
) -> Result<(), PortError> {
    sql(
        "UPDATE runs SET status = $1, reason = $2, updated_at = $3 WHERE id = $4",
        "update a run",
    )
    .bind(label(&entered.status)?)
    .bind(entered.reason.map(str::to_owned))
    .bind_time(entered.at)
    .bind(id.to_owned())
    .execute(tx)
    .await?;
    record_history(tx, id, entered).await
}

async fn insert_transition<E: Dialect>(
    tx: &mut Transaction<'static, E>,
    transition: &RunTransition,
) -> Result<(), PortError> {
    E::check_text("transition.reason", transition.reason.as_deref())?;
    let event = transition
        .event
        .as_ref()
        .map(|e| to_json("transition.event", e))
        .transpose()?;
    let inserted = sql(
        "INSERT INTO run_transitions (run_id, seq, event, state, commands, reason, at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        "append a run transition",
    )
    .bind(transition.run_id.clone())
    .bind(seq_i64(transition.seq))
    .bind(event)
    .bind(to_json("transition.state", &transition.state)?)
    .bind(to_json("transition.commands", &transition.commands)?)
    .bind(transition.reason.clone())
    .bind_time(transition.at)
    .execute(tx)
    .await;
    inserted.map_err(|err| {
        on_conflict(err, || {
            format!(
                "run {} already has transition {} (another writer moved the run)",
                transition.run_id, transition.seq
            )
        })
    })?;
    sql(
        "UPDATE runs SET last_seq = $1 WHERE id = $2",
        "advance a run's sequence",
    )
    .bind(seq_i64(transition.seq))
    .bind(transition.run_id.clone())
    .execute(tx)
    .await?;
    Ok(())
}

/// Reads a run's status, reason and sequences inside `tx`, locking its row until the
/// transaction ends.
async fn lock_run<E: Dialect>(tx: &mut Transaction<'static, E>, id: &str) -> Result<RunHead, PortError> {
    if !E::can_hold(id) {
        return Err(not_found("run", id));
    }
    let head: Option<RunHead> = sql_locking(
        "SELECT status, reason, last_seq, published_seq FROM runs WHERE id = $1",
        "read a run",
    )
    .bind(id.to_owned())
    .fetch_optional(tx)
    .await?;
    head.ok_or_else(|| not_found("run", id))
}

impl RunHead {
    fn status(&self) -> Result<RunStatus, PortError> {
        parse_label("runs.status", &self.status)
    }

    fn last_seq(&self) -> Result<u64, PortError> {
        seq_u64("runs.last_seq", self.last_seq)
    }
}

impl<E: Dialect> SqlRunLedger<E> {
    /// The records of `rows` with their histories, read in one statement.
    async fn load(&self, rows: Vec<RunRow>) -> Result<Vec<RunRecord>, PortError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = rows.iter().map(|row| row.0.id.clone()).collect();
        let history: Vec<HistoryRow> = sql_owned(
            format!(
                "SELECT run_id, status, reason, at FROM run_status_history \
                 WHERE {} ORDER BY run_id, seq",
                E::one_of("run_id", 1)
            ),
            "read run history",
        )
        .bind_texts(ids)?
        .fetch_all(&mut pooled(&self.pool).await?)
        .await?;
        let mut by_run: HashMap<String, Vec<RunStatusChange>> = HashMap::with_capacity(rows.len());
        for entry in history {
            by_run.entry(entry.run_id).or_default().push(entry.change);
        }
        Ok(rows
            .into_iter()
            .map(|RunRow(mut record)| {
                record.history = by_run.remove(&record.id).unwrap_or_default();
                record
            })
            .collect())
    }

    async fn row(&self, id: &str) -> Result<Option<RunRow>, PortError> {
        if !E::can_hold(id) {
            return Ok(None);
        }
        sql_owned(
            format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"),
            "read a run",
        )
        .bind(id.to_owned())
        .fetch_optional(&mut pooled(&self.pool).await?)
        .await
    }

    async fn require_run(&self, id: &str) -> Result<(), PortError> {
        match self.row(id).await? {
            Some(_) => Ok(()),
            None => Err(not_found("run", id)),
        }
    }
}

#[async_trait]
impl<E: Dialect> RunLedger for SqlRunLedger<E> {
    async fn create(&self, record: RunRecord) -> Result<RunRecord, PortError> {
        record.check_new()?;
        check_run_text::<E>(&record)?;
        let mut tx = E::begin_write(&self.pool).await?;
        insert_run(&mut tx, &record).await?;
        tx.commit().await.map_err(|e| E::db_error("commit a run", e))?;
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
        let rows: Vec<RunRow> = sql_owned(
            format!(
                "SELECT {RUN_COLUMNS} FROM runs \
                 WHERE (CAST($1 AS TEXT) IS NULL OR status = $1) ORDER BY created_at, id"
            ),
            "list runs",
        )
        .bind(status)
        .fetch_all(&mut pooled(&self.pool).await?)
        .await?;
        self.load(rows).await
    }

    async fn set_status(
        &self,
        id: &str,
        status: RunStatus,
        reason: Option<String>,
        at: Timestamp,
    ) -> Result<RunRecord, PortError> {
        E::check_text("run.reason", reason.as_deref())?;
        let mut tx = E::begin_write(&self.pool).await?;
        let head = lock_run(&mut tx, id).await?;
        let current_status = head.status()?;
        if current_status == status && head.reason == reason {
            drop(tx);
            return self.get(id).await;
        }
        if current_status.is_terminal() {
            return Err(terminal_run_conflict(id, current_status, status));
        }
        let entered = Entered {
            status,
            reason: reason.as_deref(),
            at,
        };
        set_status_in(&mut tx, id, entered).await?;
        tx.commit()
            .await
            .map_err(|e| E::db_error("commit a run status", e))?;
        self.get(id).await
    }

    async fn create_started(&self, record: RunRecord, first: RunTransition) -> Result<RunRecord, PortError> {
        record.check_new()?;
        first.check_first_of(&record)?;
        check_run_text::<E>(&record)?;
        let mut tx = E::begin_write(&self.pool).await?;
        insert_run(&mut tx, &record).await?;
        insert_transition(&mut tx, &first).await?;
        tx.commit()
            .await
            .map_err(|e| E::db_error("commit a started run", e))?;
        self.get(&record.id).await
    }

    async fn append_transition(&self, transition: RunTransition) -> Result<RunRecord, PortError> {
        transition.check()?;
        let id = transition.run_id.clone();
        let mut tx = E::begin_write(&self.pool).await?;
        let head = lock_run(&mut tx, &id).await?;
        let status = head.status()?;
        transition.check_follows(head.last_seq()?, status)?;
        insert_transition(&mut tx, &transition).await?;
        let next_status = transition.state.status;
        if next_status != status || transition.reason != head.reason {
            let entered = Entered {
                status: next_status,
                reason: transition.reason.as_deref(),
                at: transition.at,
            };
            set_status_in(&mut tx, &id, entered).await?;
        }
        tx.commit()
            .await
            .map_err(|e| E::db_error("commit a run transition", e))?;
        self.get(&id).await
    }

    async fn latest_transition(&self, run_id: &str) -> Result<Option<RunTransition>, PortError> {
        self.require_run(run_id).await?;
        sql_owned(
            format!(
                "SELECT {TRANSITION_COLUMNS} FROM run_transitions \
                 WHERE run_id = $1 ORDER BY seq DESC LIMIT 1"
            ),
            "read a run's latest transition",
        )
        .bind(run_id.to_owned())
        .fetch_optional(&mut pooled(&self.pool).await?)
        .await
    }

    async fn transitions(&self, run_id: &str, after_seq: u64) -> Result<Vec<RunTransition>, PortError> {
        self.require_run(run_id).await?;
        sql_owned(
            format!(
                "SELECT {TRANSITION_COLUMNS} FROM run_transitions \
                 WHERE run_id = $1 AND seq > $2 ORDER BY seq"
            ),
            "read a run's transitions",
        )
        .bind(run_id.to_owned())
        .bind(seq_i64(after_seq))
        .fetch_all(&mut pooled(&self.pool).await?)
        .await
    }

    async fn mark_settled(&self, run_id: &str, seq: u64) -> Result<(), PortError> {
        let mut tx = E::begin_write(&self.pool).await?;
        let head = lock_run(&mut tx, run_id).await?;
        check_settle(run_id, seq, head.last_seq()?)?;
        sql(
            "UPDATE runs SET settled_seq = CASE WHEN settled_seq < $1 THEN $1 ELSE settled_seq END \
             WHERE id = $2",
            "settle a run transition",
        )
        .bind(seq_i64(seq))
        .bind(run_id.to_owned())
        .execute(&mut tx)
        .await?;
        tx.commit()
            .await
            .map_err(|e| E::db_error("commit a settled transition", e))?;
        Ok(())
    }

    async fn unsettled(&self) -> Result<Vec<RunRecord>, PortError> {
        let rows: Vec<RunRow> = sql_owned(
            format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE last_seq > 0 \
                 AND (status NOT IN ('completed', 'failed', 'canceled') OR settled_seq < last_seq) \
                 ORDER BY created_at, id"
            ),
            "list unsettled runs",
        )
        .fetch_all(&mut pooled(&self.pool).await?)
        .await?;
        self.load(rows).await
    }

    async fn claim_published(&self, run_id: &str, upto: u64) -> Result<Option<u64>, PortError> {
        let mut tx = E::begin_write(&self.pool).await?;
        let head = lock_run(&mut tx, run_id).await?;
        let published = seq_u64("runs.published_seq", head.published_seq)?;
        let Some(from) = metaforge_ports::published_claim(published, upto) else {
            return Ok(None);
        };
        sql(
            "UPDATE runs SET published_seq = $1 WHERE id = $2",
            "move a run's published mark",
        )
        .bind(seq_i64(upto))
        .bind(run_id.to_owned())
        .execute(&mut tx)
        .await?;
        tx.commit()
            .await
            .map_err(|e| E::db_error("commit a run's published mark", e))?;
        Ok(Some(from))
    }
}

/// A stored lease; the placeholder row (empty holder) an acquisition locks is no lease.
struct LeaseRow(Option<Lease>);

impl<E: Dialect> FromRecord<E> for LeaseRow {
    fn from_record(row: &Record<'_, E>) -> Result<Self, PortError> {
        let holder: String = row.get("holder")?;
        if holder.is_empty() {
            return Ok(Self(None));
        }
        Ok(Self(Some(Lease {
            duty: row.get("duty")?,
            holder,
            acquired_at: row.time("acquired_at")?,
            expires_at: row.time("expires_at")?,
        })))
    }
}

/// The run ledger keeps the leases on its own duties (who drives its embedded runs), so every
/// process on the ledger sees one holder.
#[async_trait]
impl<E: Dialect> LeaseStore for SqlRunLedger<E> {
    async fn acquire(
        &self,
        duty: &str,
        holder: &str,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<Lease, PortError> {
        E::check_text("lease.duty", Some(duty))?;
        E::check_text("lease.holder", Some(holder))?;
        let mut tx = E::begin_write(&self.pool).await?;
        // A row to lock even for the first acquisition: two processes inserting the duty at
        // once meet the primary key, and the second then waits on the first's row lock.
        sql(
            "INSERT INTO leases (duty, holder, acquired_at, expires_at) \
             VALUES ($1, '', $2, $2) ON CONFLICT (duty) DO NOTHING",
            "create a lease",
        )
        .bind(duty.to_owned())
        .bind_time(now)
        .execute(&mut tx)
        .await?;
        let row: Option<LeaseRow> = sql_locking(
            "SELECT duty, holder, acquired_at, expires_at FROM leases WHERE duty = $1",
            "read a lease",
        )
        .bind(duty.to_owned())
        .fetch_optional(&mut tx)
        .await?;
        let current = row.and_then(|row| row.0);
        let Some(next) = Lease::next(current.as_ref(), duty, holder, now, ttl)? else {
            return current.ok_or_else(|| not_found("lease", duty));
        };
        sql(
            "UPDATE leases SET holder = $1, acquired_at = $2, expires_at = $3 WHERE duty = $4",
            "store a lease",
        )
        .bind(next.holder.clone())
        .bind_time(next.acquired_at)
        .bind_time(next.expires_at)
        .bind(duty.to_owned())
        .execute(&mut tx)
        .await?;
        tx.commit().await.map_err(|e| E::db_error("commit a lease", e))?;
        Ok(next)
    }

    async fn release(&self, duty: &str, holder: &str, now: Timestamp) -> Result<(), PortError> {
        if !E::can_hold(duty) || !E::can_hold(holder) {
            return Ok(());
        }
        sql(
            "UPDATE leases SET expires_at = $1 WHERE duty = $2 AND holder = $3 AND expires_at > $1",
            "release a lease",
        )
        .bind_time(now)
        .bind(duty.to_owned())
        .bind(holder.to_owned())
        .execute(&mut pooled(&self.pool).await?)
        .await?;
        Ok(())
    }

    async fn lease(&self, duty: &str) -> Result<Option<Lease>, PortError> {
        if !E::can_hold(duty) {
            return Ok(None);
        }
        let row: Option<LeaseRow> = sql(
            "SELECT duty, holder, acquired_at, expires_at FROM leases WHERE duty = $1",
            "read a lease",
        )
        .bind(duty.to_owned())
        .fetch_optional(&mut pooled(&self.pool).await?)
        .await?;
        Ok(row.and_then(|row| row.0))
    }
}
