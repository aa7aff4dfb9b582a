//! The embedded engine (FORGE-401/474/485, issue 16): runs design flows in this process, durable
//! at every transition in the run ledger. One task per active run drives the pure reducer
//! (`metaforge_domain::run`): every accepted event becomes a transition persisted with
//! compare-and-set before anything acts on it, then its effects are carried out, each idempotent
//! by key (the gate hold `gate:run:phase:attempt`, the client task `run:phase:attempt`, bus
//! notices keyed by run, sequence and index). After a crash, [`EmbeddedEngine::resume_all`]
//! re-acts from the last transition and the reducer's `resume`, so nothing is duplicated.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::channel::mpsc::{UnboundedSender, unbounded};
use metaforge_agent::CancellationToken;
use metaforge_domain::run::{FrozenFlow, start};
use metaforge_ports::{
    ApprovalKind, ApprovalLedger, ClientTaskStore, Clock, EventBus, FlowEngine, FlowEngineKind,
    FlowVersionStore, GateAnswer, IdGen, PhaseBrain, PortError, PortErrorKind, RunLedger, RunRecord,
    RunState, RunTransition, RunView, StartRun, TwinStore, WaiterResolution, gate_approval_id,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::driver::{Driver, Msg, Opening};
use super::notices::{RunEvents, RunNotice, backlog_after};
use super::service::{RunEngine, RunNoticeStream, WorkerHealth};

/// The ports the engine runs over. The binary passes the same ledgers the gateway serves, so a
/// gate the engine parks is the hold `GET /v1/approvals` lists.
#[derive(Clone)]
pub struct EnginePorts {
    /// The run ledger: records, transitions, settling.
    pub runs: Arc<dyn RunLedger>,
    /// Flow versions: a resumed run re-reads (and re-verifies) its frozen flow here.
    pub versions: Arc<dyn FlowVersionStore>,
    /// The one approval ledger: gate holds (kind `gate`).
    pub approvals: Arc<dyn ApprovalLedger>,
    /// Client tasks: withdrawn when their run is canceled.
    pub tasks: Arc<dyn ClientTaskStore>,
    /// The twin: each run's branch `run/<id>`, merged into `main` when the run completes.
    pub twin: Arc<dyn TwinStore>,
    /// Where every transition is announced (best effort: the ledger is the record).
    pub bus: Arc<dyn EventBus>,
    /// Time (events and deadlines).
    pub clock: Arc<dyn Clock>,
    /// Ids (bus events).
    pub ids: Arc<dyn IdGen>,
}

/// Who does phase work, by the run's `intelligence` (fixed when the run starts).
#[derive(Clone)]
pub struct PhaseBrains {
    /// Server intelligence ([`super::ServerPhaseBrain`]).
    pub server: Arc<dyn PhaseBrain>,
    /// Client intelligence ([`super::ClientPhaseBrain`]).
    pub client: Arc<dyn PhaseBrain>,
}

/// The engine's timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// How often a run parked at a gate with a deadline compares the clock with it (the deadline
    /// itself is stored in the run's state, so it also fires after a restart).
    pub deadline_tick: Duration,
    /// The pause before a phase re-runs after a retryable failure, times the failures so far.
    pub retry_delay: Duration,
    /// The pause before effects that failed (a ledger or store briefly unavailable) are tried
    /// again, and before a transition that could not be persisted is tried again.
    pub effect_retry: Duration,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            deadline_tick: Duration::from_secs(1),
            retry_delay: Duration::from_secs(5),
            effect_retry: Duration::from_secs(5),
        }
    }
}

/// Where the engine is in its life. Only a running engine drives runs or answers `live: true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    /// Built; [`EmbeddedEngine::resume_all`] not called yet.
    Created,
    /// Driving runs.
    Running,
    /// [`EmbeddedEngine::shutdown`] was called.
    Stopped,
}

/// What [`EmbeddedEngine::resume_all`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResumeReport {
    /// Runs picked up at their last boundary (a phase re-running with its key, a gate parked).
    pub resumed: Vec<String>,
    /// Terminal runs whose last effects were carried out again and confirmed.
    pub settled: Vec<String>,
    /// Runs that could not be resumed, with why (their frozen version could not be read back or
    /// verified); they read `live: false` with that reason.
    pub failed: Vec<(String, String)>,
    /// Gate holds left open for a gate no run waits at any more, closed as canceled.
    pub closed_holds: Vec<String>,
}

