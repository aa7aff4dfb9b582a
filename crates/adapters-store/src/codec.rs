//! The encodings every ledger engine shares (SQLite and PostgreSQL store the same text): enum
//! labels, JSON columns, timestamps as text, and the errors a stored value that no longer decodes becomes.

use metaforge_ports::{PortError, PortErrorKind, Timestamp};

/// A stored enum label that no longer parses is `Corrupt`, naming the column and value.
pub(crate) fn corrupt_label(column: &str, value: &str) -> PortError {
    PortError::new(
        PortErrorKind::Corrupt,
        format!("stored {column} {value:?} is not a known value"),
    )
}

/// Decodes a stored JSON column.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(column: &str, text: &str) -> Result<T, PortError> {
    serde_json::from_str(text).map_err(|e| {
        PortError::with_source(
            PortErrorKind::Corrupt,
            format!("stored {column} is not valid JSON"),
            e,
        )
    })
}

/// Encodes a JSON column.
pub(crate) fn to_json<T: serde::Serialize>(column: &str, value: &T) -> Result<String, PortError> {
    serde_json::to_string(value).map_err(|e| {
        PortError::with_source(
            PortErrorKind::Invalid,
            format!("{column} cannot be encoded as JSON"),
            e,
        )
    })
}

/// A limit for a `LIMIT` bind (both engines take a signed 64-bit integer).
pub(crate) fn limit_i64(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// `NotFound` naming what was looked up.
pub(crate) fn not_found(what: &str, id: &str) -> PortError {
    PortError::new(PortErrorKind::NotFound, format!("{what} {id:?} does not exist"))
}

/// The serde label of a unit enum variant (its snake_case name), used as the stored value.
pub(crate) fn label<T: serde::Serialize>(value: &T) -> Result<String, PortError> {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => Ok(s),
        _ => Err(PortError::new(
            PortErrorKind::Internal,
            "an enum value has no string label",
        )),
    }
}

/// Parses a stored serde label back into its enum; an unknown label is `Corrupt`.
pub(crate) fn parse_label<T: serde::de::DeserializeOwned>(column: &str, value: &str) -> Result<T, PortError> {
    serde_json::from_value(serde_json::Value::String(value.to_owned()))
        .map_err(|_| corrupt_label(column, value))
}

/// A run sequence number for a bind (both engines store a signed 64-bit integer).
pub(crate) fn seq_i64(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// A stored sequence number back; a negative one is `Corrupt`, naming the column.
pub(crate) fn seq_u64(column: &str, seq: i64) -> Result<u64, PortError> {
    u64::try_from(seq).map_err(|_| {
        PortError::new(
            PortErrorKind::Corrupt,
            format!("stored {column} {seq} is negative"),
        )
    })
}

/// Encodes a timestamp as fixed-width RFC 3339 (microseconds, `Z`), which sorts as text.
pub(crate) fn ts(t: Timestamp) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Decodes a stored timestamp; a malformed one is `Corrupt` naming the column.
pub(crate) fn parse_ts(column: &str, text: &str) -> Result<Timestamp, PortError> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| {
            PortError::with_source(
                PortErrorKind::Corrupt,
                format!("stored {column} {text:?} is not an RFC 3339 timestamp"),
                e,
            )
        })
}

/// Decodes an optional stored timestamp.
pub(crate) fn parse_opt_ts(column: &str, text: Option<String>) -> Result<Option<Timestamp>, PortError> {
    text.map(|t| parse_ts(column, &t)).transpose()
}
