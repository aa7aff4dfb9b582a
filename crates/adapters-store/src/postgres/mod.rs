//! Every ledger on one PostgreSQL server (`METAFORGE_DATABASE_URL=postgres://…`), for several
//! gateways and workers sharing one ledger each: the seed's "exactly one ledger" across hosts.
//!
//! Each ledger keeps its own PostgreSQL schema (`metaforge_approvals`, `metaforge_runs`, …) with its
//! own migration history, exactly as each SQLite ledger keeps its own file: a ledger's
//! migrations never collide with another's, and a database holding other applications' tables is
//! left alone. Timestamps are `timestamptz` (microseconds, like the SQLite encoding); JSON
//! columns hold the exact text the SQLite ledgers hold, so hashes over stored JSON agree.
//!
//! Writes that race (two gateways deciding one hold) are transactions that lock the row they
//! read (`SELECT … FOR UPDATE`) and then update it on its expected state: the second writer waits
//! for the first to commit, reads the closed row and answers a conflict. Nothing is retried
//! silently.
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## PostgreSQL ledgers (issue 20, item 1) — `adapters-store/src/postgres/`, feature `postgres`
//!
//! `PgApprovalLedger`, `PgFlowVersionStore`, `PgRunLedger`, `PgClientTaskStore`, `PgUsageStore`,
//! `PgSessionStore`: all six ledger ports on one PostgreSQL server, for several gateways and workers
//! sharing one ledger each. Runs keep the SQLite ledger's transition log (primary key on
//! `(run_id, seq)`, terminal runs final and the log append-only by triggers) and read a list's
//! histories in one `ANY($1)` statement. Sessions searchSessions search with a stored `tsvector` (punctuation split as SQLite's
//! `unicode61` splits it) under a GIN index, queried with `plainto_tsquery` (user text is never
//! read as query syntax); usage batches are one `INSERT … SELECT FROM UNNEST(…)`. Selected in the binary by `METAFORGE_DATABASE_URL=postgres://…`
//! (`bins/src/ledger_engine.rs`, the one place; the bins' `postgres` feature is on by default, a
//! build without it refuses the URL saying how to get it); SQLite stays the default.
//! `postgres::open_pool(url, schema, migrator)` gives each ledger its own schema (`metaforge_approvals`,
//! `metaforge_runs`, …) with its own migration history (`migrations/postgres/<ledger>/`), exactly as
//! each SQLite ledger has its own file; every pooled connection's `search_path` is that schema.
//! Engine-neutral encodings (enum labels, JSON text, the `Corrupt`/`NotFound` errors) live in
//! `src/codec.rs`, shared by both engines. **Invariants:**
//! - Timestamps are `timestamptz` (microseconds, like the SQLite text); JSON columns keep the exact
//!   text SQLite keeps (frozen flow versions hash the same on both engines).
//! - A write that races another process is one transaction that locks the rows it reads
//!   (`SELECT … FOR UPDATE`) and updates them on their expected state: two gateways deciding one
//!   hold serialise, the second reads the closed hold and answers `Conflict` (409); two processes
//!   appending one run's next transition, or claiming one client task, the same. Deadline expiry
//!   runs in every gateway and is idempotent (rows locked, updated only while still open, audited
//!   once). Nothing is retried silently: a serialization failure, deadlock, lost connection or a
//!   server shutting down is `Unavailable` (`postgres::db_error`, by SQLSTATE).
//! - An unreachable or malformed URL fails start-up (`Unavailable`/`Invalid` naming
//!   `METAFORGE_DATABASE_URL`); there is no fallback to the files.
//! - How to run the parts as a cluster, and its known gaps: `deploy/cluster.md`. The scripted
//!   cluster run, `cargo xtask cluster` (`crates/bins/tests/cluster.rs`, a harness-less test target
//!   behind the bins' `kafka` and `temporal` features), starts every engine and two gateways, a
//!   worker and a remote sidecar as processes, drives the walk-through through both gateways, races
//!   decisions under SIGKILLs and audits the promises below; `cargo xtask ci` runs it smaller.
//! - A gateway's start or sweep orphans only the holds of gateways that are gone (see "A hold is
//!   orphaned only when its parker is gone"), never those another live gateway waits on.
//!
//! Tests: `tests/it/postgres_*.rs` run every contract suite on a real server each test starts
//! (`test_support::postgres::PostgresServer`: `initdb` + `postgres` on a temporary directory and a
//! free loopback port, as the Debian `postgres` account under root), and race decisions across two
//! ledger instances; `bins/tests/it/postgres_gateways.rs` does the same through two `metaforge
//! gateway` processes.

use std::str::FromStr;
use std::time::Duration;

use metaforge_ports::{PortError, PortErrorKind};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::postgres::{PgConnection, PgQueryResult, PgRow};
use sqlx::{ConnectOptions, Executor, PgPool, Pool, Postgres, Row, Transaction};

use metaforge_ports::Timestamp;

use crate::sql::{Dialect, SqlQuery};

pub use crate::approvals::PgApprovalLedger;
pub use crate::client_tasks::PgClientTaskStore;
pub use crate::flow_versions::PgFlowVersionStore;
pub use crate::runs::PgRunLedger;
pub use crate::sessions::PgSessionStore;
pub use crate::usage::PgUsageStore;

/// Connections each ledger's pool may hold: six ledgers per process keep a gateway, a second
/// gateway and a worker (72 connections) under PostgreSQL's default `max_connections` of 100.
const POOL_SIZE: u32 = 4;

/// How long a caller waits for a free pooled connection before the ledger is `Unavailable`.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The URL schemes that select PostgreSQL.
pub const SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

