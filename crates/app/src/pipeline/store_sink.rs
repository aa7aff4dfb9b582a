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

/// How long the writer gathers events after the first one before it commits them: at most one
/// commit (one fsync) per window whatever the rate of calls, where committing each call's event
/// as it came cost a sixth of a busy gateway's CPU. A kill -9 loses at most the events of this
/// window and of the commit in flight; a flush commits at once.
pub const USAGE_COMMIT_WINDOW: std::time::Duration = std::time::Duration::from_millis(10);

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
/// disk); one writer task commits what queues within [`USAGE_COMMIT_WINDOW`] in one transaction
/// (group commit, at most [`USAGE_BATCH_MAX`] events each), so a burst of calls costs one fsync,
/// not one per call.
/// [`StoreSink::flush`] commits everything queued before it (the binary calls it on a
/// graceful stop); on a kill only the window being gathered, the batch being committed and the
/// events queued behind them can be lost. A failed write is logged, never silently dropped.
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

/// The usage writer: from the first event queued it gathers for [`USAGE_COMMIT_WINDOW`] (or
/// until [`USAGE_BATCH_MAX`] events, or a flush, arrive) and commits them in one transaction, then
/// answers the flushes it took; ends when every sink is dropped, committing what it holds.
async fn write_usage(
    store: Arc<dyn UsageStore>,
    mut queue: tokio::sync::mpsc::UnboundedReceiver<UsageWrite>,
) {
    let mut batch: Vec<UsageEvent> = Vec::with_capacity(USAGE_BATCH_MAX);
    let mut flushes = Vec::new();
    while let Some(first) = queue.recv().await {
        let window_ends = tokio::time::Instant::now() + USAGE_COMMIT_WINDOW;
        let mut next = Some(first);
        loop {
            while let Some(message) = next.take() {
                match message {
                    UsageWrite::Event(event) => batch.push(event),
                    UsageWrite::Flush(done) => flushes.push(done),
                }
                if batch.len() < USAGE_BATCH_MAX {
                    next = queue.try_recv().ok();
                }
            }
            if !flushes.is_empty() || batch.len() >= USAGE_BATCH_MAX {
                break;
            }
            match tokio::time::timeout_at(window_ends, queue.recv()).await {
                Ok(Some(message)) => next = Some(message),
                // The window is over, or every sink is gone: commit what is held.
                Ok(None) | Err(_) => break,
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use metaforge_ports::{PortError, Timestamp};
    use metaforge_test_support::clock::ManualClock;

    use super::*;

    /// A usage store that keeps the size of every batch committed to it.
    #[derive(Default)]
    struct Batches(Mutex<Vec<usize>>);

    impl Batches {
        fn sizes(&self) -> Vec<usize> {
            self.0.lock().map(|b| b.clone()).unwrap_or_default()
        }
    }

    #[async_trait::async_trait]
    impl UsageStore for Batches {
        async fn record(&self, event: UsageEvent) -> Result<(), PortError> {
            self.record_batch(&[event]).await
        }
        async fn record_batch(&self, events: &[UsageEvent]) -> Result<(), PortError> {
            if let Ok(mut batches) = self.0.lock() {
                batches.push(events.len());
            }
            Ok(())
        }
        async fn events_for_run(&self, _run_id: &str) -> Result<Vec<UsageEvent>, PortError> {
            Ok(Vec::new())
        }
        async fn events_since(&self, _since: Timestamp) -> Result<Vec<UsageEvent>, PortError> {
            Ok(Vec::new())
        }
    }

    fn call() -> CallUsage {
        CallUsage {
            event: UsageEvent {
                provider: "openai".into(),
                model: "gpt-4o-mini".into(),
                ..UsageEvent::default()
            },
            raw: None,
        }
    }

    /// Lets the writer task run until it waits again.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn events_within_one_window_are_one_commit_and_none_is_committed_before_it_ends() {
        let store = Arc::new(Batches::default());
        let sink = StoreSink::new(
            Arc::clone(&store) as Arc<dyn UsageStore>,
            Arc::new(ManualClock::fixed()),
        );
        sink.record(call());
        settle().await;
        tokio::time::advance(USAGE_COMMIT_WINDOW / 2).await;
        sink.record(call());
        sink.record(call());
        settle().await;
        assert!(store.sizes().is_empty(), "committed before the window ended");
        tokio::time::advance(USAGE_COMMIT_WINDOW).await;
        settle().await;
        assert_eq!(store.sizes(), vec![3]);
        // The next event opens a new window.
        sink.record(call());
        settle().await;
        assert_eq!(store.sizes(), vec![3]);
        tokio::time::advance(USAGE_COMMIT_WINDOW * 2).await;
        settle().await;
        assert_eq!(store.sizes(), vec![3, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flush_commits_at_once_without_waiting_for_the_window() {
        let store = Arc::new(Batches::default());
        let sink = StoreSink::new(
            Arc::clone(&store) as Arc<dyn UsageStore>,
            Arc::new(ManualClock::fixed()),
        );
        sink.record(call());
        sink.record(call());
        let started = tokio::time::Instant::now();
        sink.flush().await;
        assert_eq!(store.sizes(), vec![2]);
        assert!(
            started.elapsed() < USAGE_COMMIT_WINDOW,
            "the flush waited for the window"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_is_committed_before_its_window_ends() {
        let store = Arc::new(Batches::default());
        let sink = StoreSink::new(
            Arc::clone(&store) as Arc<dyn UsageStore>,
            Arc::new(ManualClock::fixed()),
        );
        for _ in 0..USAGE_BATCH_MAX + 1 {
            sink.record(call());
        }
        settle().await;
        assert_eq!(store.sizes(), vec![USAGE_BATCH_MAX]);
        tokio::time::advance(USAGE_COMMIT_WINDOW).await;
        settle().await;
        assert_eq!(store.sizes(), vec![USAGE_BATCH_MAX, 1]);
    }
}
