//! A flow engine whose runs an outside workflow service drives (Temporal, through the
//! `DrivenRuns` port), as this deployment's run service sees it: [`FollowedEngine`] follows each
//! run's transitions to carry out their effects here — the gate holds in the one approval ledger
//! (`GateHolds`, the embedded engine's rule), the notices on the event bus, the run record — and
//! streams a run's notices by the embedded engine's rule (`notices_of`).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_ports::{
    ApprovalKind, ApprovalLedger, Clock, DrivenRuns, EventBus, FlowEngine, FlowEngineKind, GateAnswer, IdGen,
    PortError, RunLedger, RunState, RunView, StartRun,
};

use super::service::{RunEngine, RunNoticeStream, WorkerHealth};
use super::{GateHolds, RunNotice, bus_event_of, notices_of};

/// The engine as the run service sees it: the driven engine, followed.
pub struct FollowedEngine {
    inner: Arc<dyn DrivenRuns>,
    follower: Arc<Follower>,
}

impl FollowedEngine {
    /// `inner`'s runs followed into `runs`, their gate holds kept in `approvals`, their notices
    /// published as `publish` says. Call [`FollowedEngine::follow_in_background`] once the
    /// runtime serves.
    pub fn new(
        inner: Arc<dyn DrivenRuns>,
        runs: Arc<dyn RunLedger>,
        approvals: Arc<dyn ApprovalLedger>,
        clock: Arc<dyn Clock>,
        publish: Publish,
    ) -> Self {
        let follower = Arc::new(Follower {
            engine: Arc::clone(&inner),
            runs,
            approvals: Arc::clone(&approvals),
            holds: GateHolds::new(approvals, clock),
            cursors: tokio::sync::Mutex::new(HashMap::new()),
            publish,
        });
        Self { inner, follower }
    }

    /// Starts the follower's background pass: at once (start-up), then every
    /// [`FOLLOW_EVERY`], for as long as the process runs.
    pub fn follow_in_background(&self) {
        let follower = Arc::clone(&self.follower);
        tokio::spawn(async move {
            loop {
                follower.pass().await;
                tokio::time::sleep(FOLLOW_EVERY).await;
            }
        });
    }

    /// Follows `run_id` up to its workflow's latest transition now.
    ///
    /// # Errors
    /// The run ledger's or the engine's failure.
    pub async fn follow(&self, run_id: &str) -> Result<(), PortError> {
        self.follower.follow(run_id).await
    }
}

/// How often the gateway follows its Temporal runs (record status, gate holds).
pub const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Where the follower publishes the runs' notices: the deployment's event bus, with fresh ids.
pub struct Publish {
    /// The event bus (Kafka when `KAFKA_BOOTSTRAP_SERVERS` is set).
    pub bus: Arc<dyn EventBus>,
    /// Ids for the events.
    pub ids: Arc<dyn IdGen>,
}

/// The gateway's follower of its Temporal runs (FORGE-485): for each run not yet ended, and each
/// run with a gate hold still open, it reads the transitions the workflow made since the last
/// pass and carries out their gate-hold effects with the same rule as the embedded engine
/// (`GateHolds::follow`: a gate parked in the one approval ledger when it opens, decided with the
/// person's answer, timed out, or canceled), publishes their notices on the event bus as the
/// embedded engine does (each range of transitions claimed in the run ledger first, so of
/// several gateways one publishes it, once; the notices carry the trace of the request that
/// started the run), then brings the run record in line with the workflow's state. Every effect is idempotent, so the cursor lives in memory and a restart
/// simply follows again from the start.
struct Follower {
    engine: Arc<dyn DrivenRuns>,
    runs: Arc<dyn RunLedger>,
    approvals: Arc<dyn ApprovalLedger>,
    holds: GateHolds,
    cursors: tokio::sync::Mutex<HashMap<String, u64>>,
    publish: Publish,
}