/// True when `url` names a PostgreSQL server (`postgres://` or `postgresql://`).
#[must_use]
pub fn is_postgres_url(url: &str) -> bool {
    SCHEMES.iter().any(|scheme| url.starts_with(scheme))
}

/// Connects a pool for the ledger kept in `schema`, creating the schema when it is missing and
/// running the ledger's migrations inside it. Every pooled connection has `search_path` set to
/// the schema, so the ledger's statements name bare tables.
///
/// # Errors
/// `Invalid` when the URL does not parse, `Unavailable` when the server cannot be reached or
/// the migrations fail.
pub(crate) async fn open_pool(
    url: &str,
    schema: &str,
    migrator: &sqlx::migrate::Migrator,
) -> Result<PgPool, PortError> {
    let base = PgConnectOptions::from_str(url).map_err(|e| {
        PortError::with_source(
            PortErrorKind::Invalid,
            format!(
                "METAFORGE_DATABASE_URL is not a PostgreSQL URL ({})",
                redacted(url)
            ),
            e,
        )
    })?;
    // The schema is created over a plain connection first: `search_path` naming a schema that
    // does not exist yet would leave the migrations nowhere to write.
    let mut bootstrap = base
        .clone()
        .connect()
        .await
        .map_err(|e| unreachable_server(url, e))?;
    // Two processes starting at once may both try to create it; `IF NOT EXISTS` can still race
    // on the catalogue's unique index, so the creation is serialised by a transaction-scoped
    // advisory lock keyed on the schema's name.
    let create = format!(
        "BEGIN; SELECT pg_advisory_xact_lock(hashtext('{schema}')); \
         CREATE SCHEMA IF NOT EXISTS {schema}; COMMIT;"
    );
    // The schema name is one of the ledgers' constants, never input, so splicing it is safe.
    sqlx::raw_sql(sqlx::AssertSqlSafe(create))
        .execute(&mut bootstrap)
        .await
        .map_err(|e| db_error(&format!("create the schema {schema}"), e))?;
    drop(bootstrap);
    let options = base.options([("search_path", schema)]);
    let pool = PgPoolOptions::new()
        .max_connections(POOL_SIZE)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(options)
        .await
        .map_err(|e| unreachable_server(url, e))?;
    migrator.run(&pool).await.map_err(|e| {
        PortError::with_source(
            PortErrorKind::Unavailable,
            format!("migrating the ledger schema {schema} failed"),
            e,
        )
    })?;
    Ok(pool)
}

/// The URL with any password replaced, for messages and logs.
#[must_use]
pub fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(parsed) => parsed.to_string(),
        Err(_) => "an unparseable URL".to_owned(),
    }
}

fn unreachable_server(url: &str, e: sqlx::Error) -> PortError {
    PortError::with_source(
        PortErrorKind::Unavailable,
        format!("cannot connect to the PostgreSQL ledger at {}", redacted(url)),
        e,
    )
}

/// Maps an engine error to a port error by SQLSTATE: a unique or foreign-key violation is
/// `Conflict`; a serialization failure, deadlock, lock timeout, lost connection or a server
/// shutting down is `Unavailable` (the caller may retry); anything else `Internal`.
pub(crate) fn db_error(what: &str, e: sqlx::Error) -> PortError {
    let kind = match &e {
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some("23505" | "23503") => PortErrorKind::Conflict,
            Some(code) if code.starts_with("40") || code.starts_with("08") || code.starts_with("57") => {
                PortErrorKind::Unavailable
            }
            Some("55P03" | "53300") => PortErrorKind::Unavailable,
            _ => PortErrorKind::Internal,
        },
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
            PortErrorKind::Unavailable
        }
        _ => PortErrorKind::Internal,
    };
    PortError::with_source(kind, format!("could not {what}"), e)
}

/// PostgreSQL's side of the seam: several gateways write at once, so a transaction locks the
/// rows it reads (`FOR UPDATE`) and the second writer of a row waits for the first; timestamps
/// are `timestamptz`.
impl Dialect for Postgres {
    const FOR_UPDATE: &'static str = " FOR UPDATE";
    const TIMESTAMP: &'static str = "timestamptz";

    fn on(conn: &mut PgConnection) -> impl Executor<'_, Database = Self> {
        conn
    }

    async fn begin_write(pool: &Pool<Self>) -> Result<Transaction<'static, Self>, PortError> {
        pool.begin()
            .await
            .map_err(|e| db_error("begin a write transaction", e))
    }

    fn db_error(what: &str, error: sqlx::Error) -> PortError {
        db_error(what, error)
    }

    fn rows_affected(result: &PgQueryResult) -> u64 {
        result.rows_affected()
    }

    fn bind_time<'q>(query: SqlQuery<'q, Self>, at: Option<Timestamp>) -> SqlQuery<'q, Self> {
        query.bind(at)
    }

    fn read_time(row: &PgRow, column: &str) -> Result<Option<Timestamp>, PortError> {
        row.try_get(column).map_err(|e| {
            PortError::with_source(
                PortErrorKind::Corrupt,
                format!("stored {column} is not a timestamp"),
                e,
            )
        })
    }

    fn one_of(column: &str, n: usize) -> String {
        format!("{column} = ANY(${n})")
    }

    fn bind_texts<'q>(
        query: SqlQuery<'q, Self>,
        texts: Vec<String>,
    ) -> Result<SqlQuery<'q, Self>, PortError> {
        Ok(query.bind(texts))
    }

    fn can_hold(text: &str) -> bool {
        !text.contains('\0')
    }
}
