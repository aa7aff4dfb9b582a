//! The session ledger (threads, messages, word search and `parent_session_id` lineage), one
//! engine on SQLite and on PostgreSQL (shared by every gateway on the server).
//!
//! Search is the one place the two databases index differently ([`MessageSearch`]): SQLite
//! keeps an FTS5 table, PostgreSQL a generated `tsvector` column under a GIN index. Both keep
//! one meaning: the query is split into words ([`search_words`]: runs of letters and digits,
//! lower-cased), every word must appear as a whole word (no prefixes, no stemming), and nothing
//! the user typed is ever read as query syntax (quoted FTS5 phrases; `plainto_tsquery`, which
//! has none).

use std::path::Path;

use async_trait::async_trait;
use metaforge_ports::{
    ChatMessage, ChatSession, PortError, PortErrorKind, SessionSearchHit, SessionStore, TurnLimits,
    session_store::search_words,
};
use sqlx::{Pool, Sqlite};

use crate::codec::{label, limit_i64, not_found, parse_label};
use crate::sql::{Dialect, FromRecord, Record, pooled, sql, sql_owned};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sessions");
#[cfg(feature = "postgres")]
static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres/sessions");

/// The schema holding this ledger's tables and migration history on PostgreSQL.
#[cfg(feature = "postgres")]
const PG_SCHEMA: &str = "metaforge_sessions";

/// How deep a lineage walk goes before it is judged a cycle (stored data can be hand-edited).
const MAX_LINEAGE_DEPTH: usize = 10_000;

/// The columns every read of a session selects.
const SESSION_COLUMNS: &str =
    "id, parent_session_id, project_id, title, created_at, max_iterations, token_budget";

/// How a database finds the messages holding every word of a query.
pub trait MessageSearch: Dialect {
    /// The statement (binding the words as `$1` and the limit as `$2`, selecting `session_id`,
    /// `id` and `content`) and the words to bind, or `None` when the query can match nothing.
    ///
    /// # Errors
    /// `Invalid` for a query without a word, or one too long to search.
    fn search_statement(query: &str) -> Result<Option<(&'static str, String)>, PortError>;
}

/// A query without a word is `Invalid` on every database.
fn words_of(query: &str) -> Result<Vec<String>, PortError> {
    let words = search_words(query);
    if words.is_empty() {
        return Err(PortError::new(
            PortErrorKind::Invalid,
            "search.query: must contain at least one word",
        ));
    }
    Ok(words)
}

/// SQLite: an FTS5 query matching every word as a quoted phrase, best `rank` first.
impl MessageSearch for Sqlite {
    fn search_statement(query: &str) -> Result<Option<(&'static str, String)>, PortError> {
        let fts = words_of(query)?
            .iter()
            .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(" AND ");
        Ok(Some((
            "SELECT m.session_id, m.id, m.content FROM messages_fts f \
             JOIN messages m ON m.seq = f.rowid \
             WHERE messages_fts MATCH $1 ORDER BY f.rank, m.seq LIMIT $2",
            fts,
        )))
    }
}

/// The longest word PostgreSQL indexes (bytes): longer ones are left out of every `tsvector`,
/// so a query word past it can match nothing.
#[cfg(feature = "postgres")]
const MAX_INDEXED_WORD: usize = 2047;

/// The most text a search's words may add up to (bytes), well under the 1 MiB a `tsquery` holds;
/// a longer query is `Invalid` instead of failing on the server.
#[cfg(feature = "postgres")]
const MAX_QUERY_BYTES: usize = 64 * 1024;

/// PostgreSQL: the words, each once, handed to `plainto_tsquery('simple', …)`; best match first
/// (`ts_rank`, shorter messages ahead on equal counts, as FTS5's bm25 favours them), then the
/// oldest message first.
#[cfg(feature = "postgres")]
impl MessageSearch for sqlx::Postgres {
    fn search_statement(query: &str) -> Result<Option<(&'static str, String)>, PortError> {
        let mut words = words_of(query)?;
        if words.iter().any(|w| w.len() > MAX_INDEXED_WORD) {
            return Ok(None);
        }
        // Every word must match, so a repeated word adds nothing.
        words.sort_unstable();
        words.dedup();
        let joined = words.join(" ");
        if joined.len() > MAX_QUERY_BYTES {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                format!("search.query: its words must add up to at most {MAX_QUERY_BYTES} bytes"),
            ));
        }
        Ok(Some((
            "SELECT m.session_id, m.id, m.content \
             FROM messages m, plainto_tsquery('simple', $1) q \
             WHERE m.content_tsv @@ q \
             ORDER BY ts_rank(m.content_tsv, q, 1) DESC, m.seq LIMIT $2",
            joined,
        )))
    }
}

