//! Crash safety and cross-process concurrency of the approval ledger and flow-version store,
//! driven through the `store_crash_child` helper process (feature `crash-harness`).
#![expect(
    clippy::disallowed_methods,
    reason = "the test configures its child processes through the environment"
)]
#![expect(
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a failed expectation fails the test"
)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use metaforge_adapters_store::{SqliteApprovalLedger, SqliteFlowVersionStore};
use metaforge_ports::sha256_hex;
use metaforge_ports::{
    ApprovalLedger, ApprovalStatus, Clock, FlowVersionOrigin, FlowVersionRecord, FlowVersionStatus,
    FlowVersionStore, ORPHANED_APPROVAL_REASON, PortErrorKind, Timestamp,
};
use rand::Rng;

const CHILD: &str = env!("CARGO_BIN_EXE_store_crash_child");
const KILLS: usize = 60;

struct SystemClock;
impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
    }
}

async fn open(dir: &Path) -> (SqliteApprovalLedger, SqliteFlowVersionStore) {
    let ledger = SqliteApprovalLedger::open(&dir.join("tool_approvals_ledger.db"), Arc::new(SystemClock))
        .await
        .expect("open approvals");
    let versions = SqliteFlowVersionStore::open(&dir.join("flow_versions.db"))
        .await
        .expect("open versions");
    (ledger, versions)
}

/// Plants a version whose frozen content no longer matches its hash, as on-disk tampering would.
async fn plant_tampered_version(dir: &Path, versions: &SqliteFlowVersionStore) {
    let frozen = "{\"phases\":[\"design\"]}".to_owned();
    versions
        .save(FlowVersionRecord {
            id: "v-planted".into(),
            template_id: "tpl-crash".into(),
            template_version: "1.0.0".into(),
            status: FlowVersionStatus::Proposed,
            content_hash: sha256_hex(&frozen),
            frozen,
            origin: FlowVersionOrigin::Caller,
            approval_id: None,
            approver: None,
            created_at: chrono::Utc::now(),
            decided_at: None,
        })
        .await
        .expect("plant");
    let pool = sqlx::SqlitePool::connect_with(
        sqlx::sqlite::SqliteConnectOptions::new().filename(dir.join("flow_versions.db")),
    )
    .await
    .expect("raw");
    sqlx::query("UPDATE flow_versions SET frozen = '{\"phases\":[\"rm -rf\"]}' WHERE id = 'v-planted'")
        .execute(&pool)
        .await
        .expect("tamper");
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_loses_no_committed_approval_or_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (_, versions) = open(dir.path()).await;
        plant_tampered_version(dir.path(), &versions).await;
    }
    let mut rng = rand::rng();
    let mut parked = BTreeSet::new();
    let mut approved = BTreeSet::new();
    let mut saved = BTreeSet::new();
    let (mut checked, mut lost, mut orphaned_seen) = (0usize, 0usize, 0usize);
    let mut problems = Vec::new();
    for iteration in 0..KILLS {
        let mut child = Command::new(CHILD)
            .args([
                "loop",
                &dir.path().display().to_string(),
                &format!("it{iteration}"),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let delay = rng.random_range(15..300u64);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        child.kill().expect("SIGKILL");
        let out = child.wait_with_output().expect("reap child");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("store_crash_child:"),
            "the child failed on its own: {stderr}"
        );
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            match l.split_once(' ') {
                Some(("parked", id)) => drop(parked.insert(id.to_owned())),
                Some(("approved", id)) => drop(approved.insert(id.to_owned())),
                Some(("saved", id)) => drop(saved.insert(id.to_owned())),
                _ => {}
            }
        }

        // Restart as a gateway would, and check every record ever committed.
        let (ledger, versions) = open(dir.path()).await;
        orphaned_seen += ledger
            .restore(&metaforge_ports::GoneParkers::default())
            .await
            .expect("restore approvals")
            .len();
        let restored = versions.restore().await.expect("restore versions");
        let skipped: Vec<&str> = restored.skipped.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(
            skipped,
            vec!["v-planted"],
            "exactly the tampered version is skipped"
        );
        assert_eq!(
            versions.get("v-planted").await.map_err(|e| e.kind).err(),
            Some(PortErrorKind::Corrupt),
            "the tampered version is never served"
        );
        assert!(
            ledger.list_pending().await.expect("pending").is_empty(),
            "no hold survives a restart as actionable"
        );
        for id in &parked {
            checked += 1;
            match ledger.get(id).await {
                Err(e) => {
                    lost += 1;
                    problems.push(format!("approval {id}: {e}"));
                }
                Ok(r) if approved.contains(id) => {
                    if r.status != ApprovalStatus::Approved || r.approver.as_deref() != Some("crash-tester") {
                        lost += 1;
                        problems.push(format!("approval {id} lost its decision: {r:?}"));
                    }
                }
                Ok(r) => {
                    let orphaned = r.status == ApprovalStatus::Failed
                        && r.reason.as_deref() == Some(ORPHANED_APPROVAL_REASON);
                    // Decided, committed, killed before it could print: also a committed state.
                    let decided =
                        r.status == ApprovalStatus::Approved && r.approver.as_deref() == Some("crash-tester");
                    if !(orphaned || decided) {
                        lost += 1;
                        problems.push(format!("approval {id} is in an impossible state: {r:?}"));
                    }
                }
            }
        }
        for id in &saved {
            checked += 1;
            match versions.get(id).await {
                Ok(v)
                    if v.content_hash == sha256_hex(&v.frozen) && v.status == FlowVersionStatus::Proposed => {
                }
                other => {
                    lost += 1;
                    problems.push(format!("version {id}: {other:?}"));
                }
            }
        }
    }
    println!(
        "crash loop: iterations={KILLS} kills={KILLS} approvals_committed={} decisions_committed={} versions_committed={} orphaned_on_restart={orphaned_seen} records_checked={checked} records_lost={lost}",
        parked.len(),
        approved.len(),
        saved.len()
    );
    assert!(
        parked.len() > KILLS,
        "the child committed records before most kills ({} parks)",
        parked.len()
    );
    assert_eq!(lost, 0, "committed records were lost or corrupted: {problems:#?}");
}

