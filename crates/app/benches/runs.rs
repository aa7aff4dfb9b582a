//! The embedded engine on SQLite (run through `cargo xtask bench runs`): how fast runs start,
//! how many transitions it persists per second, and what a phase costs it — the engine and its
//! real stores in one process, every commit durable (WAL, `synchronous=FULL`), the phase work done
//! by an instant brain (test-support's `ScriptedPhaseBrain`), so what is measured is the engine:
//! the reducer, the persisted transition, its effects (gate holds parked and decided, the run's
//! twin branch, the merge) and its notices.
//!
//! - **starts**: `FlowEngine::start` (the record and its first transition in one transaction,
//!   the run's task spawned, which creates the run's twin branch) by one caller and by eight at
//!   once, on a flow whose first phase never answers, so nothing more is written meanwhile;
//! - **a 20-phase auto-gated flow**, one run at a time, start to the end of its notice stream
//!   (completed, merged, settled): time per run and per phase, transitions per phase;
//! - **transitions**: the same flow, many runs at once;
//! - **the ledger alone**: the very transitions those runs persisted, appended again to a fresh
//!   ledger with `RunLedger::append_transition` — the store's floor, so the engine's own cost
//!   per transition reads as the difference.
//!
//! `cargo xtask bench runs [N]`: N run starts (default 200); the rest scales with it. Prints one
//! table and the per-phase overhead.

#![expect(
    clippy::disallowed_methods,
    reason = "a benchmark's engine runs on the wall clock"
)]
#![expect(
    clippy::unwrap_used,
    reason = "benchmark harness: a failed step stops the benchmark"
)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use metaforge_adapters_store::{
    InProcessEventBus, SqliteApprovalLedger, SqliteClientTaskStore, SqliteFlowVersionStore, SqliteRunLedger,
    SqliteTwinStore,
};
use metaforge_app::runs::{EmbeddedEngine, EngineOptions, EnginePorts, PhaseBrains};
use metaforge_domain::flow::{Flow, Gate, Phase, freeze};
use metaforge_ports::{
    Clock, FlowEngine, FlowVersionDecision, FlowVersionOrigin, FlowVersionRecord, FlowVersionStatus,
    FlowVersionStore, IntelligenceMode, PhaseBrain, RunLedger, RunSettings, RunStatus, StartRun, Timestamp,
    sha256_hex,
};
use metaforge_test_support::SequentialIds;
use metaforge_test_support::doubles::{BrainStep, ScriptedPhaseBrain};

/// Phases of the auto-gated flow.
const PHASES: usize = 20;
/// Callers starting runs at once in the concurrent start row.
const CALLERS: usize = 8;

struct Wall;

impl Clock for Wall {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
    }
}

/// `PHASES` phases in a chain, each recording one deliverable that its auto-approved gate
/// requires: every gate passes with nobody answering it.
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

/// The engine over fresh SQLite stores in `dir`, doing phase work with `brain`, resumed.
struct Bench {
    engine: EmbeddedEngine,
    runs: Arc<SqliteRunLedger>,
    version: FlowVersionRecord,
}

async fn bench(dir: &Path, brain: Arc<dyn PhaseBrain>) -> Bench {
    let clock: Arc<dyn Clock> = Arc::new(Wall);
    let runs = Arc::new(SqliteRunLedger::open(&dir.join("runs_ledger.db")).await.unwrap());
    let versions = Arc::new(
        SqliteFlowVersionStore::open(&dir.join("flow_versions.db"))
            .await
            .unwrap(),
    );
    let engine = EmbeddedEngine::new(
        EnginePorts {
            runs: runs.clone(),
            versions: versions.clone(),
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
            clock: Arc::clone(&clock),
            ids: Arc::new(SequentialIds::new("evt")),
        },
        PhaseBrains {
            server: Arc::clone(&brain),
            client: brain,
        },
        EngineOptions::default(),
    );
    engine.resume_all().await.unwrap();
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
    Bench {
        engine,
        runs,
        version,
    }
}

impl Bench {
    async fn start(&self, run_id: &str) {
        self.engine
            .start(StartRun {
                run_id: run_id.to_owned(),
                project_id: None,
                intelligence: IntelligenceMode::Server,
                version: self.version.clone(),
                settings: RunSettings::default(),
            })
            .await
            .unwrap();
    }

    /// Starts `run_id` and waits until its notice stream ends (the run ended, its effects done
    /// and settled); the run must have completed.
    async fn run_to_end(&self, run_id: &str) {
        self.start(run_id).await;
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

    /// Transitions persisted for `run_id`.
    async fn transitions(&self, run_id: &str) -> usize {
        self.runs.transitions(run_id, 0).await.unwrap().len()
    }
}

struct Row {
    what: String,
    ops: usize,
    seconds: f64,
    unit: &'static str,
}

impl Row {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.seconds
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// N: the first numeric argument (cargo bench passes `--bench` too), default 200.
fn scale() -> usize {
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200)
        .max(CALLERS)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let starts = scale();
    let sequential_runs = (starts / 20).max(5);
    let concurrent_runs = (starts / 12).max(8);
    let mut rows = Vec::new();