/// The session ledger over database `E`.
pub struct SqlSessionStore<E: MessageSearch> {
    pool: Pool<E>,
}

impl<E: MessageSearch> Clone for SqlSessionStore<E> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
        }
    }
}

/// The session ledger in one SQLite file (`sessions.db`).
pub type SqliteSessionStore = SqlSessionStore<Sqlite>;

/// The session ledger in the `metaforge_sessions` schema of a PostgreSQL database.
#[cfg(feature = "postgres")]
pub type PgSessionStore = SqlSessionStore<sqlx::Postgres>;

impl SqlSessionStore<Sqlite> {
    /// Opens (creating and migrating) the store at `path`.
    pub async fn open(path: &Path) -> Result<Self, PortError> {
        Ok(Self {
            pool: crate::sqlite::open_pool(path, &MIGRATOR).await?,
        })
    }
}

#[cfg(feature = "postgres")]
impl SqlSessionStore<sqlx::Postgres> {
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

impl<E: Dialect> FromRecord<E> for ChatSession {
    fn from_record(row: &Record<'_, E>) -> Result<Self, PortError> {
        Ok(Self {
            id: row.get("id")?,
            parent_session_id: row.get("parent_session_id")?,
            project_id: row.get("project_id")?,
            title: row.get("title")?,
            created_at: row.time("created_at")?,
            limits: TurnLimits {
                max_iterations: stored_limit("sessions.max_iterations", row.get("max_iterations")?)?,
                token_budget: stored_limit("sessions.token_budget", row.get("token_budget")?)?,
            },
        })
    }
}

impl<E: Dialect> FromRecord<E> for ChatMessage {
    fn from_record(row: &Record<'_, E>) -> Result<Self, PortError> {
        let role: String = row.get("role")?;
        Ok(Self {
            id: row.get("id")?,
            session_id: row.get("session_id")?,
            role: parse_label("messages.role", &role)?,
            content: row.get("content")?,
            created_at: row.time("created_at")?,
        })
    }
}

impl<E: Dialect> FromRecord<E> for SessionSearchHit {
    fn from_record(row: &Record<'_, E>) -> Result<Self, PortError> {
        Ok(Self {
            session_id: row.get("session_id")?,
            message_id: row.get("id")?,
            content: row.get("content")?,
        })
    }
}

/// A stored limit read back: negative or out of range is corrupt data, never a silent default.
fn stored_limit<T: TryFrom<i64>>(column: &str, value: Option<i64>) -> Result<Option<T>, PortError> {
    value
        .map(|v| {
            T::try_from(v).map_err(|_| {
                PortError::new(
                    PortErrorKind::Corrupt,
                    format!("{column}: {v} is not a valid limit"),
                )
            })
        })
        .transpose()
}

/// A unique-key conflict named as what already exists.
fn already_exists(err: PortError, what: &str, id: &str) -> PortError {
    if err.kind == PortErrorKind::Conflict {
        PortError::new(PortErrorKind::Conflict, format!("{what} {id} already exists"))
    } else {
        err
    }
}

impl<E: MessageSearch> SqlSessionStore<E> {
    async fn session(&self, id: &str) -> Result<Option<ChatSession>, PortError> {
        // No stored id holds text the database cannot hold.
        if !E::can_hold(id) {
            return Ok(None);
        }
        sql_owned(
            format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"),
            "read a session",
        )
        .bind(id.to_owned())
        .fetch_optional(&mut pooled(&self.pool).await?)
        .await
    }
}

#[async_trait]
impl<E: MessageSearch> SessionStore for SqlSessionStore<E> {
    async fn create_session(&self, session: ChatSession) -> Result<ChatSession, PortError> {
        if session.id.trim().is_empty() {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                "session.id: must not be empty",
            ));
        }
        E::check_text("session.id", Some(&session.id))?;
        E::check_text("session.project_id", session.project_id.as_deref())?;
        E::check_text("session.title", session.title.as_deref())?;
        if let Some(parent) = &session.parent_session_id
            && self.session(parent).await?.is_none()
        {
            return Err(not_found("parent session", parent));
        }
        let token_budget = session
            .limits
            .token_budget
            .map(i64::try_from)
            .transpose()
            .map_err(|_| {
                PortError::new(
                    PortErrorKind::Invalid,
                    "session.limits.token_budget: too large to store",
                )
            })?;
        sql(
            "INSERT INTO sessions (id, parent_session_id, project_id, title, created_at, \
             max_iterations, token_budget) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            "create a session",
        )
        .bind(session.id.clone())
        .bind(session.parent_session_id.clone())
        .bind(session.project_id.clone())
        .bind(session.title.clone())
        .bind_time(session.created_at)
        .bind(session.limits.max_iterations.map(i64::from))
        .bind(token_budget)
        .execute(&mut pooled(&self.pool).await?)
        .await
        .map_err(|err| already_exists(err, "session", &session.id))?;
        Ok(session)
    }

    async fn get_session(&self, id: &str) -> Result<ChatSession, PortError> {
        self.session(id).await?.ok_or_else(|| not_found("session", id))
    }

    async fn list_sessions(&self, limit: usize) -> Result<Vec<ChatSession>, PortError> {
        sql_owned(
            format!("SELECT {SESSION_COLUMNS} FROM sessions ORDER BY created_at DESC, id DESC LIMIT $1"),
            "list sessions",
        )
        .bind(limit_i64(limit))
        .fetch_all(&mut pooled(&self.pool).await?)
        .await
    }

    async fn append_message(&self, message: ChatMessage) -> Result<ChatMessage, PortError> {
        if message.id.trim().is_empty() {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                "message.id: must not be empty",
            ));
        }
        E::check_text("message.id", Some(&message.id))?;
        E::check_text("message.content", Some(&message.content))?;
        if self.session(&message.session_id).await?.is_none() {
            return Err(not_found("session", &message.session_id));
        }
        sql(
            "INSERT INTO messages (id, session_id, role, content, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
            "append a message",
        )
        .bind(message.id.clone())
        .bind(message.session_id.clone())
        .bind(label(&message.role)?)
        .bind(message.content.clone())
        .bind_time(message.created_at)
        .execute(&mut pooled(&self.pool).await?)
        .await
        .map_err(|err| already_exists(err, "message", &message.id))?;
        Ok(message)
    }

    async fn messages(&self, session_id: &str) -> Result<Vec<ChatMessage>, PortError> {
        if self.session(session_id).await?.is_none() {
            return Err(not_found("session", session_id));
        }
        sql(
            "SELECT id, session_id, role, content, created_at FROM messages \
             WHERE session_id = $1 ORDER BY seq",
            "read messages",
        )
        .bind(session_id.to_owned())
        .fetch_all(&mut pooled(&self.pool).await?)
        .await
    }

    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SessionSearchHit>, PortError> {
        let Some((statement, words)) = E::search_statement(query)? else {
            return Ok(Vec::new());
        };
        sql(statement, "search messages")
            .bind(words)
            .bind(limit_i64(limit))
            .fetch_all(&mut pooled(&self.pool).await?)
            .await
    }

    async fn lineage(&self, session_id: &str) -> Result<Vec<ChatSession>, PortError> {
        let mut chain = vec![self.get_session(session_id).await?];
        while let Some(parent) = chain.last().and_then(|s| s.parent_session_id.clone()) {
            if chain.len() > MAX_LINEAGE_DEPTH || chain.iter().any(|s| s.id == parent) {
                return Err(PortError::new(
                    PortErrorKind::Corrupt,
                    format!("session {session_id} has a cyclic or runaway parent chain"),
                ));
            }
            chain.push(
                self.session(&parent)
                    .await?
                    .ok_or_else(|| not_found("parent session", &parent))?,
            );
        }
        Ok(chain)
    }
}
