//! The embedded engine over a scripted phase brain, on the in-memory doubles and on the real
//! SQLite stores: a mech_v1-like flow to completion, retry, rework and its cap, expiry, cancel, a
//! configuration failure, refusals that record nothing, restarts mid-phase and mid-gate, a
//! deadline passing while the engine is down, and the notices it publishes.

#![expect(
    clippy::unwrap_used,
    reason = "integration tests: a failed expectation is a failed test"
)]

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::channel::mpsc::UnboundedReceiver;
use metaforge_adapters_store::{
    SqliteApprovalLedger, SqliteClientTaskStore, SqliteFlowVersionStore, SqliteRunLedger, SqliteTwinStore,
};
use metaforge_app::approvals::ApprovalService;
use metaforge_app::runs::{
    ClientPhaseBrain, EmbeddedEngine, EngineOptions, EnginePorts, PhaseBrains, RunNotice, RunNoticeKind,
    render_brief,
};
use metaforge_domain::flow::{Flow, freeze, template};
use metaforge_ports::{
    ApprovalDecision, ApprovalKind, ApprovalLedger, ApprovalRecord, ApprovalStatus, BusEvent,
    ClientTaskStatus, ClientTaskStore, Clock, DecisionSurface, EventBus, FeedbackSource, FlowEngine,
    FlowVersionDecision, FlowVersionOrigin, FlowVersionRecord, FlowVersionStatus, FlowVersionStore,
    GateAnswer, GateDecision, GateDecisionKind, GateDecisionRefused, GoneParkers, IntelligenceMode,
    PhaseStatus, PortError, PortErrorKind, PublishReceipt, ResolveOutcome, RunEvent, RunLedger, RunSettings,
    RunState, RunStatus, StartRun, TwinStore, WaiterResolution, gate_approval_id, run_branch, sha256_hex,
};
use metaforge_test_support::doubles::{
    BrainStep, MemoryApprovalLedger, MemoryClientTaskStore, MemoryFlowVersionStore, MemoryRunLedger,
    MemoryTwinStore, ScriptedPhaseBrain,
};
use metaforge_test_support::{ManualClock, SequentialIds};

const WAIT: Duration = Duration::from_secs(10);

/// A bus that records every event in publish order, and can be told to fail.
#[derive(Default)]
struct RecordingBus {
    events: Mutex<Vec<BusEvent>>,
    failing: AtomicBool,
}

impl RecordingBus {
    fn notices(&self) -> Vec<RunNotice> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| serde_json::from_value(e.payload.clone()).unwrap())
            .collect()
    }
}

#[async_trait]
impl EventBus for RecordingBus {
    async fn publish(&self, event: BusEvent) -> Result<PublishReceipt, PortError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(PortError::new(PortErrorKind::Unavailable, "the broker is down"));
        }
        assert!(
            metaforge_ports::is_valid_event_kind(&event.kind),
            "{}",
            event.kind
        );
        self.events.lock().unwrap().push(event);
        Ok(PublishReceipt {
            delivered: 0,
            persisted: false,
        })
    }

    fn subscribe(&self, _kind: &str) -> Result<UnboundedReceiver<BusEvent>, PortError> {
        Ok(futures::channel::mpsc::unbounded().1)
    }

    fn is_durable(&self) -> bool {
        false
    }

    async fn replay(&self, _: &str, _: &str, _: usize, _: u64) -> Result<Vec<BusEvent>, PortError> {
        Err(PortError::new(PortErrorKind::Unavailable, "not durable"))
    }
}

/// An approval ledger whose first `park_failures` parks fail as unavailable.
struct FlakyApprovals {
    inner: Arc<dyn ApprovalLedger>,
    park_failures: AtomicUsize,
}

#[async_trait]
impl ApprovalLedger for FlakyApprovals {
    async fn park(&self, record: ApprovalRecord) -> Result<ApprovalRecord, PortError> {
        if self
            .park_failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(PortError::new(PortErrorKind::Unavailable, "ledger busy"));
        }
        self.inner.park(record).await
    }
    async fn get(&self, id: &str) -> Result<ApprovalRecord, PortError> {
        self.inner.get(id).await
    }
    async fn list_pending(&self) -> Result<Vec<ApprovalRecord>, PortError> {
        self.inner.list_pending().await
    }
    async fn list_recent(&self, limit: usize) -> Result<Vec<ApprovalRecord>, PortError> {
        self.inner.list_recent(limit).await
    }
    async fn pending_page(
        &self,
        after: Option<&metaforge_ports::PendingCursor>,
        limit: usize,
    ) -> Result<metaforge_ports::PendingPage, PortError> {
        self.inner.pending_page(after, limit).await
    }
    async fn decide(&self, id: &str, decision: ApprovalDecision) -> Result<ApprovalRecord, PortError> {
        self.inner.decide(id, decision).await
    }
    async fn resolve(
        &self,
        id: &str,
        resolution: WaiterResolution,
        reason: Option<String>,
    ) -> Result<ResolveOutcome, PortError> {
        self.inner.resolve(id, resolution, reason).await
    }
    async fn restore(&self, gone: &GoneParkers) -> Result<Vec<ApprovalRecord>, PortError> {
        self.inner.restore(gone).await
    }
    async fn open_parkers(&self) -> Result<std::collections::BTreeSet<String>, PortError> {
        self.inner.open_parkers().await
    }
    async fn history(&self, id: &str) -> Result<Vec<metaforge_ports::ApprovalTransition>, PortError> {
        self.inner.history(id).await
    }
}