fn read_ready(child: &mut std::process::Child) -> BufReader<std::process::ChildStdout> {
    let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    reader.read_line(&mut first).expect("read ready");
    assert_eq!(first.trim(), "ready", "the child opened the ledger");
    reader
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_deciding_one_hold_exactly_one_wins_the_other_gets_the_conflict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ledger, _) = open(dir.path()).await;
    for round in 0..10 {
        let id = format!("race-{round}");
        ledger
            .park(metaforge_ports::ApprovalRecord {
                id: id.clone(),
                kind: metaforge_ports::ApprovalKind::ToolCall,
                tool: "twin.commit_geometry".into(),
                arguments: serde_json::json!({}),
                caller: "remote".into(),
                status: ApprovalStatus::AwaitingApproval,
                reason: None,
                approver: None,
                flow_version_id: None,
                created_at: chrono::Utc::now(),
                decided_at: None,
                deadline: None,
                requested_by: None,
            })
            .await
            .expect("park");
        let go = dir.path().join(format!("go-{round}"));
        let mut children = Vec::new();
        let mut readers = Vec::new();
        for approver in ["alice", "bob"] {
            let mut child = Command::new(CHILD)
                .args([
                    "decide",
                    &dir.path().display().to_string(),
                    &id,
                    approver,
                    &go.display().to_string(),
                ])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn decider");
            readers.push((approver, read_ready(&mut child)));
            children.push(child);
        }
        std::fs::write(&go, b"go").expect("release the deciders");
        let mut winners = Vec::new();
        let mut conflicts = 0;
        for (approver, mut reader) in readers {
            let mut rest = String::new();
            reader.read_to_string(&mut rest).expect("read verdict");
            match rest.trim() {
                "won" => winners.push(approver),
                v if v.starts_with("conflict") && v.contains("approved") => conflicts += 1,
                other => panic!("unexpected verdict from {approver}: {other:?}"),
            }
        }
        for mut child in children {
            assert!(child.wait().expect("reap").success());
        }
        assert_eq!(winners.len(), 1, "exactly one decider wins round {round}");
        assert_eq!(conflicts, 1, "the other gets the conflict in round {round}");
        let record = ledger.get(&id).await.expect("get");
        assert_eq!(
            record.approver.as_deref(),
            Some(winners[0]),
            "the winner's decision is the one recorded"
        );
        let history = ledger.history(&id).await.expect("history");
        assert_eq!(
            history.len(),
            2,
            "one park, one decision: the loser wrote nothing"
        );
    }
}

#[test]
fn processes_opening_one_fresh_home_at_the_same_moment_all_open_it() {
    const ROUNDS: usize = 25;
    const PROCESSES: usize = 6;
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let home = tempfile::tempdir().expect("tempdir");
        let dir = home.path().join("home");
        let go = home.path().join("go");
        let children: Vec<std::process::Child> = (0..PROCESSES)
            .map(|_| {
                Command::new(CHILD)
                    .args(["open", &dir.display().to_string(), &go.display().to_string()])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        std::fs::write(&go, b"go").expect("start signal");
        for child in children {
            let out = child.wait_with_output().expect("wait");
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() || stdout.trim() != "opened" {
                failures.push(format!(
                    "round {round}: {} {stdout:?} {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
    }
    println!(
        "{} starts on {ROUNDS} fresh homes, {PROCESSES} at once: {} failed",
        ROUNDS * PROCESSES,
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}
