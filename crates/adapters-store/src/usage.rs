//! The usage store (FORGE-476), one engine on SQLite (shared by the gateway and the worker) and
//! on PostgreSQL (shared by every gateway and worker on the server): one row per model call,
//! unknown kept as NULL. Totals are the domain's job; this store only records and reads events
//! back.
//!
//! A batch (the gateway's usage writer commits many calls' events at once) is written the way
//! each database writes many rows fastest ([`RecordsUsage`]): multi-row `INSERT`s on SQLite, one
//! `INSERT … SELECT FROM UNNEST(…)` of fourteen column arrays on PostgreSQL. Either way the batch
//! is all or nothing, and its rows take their `seq` in the batch's order, so a run's events read
//! back as they were recorded.

use std::future::Future;
use std::path::Path;

use async_trait::async_trait;
use metaforge_ports::{PortError, PortErrorKind, Timestamp, UsageEvent, UsageStore};
use sqlx::{Pool, Sqlite};

use crate::codec::{label, parse_label};
use crate::sql::{Dialect, FromRecord, Record, pooled, sql};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/usage");
#[cfg(feature = "postgres")]
static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres/usage");

/// The schema holding this store's table and migration history on PostgreSQL.
#[cfg(feature = "postgres")]
const PG_SCHEMA: &str = "metaforge_usage";

/// The columns every statement writes and every read selects, in this order.
const USAGE_COLUMNS: &str = "run_id, phase, role, caller, provider, model, prompt_tokens, \
     completion_tokens, cached_input_tokens, cache_write_tokens, reasoning_tokens, cost_usd, billing, at";

/// How a database writes a checked batch of events, all or nothing, in the batch's order.
pub trait RecordsUsage: Dialect {
    /// Inserts `rows` (never empty).
    fn insert_usage(
        pool: &Pool<Self>,
        rows: Vec<CheckedUsage>,
    ) -> impl Future<Output = Result<(), PortError>> + Send;
}

/// The usage store over database `E`.
pub struct SqlUsageStore<E: RecordsUsage> {
    pool: Pool<E>,
}

impl<E: RecordsUsage> Clone for SqlUsageStore<E> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
        }
    }
}

/// The usage store in one SQLite file (`llm_usage.db`), shared by the gateway and the worker.
pub type SqliteUsageStore = SqlUsageStore<Sqlite>;

/// The usage store in the `metaforge_usage` schema of a PostgreSQL database.
#[cfg(feature = "postgres")]
pub type PgUsageStore = SqlUsageStore<sqlx::Postgres>;

impl SqlUsageStore<Sqlite> {
    /// Opens (creating and migrating) the store at `path`.
    pub async fn open(path: &Path) -> Result<Self, PortError> {
        Ok(Self {
            pool: crate::sqlite::open_pool(path, &MIGRATOR).await?,
        })
    }
}

