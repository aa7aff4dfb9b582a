//! Reading flow documents (flows, contexts, operation lists) from YAML or JSON text, with the
//! line and column of the first problem so a person can go straight to it.
//!
//! The domain never opens files: callers hand in the text and say which syntax it is in.

use serde::de::DeserializeOwned;

/// The syntax a document is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// YAML (also accepts most JSON, but JSON files should say so for exact error positions).
    Yaml,
    /// JSON.
    Json,
}

impl Syntax {
    /// Picks the syntax from a file name: `.json` is JSON, everything else is YAML.
    pub fn from_file_name(name: &str) -> Self {
        if name.to_ascii_lowercase().ends_with(".json") {
            Self::Json
        } else {
            Self::Yaml
        }
    }
}

/// A document that could not be read, with where the reader gave up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// The text is not valid for the expected shape; `line`/`column` are 1-based.
    #[error("{line}:{column}: {message}")]
    At {
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
        /// What is wrong there.
        message: String,
    },
    /// The reader reported no position (rare; e.g. an empty document).
    #[error("{message}")]
    Unlocated {
        /// What is wrong.
        message: String,
    },
}

impl DocumentError {
    /// The 1-based `(line, column)` of the problem, when known.
    pub fn position(&self) -> Option<(u64, u64)> {
        match self {
            Self::At { line, column, .. } => Some((*line, *column)),
            Self::Unlocated { .. } => None,
        }
    }
}

/// Parses `text` as `T` in the given syntax.
pub fn parse_document<T: DeserializeOwned>(text: &str, syntax: Syntax) -> Result<T, DocumentError> {
    match syntax {
        Syntax::Json => serde_json::from_str(text).map_err(|e| {
            let message = strip_json_position(&e.to_string());
            if e.line() == 0 {
                DocumentError::Unlocated { message }
            } else {
                DocumentError::At {
                    line: e.line() as u64,
                    column: e.column() as u64,
                    message,
                }
            }
        }),
        Syntax::Yaml => serde_saphyr::from_str(text).map_err(|e| {
            let message = first_line(&e.to_string());
            match e.location() {
                Some(loc) if loc.line() > 0 => DocumentError::At {
                    line: loc.line(),
                    column: loc.column(),
                    message,
                },
                _ => DocumentError::Unlocated { message },
            }
        }),
    }
}

/// serde_json appends " at line L column C"; the position is reported separately.
fn strip_json_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(idx) => message[..idx].to_owned(),
        None => message.to_owned(),
    }
}

/// serde-saphyr renders a source snippet after the message; keep the message line only.
fn first_line(message: &str) -> String {
    let line = message.lines().find(|l| !l.trim().is_empty()).unwrap_or(message);
    let line = line.trim();
    let line = line.strip_prefix("error: ").unwrap_or(line);
    // And a leading "line L column C: ".
    let line = match line.strip_prefix("line ").and_then(|rest| rest.split_once(": ")) {
        Some((position, rest)) if position.contains(" column ") => rest,
        _ => line,
    };
    // Drop a trailing "at line L, column C" the renderer may add; the position is reported apart.
    match line.rfind(" at line ") {
        Some(idx) => line[..idx].to_owned(),
        None => line.to_owned(),
    }
}
