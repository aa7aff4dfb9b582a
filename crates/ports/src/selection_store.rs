//! The durable harness selection: the operator's chosen `provider:model` for roles that have no
//! route (PUT /v1/harness/selection). It survives restarts; a stored selection that no longer
//! passes the family check is ignored on read by the caller, never silently rewritten.

use async_trait::async_trait;

use crate::error::PortError;

/// Where the selection lives.
#[async_trait]
pub trait SelectionStore: Send + Sync {
    /// The stored `provider:model`, if any.
    async fn get(&self) -> Result<Option<String>, PortError>;

    /// Replaces the selection durably (the write is complete when this returns).
    async fn set(&self, route: &str) -> Result<(), PortError>;
}
