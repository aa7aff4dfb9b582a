//! Every PostgreSQL ledger passes the same contract suite as its SQLite twin, against a real
//! PostgreSQL server each test starts on a temporary directory (`apt-get install postgresql`);
//! and the approval ledger keeps one winner per decision when two gateways share the server.

use std::sync::Arc;

use metaforge_adapters_store::postgres::PgApprovalLedger;
use metaforge_ports::{
    ApprovalDecision, ApprovalKind, ApprovalLedger, ApprovalRecord, ApprovalStatus, Clock, PortErrorKind,
};
use metaforge_test_support::postgres::start_postgres;
use metaforge_test_support::{ManualClock, contracts};

#[tokio::test]
async fn postgres_approval_ledger_honours_the_contract() {
    let Some(server) = start_postgres() else { return };
    let clock = Arc::new(ManualClock::fixed());
    let ledger = PgApprovalLedger::open(&server.url, clock.clone())
        .await
        .expect("open");
    contracts::approval_ledger_contract(&ledger, &clock).await;
}

#[tokio::test]
async fn postgres_approval_ledger_orphans_only_the_holds_of_gone_parkers() {
    let Some(server) = start_postgres() else { return };
    let clock = Arc::new(ManualClock::fixed());
    let first = PgApprovalLedger::open(&server.url, clock.clone())
        .await
        .expect("open")
        .with_parker("host-a/1/one");
    let second = PgApprovalLedger::open(&server.url, clock.clone())
        .await
        .expect("reopen")
        .with_parker("host-b/2/two");
    contracts::approval_parkers_contract(&first, "host-a/1/one", &second, "host-b/2/two", &clock).await;
}

#[tokio::test]
async fn two_gateways_deciding_one_hold_produce_one_winner_and_conflicts() {
    let Some(server) = start_postgres() else { return };
    let clock = Arc::new(ManualClock::fixed());
    // Two ledgers with pools of their own: two gateways on one server.
    let first = Arc::new(
        PgApprovalLedger::open(&server.url, clock.clone())
            .await
            .expect("open"),
    );
    let second = Arc::new(
        PgApprovalLedger::open(&server.url, clock.clone())
            .await
            .expect("reopen"),
    );
    for hold in 0..10 {
        let id = format!("race-{hold}");
        first
            .park(ApprovalRecord {
                id: id.clone(),
                kind: ApprovalKind::ToolCall,
                tool: "parts.write_bom".into(),
                arguments: serde_json::json!({"hold": hold}),
                caller: "remote".into(),
                status: ApprovalStatus::AwaitingApproval,
                reason: None,
                approver: None,
                flow_version_id: None,
                created_at: clock.now(),
                decided_at: None,
                deadline: None,
                requested_by: None,
            })
            .await
            .expect("park");
        let deciders = (0..20).map(|n| {
            let ledger: Arc<dyn ApprovalLedger> = if n % 2 == 0 { first.clone() } else { second.clone() };
            let id = id.clone();
            tokio::spawn(async move {
                let decision = ApprovalDecision {
                    approve: n % 3 != 0,
                    approver: format!("approver-{n}"),
                    note: None,
                };
                ledger.decide(&id, decision).await
            })
        });
        let answers = futures::future::join_all(deciders).await;
        let mut winners = 0;
        for answer in answers {
            match answer.expect("decider task") {
                Ok(_) => winners += 1,
                Err(e) => assert_eq!(
                    e.kind,
                    PortErrorKind::Conflict,
                    "a losing decision is a conflict: {e}"
                ),
            }
        }
        assert_eq!(winners, 1, "exactly one of 20 racing decisions wins {id}");
        let history = second.history(&id).await.expect("history");
        assert_eq!(
            history.len(),
            2,
            "one park and one decision are audited: {history:?}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_postgres_is_unavailable_not_a_silent_fallback() {
    let port = metaforge_test_support::net::unused_port();
    let url = format!("postgres://metaforge@127.0.0.1:{port}/postgres");
    let result = PgApprovalLedger::open(&url, Arc::new(ManualClock::fixed())).await;
    assert_eq!(result.err().map(|e| e.kind), Some(PortErrorKind::Unavailable));
}

#[tokio::test]
async fn a_malformed_database_url_is_invalid_and_names_the_variable() {
    let result = PgApprovalLedger::open("postgres://[::1", Arc::new(ManualClock::fixed())).await;
    let error = result.err().expect("a malformed URL is refused");
    assert_eq!(error.kind, PortErrorKind::Invalid);
    assert!(error.to_string().contains("METAFORGE_DATABASE_URL"), "{error}");
}
