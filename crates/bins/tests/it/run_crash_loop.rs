//! The embedded engine's durability promise through the real binary (issue 16, "Crash loop"):
//! `metaforge gateway` runs design-flow runs of a shipped template with server intelligence (a
//! scripted model plays planner, phase worker and evaluator; the worker records every
//! deliverable through `twin.commit_work_product`), the test starts runs over `POST /v1/runs`
//! and answers their gates over `POST /v1/runs/{id}/approval` as a person would, and meanwhile
//! kills the gateway with SIGKILL at random points — after a random delay, right after an
//! approval was sent, right after a run start was sent — and restarts it over the same home,
//! at least [`MIN_KILLS`] times. Afterwards, from the run ledger's, the approval ledger's and the
//! twin's SQLite files: every run completed exactly once, each run's transitions are numbered
//! without a gap, no start answered 201 and no approval answered 200 is missing, no phase
//! attempt has two completions, gates parked across a kill stayed answerable, every gate hold is
//! closed, and each run's deliverables are on the twin's `main`.
//!
//! The randomness is seeded and the seed printed: `METAFORGE_CRASH_SEED=<seed>` replays the same
//! kill schedule (the timings of a loaded machine still vary). The figures are printed on the
//! terminal whether the test passes or fails.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "process tests: a failure must stop the test loudly"
)]
#![expect(
    clippy::disallowed_methods,
    reason = "the test reads its replay seed from its environment and seeds from the wall clock otherwise"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::run_support::{
    ScriptedModel, approve_body, list_runs, log_tail, merged_into_main, open_gate, send, start_gateway,
};
use metaforge_adapters_store::{SqliteApprovalLedger, SqliteRunLedger, SqliteTwinStore};
use metaforge_ports::{
    ApprovalKind, ApprovalLedger, ApprovalStatus, RunEvent, RunLedger, RunStatus, TWIN_MAIN_BRANCH,
    TwinNodeQuery, TwinNodeType, TwinStore, WORK_PRODUCT_ARTIFACT, WORK_PRODUCT_PHASE, WORK_PRODUCT_RUN,
    gate_approval_id,
};
use serde_json::json;

/// Kills the loop makes before it lets the runs finish.
const MIN_KILLS: usize = 50;
/// Runs the loop must have driven for its figures to mean anything.
const MIN_RUNS: usize = 3;
/// The shipped template the runs walk: seven phases, four human gates.
const TEMPLATE: &str = "design_v1";
/// The longest random wait before a kill.
const MAX_KILL_DELAY_MS: u64 = 1_200;
/// The whole loop, kills and the final drive, must end within this.
const LOOP_DEADLINE: Duration = Duration::from_secs(420);
/// The longest a person looks at a parked gate before answering it.
const MAX_THINK_MS: u64 = 400;
/// The operator identity `crate::common::KEY` authenticates as: every gate's approver.
const APPROVER: &str = "ops";

/// A gate of a run: (run id, gated phase).
type GateKey = (String, String);

/// What the test was told and saw, across every process it started.
#[derive(Debug, Default)]
struct Book {
    /// Runs whose start was answered 201.
    acked_starts: BTreeSet<String>,
    /// Gates whose approval was answered 200.
    acked_approvals: BTreeSet<GateKey>,
    /// Gates seen parked by the process now running, with their hold.
    open_now: BTreeMap<GateKey, Option<String>>,
    /// Gates parked (and not acknowledged as answered) when a kill came, with their hold.
    parked_at_kill: BTreeMap<GateKey, Option<String>>,
    /// Of those, the gates a later process showed parked again at the same hold.
    parked_again: BTreeSet<GateKey>,
    /// Of those, the gates a later process answered 200.
    answered_after_kill: BTreeSet<GateKey>,
    /// Every run id `GET /v1/runs` listed.
    seen_runs: BTreeSet<String>,
    /// Requests sent.
    starts_sent: usize,
    approvals_sent: usize,
    /// Answers that were neither the expected one nor a refusal explained by a race, described.
    odd_answers: Vec<String>,
}

impl Book {
    /// A kill came: every gate seen parked and not acknowledged as answered was parked at it.
    fn killed(&mut self) {
        let open = std::mem::take(&mut self.open_now);
        for (gate, hold) in open {
            if !self.acked_approvals.contains(&gate) {
                self.parked_at_kill.insert(gate, hold);
            }
        }
    }
}