/// The stores an engine runs over.
#[derive(Clone)]
struct Stores {
    runs: Arc<dyn RunLedger>,
    versions: Arc<dyn FlowVersionStore>,
    approvals: Arc<dyn ApprovalLedger>,
    tasks: Arc<dyn ClientTaskStore>,
    twin: Arc<dyn TwinStore>,
    bus: Arc<RecordingBus>,
    clock: Arc<ManualClock>,
}

impl Stores {
    fn memory() -> Self {
        let clock = Arc::new(ManualClock::fixed());
        let runs: Arc<dyn RunLedger> = Arc::new(MemoryRunLedger::new());
        Self {
            versions: Arc::new(MemoryFlowVersionStore::new()),
            approvals: Arc::new(MemoryApprovalLedger::new(clock.clone())),
            tasks: Arc::new(MemoryClientTaskStore::new(runs.clone())),
            twin: Arc::new(MemoryTwinStore::new()),
            bus: Arc::new(RecordingBus::default()),
            runs,
            clock,
        }
    }

    /// The SQLite stores in `dir`; opening the same dir again is what a restarted process sees.
    async fn sqlite(dir: &Path, clock: Arc<ManualClock>) -> Self {
        let runs: Arc<dyn RunLedger> = Arc::new(SqliteRunLedger::open(&dir.join("runs.db")).await.unwrap());
        Self {
            versions: Arc::new(
                SqliteFlowVersionStore::open(&dir.join("flow_versions.db"))
                    .await
                    .unwrap(),
            ),
            approvals: Arc::new(
                SqliteApprovalLedger::open(&dir.join("tool_approvals_ledger.db"), clock.clone())
                    .await
                    .unwrap(),
            ),
            tasks: Arc::new(
                SqliteClientTaskStore::open(&dir.join("client_tasks.db"), runs.clone())
                    .await
                    .unwrap(),
            ),
            twin: Arc::new(SqliteTwinStore::open(&dir.join("twin.db")).await.unwrap()),
            bus: Arc::new(RecordingBus::default()),
            runs,
            clock,
        }
    }

    fn ports(&self) -> EnginePorts {
        EnginePorts {
            runs: self.runs.clone(),
            versions: self.versions.clone(),
            approvals: self.approvals.clone(),
            tasks: self.tasks.clone(),
            twin: self.twin.clone(),
            bus: self.bus.clone(),
            clock: self.clock.clone(),
            ids: Arc::new(SequentialIds::new("evt")),
        }
    }
}

fn options() -> EngineOptions {
    EngineOptions {
        deadline_tick: Duration::from_millis(10),
        retry_delay: Duration::ZERO,
        effect_retry: Duration::from_millis(20),
    }
}

/// An engine over `stores` whose brain (both modes) is `brain`, resumed and running.
async fn engine(stores: &Stores, brain: &Arc<ScriptedPhaseBrain>) -> EmbeddedEngine {
    let engine = EmbeddedEngine::new(
        stores.ports(),
        PhaseBrains {
            server: brain.clone(),
            client: brain.clone(),
        },
        options(),
    );
    engine.resume_all().await.unwrap();
    engine
}

/// mech_v1 with its feasibility and simulation gates turned into auto-approved checkpoints, so
/// one run meets both kinds: auto gates that pass and human gates (design, release) answered.
fn mech_like() -> Flow {
    let mut flow = template("mech_v1").unwrap();
    for phase in &mut flow.phases {
        if let Some(gate) = phase.gate.as_mut()
            && matches!(phase.id.as_str(), "feasibility" | "simulation")
        {
            gate.auto_approve = true;
        }
    }
    flow
}

fn proposed(id: &str, flow: &Flow) -> FlowVersionRecord {
    let frozen = freeze(flow).unwrap();
    FlowVersionRecord {
        id: id.to_owned(),
        template_id: flow.id.clone(),
        template_version: flow.version.clone(),
        status: FlowVersionStatus::Proposed,
        content_hash: sha256_hex(&frozen),
        frozen,
        origin: FlowVersionOrigin::Server,
        approval_id: None,
        approver: None,
        created_at: ManualClock::fixed().now(),
        decided_at: None,
    }
}

/// Saves `flow` as version `id` and approves it.
async fn approved(stores: &Stores, id: &str, flow: &Flow) -> FlowVersionRecord {
    stores.versions.save(proposed(id, flow)).await.unwrap();
    stores
        .versions
        .decide(
            id,
            FlowVersionDecision {
                status: FlowVersionStatus::Approved,
                approver: "ana".into(),
                approval_id: None,
                at: stores.clock.now(),
            },
        )
        .await
        .unwrap()
}

fn start_request(run_id: &str, version: &FlowVersionRecord, settings: RunSettings) -> StartRun {
    StartRun {
        run_id: run_id.to_owned(),
        project_id: Some("proj-1".into()),
        intelligence: IntelligenceMode::Server,
        version: version.clone(),
        settings,
    }
}

async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn state(engine: &EmbeddedEngine, run_id: &str) -> RunState {
    engine.state(run_id).await.unwrap().state.unwrap()
}

/// Waits until the run is parked at `phase`'s gate and the gate was announced.
async fn parked_at(engine: &EmbeddedEngine, run_id: &str, phase: &str) -> RunState {
    wait_for(&format!("run {run_id} parked at {phase}"), || async {
        let s = state(engine, run_id).await;
        s.gate.as_ref().is_some_and(|g| g.phase == phase && g.announced)
    })
    .await;
    state(engine, run_id).await
}