/// One active run: where to send it events.
pub(crate) struct RunHandle {
    pub(crate) tx: mpsc::UnboundedSender<Msg>,
}

/// The engine's shared state; every run task holds it.
pub(crate) struct Shared {
    pub(crate) ports: EnginePorts,
    pub(crate) brains: PhaseBrains,
    pub(crate) options: EngineOptions,
    lifecycle: Mutex<Lifecycle>,
    pub(crate) stopping: CancellationToken,
    active: Mutex<HashMap<String, RunHandle>>,
    subscribers: Mutex<HashMap<String, Vec<UnboundedSender<RunNotice>>>>,
    resume_failures: Mutex<HashMap<String, String>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Why the engine does not drive runs here while it is not running (another process holds
    /// the engine's lease, or this one lost it), said by every refusal.
    idle_reason: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn lifecycle(&self) -> Lifecycle {
        *lock(&self.lifecycle)
    }

    /// Publishes one notice on the bus (logged loudly on failure: the ledger is the record) and
    /// hands it to the run's subscribers. Returns whether the bus took it.
    pub(crate) async fn publish(&self, notice: &RunNotice) -> bool {
        let event = match super::notices::bus_event_of(notice, self.ports.ids.new_id()) {
            Ok(event) => event,
            Err(e) => {
                tracing::error!(event = "run_event_publish_failed", run_id = %notice.run_id, seq = notice.seq, kind = notice.kind.as_str(), error = %e, "a run notice could not be encoded");
                return false;
            }
        };
        let published = match self.ports.bus.publish(event).await {
            Ok(_) => true,
            Err(e) => {
                tracing::error!(event = "run_event_publish_failed", run_id = %notice.run_id, seq = notice.seq, kind = notice.kind.as_str(), error = %e, "a run notice did not reach the event bus (the run ledger still has the transition)");
                false
            }
        };
        let mut subscribers = lock(&self.subscribers);
        if let Some(list) = subscribers.get_mut(&notice.run_id) {
            list.retain(|tx| tx.unbounded_send(notice.clone()).is_ok());
        }
        published
    }

    /// The run ended: its subscribers' streams end, and it is no longer active.
    pub(crate) fn finished(&self, run_id: &str) {
        lock(&self.subscribers).remove(run_id);
        lock(&self.active).remove(run_id);
    }

    fn spawn_driver(
        self: &Arc<Self>,
        flow: FrozenFlow,
        record: RunRecord,
        latest: RunTransition,
        opening: Opening,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.active).insert(record.id.clone(), RunHandle { tx: tx.clone() });
        // The run's span is a child of the current one (the request that started it), so its
        // phase work and the notices it publishes join that trace; a resumed run starts its own.
        let span = tracing::info_span!("design_flow_run", run_id = %record.id);
        let driver = Driver::new(Arc::clone(self), flow, record, latest, tx, rx);
        let handle = tokio::spawn(tracing::Instrument::instrument(driver.run(opening), span));
        let mut tasks = lock(&self.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle);
    }

    /// The frozen flow a stored run walks, re-read from the version store and re-verified.
    async fn frozen_for(&self, state: &RunState) -> Result<FrozenFlow, String> {
        let version = self
            .ports
            .versions
            .get(&state.flow.version_id)
            .await
            .map_err(|e| format!("its flow version {} cannot be read: {e}", state.flow.version_id))?;
        FrozenFlow::from_frozen(&state.flow.version_id, &state.flow.content_hash, &version.frozen)
            .map_err(|e| e.to_string())
    }
}

