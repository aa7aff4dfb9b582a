//! The session ledger: chat threads and their messages, searchable (FTS5 on SQLite), with
//! `parent_session_id` lineage so a compressed or forked thread can be traced to its origin.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::error::PortError;

/// One chat thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatSession {
    /// uuid v7.
    pub id: String,
    /// The session this one continues (compression, fork), if any.
    pub parent_session_id: Option<String>,
    /// The project the thread is scoped to.
    pub project_id: Option<String>,
    /// A title for lists.
    pub title: Option<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// The thread's own limits for its turns (unset = the deployment's defaults).
    #[serde(default)]
    pub limits: TurnLimits,
}

/// Per-thread overrides of a turn's limits; a turn hitting one ends with an error naming it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnLimits {
    /// Most model calls in one turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// Most prompt + completion tokens one turn may use (as reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageRole {
    /// The system prompt or a system note.
    System,
    /// The person.
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

impl MessageRole {
    /// The snake_case name used in JSON and storage.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }

    /// Parses the name written by [`MessageRole::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "system" => Self::System,
            "user" => Self::User,
            "assistant" => Self::Assistant,
            "tool" => Self::Tool,
            _ => return None,
        })
    }
}

/// One message in a thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// uuid v7.
    pub id: String,
    /// The thread.
    pub session_id: String,
    /// Who wrote it.
    pub role: MessageRole,
    /// Its text.
    pub content: String,
    /// When it was written.
    pub created_at: Timestamp,
}

/// A search hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSearchHit {
    /// The thread.
    pub session_id: String,
    /// The message that matched.
    pub message_id: String,
    /// The matching message's text.
    pub content: String,
}

/// The session ledger.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Creates a thread. Its parent, when named, must exist (`NotFound`); an existing id is a
    /// `Conflict`.
    async fn create_session(&self, session: ChatSession) -> Result<ChatSession, PortError>;

    /// One thread (`NotFound` when absent).
    async fn get_session(&self, id: &str) -> Result<ChatSession, PortError>;

    /// Every thread, newest first, at most `limit`.
    async fn list_sessions(&self, limit: usize) -> Result<Vec<ChatSession>, PortError>;

    /// Appends a message to an existing thread (`NotFound` otherwise).
    async fn append_message(&self, message: ChatMessage) -> Result<ChatMessage, PortError>;

    /// A thread's messages in the order appended.
    async fn messages(&self, session_id: &str) -> Result<Vec<ChatMessage>, PortError>;

    /// Messages containing every word of `query` (whole words, case-insensitive), best first,
    /// at most `limit`. Query syntax characters are treated as text, never as operators; a
    /// query with no words is `Invalid`.
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SessionSearchHit>, PortError>;

    /// The thread and its ancestors by `parent_session_id`, the thread first, the root last.
    async fn lineage(&self, session_id: &str) -> Result<Vec<ChatSession>, PortError>;
}

/// The words a search looks for: maximal runs of alphanumeric characters, lower-cased. Shared by
/// every adapter so they agree on what a query means.
pub fn search_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}
