//! Several processes on one approval ledger (issue 20): a start orphans only the holds of
//! processes that are gone — dead on this host, or whose presence lease lapsed — and a live
//! process's sweep catches a peer that died on another host. On the real SQLite ledgers.

#![expect(
    clippy::expect_used,
    reason = "integration tests: a failed expectation is a failed test"
)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use metaforge_adapters_store::{SqliteApprovalLedger, SqliteFlowVersionStore, SqliteRunLedger};
use metaforge_app::approvals::{ApprovalService, ParkRequest};
use metaforge_app::processes::{LeaseTimings, LocalProcesses, Presence, process_name};
use metaforge_ports::approval_ledger::{ApprovalDecision, ApprovalLedger};
use metaforge_ports::flow_version_store::{FlowVersionDecision, FlowVersionRestore, FlowVersionStore};
use metaforge_ports::{
    ApprovalKind, ApprovalRecord, ApprovalStatus, Clock, FlowVersionRecord, FlowVersionStatus, LeaseStore,
    ORPHANED_APPROVAL_REASON, PortError,
};
use metaforge_test_support::contracts::frozen_version;
use metaforge_test_support::{ManualClock, SequentialIds};

/// A host whose running pids the test sets.
struct Host {
    name: &'static str,
    alive: Mutex<BTreeSet<u32>>,
}

impl LocalProcesses for Host {
    fn host(&self) -> Option<String> {
        Some(self.name.to_owned())
    }
    fn is_alive(&self, pid: u32) -> bool {
        self.alive.lock().is_ok_and(|alive| alive.contains(&pid))
    }
}

/// One process on the shared ledger files under `dir`.
struct Member {
    approvals: ApprovalService,
    presence: Presence,
}

async fn member(dir: &std::path::Path, name: &str, host: Arc<Host>, clock: &Arc<ManualClock>) -> Member {
    let clock_dyn: Arc<dyn Clock> = clock.clone();
    let ledger = SqliteApprovalLedger::open(&dir.join("tool_approvals_ledger.db"), clock_dyn.clone())
        .await
        .expect("open approvals")
        .with_parker(name);
    let versions = SqliteFlowVersionStore::open(&dir.join("flow_versions.db"))
        .await
        .expect("open versions");
    let leases: Arc<dyn LeaseStore> = Arc::new(
        SqliteRunLedger::open(&dir.join("runs_ledger.db"))
            .await
            .expect("open leases"),
    );
    Member {
        approvals: ApprovalService::new(
            Arc::new(ledger),
            Arc::new(versions),
            clock_dyn.clone(),
            Arc::new(SequentialIds::new(format!("{name}-"))),
        ),
        presence: Presence::new(leases, clock_dyn, host, name.to_owned(), LeaseTimings::default()),
    }
}

fn held_write() -> ParkRequest {
    ParkRequest {
        tool: "twin.commit_geometry".to_owned(),
        arguments: serde_json::json!({"node": "n1"}),
        caller: "remote".to_owned(),
        requested_by: None,
        timeout_seconds: Some(3_600),
    }
}

#[tokio::test]
async fn a_restart_orphans_its_own_dead_holds_and_keeps_a_live_peers_until_its_lease_lapses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::fixed());
    let host_a = Arc::new(Host {
        name: "host-a",
        alive: Mutex::new([100].into()),
    });
    let host_b = Arc::new(Host {
        name: "host-b",
        alive: Mutex::new([200].into()),
    });
    let a = member(dir.path(), &process_name("host-a", 100, "a"), host_a, &clock).await;
    let old_b = member(
        dir.path(),
        &process_name("host-b", 200, "b"),
        host_b.clone(),
        &clock,
    )
    .await;
    a.presence.announce().await.expect("a announces");
    old_b.presence.announce().await.expect("b announces");
    let held_by_a = a.approvals.park(held_write()).await.expect("a parks").id;
    let held_by_b = old_b.approvals.park(held_write()).await.expect("b parks").id;

    // b is killed and starts again under a new pid on the same host, a few seconds later.
    host_b.alive.lock().expect("pids").remove(&200);
    host_b.alive.lock().expect("pids").insert(201);
    clock.advance(chrono::Duration::seconds(3));
    let new_b = member(dir.path(), &process_name("host-b", 201, "b2"), host_b, &clock).await;
    new_b.presence.announce().await.expect("the new b announces");
    let (orphaned, _) = new_b.approvals.restore(&new_b.presence).await.expect("restore");
    assert_eq!(orphaned, 1, "only the dead b's hold lost its waiter");
    let own = new_b.approvals.get(&held_by_b).await.expect("b's hold");
    assert_eq!(own.status, ApprovalStatus::Failed);
    assert_eq!(own.reason.as_deref(), Some(ORPHANED_APPROVAL_REASON));
    assert_eq!(
        new_b.approvals.get(&held_by_a).await.expect("a's hold").status,
        ApprovalStatus::AwaitingApproval,
        "a live peer's hold still waits on its waiter"
    );
    assert_eq!(
        new_b.approvals.orphan_gone(&new_b.presence).await.expect("sweep"),
        0,
        "a sweep while a renews finds no one gone"
    );

    // a stops renewing (its host is gone, so no pid check can tell): once its lease lapses, the
    // next sweep orphans its hold, and another sweep finds nothing more.
    clock.advance(chrono::Duration::seconds(16));
    new_b.presence.announce().await.expect("b renews");
    assert_eq!(
        new_b.approvals.orphan_gone(&new_b.presence).await.expect("sweep"),
        1
    );
    let lost = new_b.approvals.get(&held_by_a).await.expect("a's hold");
    assert_eq!(lost.status, ApprovalStatus::Failed);
    assert_eq!(lost.reason.as_deref(), Some(ORPHANED_APPROVAL_REASON));
    assert_eq!(
        new_b.approvals.orphan_gone(&new_b.presence).await.expect("sweep"),
        0
    );
}