#[cfg(feature = "postgres")]
impl SqlUsageStore<sqlx::Postgres> {
    /// Connects to the server at `url` (creating and migrating the store's schema).
    ///
    /// # Errors
    /// `Invalid` for a URL that does not parse, `Unavailable` when the server cannot be reached.
    pub async fn open(url: &str) -> Result<Self, PortError> {
        Ok(Self {
            pool: crate::postgres::open_pool(url, PG_SCHEMA, &PG_MIGRATOR).await?,
        })
    }
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
fn validate_usage(event: &UsageEvent) -> Result<Timestamp, PortError> {
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

/// One event's column values, every field checked before anything is sent.
pub struct CheckedUsage {
    run_id: Option<String>,
    phase: Option<String>,
    role: Option<String>,
    caller: Option<String>,
    provider: String,
    model: String,
    /// Prompt, completion, cached-input, cache-write and reasoning tokens, in column order.
    counts: [Option<i64>; 5],
    cost_usd: Option<f64>,
    billing: String,
    at: Timestamp,
}

impl CheckedUsage {
    fn of<E: Dialect>(event: &UsageEvent) -> Result<Self, PortError> {
        let at = validate_usage(event)?;
        for (field, value) in [
            ("run_id", event.run_id.as_deref()),
            ("phase", event.phase.as_deref()),
            ("role", event.role.as_deref()),
            ("caller", event.caller.as_deref()),
            ("provider", Some(event.provider.as_str())),
            ("model", Some(event.model.as_str())),
        ] {
            E::check_text(&format!("usage.{field}"), value)?;
        }
        Ok(Self {
            run_id: event.run_id.clone(),
            phase: event.phase.clone(),
            role: event.role.clone(),
            caller: event.caller.clone(),
            provider: event.provider.clone(),
            model: event.model.clone(),
            counts: [
                count_in("prompt_tokens", event.prompt_tokens)?,
                count_in("completion_tokens", event.completion_tokens)?,
                count_in("cached_input_tokens", event.cached_input_tokens)?,
                count_in("cache_write_tokens", event.cache_write_tokens)?,
                count_in("reasoning_tokens", event.reasoning_tokens)?,
            ],
            cost_usd: event.cost_usd,
            billing: label(&event.billing)?,
            at,
        })
    }
}

impl<E: Dialect> FromRecord<E> for UsageEvent {
    fn from_record(row: &Record<'_, E>) -> Result<Self, PortError> {
        let billing: String = row.get("billing")?;
        Ok(Self {
            run_id: row.get("run_id")?,
            phase: row.get("phase")?,
            role: row.get("role")?,
            caller: row.get("caller")?,
            provider: row.get("provider")?,
            model: row.get("model")?,
            prompt_tokens: count_out("prompt_tokens", row.get("prompt_tokens")?)?,
            completion_tokens: count_out("completion_tokens", row.get("completion_tokens")?)?,
            cached_input_tokens: count_out("cached_input_tokens", row.get("cached_input_tokens")?)?,
            cache_write_tokens: count_out("cache_write_tokens", row.get("cache_write_tokens")?)?,
            reasoning_tokens: count_out("reasoning_tokens", row.get("reasoning_tokens")?)?,
            cost_usd: row.get("cost_usd")?,
            billing: parse_label("usage_events.billing", &billing)?,
            at: Some(row.time("at")?),
        })
    }
}

/// Rows per SQLite INSERT statement: 14 parameters a row keeps one statement far below SQLite's
/// limit of 32,766 bound parameters.
const ROWS_PER_STATEMENT: usize = 256;

/// One multi-row INSERT of `rows`: a single statement is atomic in SQLite, and it crosses to
/// sqlx's connection thread once, however many events it carries (the group commit's point).
fn sqlite_insert(rows: &[CheckedUsage]) -> sqlx::QueryBuilder<Sqlite> {
    let mut insert = sqlx::QueryBuilder::new(format!("INSERT INTO usage_events ({USAGE_COLUMNS}) "));
    insert.push_values(rows, |mut row, usage| {
        row.push_bind(usage.run_id.clone())
            .push_bind(usage.phase.clone())
            .push_bind(usage.role.clone())
            .push_bind(usage.caller.clone())
            .push_bind(usage.provider.clone())
            .push_bind(usage.model.clone());
        for count in usage.counts {
            row.push_bind(count);
        }
        row.push_bind(usage.cost_usd)
            .push_bind(usage.billing.clone())
            .push_bind(crate::codec::ts(usage.at));
    });
    insert
}

/// SQLite: one statement when the batch fits, else one transaction of statements of
/// [`ROWS_PER_STATEMENT`] rows.
impl RecordsUsage for Sqlite {
    async fn insert_usage(pool: &Pool<Self>, rows: Vec<CheckedUsage>) -> Result<(), PortError> {
        use crate::sqlite::db_error;
        if rows.len() <= ROWS_PER_STATEMENT {
            sqlite_insert(&rows)
                .build()
                .execute(pool)
                .await
                .map_err(|e| db_error("record a usage batch", e))?;
            return Ok(());
        }
        let mut tx = pool
            .begin()
            .await
            .map_err(|e| db_error("begin a usage batch", e))?;
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            sqlite_insert(chunk)
                .build()
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error("record a usage batch", e))?;
        }
        tx.commit().await.map_err(|e| db_error("commit a usage batch", e))
    }
}

