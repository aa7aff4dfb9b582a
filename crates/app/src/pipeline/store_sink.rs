//! The usage writer behind every pipeline call: events are queued on the response path and
//! committed by one writer task in group commits, so a burst of calls costs one fsync.

use std::sync::Arc;

use metaforge_ports::usage_store::UsageStore;
use metaforge_ports::{Clock, UsageEvent};

use super::usage::{CallUsage, UsageSink};
use crate::usage_metrics::UsageMetrics;

/// The most usage events one transaction of the usage writer holds. A batch is whatever queued
/// while the previous commit ran, so this only matters under a backlog; it is large enough that
/// one writer keeps up with the gateway's throughput even when a commit (one fsync) takes 50 ms.
pub const USAGE_BATCH_MAX: usize = 1024;

/// What the usage writer task is sent.
#[expect(
    clippy::large_enum_variant,
    reason = "events are the traffic and flushes are rare; boxing would allocate once per call"
)]
enum UsageWrite {
    /// One call's event, to be committed with whatever else is waiting.
    Event(UsageEvent),
    /// Answered once every event sent before it is committed (a graceful stop).
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Records each pipeline call's usage into the gateway's usage store, so the usage summary
/// counts chat completions. `record` only queues the event (the response never waits for the
/// disk); one writer task commits whatever is queued in one transaction (group commit, at most
/// [`USAGE_BATCH_MAX`] events each), so a burst of calls costs one fsync, not one per call.
/// [`StoreSink::flush`] commits everything queued before it (the binary calls it on a
/// graceful stop); on a kill only the batch being committed and the events queued behind it can
/// be lost. A failed write is logged, never silently dropped.
pub struct StoreSink {
    clock: Arc<dyn Clock>,
    metrics: Option<Arc<UsageMetrics>>,
    queue: Option<tokio::sync::mpsc::UnboundedSender<UsageWrite>>,
}

impl StoreSink {
    /// A sink writing into `store`, stamping each event's time from `clock` (the pipeline leaves
    /// `at` to the recorder). Starts the writer task on the current tokio runtime; without one,
    /// every event is logged as not recorded.
    pub fn new(store: Arc<dyn UsageStore>, clock: Arc<dyn Clock>) -> Self {
        let queue = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let (queue, events) = tokio::sync::mpsc::unbounded_channel();
                runtime.spawn(write_usage(store, events));
                Some(queue)
            }
            Err(_) => None,
        };
        Self {
            clock,
            metrics: None,
            queue,
        }
    }

    /// Also adds every call to the usage series and the per-run spend alarm.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<UsageMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Returns once every event recorded before this call is committed (or its failure logged).
    pub async fn flush(&self) {
        let Some(queue) = &self.queue else { return };
        let (done, committed) = tokio::sync::oneshot::channel();
        if queue.send(UsageWrite::Flush(done)).is_ok() {
            let _ = committed.await;
        }
    }
}

impl UsageSink for StoreSink {
    fn record(&self, usage: CallUsage) {
        let mut event = usage.event;
        if event.at.is_none() {
            event.at = Some(self.clock.now());
        }
        if let Some(metrics) = &self.metrics {
            metrics.observe(&event);
        }
        let Some(queue) = &self.queue else {
            tracing::error!(event = "llm_usage_not_recorded", "no runtime to record usage on");
            return;
        };
        if queue.send(UsageWrite::Event(event)).is_err() {
            tracing::error!(event = "llm_usage_not_recorded", "the usage writer has stopped");
        }
    }
}

/// The usage writer: takes every event already queued (up to [`USAGE_BATCH_MAX`]) and commits
/// them in one transaction, then answers the flushes it took; ends when every sink is dropped.
async fn write_usage(
    store: Arc<dyn UsageStore>,
    mut queue: tokio::sync::mpsc::UnboundedReceiver<UsageWrite>,
) {
    let mut batch: Vec<UsageEvent> = Vec::with_capacity(USAGE_BATCH_MAX);
    let mut flushes = Vec::new();
    while let Some(first) = queue.recv().await {
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                UsageWrite::Event(event) => batch.push(event),
                UsageWrite::Flush(done) => flushes.push(done),
            }
            if batch.len() < USAGE_BATCH_MAX {
                next = queue.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            commit_usage(store.as_ref(), &batch).await;
            batch.clear();
        }
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Commits `batch`; when the batch is refused, each event is tried alone so one bad event costs
/// only itself, and every event that still fails is logged.
async fn commit_usage(store: &dyn UsageStore, batch: &[UsageEvent]) {
    let Err(err) = store.record_batch(batch).await else {
        return;
    };
    tracing::warn!(event = "llm_usage_batch_failed", events = batch.len(), error = %err, "retrying the batch's events one by one");
    for event in batch {
        if let Err(err) = store.record(event.clone()).await {
            tracing::error!(event = "llm_usage_not_recorded", provider = %event.provider, error = %err, "usage store write failed");
        }
    }
}
