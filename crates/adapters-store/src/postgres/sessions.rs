//! The session ledger on PostgreSQL, shared by every gateway on the server: threads, messages,
//! `parent_session_id` lineage, and word search over PostgreSQL's own full-text index (a
//! generated `tsvector` column with a GIN index) in place of SQLite's FTS5 table.
//!
//! Search keeps the SQLite ledger's meaning: the query is split into words exactly as FTS5's
//! query is built ([`search_words`]: runs of letters and digits, lower-cased), every word must
//! appear as a whole word (no prefixes, no stemming), and nothing the user typed is ever read
//! as query syntax: the words go to `plainto_tsquery`, which has none.

use async_trait::async_trait;
use metaforge_ports::{
    ChatMessage, ChatSession, PortError, PortErrorKind, SessionSearchHit, SessionStore, Timestamp,
    TurnLimits, session_store::search_words,
};
use sqlx::PgPool;

use super::{db_error, open_pool, refuse_nul};
use crate::codec::{label, limit_i64, not_found, parse_label};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres/sessions");

/// The schema holding this ledger's tables and migration history.
const SCHEMA: &str = "metaforge_sessions";

/// How deep a lineage walk goes before it is judged a cycle (stored data can be hand-edited).
const MAX_LINEAGE_DEPTH: usize = 10_000;

/// The longest word PostgreSQL indexes (bytes): longer ones are left out of every `tsvector`,
/// so a query word past it can match nothing.
const MAX_INDEXED_WORD: usize = 2047;

/// The most text a search's words may add up to (bytes), well under the 1 MiB a `tsquery` holds;
/// a longer query is `Invalid` instead of failing on the server.
const MAX_QUERY_BYTES: usize = 64 * 1024;

/// The session ledger in the `metaforge_sessions` schema of a PostgreSQL database.
#[derive(Clone)]
pub struct PgSessionStore {
    pool: PgPool,
}

#[derive(sqlx::FromRow)]
struct SessionRow {
    id: String,
    parent_session_id: Option<String>,
    project_id: Option<String>,
    title: Option<String>,
    created_at: Timestamp,
    max_iterations: Option<i64>,
    token_budget: Option<i64>,
}

impl SessionRow {
    fn into_session(self) -> Result<ChatSession, PortError> {
        Ok(ChatSession {
            created_at: self.created_at,
            id: self.id,
            parent_session_id: self.parent_session_id,
            project_id: self.project_id,
            title: self.title,
            limits: TurnLimits {
                max_iterations: stored_limit("sessions.max_iterations", self.max_iterations)?,
                token_budget: stored_limit("sessions.token_budget", self.token_budget)?,
            },
        })
    }
}

#[derive(sqlx::FromRow)]
struct MessageRow {
    id: String,
    session_id: String,
    role: String,
    content: String,
    created_at: Timestamp,
}

