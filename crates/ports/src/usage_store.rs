//! The usage store (FORGE-476): one event per model call, written by the gateway and the worker
//! into one file. Totals are computed by the domain's rules from the events read back here.

use async_trait::async_trait;

use crate::clock::Timestamp;
use crate::error::PortError;
use crate::usage::UsageEvent;

/// The usage store. Unknown counts and costs stay `None` through a round trip, never 0.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Records one event. It must carry `at` (`Invalid` otherwise, nothing written).
    async fn record(&self, event: UsageEvent) -> Result<(), PortError>;

    /// Records several events in one durable commit (the gateway's usage writer groups the events
    /// of many calls this way). All or nothing: one invalid event fails the batch, nothing written.
    async fn record_batch(&self, events: &[UsageEvent]) -> Result<(), PortError> {
        for event in events {
            self.record(event.clone()).await?;
        }
        Ok(())
    }

    /// Every event of one run, in the order recorded.
    async fn events_for_run(&self, run_id: &str) -> Result<Vec<UsageEvent>, PortError>;

    /// Every event at or after `since` (a trailing window), in the order recorded.
    async fn events_since(&self, since: Timestamp) -> Result<Vec<UsageEvent>, PortError>;
}