impl Follower {
    /// One pass over the runs that may need following.
    async fn pass(&self) {
        let mut ids = std::collections::BTreeSet::new();
        // Only the runs still open: the ledger filters by status, so a pass costs what is live.
        for status in [
            metaforge_ports::RunStatus::Queued,
            metaforge_ports::RunStatus::Running,
            metaforge_ports::RunStatus::AwaitingApproval,
        ] {
            match self.runs.list(Some(status)).await {
                Ok(runs) => ids.extend(
                    runs.into_iter()
                        .filter(|r| r.flow_engine == self.engine.kind())
                        .map(|r| r.id),
                ),
                Err(e) => {
                    tracing::warn!(event = "run_follow_failed", error = %e, "the run ledger could not be listed; following again next pass")
                }
            }
        }
        match self.approvals.list_pending().await {
            Ok(pending) => ids.extend(pending.into_iter().filter_map(|hold| {
                match hold.kind {
                    ApprovalKind::Gate => hold
                        .arguments
                        .get("run_id")
                        .and_then(serde_json::Value::as_str)
                        .map(str::to_owned),
                    ApprovalKind::ToolCall
                    | ApprovalKind::DesignFlowProposal
                    | ApprovalKind::DesignFlowVersion => None,
                }
            })),
            Err(e) => {
                tracing::warn!(event = "run_follow_failed", error = %e, "the open holds could not be listed; following again next pass")
            }
        }
        for id in ids {
            if let Err(e) = self.follow(&id).await {
                tracing::debug!(event = "run_follow_waiting", run_id = %id, error = %e, "the run could not be followed now; again next pass");
            }
        }
    }

    /// Follows one run up to its workflow's latest transition.
    async fn follow(&self, run_id: &str) -> Result<(), PortError> {
        let record = self.runs.get(run_id).await?;
        if record.flow_engine != self.engine.kind() {
            return Ok(());
        }
        let mut cursors = self.cursors.lock().await;
        let mut cursor = cursors.get(run_id).copied().unwrap_or(0);
        let mut last = None;
        loop {
            let page = self.engine.transitions_after(run_id, cursor).await?;
            if page.is_empty() {
                break;
            }
            for transition in &page {
                self.holds.follow(&record, transition).await?;
                cursor = transition.seq;
                cursors.insert(run_id.to_owned(), cursor);
                last = Some(transition.state.clone());
            }
            self.publish_notices(run_id, &page).await?;
        }
        drop(cursors);
        if let Some(state) = last {
            self.engine.reconcile(&state).await;
        }
        Ok(())
    }
}

