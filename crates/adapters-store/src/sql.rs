//! The dialect seam: every ledger is one SQL engine, generic over the database it runs on
//! (SQLite by default, PostgreSQL behind the `postgres` feature), so each transaction script —
//! park, decide, restore, claim, append — is written once.
//!
//! Statements are written once with `$1 … $N` placeholders (SQLite reads them as PostgreSQL
//! does). What differs per database is only what [`Dialect`] names: how a write transaction
//! begins (SQLite's `BEGIN IMMEDIATE` takes the write lock up front), the row-lock suffix
//! (`FOR UPDATE` on PostgreSQL, nothing on SQLite, whose write transaction already excludes
//! every other writer), how a timestamp is stored (RFC 3339 text that sorts on SQLite,
//! `timestamptz` on PostgreSQL) and how an engine error maps onto a port error kind.
//!
//! The generic code never names sqlx's per-type bounds: [`Binds`] and [`Reads`] carry the one
//! operation each needs and are implemented once, for every database that can encode or decode
//! the type, so `Dialect`'s supertraits are all a ledger engine has to ask for.

use std::future::Future;

use metaforge_ports::{PortError, PortErrorKind, Timestamp};
use sqlx::query::Query;
use sqlx::{Database, Decode, Encode, Executor, IntoArguments, Pool, Row, SqlSafeStr, Transaction, Type};

/// A query whose arguments are the database's own.
pub type SqlQuery<'q, E> = Query<'q, E, <E as Database>::Arguments>;

/// The database can bind a `T` as a statement argument.
pub trait Binds<T>: Database {
    /// Appends `value` to the query's arguments.
    fn bind_value<'q>(query: SqlQuery<'q, Self>, value: T) -> SqlQuery<'q, Self>;
}

impl<DB, T> Binds<T> for DB
where
    DB: Database,
    T: for<'t> Encode<'t, DB> + Type<DB>,
{
    fn bind_value<'q>(query: SqlQuery<'q, Self>, value: T) -> SqlQuery<'q, Self> {
        query.bind(value)
    }
}

/// The database can decode a column into a `T`.
pub trait Reads<T>: Database {
    /// Reads the column named `column` of `row`.
    fn read_value(row: &Self::Row, column: &str) -> Result<T, sqlx::Error>;
}

impl<DB, T> Reads<T> for DB
where
    DB: Database,
    T: for<'r> Decode<'r, DB> + Type<DB>,
    for<'c> &'c str: sqlx::ColumnIndex<DB::Row>,
{
    fn read_value(row: &Self::Row, column: &str) -> Result<T, sqlx::Error> {
        row.try_get(column)
    }
}

/// What one database does its own way; everything else about a ledger is written once.
pub trait Dialect:
    Database<Arguments: IntoArguments<Self>>
    + Binds<String>
    + Binds<Option<String>>
    + Binds<i64>
    + Binds<Option<i64>>
    + Binds<f64>
    + Binds<Option<f64>>
    + Binds<bool>
    + Reads<String>
    + Reads<Option<String>>
    + Reads<i64>
    + Reads<Option<i64>>
    + Reads<f64>
    + Reads<Option<f64>>
    + Reads<bool>
{
    /// The suffix of a `SELECT` that locks the rows it reads until the transaction ends.
    const FOR_UPDATE: &'static str;

    /// The SQL type a timestamp argument is cast to where the statement cannot infer it.
    const TIMESTAMP: &'static str;

    /// Runs statements on one connection.
    fn on(conn: &mut Self::Connection) -> impl Executor<'_, Database = Self>;

    /// Begins a transaction that may write, holding whatever lock the database needs so that two
    /// writers of one row serialise.
    fn begin_write(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<Transaction<'static, Self>, PortError>> + Send;

    /// Maps an engine error to a port error kind, saying what could not be done.
    fn db_error(what: &str, error: sqlx::Error) -> PortError;

    /// How many rows a statement changed.
    fn rows_affected(result: &Self::QueryResult) -> u64;

    /// Binds a timestamp in the database's stored form.
    fn bind_time<'q>(query: SqlQuery<'q, Self>, at: Option<Timestamp>) -> SqlQuery<'q, Self>;

    /// Reads a stored timestamp; one that does not decode is `Corrupt`, naming the column.
    fn read_time(row: &Self::Row, column: &str) -> Result<Option<Timestamp>, PortError>;

    /// A condition true when `column` is one of the texts bound as argument `$n`.
    fn one_of(column: &str, n: usize) -> String;

    /// Binds a list of texts for a [`Dialect::one_of`] condition.
    fn bind_texts<'q>(query: SqlQuery<'q, Self>, texts: Vec<String>)
    -> Result<SqlQuery<'q, Self>, PortError>;

    /// Whether the database's text can hold `text` (PostgreSQL's cannot hold U+0000; SQLite's
    /// can), so a key it cannot hold is known absent without asking.
    fn can_hold(text: &str) -> bool;

    /// Refuses text the database cannot store as `Invalid`, naming the field, instead of
    /// failing on the server as an internal error.
    fn check_text(field: &str, value: Option<&str>) -> Result<(), PortError> {
        match value {
            Some(text) if !Self::can_hold(text) => Err(PortError::new(
                PortErrorKind::Invalid,
                format!("{field}: must not contain a NUL character"),
            )),
            _ => Ok(()),
        }
    }
}