/// The embedded flow engine (kind `embedded`). Cheap to clone; clones share the engine.
///
/// Life: [`EmbeddedEngine::new`] builds it; [`EmbeddedEngine::resume_all`] (once, at start-up)
/// picks up every unfinished run and makes it drive runs; [`EmbeddedEngine::shutdown`] stops every
/// run task without writing anything (a restart resumes them). Before `resume_all` and after
/// `shutdown`, starting or answering a run is `Unavailable` and [`FlowEngine::state`] reads the
/// last persisted state with `live: false` and the reason.
#[derive(Clone)]
pub struct EmbeddedEngine {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EmbeddedEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedEngine")
            .field("lifecycle", &self.shared.lifecycle())
            .field("active_runs", &lock(&self.shared.active).len())
            .finish()
    }
}

fn unavailable(message: impl Into<String>) -> PortError {
    PortError::new(PortErrorKind::Unavailable, message)
}

impl EmbeddedEngine {
    /// An engine over `ports`, doing phase work with `brains`. It drives nothing until
    /// [`EmbeddedEngine::resume_all`] is called.
    pub fn new(ports: EnginePorts, brains: PhaseBrains, options: EngineOptions) -> Self {
        Self {
            shared: Arc::new(Shared {
                ports,
                brains,
                options,
                lifecycle: Mutex::new(Lifecycle::Created),
                stopping: CancellationToken::new(),
                active: Mutex::new(HashMap::new()),
                subscribers: Mutex::new(HashMap::new()),
                resume_failures: Mutex::new(HashMap::new()),
                tasks: Mutex::new(Vec::new()),
                idle_reason: Mutex::new(None),
            }),
        }
    }

    fn require_running(&self) -> Result<(), PortError> {
        match self.idle_reason() {
            None => Ok(()),
            Some(reason) => Err(unavailable(reason)),
        }
    }

    /// Why the engine does not drive runs now, or `None` while it does.
    fn idle_reason(&self) -> Option<String> {
        let said = lock(&self.shared.idle_reason).clone();
        match self.shared.lifecycle() {
            Lifecycle::Running => None,
            Lifecycle::Created => Some(said.unwrap_or_else(|| {
                "the embedded flow engine has not started yet (resume_all is called at start-up)".to_owned()
            })),
            Lifecycle::Stopped => Some(match said {
                Some(why) => format!("the embedded flow engine is stopped: {why}"),
                None => "the embedded flow engine is stopped".to_owned(),
            }),
        }
    }

    /// Records why the engine does not drive runs in this process (before
    /// [`EmbeddedEngine::resume_all`], or before a [`EmbeddedEngine::shutdown`]): refusals and
    /// `/health` say it instead of the generic reason.
    pub fn set_idle_reason(&self, why: impl Into<String>) {
        *lock(&self.shared.idle_reason) = Some(why.into());
    }

