//! The session ledger on SQLite: threads, messages, FTS5 search and `parent_session_id` lineage.

use std::path::Path;

use async_trait::async_trait;
use metaforge_ports::{
    ChatMessage, ChatSession, PortError, PortErrorKind, SessionSearchHit, SessionStore, TurnLimits,
    session_store::search_words,
};
use sqlx::SqlitePool;

use crate::sqlite::{db_error, label, limit_i64, not_found, open_pool, parse_label, parse_ts, ts};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sessions");

/// How deep a lineage walk goes before it is judged a cycle (stored data can be hand-edited).
const MAX_LINEAGE_DEPTH: usize = 10_000;

/// The session ledger in one SQLite file (`sessions.db`).
#[derive(Clone)]
pub struct SqliteSessionStore {
    pool: SqlitePool,
}

#[derive(sqlx::FromRow)]
struct SessionRow {
    id: String,
    parent_session_id: Option<String>,
    project_id: Option<String>,
    title: Option<String>,
    created_at: String,
    max_iterations: Option<i64>,
    token_budget: Option<i64>,
}

impl SessionRow {
    fn into_session(self) -> Result<ChatSession, PortError> {
        Ok(ChatSession {
            created_at: parse_ts("sessions.created_at", &self.created_at)?,
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
    created_at: String,
}

impl MessageRow {
    fn into_message(self) -> Result<ChatMessage, PortError> {
        Ok(ChatMessage {
            role: parse_label("messages.role", &self.role)?,
            created_at: parse_ts("messages.created_at", &self.created_at)?,
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

/// An FTS5 query matching every word as a quoted phrase, so no user text is read as syntax.
pub(crate) fn fts_query(query: &str) -> Result<String, PortError> {
    let words = search_words(query);
    if words.is_empty() {
        return Err(PortError::new(
            PortErrorKind::Invalid,
            "search.query: must contain at least one word",
        ));
    }
    Ok(words
        .iter()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" AND "))
}

impl SqliteSessionStore {
    /// Opens (creating and migrating) the store at `path`.
    pub async fn open(path: &Path) -> Result<Self, PortError> {
        Ok(Self {
            pool: open_pool(path, &MIGRATOR).await?,
        })
    }

    async fn session(&self, id: &str) -> Result<Option<ChatSession>, PortError> {
        let row: Option<SessionRow> = sqlx::query_as(
            "SELECT id, parent_session_id, project_id, title, created_at, max_iterations, token_budget FROM sessions WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("read a session", e))?;
        row.map(SessionRow::into_session).transpose()
    }
}

#[async_trait]
impl SessionStore for SqliteSessionStore {
    async fn create_session(&self, session: ChatSession) -> Result<ChatSession, PortError> {
        if session.id.trim().is_empty() {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                "session.id: must not be empty",
            ));
        }
        if let Some(parent) = &session.parent_session_id
            && self.session(parent).await?.is_none()
        {
            return Err(not_found("parent session", parent));
        }
        sqlx::query(
            "INSERT INTO sessions (id, parent_session_id, project_id, title, created_at, max_iterations, token_budget) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&session.id)
        .bind(&session.parent_session_id)
        .bind(&session.project_id)
        .bind(&session.title)
        .bind(ts(session.created_at))
        .bind(session.limits.max_iterations.map(i64::from))
        .bind(session.limits.token_budget.map(i64::try_from).transpose().map_err(|_| {
            PortError::new(PortErrorKind::Invalid, "session.limits.token_budget: too large to store")
        })?)
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
            "SELECT id, parent_session_id, project_id, title, created_at, max_iterations, token_budget FROM sessions \
             ORDER BY created_at DESC, id DESC LIMIT ?",
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
        if self.session(&message.session_id).await?.is_none() {
            return Err(not_found("session", &message.session_id));
        }
        sqlx::query(
            "INSERT INTO messages (id, session_id, role, content, created_at) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(&message.id)
        .bind(&message.session_id)
        .bind(label(&message.role)?)
        .bind(&message.content)
        .bind(ts(message.created_at))
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
             WHERE session_id = ? ORDER BY seq",
        )
        .bind(session_id)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("read messages", e))?;
        rows.into_iter().map(MessageRow::into_message).collect()
    }

    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SessionSearchHit>, PortError> {
        let fts = fts_query(query)?;
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT m.session_id, m.id, m.content FROM messages_fts f \
             JOIN messages m ON m.seq = f.rowid \
             WHERE messages_fts MATCH ? ORDER BY f.rank, m.seq LIMIT ?",
        )
        .bind(fts)
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