/// Waits until the run ended and its last effects and notices are done (the ledger marks the
/// last transition settled).
async fn ended(engine: &EmbeddedEngine, stores: &Stores, run_id: &str, status: RunStatus) -> RunState {
    wait_for(&format!("run {run_id} {}", status.as_str()), || async {
        state(engine, run_id).await.status.is_terminal()
            && !stores
                .runs
                .unsettled()
                .await
                .unwrap()
                .iter()
                .any(|r| r.id == run_id)
    })
    .await;
    let s = state(engine, run_id).await;
    assert_eq!(s.status, status, "{:?}", s.error);
    s
}

fn approve(phase: &str, by: &str) -> GateAnswer {
    GateAnswer {
        phase: phase.to_owned(),
        decision: GateDecision::Approve { reason: None },
        approver: by.to_owned(),
        surface: DecisionSurface::Api,
    }
}

/// Every transition is in the log once, numbered 1..n, and each phase attempt finished at most
/// once.
async fn assert_log_is_whole(runs: &dyn RunLedger, run_id: &str) -> Vec<metaforge_ports::RunTransition> {
    let log = runs.transitions(run_id, 0).await.unwrap();
    let seqs: Vec<u64> = log.iter().map(|t| t.seq).collect();
    assert_eq!(
        seqs,
        (1..=log.len() as u64).collect::<Vec<_>>(),
        "no transition lost or doubled"
    );
    let mut finished: Vec<(String, u32)> = log
        .iter()
        .filter_map(|t| match &t.event {
            Some(RunEvent::PhaseFinished { phase, attempt, .. }) => Some((phase.clone(), *attempt)),
            _ => None,
        })
        .collect();
    let all = finished.len();
    finished.sort();
    finished.dedup();
    assert_eq!(finished.len(), all, "no phase completion is recorded twice");
    log
}