    /// Start-up: makes the engine drive runs and picks up every run the ledger says is unfinished
    /// (on this engine; a ledger that cannot be listed is an error and the engine stays not
    /// started, a run that cannot be read back is reported in [`ResumeReport::failed`]): a phase in flight re-runs with the same `run:phase:attempt` key, a gate
    /// not yet parked is parked, a parked gate stays parked and answerable (its deadline, stored
    /// in the state, fires even if it passed while the engine was down), the last transition's
    /// notices are published again (consumers drop duplicates by run, seq and index), and a
    /// terminal run whose last effects were not confirmed gets them carried out again. Finally
    /// gate holds no run waits at are closed. Call it once, before serving; a second call
    /// resumes nothing more.
    pub async fn resume_all(&self) -> Result<ResumeReport, PortError> {
        let check = |lifecycle: Lifecycle| match lifecycle {
            Lifecycle::Created => Ok(true),
            Lifecycle::Running => Ok(false),
            Lifecycle::Stopped => Err(unavailable("the embedded flow engine is stopped")),
        };
        if !check(self.shared.lifecycle())? {
            return Ok(ResumeReport::default());
        }
        // Read before the engine counts as running: a ledger that cannot be read leaves the engine
        // not started (and `resume_all` can be called again).
        let unsettled = self.shared.ports.runs.unsettled().await?;
        {
            let mut lifecycle = lock(&self.shared.lifecycle);
            if !check(*lifecycle)? {
                return Ok(ResumeReport::default());
            }
            *lifecycle = Lifecycle::Running;
        }
        let mut report = ResumeReport::default();
        let mut parked: HashMap<String, Option<String>> = HashMap::new();
        let mut resumed_holds: HashSet<String> = HashSet::new();
        for record in unsettled {
            match record.flow_engine {
                FlowEngineKind::Embedded => {}
                FlowEngineKind::Temporal | FlowEngineKind::InProcess => continue,
            }
            let latest = match self.shared.ports.runs.latest_transition(&record.id).await {
                Ok(Some(latest)) => Ok(latest),
                Ok(None) => continue,
                Err(e) => Err(format!("its state cannot be read: {e}")),
            };
            let flow = match latest {
                Ok(latest) => self
                    .shared
                    .frozen_for(&latest.state)
                    .await
                    .map(|flow| (flow, latest)),
                Err(reason) => Err(reason),
            };
            let (flow, latest) = match flow {
                Ok(found) => found,
                Err(reason) => {
                    tracing::error!(event = "run_resume_failed", run_id = %record.id, reason = %reason, "a run could not be resumed; it reads live: false until its version is repaired");
                    lock(&self.shared.resume_failures).insert(record.id.clone(), reason.clone());
                    report.failed.push((record.id.clone(), reason));
                    continue;
                }
            };
            parked.insert(
                record.id.clone(),
                latest.state.gate.as_ref().and_then(|g| g.approval_id.clone()),
            );
            // The resumed driver owns two holds the sweep must not race it to a cancel: the one
            // its open gate waits at, even before the transition naming it is persisted (the park
            // may have landed just before a kill), and the one the last transition's own event
            // decides (the resume re-acts that decision with the person as approver).
            if let Some(gate) = &latest.state.gate {
                let attempt = latest.state.phase(&gate.phase).map_or(0, |p| p.attempt);
                resumed_holds.insert(gate_approval_id(&record.id, &gate.phase, attempt));
            }
            if let Some(hold) = latest
                .event
                .as_ref()
                .and_then(|event| super::holds::event_hold(&record.id, event, &latest.state))
            {
                resumed_holds.insert(hold);
            }
            let terminal = latest.state.status.is_terminal();
            tracing::info!(event = "run_resumed", run_id = %record.id, seq = latest.seq, status = latest.state.status.as_str(), "picking up a run at its last boundary");
            if terminal {
                report.settled.push(record.id.clone());
            } else {
                report.resumed.push(record.id.clone());
            }
            self.shared.spawn_driver(flow, record, latest, Opening::Resume);
        }
        report.closed_holds = self.close_stray_gate_holds(&parked, &resumed_holds).await;
        Ok(report)
    }

    /// Closes gate holds still open for runs this start-up loaded whose state no longer parks
    /// at them (a decision or cancel recorded in the run whose hold update was lost) — except
    /// those in `resumed`, which the resumed drivers decide as their last transition says.
    async fn close_stray_gate_holds(
        &self,
        parked: &HashMap<String, Option<String>>,
        resumed: &HashSet<String>,
    ) -> Vec<String> {
        let pending = match self.shared.ports.approvals.list_pending().await {
            Ok(pending) => pending,
            Err(e) => {
                tracing::error!(event = "run_gate_hold_sweep_failed", error = %e, "could not list open gate holds at start-up");
                return Vec::new();
            }
        };
        let mut closed = Vec::new();
        for hold in pending {
            match hold.kind {
                ApprovalKind::Gate => {}
                ApprovalKind::ToolCall
                | ApprovalKind::DesignFlowProposal
                | ApprovalKind::DesignFlowVersion => continue,
            }
            let run_id = hold
                .arguments
                .get("run_id")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default();
            let Some(waiting_at) = parked.get(run_id) else {
                continue;
            };
            if waiting_at.as_deref() == Some(hold.id.as_str()) || resumed.contains(&hold.id) {
                continue;
            }
            let reason = Some(format!("run {run_id} no longer waits at this gate"));
            match self
                .shared
                .ports
                .approvals
                .resolve(&hold.id, WaiterResolution::Canceled, reason)
                .await
            {
                Ok(_) => closed.push(hold.id),
                Err(e) => {
                    tracing::error!(event = "run_gate_hold_close_failed", approval_id = %hold.id, error = %e, "a stray gate hold could not be closed");
                }
            }
        }
        closed
    }