/// What the driver told the killer it just did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// An approval was written to the gateway (its answer not read yet).
    Approval,
    /// A run start was written to the gateway (its answer not read yet).
    Start,
}

/// When the kill of one process comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KillPoint {
    /// After a random delay.
    Timer,
    /// Right after the driver sends an approval (or after the delay, whichever is first).
    AfterApproval,
    /// Right after the driver sends a run start (or after the delay).
    AfterStart,
}

/// How one driver ended.
#[derive(Debug)]
enum DriverEnd {
    /// The gateway stopped answering (killed).
    Lost,
    /// Told to stop.
    Stopped,
    /// Every run ended and the last completed one is merged into `main` (only when it may not
    /// start runs).
    Done,
    /// Something the engine must never do (a gate that cannot be approved, the deadline).
    Failed(String),
}

fn lock(book: &Mutex<Book>) -> std::sync::MutexGuard<'_, Book> {
    book.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One process's driver: answers every parked gate with `approve` once it has looked at it for
/// a moment (a random pause of up to [`MAX_THINK_MS`] from `rng`, so kills find gates parked),
/// starts the next run (when
/// `may_start`) once every run ended and the last completed one is merged into `main` — a run
/// branches from `main` when its first phase starts and merges fast-forward only, so runs are
/// driven one after another — and reports each request it sends to the killer.
fn drive(
    addr: &str,
    book: &Mutex<Book>,
    stop: &AtomicBool,
    sent: &mpsc::Sender<Sent>,
    may_start: bool,
    deadline: Instant,
    rng: &mut fastrand::Rng,
) -> DriverEnd {
    let mut answer_at: BTreeMap<GateKey, Instant> = BTreeMap::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            return DriverEnd::Stopped;
        }
        if Instant::now() > deadline {
            return DriverEnd::Failed(format!("the loop did not finish within {LOOP_DEADLINE:?}"));
        }
        let runs = match list_runs(addr) {
            Ok(runs) => runs,
            Err(_) => return DriverEnd::Lost,
        };
        lock(book).seen_runs.extend(runs.iter().map(|r| r.id.clone()));
        let active: Vec<_> = runs.iter().filter(|r| !r.ended()).collect();
        for run in &active {
            let gate = match open_gate(addr, &run.id) {
                Ok(Some(gate)) => gate,
                Ok(None) => continue,
                Err(_) => return DriverEnd::Lost,
            };
            let key = (run.id.clone(), gate.phase.clone());
            {
                let mut book = lock(book);
                if book.parked_at_kill.get(&key) == Some(&gate.approval_id) {
                    book.parked_again.insert(key.clone());
                }
                book.open_now.insert(key.clone(), gate.approval_id.clone());
            }
            let due = *answer_at
                .entry(key.clone())
                .or_insert_with(|| Instant::now() + Duration::from_millis(rng.u64(0..=MAX_THINK_MS)));
            if Instant::now() < due {
                continue;
            }
            if !gate.approvable {
                return DriverEnd::Failed(format!(
                    "run {} parks at gate '{}' without allowing approve (its deliverables were not recorded?)",
                    run.id, gate.phase
                ));
            }
            let request = match send(
                addr,
                "POST",
                &format!("/v1/runs/{}/approval", run.id),
                Some(&approve_body(&gate)),
            ) {
                Ok(request) => request,
                Err(_) => return DriverEnd::Lost,
            };
            lock(book).approvals_sent += 1;
            let _killer_gone = sent.send(Sent::Approval);
            match request.receive() {
                Ok((200, _)) => {
                    let mut book = lock(book);
                    if book.parked_at_kill.contains_key(&key) {
                        book.answered_after_kill.insert(key.clone());
                    }
                    book.open_now.remove(&key);
                    book.acked_approvals.insert(key);
                }
                // The gate was decided a moment ago (an earlier answer whose reply was lost).
                Ok((409, _)) => {}
                Ok((status, body)) => lock(book)
                    .odd_answers
                    .push(format!("approval of {key:?}: {status} {body}")),
                Err(_) => return DriverEnd::Lost,
            }
        }
        if active.is_empty() {
            let last_settled = match runs.last() {
                None => true,
                Some(run) if run.status != "completed" => true,
                Some(run) => match merged_into_main(addr, &run.id) {
                    Ok(merged) => merged,
                    Err(_) => return DriverEnd::Lost,
                },
            };
            if last_settled && !may_start {
                return DriverEnd::Done;
            }
            if last_settled {
                let request = match send(addr, "POST", "/v1/runs", Some(&json!({"template_id": TEMPLATE}))) {
                    Ok(request) => request,
                    Err(_) => return DriverEnd::Lost,
                };
                lock(book).starts_sent += 1;
                let _killer_gone = sent.send(Sent::Start);
                match request.receive() {
                    Ok((201, body)) => {
                        let id = body["id"].as_str().unwrap_or_default().to_owned();
                        lock(book).acked_starts.insert(id);
                    }
                    Ok((status, body)) => lock(book).odd_answers.push(format!("run start: {status} {body}")),
                    Err(_) => return DriverEnd::Lost,
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Writes a line to the terminal past the test harness's capture.
fn show(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The seed: `METAFORGE_CRASH_SEED`, else from the clock.
fn seed() -> u64 {
    std::env::var("METAFORGE_CRASH_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        })
}

/// Everything the runs left on disk, read after the last process is gone.
struct Figures {
    runs: usize,
    transitions: usize,
    work_products: usize,
    /// Gate holds whose record is not the person's approval the run ledger holds (asserted
    /// after the figures are shown).
    holds_not_decided: Vec<String>,
}

/// The assertions over the run ledger, the approval ledger and the twin (module docs).
async fn check_the_files(home: &Path, book: &Book) -> Figures {
    let ledger = SqliteRunLedger::open(&home.join("runs_ledger.db")).await.unwrap();
    let records = ledger.list(None).await.unwrap();
    let flow = metaforge_domain::flow::template(TEMPLATE).unwrap();
    let gated: BTreeSet<&str> = flow
        .phases
        .iter()
        .filter(|p| p.gate.is_some())
        .map(|p| p.id.as_str())
        .collect();
    let ids: BTreeSet<String> = records.iter().map(|r| r.id.clone()).collect();
    assert_eq!(
        ids, book.seen_runs,
        "the ledger holds exactly the runs the gateway listed"
    );
    for acked in &book.acked_starts {
        assert!(
            ids.contains(acked),
            "run {acked} was started (201) but is not in the ledger"
        );
    }
    let mut transitions = 0;
    for record in &records {
        let run = &record.id;
        assert_eq!(
            record.status,
            RunStatus::Completed,
            "run {run} ended {:?}: {:?}",
            record.status,
            record.reason
        );
        let log = ledger.transitions(run, 0).await.unwrap();
        transitions += log.len();
        let seqs: Vec<u64> = log.iter().map(|t| t.seq).collect();
        let contiguous: Vec<u64> = (1..=log.len() as u64).collect();
        assert_eq!(
            seqs, contiguous,
            "run {run}'s transitions are numbered 1.. without a gap"
        );
        assert!(log[0].event.is_none(), "run {run} begins with its start");
        let completed: Vec<u64> = log
            .iter()
            .filter(|t| t.state.status == RunStatus::Completed)
            .map(|t| t.seq)
            .collect();
        assert_eq!(
            completed,
            vec![log.len() as u64],
            "run {run} completed exactly once, in its last transition"
        );
        let mut finished: BTreeMap<(String, u32), usize> = BTreeMap::new();
        let mut decided: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for t in &log {
            match &t.event {
                Some(RunEvent::PhaseFinished { phase, attempt, .. }) => {
                    *finished.entry((phase.clone(), *attempt)).or_default() += 1;
                }
                Some(RunEvent::GateDecided {
                    phase,
                    decision,
                    approver,
                    ..
                }) => decided
                    .entry(phase.clone())
                    .or_default()
                    .push((decision.kind().as_str().to_owned(), approver.clone())),
                Some(RunEvent::PhaseFailed { phase, reason, .. }) => {
                    panic!("run {run}: phase {phase} failed: {reason}")
                }
                _ => {}
            }
        }
        let twice: Vec<_> = finished.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "run {run}: phase attempts completed twice: {twice:?}"
        );
        let attempts: BTreeSet<(String, u32)> = finished.keys().cloned().collect();
        let once: BTreeSet<(String, u32)> = flow.phases.iter().map(|p| (p.id.clone(), 1)).collect();
        assert_eq!(
            attempts, once,
            "run {run}: every phase finished once, in its first attempt"
        );
        for phase in &gated {
            assert_eq!(
                decided.get(*phase).cloned().unwrap_or_default(),
                vec![("approve".to_owned(), APPROVER.to_owned())],
                "run {run}: gate '{phase}' was decided once, by the person"
            );
        }
        for (acked_run, phase) in &book.acked_approvals {
            if acked_run == run {
                assert!(
                    decided.contains_key(phase),
                    "run {run}: the approval of '{phase}' was answered 200 but is not in the log"
                );
            }
        }
        for (parked_run, phase) in book.parked_at_kill.keys() {
            if parked_run == run {
                assert!(
                    decided.contains_key(phase),
                    "run {run}: gate '{phase}', parked at a kill, was never decided"
                );
            }
        }
    }
    assert!(
        ledger.unsettled().await.unwrap().is_empty(),
        "every run's last effects were carried out and marked settled"
    );

    // Every gate hold is decided by the person; none is left open.
    let clock: Arc<dyn metaforge_ports::Clock> = Arc::new(crate::common::Wall);
    let approvals = SqliteApprovalLedger::open(&home.join("tool_approvals_ledger.db"), clock)
        .await
        .unwrap();
    let open: Vec<String> = approvals
        .list_pending()
        .await
        .unwrap()
        .into_iter()
        .filter(|h| h.kind == ApprovalKind::Gate)
        .map(|h| h.id)
        .collect();
    assert!(open.is_empty(), "gate holds left open: {open:?}");
    let mut holds_not_decided = Vec::new();
    for record in &records {
        for phase in &gated {
            let hold = approvals
                .get(&gate_approval_id(&record.id, phase, 1))
                .await
                .unwrap();
            if hold.status != ApprovalStatus::Approved || hold.approver.as_deref() != Some(APPROVER) {
                holds_not_decided.push(format!(
                    "{}: {} (approver {:?}, reason {:?})",
                    hold.id,
                    hold.status.as_str(),
                    hold.approver,
                    hold.reason
                ));
            }
        }
    }

    // Each run's deliverables (what its worker recorded: required and expected) are on `main`.
    let twin = SqliteTwinStore::open(&home.join("twin.db")).await.unwrap();
    let on_main = twin
        .find_nodes(
            TWIN_MAIN_BRANCH,
            &TwinNodeQuery {
                node_type: Some(TwinNodeType::WorkProduct),
                property: None,
            },
        )
        .await
        .unwrap();
    let mut recorded: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for node in &on_main {
        let prop = |name: &str| {
            node.properties
                .get(name)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        recorded
            .entry((prop(WORK_PRODUCT_RUN), prop(WORK_PRODUCT_PHASE)))
            .or_default()
            .insert(prop(WORK_PRODUCT_ARTIFACT));
    }
    for record in &records {
        for phase in &flow.phases {
            let wanted: BTreeSet<String> = phase
                .required_deliverables
                .iter()
                .chain(&phase.expected_artifacts)
                .cloned()
                .collect();
            let have = recorded
                .get(&(record.id.clone(), phase.id.clone()))
                .cloned()
                .unwrap_or_default();
            assert!(
                wanted.is_subset(&have),
                "run {}: phase {}'s deliverables {wanted:?} are not all on main (found {have:?})",
                record.id,
                phase.id
            );
        }
    }
    Figures {
        runs: records.len(),
        transitions,
        work_products: on_main.len(),
        holds_not_decided,
    }
}

#[test]
fn runs_survive_sigkill_at_random_points_each_completing_once_with_nothing_acknowledged_lost() {
    let seed = seed();
    show(&format!(
        "crash loop: seed {seed} (replay with METAFORGE_CRASH_SEED={seed})"
    ));
    let mut rng = fastrand::Rng::with_seed(seed);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let model = runtime.block_on(ScriptedModel::start());
    let home = tempfile::tempdir().unwrap();
    let env = model.gateway_env(home.path());
    let log = home.path().join("gateway.log");
    let book = Arc::new(Mutex::new(Book::default()));
    let began = Instant::now();
    let deadline = began + LOOP_DEADLINE;
    let mut kills: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut killed = 0usize;
    let mut epochs = 0usize;
    loop {
        epochs += 1;
        let (mut gateway, addr) = start_gateway(home.path(), &env, &log);
        let killing = killed < MIN_KILLS;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let driver = {
            let (book, stop, addr) = (Arc::clone(&book), Arc::clone(&stop), addr.clone());
            let mut person = fastrand::Rng::with_seed(rng.u64(..));
            std::thread::spawn(move || drive(&addr, &book, &stop, &tx, killing, deadline, &mut person))
        };
        if !killing {
            let end = driver.join().unwrap();
            gateway.kill();
            assert!(
                matches!(end, DriverEnd::Done),
                "the runs did not all finish after the last kill: {end:?}\n{:?}\ngateway log:\n{}",
                lock(&book),
                log_tail(&log, 40)
            );
            break;
        }
        let point = match rng.u8(0..10) {
            0..=5 => KillPoint::Timer,
            6..=8 => KillPoint::AfterApproval,
            _ => KillPoint::AfterStart,
        };
        let delay = Duration::from_millis(rng.u64(0..=MAX_KILL_DELAY_MS));
        let wanted = match point {
            KillPoint::Timer => None,
            KillPoint::AfterApproval => Some(Sent::Approval),
            KillPoint::AfterStart => Some(Sent::Start),
        };
        let waited = Instant::now();
        let mut landed = "timer";
        while let Some(remaining) = delay.checked_sub(waited.elapsed()) {
            match rx.recv_timeout(remaining) {
                Ok(what) if Some(what) == wanted => {
                    // Into the gateway's handling of it: from before the request is read to after
                    // its transition is persisted.
                    std::thread::sleep(Duration::from_micros(rng.u64(0..=20_000)));
                    landed = match what {
                        Sent::Approval => "after an approval was sent",
                        Sent::Start => "after a start was sent",
                    };
                    break;
                }
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(remaining);
                    break;
                }
            }
        }
        gateway.kill();
        killed += 1;
        *kills.entry(landed).or_default() += 1;
        stop.store(true, Ordering::SeqCst);
        let end = driver.join().unwrap();
        lock(&book).killed();
        if let DriverEnd::Failed(why) = end {
            panic!("{why}\n{:?}\ngateway log:\n{}", lock(&book), log_tail(&log, 40));
        }
    }
    let elapsed = began.elapsed();
    let book = Arc::try_unwrap(book).unwrap().into_inner().unwrap();
    let calls = model.calls();
    assert!(
        calls.unexpected.is_empty(),
        "the model was asked: {:?}",
        calls.unexpected
    );
    assert!(
        book.odd_answers.is_empty(),
        "unexpected answers: {:?}",
        book.odd_answers
    );
    let figures = runtime.block_on(check_the_files(home.path(), &book));
    let (rerun, extra) = calls.reruns();
    show(&format!(
        "crash loop figures (seed {seed}): {killed} SIGKILLs ({}) over {epochs} gateway processes; \
         {} runs of {TEMPLATE} completed, each exactly once; {} transitions, contiguous, none lost or doubled; \
         {rerun} phase attempts re-run after a kill ({extra} extra brain runs, same run:phase:attempt key); \
         {} gates parked at a kill, {} parked again at the same hold after the restart, {} answered 200 by a later process; \
         {} starts and {} approvals acknowledged, all in the ledger ({} starts and {} approvals sent); \
         {} work products on main; {} model calls; {:.1} s",
        kills
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", "),
        figures.runs,
        figures.transitions,
        book.parked_at_kill.len(),
        book.parked_again.len(),
        book.answered_after_kill.len(),
        book.acked_starts.len(),
        book.acked_approvals.len(),
        book.starts_sent,
        book.approvals_sent,
        figures.work_products,
        calls.planner_by_key.values().sum::<usize>() + calls.worker + calls.evaluator,
        elapsed.as_secs_f64(),
    ));
    assert!(
        figures.holds_not_decided.is_empty(),
        "gate holds that do not record the person's approval the run ledger holds for them: {:#?}",
        figures.holds_not_decided
    );
    assert!(killed >= MIN_KILLS);
    assert!(figures.runs >= MIN_RUNS, "only {} runs were driven", figures.runs);
    assert!(
        rerun > 0,
        "no kill landed in a phase: the loop proved nothing about phases in flight"
    );
    assert!(
        !book.answered_after_kill.is_empty(),
        "no gate parked at a kill was answered afterwards: the loop proved nothing about parked gates"
    );
}