impl Follower {
    /// Publishes the notices of `page` (the transitions just followed) that no gateway has
    /// published yet: the range is claimed in the run ledger first, and a claim that reaches
    /// back before the page reads the missing transitions again. Publishing happens after the
    /// claim, as the embedded engine publishes after its commit: a failure is logged loudly
    /// (the workflow's history is the record) and not retried.
    async fn publish_notices(
        &self,
        run_id: &str,
        page: &[metaforge_ports::RunTransition],
    ) -> Result<(), PortError> {
        let (Some(first), Some(last)) = (page.first(), page.last()) else {
            return Ok(());
        };
        let Some(from) = self.runs.claim_published(run_id, last.seq).await? else {
            return Ok(());
        };
        let mut transitions: Vec<metaforge_ports::RunTransition> = Vec::new();
        let mut read = from;
        while read + 1 < first.seq {
            let missed = self.engine.transitions_after(run_id, read).await?;
            let before_page: Vec<_> = missed.into_iter().filter(|t| t.seq < first.seq).collect();
            let Some(newest) = before_page.last().map(|t| t.seq) else {
                break;
            };
            read = newest;
            transitions.extend(before_page);
        }
        transitions.extend(page.iter().filter(|t| t.seq > from).cloned());
        let traceparent = self.engine.traceparent(run_id).await;
        for transition in &transitions {
            for notice in notices_of(transition) {
                let event = match bus_event_of(&notice, self.publish.ids.new_id()) {
                    Ok(mut event) => {
                        event.traceparent.clone_from(&traceparent);
                        event
                    }
                    Err(e) => {
                        tracing::error!(event = "run_event_publish_failed", run_id, seq = notice.seq, kind = notice.kind.as_str(), error = %e, "a run notice could not be encoded");
                        continue;
                    }
                };
                if let Err(e) = self.publish.bus.publish(event).await {
                    tracing::error!(event = "run_event_publish_failed", run_id, seq = notice.seq, kind = notice.kind.as_str(), error = %e, "a run notice did not reach the event bus (the workflow's history still has the transition)");
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl FlowEngine for FollowedEngine {
    fn kind(&self) -> FlowEngineKind {
        self.inner.kind()
    }

    async fn start(&self, request: StartRun) -> Result<RunState, PortError> {
        self.inner.start(request).await
    }

    /// The answer is signalled, then the run followed at once, so its hold is decided now
    /// rather than at the next pass.
    async fn decide_gate(&self, run_id: &str, answer: GateAnswer) -> Result<RunState, PortError> {
        let state = self.inner.decide_gate(run_id, answer).await?;
        self.follow_now(run_id).await;
        Ok(state)
    }

    async fn state(&self, run_id: &str) -> Result<RunView, PortError> {
        self.inner.state(run_id).await
    }

    async fn cancel(&self, run_id: &str, by: &str, reason: Option<String>) -> Result<RunState, PortError> {
        let state = self.inner.cancel(run_id, by, reason).await?;
        self.follow_now(run_id).await;
        Ok(state)
    }
}

impl FollowedEngine {
    async fn follow_now(&self, run_id: &str) {
        if let Err(e) = self.follower.follow(run_id).await {
            tracing::debug!(event = "run_follow_waiting", run_id, error = %e, "the run could not be followed now; the background pass will");
        }
    }
}

#[async_trait]
impl RunEngine for FollowedEngine {
    /// The run's notices, built from the transitions its workflow made (the `run_transitions`
    /// query, polled) by the same rule as the embedded engine's (`notices_of`): with `after`, the
    /// ones after that key (`(0, 0)`: all), else those from now on; each once, in order; the
    /// stream ends after the run's last. While no worker answers, it waits and asks again.
    async fn notices(&self, run_id: &str, after: Option<(u64, u32)>) -> Result<RunNoticeStream, PortError> {
        use futures::StreamExt as _;
        self.inner.state(run_id).await?;
        let last = match after {
            Some(key) => key,
            None => (latest_seq(self.inner.as_ref(), run_id).await?, u32::MAX),
        };
        let watch = Watch {
            engine: Arc::clone(&self.inner),
            run_id: run_id.to_owned(),
            last,
            fetched: last.0.saturating_sub(1),
            pending: std::collections::VecDeque::new(),
            ended: false,
        };
        Ok(futures::stream::unfold(watch, Watch::next).boxed())
    }

    async fn worker(&self) -> WorkerHealth {
        self.inner.worker().await
    }
}

/// How often a watcher asks the workflow for new transitions.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
/// How long a watcher waits before asking again when no worker answered.
const WATCH_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// The number of the run's last transition so far.
async fn latest_seq(engine: &dyn DrivenRuns, run_id: &str) -> Result<u64, PortError> {
    let mut seen = 0;
    loop {
        let page = engine.transitions_after(run_id, seen).await?;
        match page.last() {
            Some(last) => seen = last.seq,
            None => return Ok(seen),
        }
    }
}

/// One watcher's place in a run's notices.
struct Watch {
    engine: Arc<dyn DrivenRuns>,
    run_id: String,
    /// The key of the last notice handed out.
    last: (u64, u32),
    /// The number of the last transition read.
    fetched: u64,
    pending: std::collections::VecDeque<RunNotice>,
    ended: bool,
}

impl Watch {
    async fn next(mut self) -> Option<(RunNotice, Self)> {
        loop {
            if let Some(notice) = self.pending.pop_front() {
                self.last = notice.key();
                return Some((notice, self));
            }
            if self.ended {
                return None;
            }
            match self.engine.transitions_after(&self.run_id, self.fetched).await {
                Ok(page) if page.is_empty() => tokio::time::sleep(WATCH_EVERY).await,
                Ok(page) => {
                    for transition in &page {
                        self.fetched = transition.seq;
                        self.ended |= transition.state.status.is_terminal();
                        self.pending
                            .extend(notices_of(transition).into_iter().filter(|n| n.key() > self.last));
                    }
                }
                Err(e) if e.kind == metaforge_ports::PortErrorKind::NotFound => return None,
                Err(e) => {
                    tracing::debug!(event = "run_watch_waiting", run_id = %self.run_id, error = %e, "the run's workflow did not answer; asking again");
                    tokio::time::sleep(WATCH_RETRY).await;
                }
            }
        }
    }
}