    /// Stops every run task (phases in flight are dropped, nothing is written: a restart resumes
    /// them at their last boundary). Afterwards the engine answers `Unavailable` and reads
    /// `live: false`.
    pub async fn shutdown(&self) {
        *lock(&self.shared.lifecycle) = Lifecycle::Stopped;
        self.shared.stopping.cancel();
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.shared.tasks));
        for task in tasks {
            let _ended = task.await;
        }
        lock(&self.shared.active).clear();
        lock(&self.shared.subscribers).clear();
    }

    /// A run's notices for one watcher (SSE). With `after` — the `(seq, index)` key of the last
    /// notice the watcher has (an SSE `Last-Event-ID`; `(0, 0)` for everything) — the notices of
    /// the persisted transitions after it come first, replayed from the ledger; then live ones
    /// as they happen; each once, in order. Without it, live notices only. The stream ends when the
    /// run ends (for a run already ended, after its backlog). `NotFound` for an unknown run.
    pub async fn subscribe(&self, run_id: &str, after: Option<(u64, u32)>) -> Result<RunEvents, PortError> {
        let record = self.shared.ports.runs.get(run_id).await?;
        let live = if record.status.is_terminal() {
            None
        } else {
            let (tx, rx) = unbounded();
            lock(&self.shared.subscribers)
                .entry(run_id.to_owned())
                .or_default()
                .push(tx);
            // The run may have ended between the read above and the registration; its task has
            // then already dropped the subscribers, so drop ours too and let the stream end.
            if self.shared.ports.runs.get(run_id).await?.status.is_terminal() {
                lock(&self.shared.subscribers).remove(run_id);
            }
            Some(rx)
        };
        let backlog = backlog_after(self.shared.ports.runs.as_ref(), run_id, after).await?;
        Ok(RunEvents::new(backlog, live, after))
    }

    /// Whether this engine drives runs now (`/health`'s `design_flow_worker`): `ok` once
    /// [`EmbeddedEngine::resume_all`] ran, `absent` before it and after [`EmbeddedEngine::shutdown`].
    pub fn worker_health(&self) -> WorkerHealth {
        match self.idle_reason() {
            None => WorkerHealth::Ok,
            Some(reason) => WorkerHealth::Absent { reason },
        }
    }

    /// Sends `msg` (built around a reply channel) to the run's task and waits for its answer; a
    /// run with no task answers from the ledger (ended: `Conflict`; unknown: `NotFound`).
    async fn ask(
        &self,
        run_id: &str,
        msg: impl FnOnce(oneshot::Sender<Result<RunState, PortError>>) -> Msg,
    ) -> Result<RunState, PortError> {
        self.require_running()?;
        let (reply, answer) = oneshot::channel();
        let sent = lock(&self.shared.active)
            .get(run_id)
            .is_some_and(|handle| handle.tx.send(msg(reply)).is_ok());
        if sent && let Ok(result) = answer.await {
            return result;
        }
        Err(self.not_driven(run_id).await)
    }

    /// Why a run has no task here.
    async fn not_driven(&self, run_id: &str) -> PortError {
        let record = match self.shared.ports.runs.get(run_id).await {
            Ok(record) => record,
            Err(e) => return e,
        };
        if record.status.is_terminal() {
            return PortError::new(
                PortErrorKind::Conflict,
                format!("run {run_id} is {} and never reopens", record.status.as_str()),
            );
        }
        match record.flow_engine {
            FlowEngineKind::Embedded => {}
            FlowEngineKind::Temporal | FlowEngineKind::InProcess => {
                return unavailable(format!(
                    "run {run_id} runs on the {} engine, not this embedded one",
                    record.flow_engine.as_str()
                ));
            }
        }
        let why = lock(&self.shared.resume_failures).get(run_id).map_or_else(
            || "it is not driven by this engine process".to_owned(),
            |r| format!("it could not be resumed: {r}"),
        );
        unavailable(format!("run {run_id} cannot be answered now: {why}"))
    }
}

#[async_trait]
impl FlowEngine for EmbeddedEngine {
    fn kind(&self) -> FlowEngineKind {
        FlowEngineKind::Embedded
    }

