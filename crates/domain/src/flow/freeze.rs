//! Freezing a flow: canonical JSON (keys sorted, no whitespace) and its SHA-256, so "which flow
//! did this run use" has an answer that survives the template being edited afterwards.
//!
//! Fields added to the model later are omitted when unset (see [`super::model`]), so the hash
//! of an older flow still verifies after the model grows.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::document::{DocumentError, Syntax, parse_document};
use super::model::Flow;

/// Why a frozen flow could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum FreezeError {
    /// The flow could not be turned into JSON (cannot happen for the plain data model).
    #[error("flow could not be serialized: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// The canonical JSON text of `flow`: object keys sorted, no insignificant whitespace.
pub fn freeze(flow: &Flow) -> Result<String, FreezeError> {
    let value = serde_json::to_value(flow)?;
    let mut out = String::new();
    write_canonical(&value, &mut out)?;
    Ok(out)
}

/// Lower-case hex SHA-256 of `text`.
pub fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The content hash of `flow`: SHA-256 of its canonical JSON.
pub fn content_hash(flow: &Flow) -> Result<String, FreezeError> {
    Ok(sha256_hex(&freeze(flow)?))
}

/// Reads a frozen flow back. Freezing the result gives the same text for any canonical input.
pub fn thaw(frozen: &str) -> Result<Flow, DocumentError> {
    parse_document(frozen, Syntax::Json)
}

fn write_canonical(value: &Value, out: &mut String) -> Result<(), serde_json::Error> {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(key)?);
                out.push(':');
                if let Some(inner) = map.get(key) {
                    write_canonical(inner, out)?;
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out)?;
            }
            out.push(']');
        }
        scalar => out.push_str(&serde_json::to_string(scalar)?),
    }
    Ok(())
}