/// One statement being built: its text, its arguments and what it does (for errors).
pub(crate) struct Sql<'q, E: Dialect> {
    query: SqlQuery<'q, E>,
    what: &'static str,
}

/// Starts a statement; `what` completes "could not …" in its errors.
pub(crate) fn sql<'q, E: Dialect>(text: impl SqlSafeStr, what: &'static str) -> Sql<'q, E> {
    Sql {
        query: sqlx::query(text),
        what,
    }
}

/// Starts a statement whose text was assembled at run time from constants (a dialect's
/// row-lock suffix, a column list), never from input.
pub(crate) fn sql_owned<'q, E: Dialect>(text: String, what: &'static str) -> Sql<'q, E> {
    sql(sqlx::AssertSqlSafe(text), what)
}

/// A unique-key conflict said as `message` names it (which record already exists); any other
/// error as it is.
pub(crate) fn on_conflict(err: PortError, message: impl FnOnce() -> String) -> PortError {
    if err.kind == PortErrorKind::Conflict {
        PortError::new(PortErrorKind::Conflict, message())
    } else {
        err
    }
}

/// Starts a `SELECT` (text assembled from constants, never input) that locks the rows it reads
/// until the transaction ends, in the dialect's way (PostgreSQL `FOR UPDATE`; SQLite's write
/// transaction already holds the database).
pub(crate) fn sql_locking<'q, E: Dialect>(select: impl AsRef<str>, what: &'static str) -> Sql<'q, E> {
    sql_owned(format!("{}{}", select.as_ref(), E::FOR_UPDATE), what)
}

impl<'q, E: Dialect> Sql<'q, E> {
    /// Binds the next argument.
    pub(crate) fn bind<T>(self, value: T) -> Self
    where
        E: Binds<T>,
    {
        Self {
            query: E::bind_value(self.query, value),
            what: self.what,
        }
    }

    /// Binds the next argument, a timestamp.
    pub(crate) fn bind_time(self, at: Timestamp) -> Self {
        self.bind_opt_time(Some(at))
    }

    /// Binds the next argument, an optional timestamp.
    pub(crate) fn bind_opt_time(self, at: Option<Timestamp>) -> Self {
        Self {
            query: E::bind_time(self.query, at),
            what: self.what,
        }
    }

    /// Binds the next argument, a list of texts for a [`Dialect::one_of`] condition.
    pub(crate) fn bind_texts(self, texts: Vec<String>) -> Result<Self, PortError> {
        Ok(Self {
            query: E::bind_texts(self.query, texts)?,
            what: self.what,
        })
    }

    /// Runs the statement; answers how many rows it changed.
    pub(crate) async fn execute(self, on: &mut impl OnConnection<E>) -> Result<u64, PortError> {
        let what = self.what;
        let result = self
            .query
            .execute(E::on(on.connection()))
            .await
            .map_err(|e| E::db_error(what, e))?;
        Ok(E::rows_affected(&result))
    }

    /// Runs the statement and decodes every row it returns.
    pub(crate) async fn fetch_all<R: FromRecord<E>>(
        self,
        on: &mut impl OnConnection<E>,
    ) -> Result<Vec<R>, PortError> {
        let what = self.what;
        let rows = self
            .query
            .fetch_all(E::on(on.connection()))
            .await
            .map_err(|e| E::db_error(what, e))?;
        rows.iter().map(|row| R::from_record(&Record::<E>(row))).collect()
    }