#[tokio::test]
async fn a_run_walks_the_flow_through_auto_and_human_gates_to_completion() {
    let stores = Stores::memory();
    let brain = Arc::new(ScriptedPhaseBrain::new());
    let engine = engine(&stores, &brain).await;
    let version = approved(&stores, "v-mech", &mech_like()).await;
    let started = engine
        .start(start_request("run-1", &version, RunSettings::default()))
        .await
        .unwrap();
    assert_eq!(started.status, RunStatus::Running);
    let record = stores.runs.get("run-1").await.unwrap();
    assert_eq!(record.flow_engine, metaforge_ports::FlowEngineKind::Embedded);
    assert_eq!(
        (record.template_id.as_str(), record.template_version.as_str()),
        ("mech_v1", version.template_version.as_str())
    );
    assert_eq!(record.flow_version_id, "v-mech");
    assert_eq!(record.content_hash, version.content_hash);

    let at_design = parked_at(&engine, "run-1", "design").await;
    assert_eq!(at_design.status, RunStatus::AwaitingApproval);
    let auto = &at_design.decisions[0];
    assert_eq!(
        (auto.phase.as_str(), auto.approver.as_str(), auto.auto),
        ("feasibility", "auto", true)
    );
    let feasibility = stores.approvals.get("gate:run-1:feasibility:1").await.unwrap();
    assert_eq!(
        (
            feasibility.kind,
            feasibility.status,
            feasibility.approver.as_deref()
        ),
        (ApprovalKind::Gate, ApprovalStatus::Approved, Some("auto")),
        "an auto-approved checkpoint is recorded in the one approval ledger"
    );
    let hold_id = gate_approval_id("run-1", "design", 1);
    assert_eq!(
        at_design.gate.as_ref().unwrap().approval_id.as_deref(),
        Some(hold_id.as_str())
    );
    let pending = stores.approvals.list_pending().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].id.as_str(), pending[0].kind),
        (hold_id.as_str(), ApprovalKind::Gate)
    );
    assert_eq!(pending[0].arguments["run_id"], "run-1");
    let record = stores.runs.get("run-1").await.unwrap();
    assert_eq!(record.status, RunStatus::AwaitingApproval);
    assert_eq!(
        record.reason.as_deref(),
        Some("G6 Design Review: ready for review")
    );

    // A generic decision of the hold is refused, pointing at the run.
    let service = ApprovalService::new(
        stores.approvals.clone(),
        stores.versions.clone(),
        stores.clock.clone(),
        Arc::new(SequentialIds::new("ap")),
    );
    let refused = service.decide(&hold_id, true, "ana", None).await.unwrap_err();
    assert_eq!(refused.kind, PortErrorKind::Conflict);
    let why = refused
        .source
        .as_deref()
        .and_then(|s| s.downcast_ref::<GateDecisionRefused>())
        .unwrap();
    assert_eq!((why.run_id.as_str(), why.phase.as_str()), ("run-1", "design"));
    assert_eq!(
        stores.approvals.get(&hold_id).await.unwrap().status,
        ApprovalStatus::AwaitingApproval
    );

    // Only the open gate, only what it allows, only a person.
    let stale = engine
        .decide_gate("run-1", approve("feasibility", "ana"))
        .await
        .unwrap_err();
    assert_eq!(stale.kind, PortErrorKind::Conflict);
    let later = GateAnswer {
        phase: "design".into(),
        decision: GateDecision::Rework {
            phase: "release".into(),
            reason: "x".into(),
        },
        approver: "ana".into(),
        surface: DecisionSurface::Api,
    };
    assert_eq!(
        engine.decide_gate("run-1", later).await.unwrap_err().kind,
        PortErrorKind::Invalid
    );
    assert_eq!(
        engine
            .decide_gate("run-1", approve("design", "auto"))
            .await
            .unwrap_err()
            .kind,
        PortErrorKind::Invalid,
        "nobody answers as auto"
    );
    let decided = engine
        .decide_gate("run-1", approve("design", "ana"))
        .await
        .unwrap();
    assert_eq!(decided.phase("design").unwrap().status, PhaseStatus::Passed);
    let design = stores.approvals.get(&hold_id).await.unwrap();
    assert_eq!(
        (design.status, design.approver.as_deref()),
        (ApprovalStatus::Approved, Some("ana"))
    );

    parked_at(&engine, "run-1", "release").await;
    engine
        .decide_gate("run-1", approve("release", "bo"))
        .await
        .unwrap();
    let done = ended(&engine, &stores, "run-1", RunStatus::Completed).await;
    assert!(done.phases.iter().all(|p| p.status == PhaseStatus::Passed));
    assert_eq!(
        done.decisions
            .iter()
            .map(|d| (d.phase.as_str(), d.approver.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("feasibility", "auto"),
            ("design", "ana"),
            ("simulation", "auto"),
            ("release", "bo")
        ]
    );
    assert_eq!(
        brain.keys(),
        [
            "intent",
            "needs",
            "requirements",
            "feasibility",
            "design",
            "simulation",
            "release"
        ]
        .iter()
        .map(|p| format!("run-1:{p}:1"))
        .collect::<Vec<_>>(),
        "each phase ran once, in dependency order, with its run:phase:attempt key"
    );
    let view = engine.state("run-1").await.unwrap();
    assert!(view.live, "a running engine reads its runs live");
    let record = stores.runs.get("run-1").await.unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    assert_eq!(
        record.history.iter().map(|h| h.status).collect::<Vec<_>>(),
        vec![
            RunStatus::Running,
            RunStatus::AwaitingApproval,
            RunStatus::Running,
            RunStatus::AwaitingApproval,
            RunStatus::Completed
        ],
        "every status entered once, in order (approving the release gate completes the run)"
    );
    let log = assert_log_is_whole(stores.runs.as_ref(), "run-1").await;
    assert!(stores.approvals.list_pending().await.unwrap().is_empty());
    let branches = stores.twin.branches().await.unwrap();
    assert!(
        branches.iter().any(|b| b.name == run_branch("run-1")),
        "{branches:?}"
    );

    // Notices: in publish order, keyed by strictly increasing (seq, index), every transition's.
    let notices = stores.bus.notices();
    let keys: Vec<(u64, u32)> = notices.iter().map(RunNotice::key).collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    assert_eq!(notices.last().map(|n| n.seq), log.last().map(|t| t.seq));
    assert_eq!(notices.first().map(|n| n.kind), Some(RunNoticeKind::Started));
    assert_eq!(notices.last().map(|n| n.kind), Some(RunNoticeKind::Completed));
    let count = |kind: RunNoticeKind| notices.iter().filter(|n| n.kind == kind).count();
    assert_eq!(count(RunNoticeKind::PhaseStarted), 7);
    assert_eq!(count(RunNoticeKind::PhaseFinished), 7);
    assert_eq!(count(RunNoticeKind::GateOpened), 2);
    assert_eq!(count(RunNoticeKind::GateDecided), 4);
    let kinds: Vec<String> = stores
        .bus
        .events
        .lock()
        .unwrap()
        .iter()
        .map(|e| e.kind.clone())
        .collect();
    assert_eq!(
        kinds,
        notices
            .iter()
            .map(|n| n.kind.as_str().to_owned())
            .collect::<Vec<_>>(),
        "each bus event's kind is its notice's"
    );

    // A late subscriber replays the whole run from the ledger, then the stream ends.
    let replayed: Vec<RunNotice> = engine
        .subscribe("run-1", Some((0, 0)))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(replayed, notices, "the ledger replays exactly what was published");
    let middle = notices.iter().find(|n| n.index == 1).unwrap().key();
    let rest: Vec<RunNotice> = engine
        .subscribe("run-1", Some(middle))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(
        rest,
        notices
            .iter()
            .filter(|n| n.key() > middle)
            .cloned()
            .collect::<Vec<_>>(),
        "a reconnecting watcher resumes right after the last notice it saw, mid-transition too"
    );
    assert_eq!(
        engine.cancel("run-1", "ana", None).await.unwrap_err().kind,
        PortErrorKind::Conflict,
        "a terminal run is never re-ended"
    );
}

#[tokio::test]
async fn a_live_subscription_sees_every_notice_once_in_order() {
    let stores = Stores::memory();
    let brain = Arc::new(ScriptedPhaseBrain::new());
    let engine = engine(&stores, &brain).await;
    let version = approved(&stores, "v-mech", &mech_like()).await;
    engine
        .start(start_request("run-s", &version, RunSettings::default()))
        .await
        .unwrap();
    let mut events = engine.subscribe("run-s", Some((0, 0))).await.unwrap();
    parked_at(&engine, "run-s", "design").await;
    engine
        .decide_gate("run-s", approve("design", "ana"))
        .await
        .unwrap();
    parked_at(&engine, "run-s", "release").await;
    engine
        .decide_gate("run-s", approve("release", "ana"))
        .await
        .unwrap();
    let mut seen = Vec::new();
    while let Some(notice) = tokio::time::timeout(WAIT, events.next()).await.unwrap() {
        seen.push(notice);
    }
    assert_eq!(
        seen,
        stores.bus.notices(),
        "backlog then live, each once, and the stream ends with the run"
    );
}

