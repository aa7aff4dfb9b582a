//! The session store double: search is whole-word, case-insensitive, all words required.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use metaforge_ports::{
    ChatMessage, ChatSession, PortError, PortErrorKind, SessionSearchHit, SessionStore,
    session_store::search_words,
};

use super::{err, lock};

#[derive(Default)]
struct State {
    sessions: BTreeMap<String, ChatSession>,
    messages: Vec<ChatMessage>,
}

/// A session store in memory (unit tests only).
#[derive(Default)]
pub struct MemorySessionStore {
    state: Mutex<State>,
}

impl MemorySessionStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

fn missing(what: &str, id: &str) -> PortError {
    err(PortErrorKind::NotFound, format!("{what} {id:?} does not exist"))
}

#[async_trait]
impl SessionStore for MemorySessionStore {
    async fn create_session(&self, session: ChatSession) -> Result<ChatSession, PortError> {
        if session.id.trim().is_empty() {
            return Err(err(PortErrorKind::Invalid, "session.id: must not be empty"));
        }
        let mut s = lock(&self.state);
        if let Some(p) = &session.parent_session_id
            && !s.sessions.contains_key(p)
        {
            return Err(missing("parent session", p));
        }
        if s.sessions.contains_key(&session.id) {
            return Err(err(
                PortErrorKind::Conflict,
                format!("session {} already exists", session.id),
            ));
        }
        s.sessions.insert(session.id.clone(), session.clone());
        Ok(session)
    }

    async fn get_session(&self, id: &str) -> Result<ChatSession, PortError> {
        lock(&self.state)
            .sessions
            .get(id)
            .cloned()
            .ok_or_else(|| missing("session", id))
    }

    async fn list_sessions(&self, limit: usize) -> Result<Vec<ChatSession>, PortError> {
        let mut v: Vec<ChatSession> = lock(&self.state).sessions.values().cloned().collect();
        v.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        v.truncate(limit);
        Ok(v)
    }

    async fn append_message(&self, message: ChatMessage) -> Result<ChatMessage, PortError> {
        if message.id.trim().is_empty() {
            return Err(err(PortErrorKind::Invalid, "message.id: must not be empty"));
        }
        let mut s = lock(&self.state);
        if !s.sessions.contains_key(&message.session_id) {
            return Err(missing("session", &message.session_id));
        }
        if s.messages.iter().any(|m| m.id == message.id) {
            return Err(err(
                PortErrorKind::Conflict,
                format!("message {} already exists", message.id),
            ));
        }
        s.messages.push(message.clone());
        Ok(message)
    }

    async fn messages(&self, session_id: &str) -> Result<Vec<ChatMessage>, PortError> {
        let s = lock(&self.state);
        if !s.sessions.contains_key(session_id) {
            return Err(missing("session", session_id));
        }
        Ok(s.messages
            .iter()
            .filter(|m| m.session_id == session_id)
            .cloned()
            .collect())
    }

    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SessionSearchHit>, PortError> {
        let words = search_words(query);
        if words.is_empty() {
            return Err(err(
                PortErrorKind::Invalid,
                "search.query: must contain at least one word",
            ));
        }
        Ok(lock(&self.state)
            .messages
            .iter()
            .filter(|m| {
                let have = search_words(&m.content);
                words.iter().all(|w| have.contains(w))
            })
            .take(limit)
            .map(|m| SessionSearchHit {
                session_id: m.session_id.clone(),
                message_id: m.id.clone(),
                content: m.content.clone(),
            })
            .collect())
    }

    async fn lineage(&self, session_id: &str) -> Result<Vec<ChatSession>, PortError> {
        let s = lock(&self.state);
        let mut chain = vec![
            s.sessions
                .get(session_id)
                .cloned()
                .ok_or_else(|| missing("session", session_id))?,
        ];
        while let Some(parent) = chain.last().and_then(|c| c.parent_session_id.clone()) {
            if chain.iter().any(|c| c.id == parent) {
                return Err(err(
                    PortErrorKind::Corrupt,
                    format!("session {session_id} has a cyclic parent chain"),
                ));
            }
            chain.push(
                s.sessions
                    .get(&parent)
                    .cloned()
                    .ok_or_else(|| missing("parent session", &parent))?,
            );
        }
        Ok(chain)
    }
}