    /// Runs the statement and decodes its first row, if any.
    pub(crate) async fn fetch_optional<R: FromRecord<E>>(
        self,
        on: &mut impl OnConnection<E>,
    ) -> Result<Option<R>, PortError> {
        let what = self.what;
        let row = self
            .query
            .fetch_optional(E::on(on.connection()))
            .await
            .map_err(|e| E::db_error(what, e))?;
        row.as_ref()
            .map(|row| R::from_record(&Record::<E>(row)))
            .transpose()
    }

    /// Runs the statement and decodes its one row.
    pub(crate) async fn fetch_one<R: FromRecord<E>>(
        self,
        on: &mut impl OnConnection<E>,
    ) -> Result<R, PortError> {
        let what = self.what;
        let row = self
            .query
            .fetch_one(E::on(on.connection()))
            .await
            .map_err(|e| E::db_error(what, e))?;
        R::from_record(&Record::<E>(&row))
    }
}

/// A pooled connection for reads outside a transaction.
pub(crate) async fn pooled<E: Dialect>(pool: &Pool<E>) -> Result<sqlx::pool::PoolConnection<E>, PortError> {
    pool.acquire()
        .await
        .map_err(|e| E::db_error("reach the ledger", e))
}

/// Where a statement runs: a pooled connection or an open transaction (which also names the
/// database, so a statement's engine is inferred from where it runs).
pub(crate) trait OnConnection<E: Dialect> {
    /// The connection underneath.
    fn connection(&mut self) -> &mut E::Connection;
}

impl<E: Dialect> OnConnection<E> for Transaction<'_, E> {
    fn connection(&mut self) -> &mut E::Connection {
        self
    }
}

impl<E: Dialect> OnConnection<E> for sqlx::pool::PoolConnection<E> {
    fn connection(&mut self) -> &mut E::Connection {
        self
    }
}

/// One row being read, column by column; a column that does not decode is `Corrupt`.
pub(crate) struct Record<'r, E: Dialect>(&'r E::Row);

impl<E: Dialect> Record<'_, E> {
    /// The column's value.
    pub(crate) fn get<T>(&self, column: &str) -> Result<T, PortError>
    where
        E: Reads<T>,
    {
        E::read_value(self.0, column).map_err(|e| corrupt_column(column, e))
    }

    /// The column's timestamp; NULL is `Corrupt`.
    pub(crate) fn time(&self, column: &str) -> Result<Timestamp, PortError> {
        E::read_time(self.0, column)?.ok_or_else(|| {
            PortError::new(
                PortErrorKind::Corrupt,
                format!("stored {column} is NULL where a timestamp is required"),
            )
        })
    }

    /// The column's timestamp, or `None` for NULL.
    pub(crate) fn opt_time(&self, column: &str) -> Result<Option<Timestamp>, PortError> {
        E::read_time(self.0, column)
    }
}

/// A value read from one row.
pub(crate) trait FromRecord<E: Dialect>: Sized {
    /// Decodes the row.
    fn from_record(record: &Record<'_, E>) -> Result<Self, PortError>;
}

impl<E: Dialect> FromRecord<E> for String {
    fn from_record(record: &Record<'_, E>) -> Result<Self, PortError> {
        E::read_value(record.0, column_zero::<E>(record)?.as_str()).map_err(|e| corrupt_column("column 0", e))
    }
}

impl<E: Dialect> FromRecord<E> for i64 {
    fn from_record(record: &Record<'_, E>) -> Result<Self, PortError> {
        E::read_value(record.0, column_zero::<E>(record)?.as_str()).map_err(|e| corrupt_column("column 0", e))
    }
}

/// The name of a row's first column, for single-column reads (`SELECT COUNT(*) AS n …`).
fn column_zero<E: Dialect>(record: &Record<'_, E>) -> Result<String, PortError> {
    use sqlx::Column;
    record
        .0
        .columns()
        .first()
        .map(|c| c.name().to_owned())
        .ok_or_else(|| PortError::new(PortErrorKind::Internal, "a single-value query returned no column"))
}

fn corrupt_column(column: &str, e: sqlx::Error) -> PortError {
    PortError::with_source(
        PortErrorKind::Corrupt,
        format!("stored {column} does not decode"),
        e,
    )
}