    // Starts: the first phase of every run hangs, so only the starts write.
    {
        let dir = tempfile::tempdir().unwrap();
        let hang = Arc::new(ScriptedPhaseBrain::new().with("p01", vec![BrainStep::Hang; 2 * starts]));
        let b = bench(dir.path(), hang).await;
        let began = Instant::now();
        for i in 0..starts {
            b.start(&format!("start-{i:05}")).await;
        }
        rows.push(Row {
            what: "run starts, 1 caller".to_owned(),
            ops: starts,
            seconds: began.elapsed().as_secs_f64(),
            unit: "starts/s",
        });
        let b = Arc::new(b);
        let began = Instant::now();
        let callers: Vec<_> = (0..CALLERS)
            .map(|c| {
                let b = Arc::clone(&b);
                tokio::spawn(async move {
                    for i in 0..starts / CALLERS {
                        b.start(&format!("start-{c}-{i:05}")).await;
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.await.unwrap();
        }
        rows.push(Row {
            what: format!("run starts, {CALLERS} callers at once"),
            ops: starts / CALLERS * CALLERS,
            seconds: began.elapsed().as_secs_f64(),
            unit: "starts/s",
        });
        b.engine.shutdown().await;
    }

    // One 20-phase run at a time, then many at once, with an instant brain.
    let dir = tempfile::tempdir().unwrap();
    let b = Arc::new(bench(dir.path(), Arc::new(ScriptedPhaseBrain::new())).await);
    b.run_to_end("warm-up").await;
    let mut times = Vec::new();
    let mut sequential_transitions = 0;
    for i in 0..sequential_runs {
        let id = format!("seq-{i:04}");
        let began = Instant::now();
        b.run_to_end(&id).await;
        times.push(began.elapsed());
        sequential_transitions += b.transitions(&id).await;
    }
    let total: Duration = times.iter().sum();
    rows.push(Row {
        what: format!("transitions, {PHASES}-phase runs one at a time"),
        ops: sequential_transitions,
        seconds: total.as_secs_f64(),
        unit: "transitions/s",
    });
    let began = Instant::now();
    let all: Vec<_> = (0..concurrent_runs)
        .map(|i| {
            let b = Arc::clone(&b);
            tokio::spawn(async move { b.run_to_end(&format!("par-{i:04}")).await })
        })
        .collect();
    for run in all {
        run.await.unwrap();
    }
    let concurrent_seconds = began.elapsed().as_secs_f64();
    let mut concurrent_transitions = 0;
    for i in 0..concurrent_runs {
        concurrent_transitions += b.transitions(&format!("par-{i:04}")).await;
    }
    rows.push(Row {
        what: format!("transitions, {concurrent_runs} {PHASES}-phase runs at once"),
        ops: concurrent_transitions,
        seconds: concurrent_seconds,
        unit: "transitions/s",
    });

    // The ledger alone: the same transitions appended again to a fresh ledger.
    let floor_dir = tempfile::tempdir().unwrap();
    let floor = SqliteRunLedger::open(&floor_dir.path().join("runs_ledger.db"))
        .await
        .unwrap();
    let mut logs = Vec::new();
    for i in 0..sequential_runs {
        let id = format!("seq-{i:04}");
        let mut record = b.runs.get(&id).await.unwrap();
        let log = b.runs.transitions(&id, 0).await.unwrap();
        record.status = log[0].state.status;
        record.reason = None;
        logs.push((record, log));
    }
    let began = Instant::now();
    let mut appended = 0;
    for (record, log) in logs {
        let mut log = log.into_iter();
        let first = log.next().unwrap();
        floor.create_started(record, first).await.unwrap();
        appended += 1;
        for transition in log {
            floor.append_transition(transition).await.unwrap();
            appended += 1;
        }
    }
    let floor_row = Row {
        what: "ledger alone: the same transitions appended".to_owned(),
        ops: appended,
        seconds: began.elapsed().as_secs_f64(),
        unit: "appends/s",
    };
    b.engine.shutdown().await;

    println!(
        "| embedded engine on SQLite (durable commits)        |     ops |  seconds |                 rate |"
    );
    println!(
        "|---------------------------------------------------|--------:|---------:|---------------------:|"
    );
    for row in rows.iter().chain(std::iter::once(&floor_row)) {
        println!(
            "| {:<49} | {:>7} | {:>8.3} | {:>6.0} {:<13} |",
            row.what,
            row.ops,
            row.seconds,
            row.rate(),
            row.unit,
        );
    }
    times.sort();
    let p50 = times[times.len() / 2];
    let per_run_transitions = sequential_transitions as f64 / sequential_runs as f64;
    let per_transition_engine = ms(total) / sequential_transitions as f64;
    let per_append = floor_row.seconds * 1000.0 / floor_row.ops as f64;
    println!();
    println!(
        "{PHASES}-phase auto-gated flow, instant brain, {sequential_runs} runs one at a time: p50 {:.1} ms (min {:.1}, max {:.1}) \
         from start to its stream's end → {:.2} ms per phase (engine overhead per phase); \
         {per_run_transitions:.1} transitions per run ({:.2} per phase), {per_transition_engine:.2} ms each in the engine \
         vs {per_append:.2} ms per append to the ledger alone ({:.1}× the store's floor)",
        ms(p50),
        ms(times[0]),
        ms(times[times.len() - 1]),
        ms(p50) / PHASES as f64,
        per_run_transitions / PHASES as f64,
        per_transition_engine / per_append,
    );
    println!(
        "({CALLERS}-caller starts vs 1 caller: {:.2}×; {concurrent_runs} runs at once vs one at a time: {:.2}× the transitions per second)",
        rows[1].rate() / rows[0].rate(),
        rows[3].rate() / rows[2].rate(),
    );
}