#[tokio::test]
async fn a_process_never_counts_itself_gone_and_a_peer_that_never_announced_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::fixed());
    let host = Arc::new(Host {
        name: "host-a",
        alive: Mutex::new([1, 2].into()),
    });
    let gateway = member(dir.path(), &process_name("host-a", 1, "g"), host.clone(), &clock).await;
    // A local `metaforge mcp serve` names its holds but keeps no presence lease.
    let sidecar = member(dir.path(), &process_name("host-a", 2, "s"), host, &clock).await;
    gateway.presence.announce().await.expect("announce");
    let own = gateway.approvals.park(held_write()).await.expect("park").id;
    let sidecars = sidecar.approvals.park(held_write()).await.expect("park").id;
    clock.advance(chrono::Duration::seconds(60));
    let (orphaned, _) = gateway
        .approvals
        .restore(&gateway.presence)
        .await
        .expect("restore");
    assert_eq!(
        orphaned, 0,
        "its own lapsed lease and a live pid without one are not gone"
    );
    for id in [&own, &sidecars] {
        assert_eq!(
            gateway.approvals.get(id).await.expect("hold").status,
            ApprovalStatus::AwaitingApproval
        );
    }
}

/// A flow-version store whose first `stale` reads of a version are stale, as when another
/// process decides it between this process's read and its write.
struct StaleReads {
    inner: Arc<dyn FlowVersionStore>,
    stale: Mutex<Option<(FlowVersionRecord, usize)>>,
}

#[async_trait::async_trait]
impl FlowVersionStore for StaleReads {
    async fn save(&self, record: FlowVersionRecord) -> Result<FlowVersionRecord, PortError> {
        self.inner.save(record).await
    }
    async fn get(&self, id: &str) -> Result<FlowVersionRecord, PortError> {
        let stale = {
            let mut stale = self.stale.lock().expect("stale");
            match stale.as_mut() {
                Some((record, left)) if *left > 0 && record.id == id => {
                    *left -= 1;
                    Some(record.clone())
                }
                Some(_) | None => None,
            }
        };
        if let Some(record) = stale {
            return Ok(record);
        }
        self.inner.get(id).await
    }
    async fn list(&self, template_id: Option<&str>) -> Result<Vec<FlowVersionRecord>, PortError> {
        self.inner.list(template_id).await
    }
    async fn decide(&self, id: &str, decision: FlowVersionDecision) -> Result<FlowVersionRecord, PortError> {
        self.inner.decide(id, decision).await
    }
    async fn restore(&self) -> Result<FlowVersionRestore, PortError> {
        self.inner.restore().await
    }
}

#[tokio::test]
async fn a_start_whose_carry_races_the_deciding_gateway_finds_the_version_decided_and_starts() {
    // Found by the full-size cluster run: a worker restarting while gateway A approved a
    // proposal read the version as proposed, then failed its start on "already approved".
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::fixed());
    let clock_dyn: Arc<dyn Clock> = clock.clone();
    let ledger = Arc::new(
        SqliteApprovalLedger::open(&dir.path().join("tool_approvals_ledger.db"), clock_dyn.clone())
            .await
            .expect("open approvals"),
    );
    let versions: Arc<dyn FlowVersionStore> = Arc::new(
        SqliteFlowVersionStore::open(&dir.path().join("flow_versions.db"))
            .await
            .expect("open versions"),
    );
    let proposed = versions
        .save(frozen_version("v-1", "mech_v1", "design", 0))
        .await
        .expect("save");
    let hold = ledger
        .park(ApprovalRecord {
            id: "hold-1".to_owned(),
            kind: ApprovalKind::DesignFlowProposal,
            tool: "flow.propose".to_owned(),
            arguments: serde_json::json!({}),
            caller: "local".to_owned(),
            status: ApprovalStatus::AwaitingApproval,
            reason: None,
            approver: None,
            flow_version_id: Some("v-1".to_owned()),
            created_at: clock.now(),
            decided_at: None,
            deadline: None,
            requested_by: None,
        })
        .await
        .expect("park");
    // Gateway A decides the hold and carries it to the version...
    let decided = ledger
        .decide(
            &hold.id,
            ApprovalDecision {
                approve: true,
                approver: "ana".to_owned(),
                note: None,
            },
        )
        .await
        .expect("decide");
    versions
        .decide(
            "v-1",
            FlowVersionDecision {
                status: FlowVersionStatus::Approved,
                approver: "ana".to_owned(),
                approval_id: Some(decided.id.clone()),
                at: clock.now(),
            },
        )
        .await
        .expect("carry");
    // ...while the restarting process had read the version as still proposed.
    let starting = ApprovalService::new(
        ledger,
        Arc::new(StaleReads {
            inner: Arc::clone(&versions),
            stale: Mutex::new(Some((proposed, 2))),
        }),
        clock_dyn.clone(),
        Arc::new(SequentialIds::new("w-")),
    );
    let host = Arc::new(Host {
        name: "host-w",
        alive: Mutex::new([300].into()),
    });
    let leases: Arc<dyn LeaseStore> = Arc::new(
        SqliteRunLedger::open(&dir.path().join("runs_ledger.db"))
            .await
            .expect("open leases"),
    );
    let presence = Presence::new(
        leases,
        clock_dyn,
        host,
        process_name("host-w", 300, "w"),
        LeaseTimings::default(),
    );
    starting
        .restore(&presence)
        .await
        .expect("the start restores despite the race");
    assert_eq!(
        versions.get("v-1").await.expect("v-1").status,
        FlowVersionStatus::Approved
    );
}
