//! The event bus double: in-process dispatch, plus a recorded log so tests can read what was
//! published. It is not durable (`replay` is unavailable), like the production in-process bus.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use metaforge_ports::{BusEvent, EventBus, PortError, PortErrorKind, PublishReceipt, is_valid_event_kind};

use super::{err, lock};

/// An event bus in memory that also remembers every published event (unit tests only).
#[derive(Default)]
pub struct MemoryEventBus {
    subscribers: Mutex<HashMap<String, Vec<UnboundedSender<BusEvent>>>>,
    published: Mutex<Vec<BusEvent>>,
}

impl MemoryEventBus {
    /// An empty bus.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every event published so far, in order.
    pub fn published(&self) -> Vec<BusEvent> {
        lock(&self.published).clone()
    }
}

fn check_kind(kind: &str) -> Result<(), PortError> {
    if is_valid_event_kind(kind) {
        Ok(())
    } else {
        Err(err(
            PortErrorKind::Invalid,
            format!("event.kind {kind:?}: must be 1-200 characters of [a-z0-9_.-]"),
        ))
    }
}

#[async_trait]
impl EventBus for MemoryEventBus {
    async fn publish(&self, event: BusEvent) -> Result<PublishReceipt, PortError> {
        check_kind(&event.kind)?;
        lock(&self.published).push(event.clone());
        let mut subs = lock(&self.subscribers);
        let delivered = match subs.get_mut(&event.kind) {
            Some(list) => {
                list.retain(|tx| tx.unbounded_send(event.clone()).is_ok());
                list.len()
            }
            None => 0,
        };
        Ok(PublishReceipt {
            delivered,
            persisted: false,
        })
    }

    fn subscribe(&self, kind: &str) -> Result<UnboundedReceiver<BusEvent>, PortError> {
        check_kind(kind)?;
        let (tx, rx) = unbounded();
        lock(&self.subscribers)
            .entry(kind.to_owned())
            .or_default()
            .push(tx);
        Ok(rx)
    }

    fn is_durable(&self) -> bool {
        false
    }

    async fn replay(
        &self,
        _kind: &str,
        _group: &str,
        _max: usize,
        _wait_ms: u64,
    ) -> Result<Vec<BusEvent>, PortError> {
        Err(err(
            PortErrorKind::Unavailable,
            "the in-memory event bus keeps no durable log",
        ))
    }
}