/// PostgreSQL: one statement of fourteen column arrays, whatever the batch's size (one round
/// trip, no bound-parameter limit to chunk around); `ORDER BY ord` hands the rows to the
/// identity column in the batch's order.
#[cfg(feature = "postgres")]
impl RecordsUsage for sqlx::Postgres {
    async fn insert_usage(pool: &Pool<Self>, rows: Vec<CheckedUsage>) -> Result<(), PortError> {
        let mut columns = UsageArrays::default();
        for row in rows {
            columns.push(row);
        }
        sqlx::query(
            "INSERT INTO usage_events (run_id, phase, role, caller, provider, model, \
             prompt_tokens, completion_tokens, cached_input_tokens, cache_write_tokens, \
             reasoning_tokens, cost_usd, billing, at) \
             SELECT run_id, phase, role, caller, provider, model, prompt_tokens, \
             completion_tokens, cached_input_tokens, cache_write_tokens, reasoning_tokens, \
             cost_usd, billing, at \
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
             $7::int8[], $8::int8[], $9::int8[], $10::int8[], $11::int8[], $12::float8[], \
             $13::text[], $14::timestamptz[]) WITH ORDINALITY AS batch (run_id, phase, role, \
             caller, provider, model, prompt_tokens, completion_tokens, cached_input_tokens, \
             cache_write_tokens, reasoning_tokens, cost_usd, billing, at, ord) \
             ORDER BY ord",
        )
        .bind(columns.run_id)
        .bind(columns.phase)
        .bind(columns.role)
        .bind(columns.caller)
        .bind(columns.provider)
        .bind(columns.model)
        .bind(columns.prompt_tokens)
        .bind(columns.completion_tokens)
        .bind(columns.cached_input_tokens)
        .bind(columns.cache_write_tokens)
        .bind(columns.reasoning_tokens)
        .bind(columns.cost_usd)
        .bind(columns.billing)
        .bind(columns.at)
        .execute(pool)
        .await
        .map_err(|e| crate::postgres::db_error("record a usage batch", e))?;
        Ok(())
    }
}

/// A batch as one array per column.
#[cfg(feature = "postgres")]
#[derive(Default)]
struct UsageArrays {
    run_id: Vec<Option<String>>,
    phase: Vec<Option<String>>,
    role: Vec<Option<String>>,
    caller: Vec<Option<String>>,
    provider: Vec<String>,
    model: Vec<String>,
    prompt_tokens: Vec<Option<i64>>,
    completion_tokens: Vec<Option<i64>>,
    cached_input_tokens: Vec<Option<i64>>,
    cache_write_tokens: Vec<Option<i64>>,
    reasoning_tokens: Vec<Option<i64>>,
    cost_usd: Vec<Option<f64>>,
    billing: Vec<String>,
    at: Vec<Timestamp>,
}

#[cfg(feature = "postgres")]
impl UsageArrays {
    fn push(&mut self, row: CheckedUsage) {
        let [prompt, completion, cached_input, cache_write, reasoning] = row.counts;
        self.run_id.push(row.run_id);
        self.phase.push(row.phase);
        self.role.push(row.role);
        self.caller.push(row.caller);
        self.provider.push(row.provider);
        self.model.push(row.model);
        self.prompt_tokens.push(prompt);
        self.completion_tokens.push(completion);
        self.cached_input_tokens.push(cached_input);
        self.cache_write_tokens.push(cache_write);
        self.reasoning_tokens.push(reasoning);
        self.cost_usd.push(row.cost_usd);
        self.billing.push(row.billing);
        self.at.push(row.at);
    }
}

#[async_trait]
impl<E: RecordsUsage> UsageStore for SqlUsageStore<E> {
    async fn record(&self, event: UsageEvent) -> Result<(), PortError> {
        self.record_batch(std::slice::from_ref(&event)).await
    }

    /// The whole batch or nothing.
    async fn record_batch(&self, events: &[UsageEvent]) -> Result<(), PortError> {
        let rows = events
            .iter()
            .map(CheckedUsage::of::<E>)
            .collect::<Result<Vec<_>, _>>()?;
        if rows.is_empty() {
            return Ok(());
        }
        E::insert_usage(&self.pool, rows).await
    }

    async fn events_for_run(&self, run_id: &str) -> Result<Vec<UsageEvent>, PortError> {
        // No stored run id holds text the database cannot hold.
        if !E::can_hold(run_id) {
            return Ok(Vec::new());
        }
        sql(
            "SELECT run_id, phase, role, caller, provider, model, prompt_tokens, \
             completion_tokens, cached_input_tokens, cache_write_tokens, reasoning_tokens, \
             cost_usd, billing, at FROM usage_events WHERE run_id = $1 ORDER BY seq",
            "read a run's usage",
        )
        .bind(run_id.to_owned())
        .fetch_all(&mut pooled(&self.pool).await?)
        .await
    }

    async fn events_since(&self, since: Timestamp) -> Result<Vec<UsageEvent>, PortError> {
        sql(
            "SELECT run_id, phase, role, caller, provider, model, prompt_tokens, \
             completion_tokens, cached_input_tokens, cache_write_tokens, reasoning_tokens, \
             cost_usd, billing, at FROM usage_events WHERE at >= $1 ORDER BY seq",
            "read usage in a window",
        )
        .bind_time(since)
        .fetch_all(&mut pooled(&self.pool).await?)
        .await
    }
}