#[tokio::test]
async fn a_retry_reruns_the_gated_phase_with_the_reason_and_findings_first() {
    let stores = Stores::memory();
    let brain =
        Arc::new(ScriptedPhaseBrain::new().with("design", vec![BrainStep::recording(&["cad_model"])]));
    let engine = engine(&stores, &brain).await;
    let version = approved(&stores, "v-mech", &mech_like()).await;
    engine
        .start(start_request("run-r", &version, RunSettings::default()))
        .await
        .unwrap();
    let parked = parked_at(&engine, "run-r", "design").await;
    let gate = parked.gate.unwrap();
    assert!(
        !gate.ready,
        "a gate whose deliverables are not recorded parks not ready"
    );
    assert_eq!(
        gate.findings,
        vec!["required deliverable 'drawing' is not recorded"]
    );
    assert!(!gate.allowed.contains(&GateDecisionKind::Approve));
    let refused = engine
        .decide_gate("run-r", approve("design", "ana"))
        .await
        .unwrap_err();
    assert_eq!(refused.kind, PortErrorKind::Conflict);
    assert!(refused.message.contains("not ready"), "{}", refused.message);
    let retry = GateAnswer {
        phase: "design".into(),
        decision: GateDecision::Retry {
            reason: "record the drawing too".into(),
        },
        approver: "ana".into(),
        surface: DecisionSurface::Api,
    };
    engine.decide_gate("run-r", retry).await.unwrap();
    let first = stores.approvals.get("gate:run-r:design:1").await.unwrap();
    assert_eq!(first.status, ApprovalStatus::Rejected);
    assert_eq!(first.reason.as_deref(), Some("retry: record the drawing too"));

    let again = parked_at(&engine, "run-r", "design").await;
    assert!(again.gate.as_ref().unwrap().ready);
    let brief = brain
        .briefs()
        .into_iter()
        .find(|b| b.key == "run-r:design:2")
        .unwrap();
    let feedback = brief.feedback.clone().unwrap();
    assert_eq!(feedback.source, FeedbackSource::Retry);
    assert_eq!(feedback.reason, "record the drawing too");
    assert_eq!(
        feedback.findings,
        vec!["required deliverable 'drawing' is not recorded"]
    );
    let rendered = render_brief(&brief);
    assert!(
        rendered.starts_with("A retry was asked at gate 'G6 Design Review'"),
        "the feedback comes first: {rendered}"
    );
    assert!(rendered.contains("required deliverable 'drawing' is not recorded"));
    assert_eq!(
        stores.approvals.get("gate:run-r:design:2").await.unwrap().status,
        ApprovalStatus::AwaitingApproval,
        "the new attempt's gate is a new hold"
    );
}

#[tokio::test]
async fn a_rework_reruns_the_earlier_phase_and_every_later_one_up_to_the_cap() {
    let stores = Stores::memory();
    let brain = Arc::new(ScriptedPhaseBrain::new());
    let engine = engine(&stores, &brain).await;
    let version = approved(&stores, "v-mech", &mech_like()).await;
    let settings = RunSettings {
        rework_cap: 1,
        ..RunSettings::default()
    };
    engine
        .start(start_request("run-w", &version, settings))
        .await
        .unwrap();
    parked_at(&engine, "run-w", "design").await;
    let rework = |reason: &str| GateAnswer {
        phase: "design".into(),
        decision: GateDecision::Rework {
            phase: "requirements".into(),
            reason: reason.into(),
        },
        approver: "ana".into(),
        surface: DecisionSurface::Api,
    };
    engine
        .decide_gate("run-w", rework("the load case changed"))
        .await
        .unwrap();
    let again = parked_at(&engine, "run-w", "design").await;
    assert_eq!(again.reworks_used, 1);
    for phase in ["requirements", "feasibility", "design"] {
        assert_eq!(again.phase(phase).unwrap().attempt, 2, "{phase} re-ran");
        let brief = brain
            .briefs()
            .into_iter()
            .find(|b| b.key == format!("run-w:{phase}:2"))
            .unwrap();
        let feedback = brief.feedback.unwrap();
        assert_eq!(
            (feedback.source, feedback.reason.as_str()),
            (FeedbackSource::Rework, "the load case changed")
        );
    }
    assert_eq!(again.phase("needs").unwrap().attempt, 1, "earlier work stands");
    let gate = again.gate.unwrap();
    assert!(
        !gate.allowed.contains(&GateDecisionKind::Rework),
        "the cap is used up"
    );
    let capped = engine.decide_gate("run-w", rework("again")).await.unwrap_err();
    assert_eq!(capped.kind, PortErrorKind::Conflict);
    assert!(capped.message.contains("cap"), "{}", capped.message);
    assert_eq!(
        brain.keys().iter().filter(|k| k.ends_with(":2")).count(),
        3,
        "exactly the reworked phases re-ran"
    );
}

