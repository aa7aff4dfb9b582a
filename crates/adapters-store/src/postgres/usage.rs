//! The usage store on PostgreSQL (FORGE-476), shared by every gateway and worker on the server:
//! one row per model call, unknown kept as NULL. Totals are the domain's job; this store only
//! records and reads events back.
//!
//! A batch (the gateway's usage writer commits many calls' events at once) is one `INSERT … SELECT
//! FROM UNNEST(…)` of fourteen column arrays: one statement, hence one transaction and one round
//! trip however many events it carries, and no bound-parameter limit to chunk around. The rows
//! take their `seq` in the batch's order, so a run's events read back as they were recorded.

use async_trait::async_trait;
use metaforge_ports::{PortError, PortErrorKind, Timestamp, UsageEvent, UsageStore};
use sqlx::PgPool;

use super::{db_error, open_pool};
use crate::codec::{label, parse_label};
use crate::usage::validate_usage;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres/usage");

/// The schema holding this store's table and migration history.
const SCHEMA: &str = "metaforge_usage";

/// The usage store in the `metaforge_usage` schema of a PostgreSQL database.
#[derive(Clone)]
pub struct PgUsageStore {
    pool: PgPool,
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
    at: Timestamp,
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

/// PostgreSQL text cannot hold U+0000 (SQLite's can): an event carrying one is refused as
/// `Invalid`, naming the field, instead of failing its whole batch on the server as internal.
fn refuse_nul(event: &UsageEvent) -> Result<(), PortError> {
    let fields = [
        ("run_id", event.run_id.as_deref()),
        ("phase", event.phase.as_deref()),
        ("role", event.role.as_deref()),
        ("caller", event.caller.as_deref()),
        ("provider", Some(event.provider.as_str())),
        ("model", Some(event.model.as_str())),
    ];
    match fields.iter().find(|(_, v)| v.is_some_and(|v| v.contains('\0'))) {
        Some((field, _)) => Err(PortError::new(
            PortErrorKind::Invalid,
            format!("usage.{field}: must not contain a NUL character"),
        )),
        None => Ok(()),
    }
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
            at: Some(self.at),
        })
    }
}

/// A batch as one array per column, every event validated and every count checked before
/// anything is sent.
#[derive(Default)]
struct UsageColumns {
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

impl UsageColumns {
    fn of(events: &[UsageEvent]) -> Result<Self, PortError> {
        let mut columns = Self::default();
        for event in events {
            let at = validate_usage(event)?;
            refuse_nul(event)?;
            columns
                .prompt_tokens
                .push(count_in("prompt_tokens", event.prompt_tokens)?);
            columns
                .completion_tokens
                .push(count_in("completion_tokens", event.completion_tokens)?);
            columns
                .cached_input_tokens
                .push(count_in("cached_input_tokens", event.cached_input_tokens)?);
            columns
                .cache_write_tokens
                .push(count_in("cache_write_tokens", event.cache_write_tokens)?);
            columns
                .reasoning_tokens
                .push(count_in("reasoning_tokens", event.reasoning_tokens)?);
            columns.billing.push(label(&event.billing)?);
            columns.run_id.push(event.run_id.clone());
            columns.phase.push(event.phase.clone());
            columns.role.push(event.role.clone());
            columns.caller.push(event.caller.clone());
            columns.provider.push(event.provider.clone());
            columns.model.push(event.model.clone());
            columns.cost_usd.push(event.cost_usd);
            columns.at.push(at);
        }
        Ok(columns)
    }
}

impl PgUsageStore {
    /// Connects to the server at `url` (creating and migrating the store's schema).
    ///
    /// # Errors
    /// `Invalid` for a URL that does not parse, `Unavailable` when the server cannot be reached.
    pub async fn open(url: &str) -> Result<Self, PortError> {
        Ok(Self {
            pool: open_pool(url, SCHEMA, &MIGRATOR).await?,
        })
    }
}

#[async_trait]
impl UsageStore for PgUsageStore {
    async fn record(&self, event: UsageEvent) -> Result<(), PortError> {
        self.record_batch(std::slice::from_ref(&event)).await
    }

    /// The whole batch or nothing: one statement, whatever its size.
    async fn record_batch(&self, events: &[UsageEvent]) -> Result<(), PortError> {
        let columns = UsageColumns::of(events)?;
        if events.is_empty() {
            return Ok(());
        }
        // `ORDER BY ord` hands the rows to the identity column in the batch's order.
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
        .execute(&self.pool)
        .await
        .map_err(|e| db_error("record a usage batch", e))?;
        Ok(())
    }

    async fn events_for_run(&self, run_id: &str) -> Result<Vec<UsageEvent>, PortError> {
        // No stored run id holds a NUL, and the server would refuse the bind.
        if run_id.contains('\0') {
            return Ok(Vec::new());
        }
        let rows: Vec<UsageRow> = sqlx::query_as(
            "SELECT run_id, phase, role, caller, provider, model, prompt_tokens, \
             completion_tokens, cached_input_tokens, cache_write_tokens, reasoning_tokens, \
             cost_usd, billing, at FROM usage_events WHERE run_id = $1 ORDER BY seq",
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
             cost_usd, billing, at FROM usage_events WHERE at >= $1 ORDER BY seq",
        )
        .bind(since)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("read usage in a window", e))?;
        rows.into_iter().map(UsageRow::into_event).collect()
    }
}
