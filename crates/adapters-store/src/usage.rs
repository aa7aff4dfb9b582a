//! The usage store on SQLite (FORGE-476): one row per model call, unknown kept as NULL.
//! Totals are the domain's job; this store only records and reads events back.

use std::path::Path;

use async_trait::async_trait;
use metaforge_ports::{PortError, PortErrorKind, Timestamp, UsageEvent, UsageStore};
use sqlx::SqlitePool;

use crate::sqlite::{db_error, label, open_pool, parse_label, parse_ts, ts};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/usage");

/// The usage store in one SQLite file (`llm_usage.db`), shared by the gateway and the worker.
#[derive(Clone)]
pub struct SqliteUsageStore {
    pool: SqlitePool,
}

#[derive(sqlx::FromRow)]
struct UsageRow {
    run_id: Option<String>,
    phase: Option<String>,
    role: Option<String>,
    caller: Option<String>,
    provider: String,
    model: String,
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    cached_input_tokens: Option<i64>,
    cache_write_tokens: Option<i64>,
    reasoning_tokens: Option<i64>,
    cost_usd: Option<f64>,
    billing: String,
    at: String,
}

fn count_in(field: &str, v: Option<u64>) -> Result<Option<i64>, PortError> {
    v.map(|n| {
        i64::try_from(n).map_err(|_| {
            PortError::new(
                PortErrorKind::Invalid,
                format!("usage.{field}: {n} is too large to store"),
            )
        })
    })
    .transpose()
}

fn count_out(field: &str, v: Option<i64>) -> Result<Option<u64>, PortError> {
    v.map(|n| {
        u64::try_from(n).map_err(|_| {
            PortError::new(
                PortErrorKind::Corrupt,
                format!("stored usage_events.{field} {n} is negative"),
            )
        })
    })
    .transpose()
}

/// Refuses an event that cannot be recorded, naming the field.
pub(crate) fn validate_usage(event: &UsageEvent) -> Result<Timestamp, PortError> {
    let invalid =
        |field: &str, why: &str| PortError::new(PortErrorKind::Invalid, format!("usage.{field}: {why}"));
    if event.provider.trim().is_empty() {
        return Err(invalid("provider", "must not be empty"));
    }
    if event.model.trim().is_empty() {
        return Err(invalid("model", "must not be empty"));
    }
    if event.cost_usd.is_some_and(|c| !c.is_finite() || c < 0.0) {
        return Err(invalid(
            "cost_usd",
            "must be a finite, non-negative number or null",
        ));
    }
    event
        .at
        .ok_or_else(|| invalid("at", "must be set by the recorder"))
}

impl UsageRow {
    fn into_event(self) -> Result<UsageEvent, PortError> {
        Ok(UsageEvent {
            run_id: self.run_id,
            phase: self.phase,
            role: self.role,
            caller: self.caller,
            provider: self.provider,
            model: self.model,
            prompt_tokens: count_out("prompt_tokens", self.prompt_tokens)?,
            completion_tokens: count_out("completion_tokens", self.completion_tokens)?,
            cached_input_tokens: count_out("cached_input_tokens", self.cached_input_tokens)?,
            cache_write_tokens: count_out("cache_write_tokens", self.cache_write_tokens)?,
            reasoning_tokens: count_out("reasoning_tokens", self.reasoning_tokens)?,
            cost_usd: self.cost_usd,
            billing: parse_label("usage_events.billing", &self.billing)?,
            at: Some(parse_ts("usage_events.at", &self.at)?),
        })
    }
}

impl SqliteUsageStore {
    /// Opens (creating and migrating) the store at `path`.
    pub async fn open(path: &Path) -> Result<Self, PortError> {
        Ok(Self {
            pool: open_pool(path, &MIGRATOR).await?,
        })
    }
}

/// Inserts one validated event inside `tx`.
/// Rows per INSERT statement: 14 parameters a row keeps one statement far below SQLite's limit
/// of 32,766 bound parameters.
const ROWS_PER_STATEMENT: usize = 256;

/// One event's column values, every count checked before anything is sent.
struct UsageColumns<'a> {
    event: &'a UsageEvent,
    counts: [Option<i64>; 5],
    billing: String,
    at: String,
}

