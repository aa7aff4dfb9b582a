//! The one error shape every port returns, so callers branch on a kind instead of on adapter types.

use std::error::Error as StdError;

/// What went wrong at a port, in terms a caller can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortErrorKind {
    /// The addressed record does not exist.
    NotFound,
    /// The record exists but is in a state that forbids the change (e.g. a decided approval).
    Conflict,
    /// The input was refused before anything was written.
    Invalid,
    /// The backing engine could not be reached; nothing was written.
    Unavailable,
    /// Stored data failed an integrity check (e.g. a hash mismatch) and is not served.
    Corrupt,
    /// Anything else: a bug or an unexpected engine answer.
    Internal,
}

/// A failure at a port: its kind, a message for people, and the adapter's own error as source.
#[derive(Debug, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct PortError {
    /// What kind of failure this is.
    pub kind: PortErrorKind,
    /// A human-readable account naming the record or field involved.
    pub message: String,
    /// The adapter's underlying error, when there is one.
    #[source]
    pub source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

impl PortError {
    /// A port error without an underlying cause.
    pub fn new(kind: PortErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A port error wrapping the adapter's own error.
    pub fn with_source(
        kind: PortErrorKind,
        message: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind,
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}
