//! The usage store double.

use std::sync::Mutex;

use async_trait::async_trait;
use metaforge_ports::{PortError, PortErrorKind, Timestamp, UsageEvent, UsageStore};

use super::{err, lock};

/// A usage store in memory (unit tests only).
#[derive(Default)]
pub struct MemoryUsageStore {
    events: Mutex<Vec<UsageEvent>>,
}

impl MemoryUsageStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

/// The rules the SQLite store enforces on an event before writing it.
fn check(event: &UsageEvent) -> Result<(), PortError> {
    if event.provider.trim().is_empty() || event.model.trim().is_empty() {
        return Err(err(
            PortErrorKind::Invalid,
            "usage.provider/model: must not be empty",
        ));
    }
    if event.cost_usd.is_some_and(|c| !c.is_finite() || c < 0.0) {
        return Err(err(
            PortErrorKind::Invalid,
            "usage.cost_usd: must be a finite, non-negative number or null",
        ));
    }
    let too_big = [
        event.prompt_tokens,
        event.completion_tokens,
        event.cached_input_tokens,
        event.cache_write_tokens,
        event.reasoning_tokens,
    ]
    .into_iter()
    .flatten()
    .any(|n| i64::try_from(n).is_err());
    if too_big {
        return Err(err(
            PortErrorKind::Invalid,
            "usage: a token count is too large to store",
        ));
    }
    if event.at.is_none() {
        return Err(err(
            PortErrorKind::Invalid,
            "usage.at: must be set by the recorder",
        ));
    }
    Ok(())
}

#[async_trait]
impl UsageStore for MemoryUsageStore {
    async fn record(&self, event: UsageEvent) -> Result<(), PortError> {
        check(&event)?;
        lock(&self.events).push(event);
        Ok(())
    }

    async fn record_batch(&self, events: &[UsageEvent]) -> Result<(), PortError> {
        events.iter().try_for_each(check)?;
        lock(&self.events).extend_from_slice(events);
        Ok(())
    }

    async fn events_for_run(&self, run_id: &str) -> Result<Vec<UsageEvent>, PortError> {
        Ok(lock(&self.events)
            .iter()
            .filter(|e| e.run_id.as_deref() == Some(run_id))
            .cloned()
            .collect())
    }

    async fn events_since(&self, since: Timestamp) -> Result<Vec<UsageEvent>, PortError> {
        Ok(lock(&self.events)
            .iter()
            .filter(|e| e.at.is_some_and(|at| at >= since))
            .cloned()
            .collect())
    }
}
