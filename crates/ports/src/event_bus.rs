//! The event bus: dispatched in-process to every subscriber; with Kafka it is additionally
//! persisted to a topic per kind, which makes deposits replayable (the bus is additive).

use async_trait::async_trait;
use futures::channel::mpsc::UnboundedReceiver;
use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::error::PortError;

/// One event on the bus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BusEvent {
    /// uuid v7.
    pub id: String,
    /// What kind of event (`[a-z0-9_.-]+`); a topic per kind when persisted.
    pub kind: String,
    /// The trace it belongs to; carried as the `trace-id` header when persisted.
    pub trace_id: String,
    /// The event body.
    pub payload: serde_json::Value,
    /// When it was published.
    pub at: Timestamp,
    /// The W3C `traceparent` of the work the event belongs to, so a consumer's spans join the
    /// publisher's trace. A durable bus sends its own producer span's context as the
    /// `traceparent` header (parented on this one, else on the publisher's current span) and a
    /// replay reads it back here; `None` when no trace is being recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// True when `kind` is a valid event kind: non-empty, at most 200 characters of `[a-z0-9_.-]`,
/// so it can name a topic.
pub fn is_valid_event_kind(kind: &str) -> bool {
    !kind.is_empty()
        && kind.len() <= 200
        && kind
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-'))
}

/// What publishing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishReceipt {
    /// In-process subscribers it was handed to.
    pub delivered: usize,
    /// True when the event was also written to the durable log.
    pub persisted: bool,
}

/// The event bus.
#[async_trait]
pub trait EventBus: Send + Sync {
    /// Publishes an event: every current subscriber of its kind receives it in-process, and a
    /// durable bus also writes it to the log (an error if that write fails). A bad kind is
    /// `Invalid` and nothing is sent.
    async fn publish(&self, event: BusEvent) -> Result<PublishReceipt, PortError>;

    /// Subscribes in-process to one kind; every subscriber receives every event published after
    /// it subscribed. Dropping the receiver unsubscribes.
    fn subscribe(&self, kind: &str) -> Result<UnboundedReceiver<BusEvent>, PortError>;

    /// True when events are persisted to a durable log.
    fn is_durable(&self) -> bool;

    /// Reads persisted events of one kind as consumer group `group`, resuming after the group's
    /// last committed offset: at most `max` events, waiting up to `wait_ms` for the first.
    /// `Unavailable` on a bus with no durable log.
    async fn replay(
        &self,
        kind: &str,
        group: &str,
        max: usize,
        wait_ms: u64,
    ) -> Result<Vec<BusEvent>, PortError>;
}