#[tokio::test]
async fn a_gate_expires_at_its_deadline_as_a_rejection() {
    let stores = Stores::memory();
    let brain = Arc::new(ScriptedPhaseBrain::new());
    let engine = engine(&stores, &brain).await;
    let version = approved(&stores, "v-mech", &mech_like()).await;
    let settings = RunSettings {
        gate_timeout_seconds: Some(3600),
        ..RunSettings::default()
    };
    engine
        .start(start_request("run-x", &version, settings))
        .await
        .unwrap();
    let parked = parked_at(&engine, "run-x", "design").await;
    assert!(parked.gate.unwrap().deadline.is_some());
    stores.clock.advance(chrono::Duration::seconds(3599));
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(
        state(&engine, "run-x").await.status,
        RunStatus::AwaitingApproval,
        "not before its deadline"
    );
    stores.clock.advance(chrono::Duration::seconds(2));
    let failed = ended(&engine, &stores, "run-x", RunStatus::Failed).await;
    assert!(
        failed.error.as_deref().unwrap().contains("expired"),
        "{:?}",
        failed.error
    );
    let last = failed.decisions.last().unwrap();
    assert_eq!(last.approver, "deadline");
    wait_for("the expired gate's hold timed out", || async {
        stores.approvals.get("gate:run-x:design:1").await.unwrap().status == ApprovalStatus::TimedOut
    })
    .await;
    assert!(
        stores
            .bus
            .notices()
            .iter()
            .any(|n| n.kind == RunNoticeKind::GateExpired)
    );
}

#[tokio::test]
async fn cancel_closes_the_parked_gate_hold() {
    let stores = Stores::memory();
    let brain = Arc::new(ScriptedPhaseBrain::new());
    let engine = engine(&stores, &brain).await;
    let version = approved(&stores, "v-mech", &mech_like()).await;
    engine
        .start(start_request("run-c", &version, RunSettings::default()))
        .await
        .unwrap();
    parked_at(&engine, "run-c", "design").await;
    let canceled = engine
        .cancel("run-c", "ana", Some("wrong part".into()))
        .await
        .unwrap();
    assert_eq!(canceled.status, RunStatus::Canceled);
    assert_eq!(canceled.error.as_deref(), Some("canceled by ana: wrong part"));
    let hold = stores.approvals.get("gate:run-c:design:1").await.unwrap();
    assert_eq!(hold.status, ApprovalStatus::Canceled);
    assert_eq!(
        stores.runs.get("run-c").await.unwrap().status,
        RunStatus::Canceled
    );
    assert_eq!(
        engine
            .decide_gate("run-c", approve("design", "ana"))
            .await
            .unwrap_err()
            .kind,
        PortErrorKind::Conflict
    );
}

#[tokio::test]
async fn cancel_withdraws_the_client_task_of_the_phase_in_flight() {
    let stores = Stores::memory();
    let scripted = Arc::new(ScriptedPhaseBrain::new());
    let client = Arc::new(
        ClientPhaseBrain::new(stores.tasks.clone(), stores.twin.clone(), stores.clock.clone())
            .with_poll(Duration::from_millis(5)),
    );
    let engine = EmbeddedEngine::new(
        stores.ports(),
        PhaseBrains {
            server: scripted,
            client,
        },
        options(),
    );
    engine.resume_all().await.unwrap();
    let version = approved(&stores, "v-mech", &mech_like()).await;
    let mut request = start_request("run-t", &version, RunSettings::default());
    request.intelligence = IntelligenceMode::Client;
    engine.start(request).await.unwrap();
    wait_for("the intent task", || async {
        stores.tasks.get("run-t:intent:1").await.is_ok()
    })
    .await;
    let task = stores.tasks.get("run-t:intent:1").await.unwrap();
    assert_eq!(task.status, ClientTaskStatus::Open);
    assert_eq!(task.brief["key"], "run-t:intent:1", "the body is the phase brief");
    stores
        .tasks
        .claim(
            "run-t:intent:1",
            &metaforge_ports::Claimant {
                identity: "claude".into(),
                session: None,
            },
            stores.clock.now(),
        )
        .await
        .unwrap();
    engine.cancel("run-t", "ana", None).await.unwrap();
    assert_eq!(
        stores.tasks.get("run-t:intent:1").await.unwrap().status,
        ClientTaskStatus::Withdrawn
    );
    let s = state(&engine, "run-t").await;
    assert_eq!(s.phase("intent").unwrap().status, PhaseStatus::Canceled);
}

#[tokio::test]
async fn a_configuration_failure_fails_the_run_once_and_a_retryable_one_reruns_the_same_key() {
    let stores = Stores::memory();
    let brain = Arc::new(
        ScriptedPhaseBrain::new()
            .with("intent", vec![BrainStep::retryable("upstream timed out")])
            .with(
                "needs",
                vec![BrainStep::configuration(
                    "no model serves role 'phase_brain': set METAFORGE_ROUTE_PHASE_BRAIN",
                )],
            ),
    );
    let engine = engine(&stores, &brain).await;
    let version = approved(&stores, "v-mech", &mech_like()).await;
    engine
        .start(start_request("run-f", &version, RunSettings::default()))
        .await
        .unwrap();
    let failed = ended(&engine, &stores, "run-f", RunStatus::Failed).await;
    assert_eq!(
        failed.error.as_deref(),
        Some("Phase 'needs' failed: no model serves role 'phase_brain': set METAFORGE_ROUTE_PHASE_BRAIN")
    );
    assert_eq!(
        brain.keys(),
        vec!["run-f:intent:1", "run-f:intent:1", "run-f:needs:1"],
        "a retryable failure re-runs the same key; a configuration failure is not retried"
    );
    let failures = stores
        .bus
        .notices()
        .into_iter()
        .filter(|n| n.kind == RunNoticeKind::Failed)
        .count();
    assert_eq!(failures, 1, "the run fails once");
    assert_eq!(
        stores.runs.get("run-f").await.unwrap().reason,
        failed.error,
        "the record's reason is the run's error"
    );
}

