//! What every SQLite ledger shares: opening a file durably (WAL, full sync, busy timeout),
//! timestamp encoding that sorts as text, and mapping engine errors onto port error kinds.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use metaforge_ports::{PortError, PortErrorKind, Timestamp};

use crate::codec::{parse_opt_ts, ts};
use crate::paths::{create_private_dir, ensure_private_file, tighten_if_present};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::sqlite::{SqliteConnection, SqliteQueryResult, SqliteRow};
use sqlx::{Executor, Pool, Row, Sqlite, SqlitePool, Transaction};

use crate::sql::{Dialect, SqlQuery};

/// How long a writer waits for another process's write lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The statement that opens every write transaction: it takes the write lock up front, so two
/// processes racing on one row serialise instead of failing to upgrade a read lock.
pub(crate) const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";

/// Opens (creating if needed) a ledger file with WAL and `synchronous=FULL`, so a commit that
/// returned survives a SIGKILL or power loss, then runs the ledger's migrations.
pub(crate) async fn open_pool(
    path: &Path,
    migrator: &sqlx::migrate::Migrator,
) -> Result<SqlitePool, PortError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_private_dir(parent).map_err(|e| {
            PortError::with_source(
                PortErrorKind::Unavailable,
                format!("cannot create the ledger directory {}", parent.display()),
                e,
            )
        })?;
    }
    // The file exists 0600 before SQLite opens it, whatever the umask; SQLite then creates the
    // -wal and -shm files with the database's mode.
    ensure_private_file(path).map_err(|e| private_error(path, e))?;
    // Held until the migrations ran: two processes opening one fresh home at once (a gateway and
    // `mcp serve` started together) would otherwise both apply the first migration.
    let _migrating = migration_lock(path).await?;
    let options = SqliteConnectOptions::from_str("sqlite://")
        .map_err(|e| unavailable(path, e))?
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(BUSY_TIMEOUT)
        .foreign_keys(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .map_err(|e| unavailable(path, e))?;
    migrator.run(&pool).await.map_err(|e| {
        PortError::with_source(
            PortErrorKind::Unavailable,
            format!("migrating the ledger {} failed", path.display()),
            e,
        )
    })?;
    // Belt and braces: whatever SQLite did, its side files are owner-only too.
    for suffix in ["-wal", "-shm"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        tighten_if_present(Path::new(&side)).map_err(|e| private_error(Path::new(&side), e))?;
    }
    Ok(pool)
}

/// How long a process waits for another one's migrations of the same ledger.
const MIGRATION_WAIT: Duration = Duration::from_secs(30);

/// Takes `<ledger>.lock` exclusively (an advisory lock of its own file: the database file itself
/// must not be opened and closed beside SQLite, whose POSIX locks that would drop), waiting at
/// most [`MIGRATION_WAIT`] for another process's migrations; the lock ends with the returned file.
async fn migration_lock(path: &Path) -> Result<std::fs::File, PortError> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = std::path::PathBuf::from(lock_path);
    ensure_private_file(&lock_path).map_err(|e| private_error(&lock_path, e))?;
    let file = std::fs::OpenOptions::new()
        .append(true)
        .open(&lock_path)
        .map_err(|e| private_error(&lock_path, e))?;
    let deadline = tokio::time::Instant::now() + MIGRATION_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(PortError::new(
                    PortErrorKind::Unavailable,
                    format!(
                        "another process has held {} for {}s while migrating the ledger {}",
                        lock_path.display(),
                        MIGRATION_WAIT.as_secs(),
                        path.display()
                    ),
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(PortError::with_source(
                    PortErrorKind::Unavailable,
                    format!("cannot lock {} to migrate the ledger", lock_path.display()),
                    e,
                ));
            }
        }
    }
}

fn private_error(path: &Path, e: std::io::Error) -> PortError {
    PortError::with_source(
        PortErrorKind::Unavailable,
        format!("cannot make the ledger file {} owner-only (0600)", path.display()),
        e,
    )
}

fn unavailable(path: &Path, e: sqlx::Error) -> PortError {
    PortError::with_source(
        PortErrorKind::Unavailable,
        format!("cannot open the ledger {}", path.display()),
        e,
    )
}

/// Begins a write transaction holding the write lock.
pub(crate) async fn begin_write(pool: &SqlitePool) -> Result<Transaction<'static, Sqlite>, PortError> {
    pool.begin_with(BEGIN_WRITE)
        .await
        .map_err(|e| db_error("begin a write transaction", e))
}

/// Maps an engine error to a port error: busy/locked is `Unavailable`, a constraint violation
/// is `Conflict`, anything else `Internal`.
pub(crate) fn db_error(what: &str, e: sqlx::Error) -> PortError {
    let kind = match &e {
        sqlx::Error::Database(db) => {
            // SQLite's primary result code is the low byte: 5 is BUSY, 6 is LOCKED.
            let primary = db.code().and_then(|c| c.parse::<i64>().ok()).map(|c| c & 0xff);
            if db.is_unique_violation() || db.is_foreign_key_violation() {
                PortErrorKind::Conflict
            } else if matches!(primary, Some(5 | 6)) {
                PortErrorKind::Unavailable
            } else {
                PortErrorKind::Internal
            }
        }
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
            PortErrorKind::Unavailable
        }
        _ => PortErrorKind::Internal,
    };
    PortError::with_source(kind, format!("could not {what}"), e)
}

/// SQLite's side of the seam: one writer at a time (`BEGIN IMMEDIATE`), so a read inside a write
/// transaction needs no row lock; timestamps are RFC 3339 text that sorts as it compares.
impl Dialect for Sqlite {
    const FOR_UPDATE: &'static str = "";
    const TIMESTAMP: &'static str = "TEXT";

    fn on(conn: &mut SqliteConnection) -> impl Executor<'_, Database = Self> {
        conn
    }

    fn begin_write(
        pool: &Pool<Self>,
    ) -> impl std::future::Future<Output = Result<Transaction<'static, Self>, PortError>> + Send {
        begin_write(pool)
    }

    fn db_error(what: &str, error: sqlx::Error) -> PortError {
        db_error(what, error)
    }

    fn rows_affected(result: &SqliteQueryResult) -> u64 {
        result.rows_affected()
    }

    fn bind_time<'q>(query: SqlQuery<'q, Self>, at: Option<Timestamp>) -> SqlQuery<'q, Self> {
        query.bind(at.map(ts))
    }

    fn read_time(row: &SqliteRow, column: &str) -> Result<Option<Timestamp>, PortError> {
        let text: Option<String> = row.try_get(column).map_err(|e| {
            PortError::with_source(PortErrorKind::Corrupt, format!("stored {column} is not text"), e)
        })?;
        parse_opt_ts(column, text)
    }

    fn one_of(column: &str, n: usize) -> String {
        format!("{column} IN (SELECT value FROM json_each(${n}))")
    }

    fn bind_texts<'q>(
        query: SqlQuery<'q, Self>,
        texts: Vec<String>,
    ) -> Result<SqlQuery<'q, Self>, PortError> {
        Ok(query.bind(crate::codec::to_json("a list of keys", &texts)?))
    }

    fn can_hold(_text: &str) -> bool {
        true
    }
}