impl MessageRow {
    fn into_message(self) -> Result<ChatMessage, PortError> {
        Ok(ChatMessage {
            role: parse_label("messages.role", &self.role)?,
            created_at: self.created_at,
            id: self.id,
            session_id: self.session_id,
            content: self.content,
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

/// What to hand `plainto_tsquery`: the query's words, each once, space-separated, or `None`
/// when one word is too long to be indexed (it can match nothing, so neither can the query).
/// A query without a word is `Invalid`, as on SQLite.
fn tsquery_words(query: &str) -> Result<Option<String>, PortError> {
    let mut words = search_words(query);
    if words.is_empty() {
        return Err(PortError::new(
            PortErrorKind::Invalid,
            "search.query: must contain at least one word",
        ));
    }
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
    Ok(Some(joined))
}

impl PgSessionStore {
    /// Connects to the server at `url` (creating and migrating the ledger's schema).
    ///
    /// # Errors
    /// `Invalid` for a URL that does not parse, `Unavailable` when the server cannot be reached.
    pub async fn open(url: &str) -> Result<Self, PortError> {
        Ok(Self {
            pool: open_pool(url, SCHEMA, &MIGRATOR).await?,
        })
    }

    async fn session(&self, id: &str) -> Result<Option<ChatSession>, PortError> {
        // No stored id holds a NUL, and the server would refuse the bind.
        if id.contains('\0') {
            return Ok(None);
        }
        let row: Option<SessionRow> = sqlx::query_as(
            "SELECT id, parent_session_id, project_id, title, created_at, max_iterations, \
             token_budget FROM sessions WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("read a session", e))?;
        row.map(SessionRow::into_session).transpose()
    }
}

#[async_trait]
impl SessionStore for PgSessionStore {
    async fn create_session(&self, session: ChatSession) -> Result<ChatSession, PortError> {
        if session.id.trim().is_empty() {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                "session.id: must not be empty",
            ));
        }
        refuse_nul("session.id", Some(&session.id))?;
        refuse_nul("session.project_id", session.project_id.as_deref())?;
        refuse_nul("session.title", session.title.as_deref())?;
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
        sqlx::query(
            "INSERT INTO sessions (id, parent_session_id, project_id, title, created_at, \
             max_iterations, token_budget) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&session.id)
        .bind(&session.parent_session_id)
        .bind(&session.project_id)
        .bind(&session.title)
        .bind(session.created_at)
        .bind(session.limits.max_iterations.map(i64::from))
        .bind(token_budget)
        .execute(&self.pool)
        .await
        .map_err(|e| {
            let err = db_error("create a session", e);
            if err.kind == PortErrorKind::Conflict {
                PortError::new(
                    PortErrorKind::Conflict,
                    format!("session {} already exists", session.id),
                )
            } else {
                err
            }
        })?;
        Ok(session)
    }

    async fn get_session(&self, id: &str) -> Result<ChatSession, PortError> {
        self.session(id).await?.ok_or_else(|| not_found("session", id))
    }

    async fn list_sessions(&self, limit: usize) -> Result<Vec<ChatSession>, PortError> {
        let rows: Vec<SessionRow> = sqlx::query_as(
            "SELECT id, parent_session_id, project_id, title, created_at, max_iterations, \
             token_budget FROM sessions ORDER BY created_at DESC, id DESC LIMIT $1",
        )
        .bind(limit_i64(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("list sessions", e))?;
        rows.into_iter().map(SessionRow::into_session).collect()
    }

    async fn append_message(&self, message: ChatMessage) -> Result<ChatMessage, PortError> {
        if message.id.trim().is_empty() {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                "message.id: must not be empty",
            ));
        }
        refuse_nul("message.id", Some(&message.id))?;
        refuse_nul("message.content", Some(&message.content))?;
        if self.session(&message.session_id).await?.is_none() {
            return Err(not_found("session", &message.session_id));
        }
        sqlx::query(
            "INSERT INTO messages (id, session_id, role, content, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&message.id)
        .bind(&message.session_id)
        .bind(label(&message.role)?)
        .bind(&message.content)
        .bind(message.created_at)
        .execute(&self.pool)
        .await
        .map_err(|e| {
            let err = db_error("append a message", e);
            if err.kind == PortErrorKind::Conflict {
                PortError::new(
                    PortErrorKind::Conflict,
                    format!("message {} already exists", message.id),
                )
            } else {
                err
            }
        })?;
        Ok(message)
    }

    async fn messages(&self, session_id: &str) -> Result<Vec<ChatMessage>, PortError> {
        if self.session(session_id).await?.is_none() {
            return Err(not_found("session", session_id));
        }
        let rows: Vec<MessageRow> = sqlx::query_as(
            "SELECT id, session_id, role, content, created_at FROM messages \
             WHERE session_id = $1 ORDER BY seq",
        )
        .bind(session_id)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("read messages", e))?;
        rows.into_iter().map(MessageRow::into_message).collect()
    }

    /// Best match first (`ts_rank`, shorter messages ahead on equal counts, as FTS5's bm25
    /// favours them), then the oldest message first, as on SQLite.
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SessionSearchHit>, PortError> {
        let Some(words) = tsquery_words(query)? else {
            return Ok(Vec::new());
        };
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT m.session_id, m.id, m.content \
             FROM messages m, plainto_tsquery('simple', $1) q \
             WHERE m.content_tsv @@ q \
             ORDER BY ts_rank(m.content_tsv, q, 1) DESC, m.seq LIMIT $2",
        )
        .bind(words)
        .bind(limit_i64(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("search messages", e))?;
        Ok(rows
            .into_iter()
            .map(|(session_id, message_id, content)| SessionSearchHit {
                session_id,
                message_id,
                content,
            })
            .collect())
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