#[tokio::test]
async fn an_unapproved_or_corrupt_version_is_refused_and_nothing_is_recorded() {
    let stores = Stores::memory();
    let brain = Arc::new(ScriptedPhaseBrain::new());
    let engine = engine(&stores, &brain).await;
    let flow = mech_like();
    let unapproved = stores.versions.save(proposed("v-p", &flow)).await.unwrap();
    let err = engine
        .start(start_request("run-u", &unapproved, RunSettings::default()))
        .await
        .unwrap_err();
    assert_eq!(err.kind, PortErrorKind::Conflict);
    assert!(err.message.contains("not approved"), "{}", err.message);

    let mut corrupt = approved(&stores, "v-a", &flow).await;
    corrupt.frozen = corrupt.frozen.replacen("Mechanical", "Mechanica1", 1);
    let err = engine
        .start(start_request("run-u", &corrupt, RunSettings::default()))
        .await
        .unwrap_err();
    assert_eq!(err.kind, PortErrorKind::Corrupt);

    let mut unreproducible = approved(&stores, "v-b", &flow).await;
    unreproducible.frozen = unreproducible.frozen.replacen('{', "{ ", 1);
    unreproducible.content_hash = sha256_hex(&unreproducible.frozen);
    let err = engine
        .start(start_request("run-u", &unreproducible, RunSettings::default()))
        .await
        .unwrap_err();
    assert_eq!(err.kind, PortErrorKind::Corrupt);
    assert!(err.message.contains("re-freezing"), "{}", err.message);

    assert!(stores.runs.list(None).await.unwrap().is_empty(), "no run record");
    assert!(stores.approvals.list_recent(10).await.unwrap().is_empty());
    assert!(stores.bus.notices().is_empty());
    assert!(brain.briefs().is_empty());
}

#[tokio::test]
async fn a_stopped_engine_reads_its_runs_not_live_and_refuses_writes() {
    let stores = Stores::memory();
    let brain = Arc::new(ScriptedPhaseBrain::new());
    let version = approved(&stores, "v-mech", &mech_like()).await;
    let engine = EmbeddedEngine::new(
        stores.ports(),
        PhaseBrains {
            server: brain.clone(),
            client: brain.clone(),
        },
        options(),
    );
    assert_eq!(
        engine
            .start(start_request("run-l", &version, RunSettings::default()))
            .await
            .unwrap_err()
            .kind,
        PortErrorKind::Unavailable,
        "an engine that has not resumed starts nothing"
    );
    engine.resume_all().await.unwrap();
    engine
        .start(start_request("run-l", &version, RunSettings::default()))
        .await
        .unwrap();
    parked_at(&engine, "run-l", "design").await;
    engine.shutdown().await;
    let view = engine.state("run-l").await.unwrap();
    assert!(!view.live);
    assert_eq!(
        view.reason.as_deref(),
        Some("the embedded flow engine is stopped")
    );
    assert!(view.state.is_some(), "the shape still lists");
    assert_eq!(
        engine
            .decide_gate("run-l", approve("design", "ana"))
            .await
            .unwrap_err()
            .kind,
        PortErrorKind::Unavailable
    );
    assert_eq!(
        engine.state("nope").await.unwrap_err().kind,
        PortErrorKind::NotFound
    );
}

#[tokio::test]
async fn holds_that_could_not_be_written_are_written_when_the_effects_are_retried() {
    let mut stores = Stores::memory();
    let flaky = Arc::new(FlakyApprovals {
        inner: stores.approvals.clone(),
        park_failures: AtomicUsize::new(0),
    });
    stores.approvals = flaky.clone();
    let brain = Arc::new(ScriptedPhaseBrain::new());
    let engine = engine(&stores, &brain).await;
    let version = approved(&stores, "v-mech", &mech_like()).await;
    // Fail the feasibility checkpoint's park and the design gate's first parks.
    flaky.park_failures.store(3, Ordering::SeqCst);
    stores.bus.failing.store(true, Ordering::SeqCst);
    engine
        .start(start_request("run-k", &version, RunSettings::default()))
        .await
        .unwrap();
    let parked = parked_at(&engine, "run-k", "design").await;
    assert_eq!(
        parked.gate.unwrap().approval_id.as_deref(),
        Some("gate:run-k:design:1")
    );
    assert_eq!(
        stores.approvals.get("gate:run-k:design:1").await.unwrap().status,
        ApprovalStatus::AwaitingApproval
    );
    wait_for(
        "the checkpoint's record, retried after the later transitions",
        || async {
            stores
                .approvals
                .get("gate:run-k:feasibility:1")
                .await
                .is_ok_and(|h| h.status == ApprovalStatus::Approved && h.approver.as_deref() == Some("auto"))
        },
    )
    .await;
    assert!(
        stores.bus.notices().is_empty(),
        "the bus was down: the run went on regardless"
    );
    stores.bus.failing.store(false, Ordering::SeqCst);
    engine
        .decide_gate("run-k", approve("design", "ana"))
        .await
        .unwrap();
    parked_at(&engine, "run-k", "release").await;
}