impl<'a> UsageColumns<'a> {
    fn of(event: &'a UsageEvent, at: Timestamp) -> Result<Self, PortError> {
        Ok(Self {
            event,
            counts: [
                count_in("prompt_tokens", event.prompt_tokens)?,
                count_in("completion_tokens", event.completion_tokens)?,
                count_in("cached_input_tokens", event.cached_input_tokens)?,
                count_in("cache_write_tokens", event.cache_write_tokens)?,
                count_in("reasoning_tokens", event.reasoning_tokens)?,
            ],
            billing: label(&event.billing)?,
            at: ts(at),
        })
    }
}

/// One multi-row INSERT of `rows`: a single statement is atomic in SQLite, and it crosses to
/// sqlx's connection thread once, however many events it carries (the group commit's point).
fn insert_rows(rows: &[UsageColumns<'_>]) -> sqlx::QueryBuilder<sqlx::Sqlite> {
    let mut insert = sqlx::QueryBuilder::new(
        "INSERT INTO usage_events (run_id, phase, role, caller, provider, model, \
         prompt_tokens, completion_tokens, cached_input_tokens, cache_write_tokens, \
         reasoning_tokens, cost_usd, billing, at) ",
    );
    insert.push_values(rows, |mut row, columns| {
        let event = columns.event;
        row.push_bind(event.run_id.clone())
            .push_bind(event.phase.clone())
            .push_bind(event.role.clone())
            .push_bind(event.caller.clone())
            .push_bind(event.provider.clone())
            .push_bind(event.model.clone());
        for count in columns.counts {
            row.push_bind(count);
        }
        row.push_bind(event.cost_usd)
            .push_bind(columns.billing.clone())
            .push_bind(columns.at.clone());
    });
    insert
}

#[async_trait]
impl UsageStore for SqliteUsageStore {
    async fn record(&self, event: UsageEvent) -> Result<(), PortError> {
        self.record_batch(std::slice::from_ref(&event)).await
    }

    /// The whole batch or nothing: one statement when it fits, else one transaction of
    /// statements of [`ROWS_PER_STATEMENT`] rows.
    async fn record_batch(&self, events: &[UsageEvent]) -> Result<(), PortError> {
        let rows = events
            .iter()
            .map(|event| validate_usage(event).and_then(|at| UsageColumns::of(event, at)))
            .collect::<Result<Vec<_>, _>>()?;
        if rows.is_empty() {
            return Ok(());
        }
        if rows.len() <= ROWS_PER_STATEMENT {
            insert_rows(&rows)
                .build()
                .execute(&self.pool)
                .await
                .map_err(|e| db_error("record a usage batch", e))?;
            return Ok(());
        }
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| db_error("begin a usage batch", e))?;
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            insert_rows(chunk)
                .build()
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error("record a usage batch", e))?;
        }
        tx.commit().await.map_err(|e| db_error("commit a usage batch", e))
    }

    async fn events_for_run(&self, run_id: &str) -> Result<Vec<UsageEvent>, PortError> {
        let rows: Vec<UsageRow> = sqlx::query_as(
            "SELECT run_id, phase, role, caller, provider, model, prompt_tokens, \
             completion_tokens, cached_input_tokens, cache_write_tokens, reasoning_tokens, \
             cost_usd, billing, at FROM usage_events WHERE run_id = ? ORDER BY seq",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("read a run's usage", e))?;
        rows.into_iter().map(UsageRow::into_event).collect()
    }

    async fn events_since(&self, since: Timestamp) -> Result<Vec<UsageEvent>, PortError> {
        let rows: Vec<UsageRow> = sqlx::query_as(
            "SELECT run_id, phase, role, caller, provider, model, prompt_tokens, \
             completion_tokens, cached_input_tokens, cache_write_tokens, reasoning_tokens, \
             cost_usd, billing, at FROM usage_events WHERE at >= ? ORDER BY seq",
        )
        .bind(ts(since))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("read usage in a window", e))?;
        rows.into_iter().map(UsageRow::into_event).collect()
    }
}
