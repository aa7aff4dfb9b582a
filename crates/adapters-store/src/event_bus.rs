//! The in-process event bus: the embedded default. Every subscriber of a kind receives every
//! event published after it subscribed; nothing is persisted, so `replay` is unavailable.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use metaforge_ports::{BusEvent, EventBus, PortError, PortErrorKind, PublishReceipt, is_valid_event_kind};

/// The in-process bus. Cheap to clone; clones share subscribers.
#[derive(Clone, Default)]
pub struct InProcessEventBus {
    subscribers: Arc<Mutex<HashMap<String, Vec<UnboundedSender<BusEvent>>>>>,
}

/// Refuses an event kind that cannot name a topic.
pub(crate) fn validate_kind(kind: &str) -> Result<(), PortError> {
    if is_valid_event_kind(kind) {
        Ok(())
    } else {
        Err(PortError::new(
            PortErrorKind::Invalid,
            format!("event.kind {kind:?}: must be 1-200 characters of [a-z0-9_.-]"),
        ))
    }
}

impl InProcessEventBus {
    /// An empty bus.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hands `event` to every live subscriber of its kind, dropping closed ones.
    pub(crate) fn dispatch(&self, event: &BusEvent) -> usize {
        let mut subs = self.subscribers.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(list) = subs.get_mut(&event.kind) else {
            return 0;
        };
        list.retain(|tx| tx.unbounded_send(event.clone()).is_ok());
        list.len()
    }
}

#[async_trait]
impl EventBus for InProcessEventBus {
    async fn publish(&self, event: BusEvent) -> Result<PublishReceipt, PortError> {
        validate_kind(&event.kind)?;
        Ok(PublishReceipt {
            delivered: self.dispatch(&event),
            persisted: false,
        })
    }

    fn subscribe(&self, kind: &str) -> Result<UnboundedReceiver<BusEvent>, PortError> {
        validate_kind(kind)?;
        let (tx, rx) = unbounded();
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
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
        Err(PortError::new(
            PortErrorKind::Unavailable,
            "the in-process event bus keeps no durable log to replay (set KAFKA_BOOTSTRAP_SERVERS)",
        ))
    }
}