    async fn start(&self, request: StartRun) -> Result<RunState, PortError> {
        self.require_running()?;
        // Approved, hash-verified and reproducible, or refused before anything is recorded.
        let flow = FrozenFlow::from_version(&request.version).map_err(PortError::from)?;
        let now = self.shared.ports.clock.now();
        let started = start(&flow, &request.run_id, request.settings, now).map_err(PortError::from)?;
        let record = request.record(FlowEngineKind::Embedded, started.state.status, now);
        let first = RunTransition {
            run_id: request.run_id.clone(),
            seq: 1,
            event: None,
            state: started.state.clone(),
            commands: started.commands,
            reason: None,
            at: now,
        };
        let record = self
            .shared
            .ports
            .runs
            .create_started(record, first.clone())
            .await?;
        tracing::info!(
            event = "run_started",
            run_id = %record.id,
            flow_version_id = %record.flow_version_id,
            content_hash = %record.content_hash,
            intelligence = record.intelligence.as_str(),
            flow_engine = record.flow_engine.as_str(),
            "design-flow run started on the embedded engine"
        );
        self.shared.spawn_driver(flow, record, first, Opening::Fresh);
        Ok(started.state)
    }

    async fn decide_gate(&self, run_id: &str, answer: GateAnswer) -> Result<RunState, PortError> {
        let approver = answer.approver.trim();
        if approver == metaforge_ports::AUTO_APPROVER || approver == metaforge_ports::DEADLINE_APPROVER {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                format!("approver: '{approver}' is reserved for decisions nobody made"),
            ));
        }
        self.ask(run_id, |reply| Msg::Decide { answer, reply }).await
    }

    async fn state(&self, run_id: &str) -> Result<RunView, PortError> {
        let record = self.shared.ports.runs.get(run_id).await?;
        let view = |live: bool, reason: Option<String>, state: Option<RunState>| RunView {
            engine: FlowEngineKind::Embedded,
            live,
            reason,
            state,
        };
        let latest = match self.shared.ports.runs.latest_transition(run_id).await {
            Ok(Some(latest)) => latest,
            Ok(None) => {
                return Ok(view(
                    false,
                    Some(format!(
                        "run {run_id} has no state recorded by the embedded engine"
                    )),
                    None,
                ));
            }
            Err(e) if e.kind == PortErrorKind::NotFound => return Err(e),
            Err(e) => {
                return Ok(view(
                    false,
                    Some(format!("the run ledger cannot be read: {e}")),
                    None,
                ));
            }
        };
        let state = Some(latest.state);
        let not_live = match (self.shared.lifecycle(), record.flow_engine) {
            (Lifecycle::Created, _) => Some("the embedded flow engine has not started yet".to_owned()),
            (Lifecycle::Stopped, _) => Some("the embedded flow engine is stopped".to_owned()),
            (Lifecycle::Running, FlowEngineKind::Temporal | FlowEngineKind::InProcess) => Some(format!(
                "run {run_id} runs on the {} engine, not this embedded one",
                record.flow_engine.as_str()
            )),
            (Lifecycle::Running, FlowEngineKind::Embedded) => {
                if record.status.is_terminal() || lock(&self.shared.active).contains_key(run_id) {
                    None
                } else {
                    Some(lock(&self.shared.resume_failures).get(run_id).map_or_else(
                        || format!("run {run_id} is not driven by this engine process"),
                        |r| format!("run {run_id} could not be resumed: {r}"),
                    ))
                }
            }
        };
        Ok(match not_live {
            None => view(true, None, state),
            Some(reason) => view(false, Some(reason), state),
        })
    }

    async fn cancel(&self, run_id: &str, by: &str, reason: Option<String>) -> Result<RunState, PortError> {
        let by = by.to_owned();
        self.ask(run_id, |reply| Msg::Cancel { by, reason, reply }).await
    }
}

#[async_trait]
impl RunEngine for EmbeddedEngine {
    async fn notices(&self, run_id: &str, after: Option<(u64, u32)>) -> Result<RunNoticeStream, PortError> {
        use futures::StreamExt as _;
        Ok(self.subscribe(run_id, after).await?.boxed())
    }

    async fn worker(&self) -> WorkerHealth {
        self.worker_health()
    }
}
