//! Freezing a flow: canonical JSON (keys sorted, no whitespace) and its SHA-256, so "which flow
//! did this run use" has an answer that survives the template being edited afterwards.
//!
//! Fields added to the model later are omitted when unset (see [`super::model`]), so the hash
//! of an older flow still verifies after the model grows.

use metaforge_ports::canonical::canonical_json;
pub use metaforge_ports::canonical::sha256_hex;

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
    Ok(canonical_json(&serde_json::to_value(flow)?))
}

/// The content hash of `flow`: SHA-256 of its canonical JSON.
pub fn content_hash(flow: &Flow) -> Result<String, FreezeError> {
    Ok(sha256_hex(&freeze(flow)?))
}

/// Reads a frozen flow back. Freezing the result gives the same text for any canonical input.
pub fn thaw(frozen: &str) -> Result<Flow, DocumentError> {
    parse_document(frozen, Syntax::Json)
}