#[tokio::test]
async fn a_restart_mid_phase_and_mid_gate_completes_the_run_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::fixed());
    let stores = Stores::sqlite(dir.path(), clock.clone()).await;
    let version = approved(&stores, "v-mech", &mech_like()).await;

    // First process: the design phase is in flight when it stops.
    let first = Arc::new(ScriptedPhaseBrain::new().with("design", vec![BrainStep::Hang]));
    let engine1 = engine(&stores, &first).await;
    engine1
        .start(start_request("run-z", &version, RunSettings::default()))
        .await
        .unwrap();
    assert!(first.wait_for_calls(5, WAIT).await, "{:?}", first.keys());
    assert_eq!(first.keys().last().map(String::as_str), Some("run-z:design:1"));
    engine1.shutdown().await;
    drop(engine1);
    drop(stores);

    // Second process over the same files: design re-runs with the same key and parks.
    let stores = Stores::sqlite(dir.path(), clock.clone()).await;
    assert!(
        stores
            .approvals
            .restore(&GoneParkers::default())
            .await
            .unwrap()
            .is_empty(),
        "the gateway's start-up restore orphans no gate hold"
    );
    let second = Arc::new(ScriptedPhaseBrain::new());
    let engine2 = EmbeddedEngine::new(
        stores.ports(),
        PhaseBrains {
            server: second.clone(),
            client: second.clone(),
        },
        options(),
    );
    let report = engine2.resume_all().await.unwrap();
    assert_eq!(report.resumed, vec!["run-z"]);
    parked_at(&engine2, "run-z", "design").await;
    assert_eq!(
        second.keys(),
        vec!["run-z:design:1"],
        "the phase in flight re-ran with its key"
    );
    let republished = stores.bus.notices();
    let interrupted = republished.first().map(|n| n.seq).unwrap();
    assert!(
        republished
            .iter()
            .take_while(|n| n.seq == interrupted)
            .any(|n| n.kind == RunNoticeKind::PhaseStarted && n.phase.as_deref() == Some("design")),
        "the last transition's notices are published again (same seq and index: droppable): {republished:?}"
    );
    engine2.shutdown().await;
    drop(engine2);
    drop(stores);

    // Third process: the parked gate is still parked and answerable.
    let stores = Stores::sqlite(dir.path(), clock.clone()).await;
    stores.approvals.restore(&GoneParkers::default()).await.unwrap();
    let third = Arc::new(ScriptedPhaseBrain::new());
    let engine3 = engine(&stores, &third).await;
    let view = engine3.state("run-z").await.unwrap();
    assert!(view.live);
    assert_eq!(view.state.unwrap().gate.unwrap().phase, "design");
    assert_eq!(
        stores.approvals.get("gate:run-z:design:1").await.unwrap().status,
        ApprovalStatus::AwaitingApproval
    );
    assert!(third.keys().is_empty(), "a parked gate runs nothing again");
    engine3
        .decide_gate("run-z", approve("design", "ana"))
        .await
        .unwrap();
    parked_at(&engine3, "run-z", "release").await;
    engine3
        .decide_gate("run-z", approve("release", "ana"))
        .await
        .unwrap();
    ended(&engine3, &stores, "run-z", RunStatus::Completed).await;

    let log = assert_log_is_whole(stores.runs.as_ref(), "run-z").await;
    let completions = log
        .iter()
        .filter(|t| {
            t.commands
                .iter()
                .any(|c| matches!(c, metaforge_ports::RunCommand::CompleteRun { .. }))
        })
        .count();
    assert_eq!(completions, 1, "the run completes exactly once");
    assert_eq!(
        first.keys().len() + second.keys().len() + third.keys().len(),
        8,
        "seven phases, the interrupted one twice"
    );
    wait_for("the run settled", || async {
        stores.runs.unsettled().await.unwrap().is_empty()
    })
    .await;
    let fourth = Arc::new(ScriptedPhaseBrain::new());
    let engine4 = engine(&Stores::sqlite(dir.path(), clock.clone()).await, &fourth).await;
    assert_eq!(
        engine4.state("run-z").await.unwrap().state.unwrap().status,
        RunStatus::Completed
    );
    assert!(fourth.keys().is_empty());
}

#[tokio::test]
async fn a_deadline_that_passed_while_the_engine_was_down_fires_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::fixed());
    let stores = Stores::sqlite(dir.path(), clock.clone()).await;
    let version = approved(&stores, "v-mech", &mech_like()).await;
    let brain = Arc::new(ScriptedPhaseBrain::new());
    let engine1 = engine(&stores, &brain).await;
    let settings = RunSettings {
        gate_timeout_seconds: Some(600),
        ..RunSettings::default()
    };
    engine1
        .start(start_request("run-d", &version, settings))
        .await
        .unwrap();
    parked_at(&engine1, "run-d", "design").await;
    engine1.shutdown().await;
    drop(engine1);
    drop(stores);

    clock.advance(chrono::Duration::seconds(601));
    let stores = Stores::sqlite(dir.path(), clock.clone()).await;
    let engine2 = engine(&stores, &Arc::new(ScriptedPhaseBrain::new())).await;
    let failed = ended(&engine2, &stores, "run-d", RunStatus::Failed).await;
    assert!(failed.error.unwrap().contains("expired"));
    wait_for("the expired gate's hold timed out", || async {
        stores.approvals.get("gate:run-d:design:1").await.unwrap().status == ApprovalStatus::TimedOut
    })
    .await;
}
