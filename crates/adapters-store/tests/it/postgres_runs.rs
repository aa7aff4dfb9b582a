//! The PostgreSQL run ledger and client-task store pass their SQLite twins' contracts against a
//! real PostgreSQL server each test starts; and what only a shared server can get wrong: two
//! processes moving one run, two clients claiming one task through two gateways, a terminal run
//! reopened by a hand-written statement.

use std::sync::Arc;

use metaforge_adapters_store::postgres::{PgClientTaskStore, PgRunLedger};
use metaforge_ports::{ClientTaskStore, IntelligenceMode, PortErrorKind, RunLedger, RunStatus};
use metaforge_test_support::contracts::{self, kind_of, sample_run, t, transition};
use metaforge_test_support::postgres::start_postgres;

#[tokio::test]
async fn postgres_run_ledger_honours_the_contract() {
    let Some(server) = start_postgres() else { return };
    let ledger = PgRunLedger::open(&server.url).await.expect("open");
    contracts::run_ledger_contract(&ledger).await;
}

#[tokio::test]
async fn postgres_run_ledger_leases_honour_the_contract() {
    let Some(server) = start_postgres() else { return };
    let ledger = PgRunLedger::open(&server.url).await.expect("open");
    contracts::lease_store_contract(&ledger).await;
}

#[tokio::test]
async fn postgres_client_task_store_honours_the_contract() {
    let Some(server) = start_postgres() else { return };
    let runs = Arc::new(PgRunLedger::open(&server.url).await.expect("open runs"));
    let tasks = PgClientTaskStore::open(&server.url, runs.clone())
        .await
        .expect("open tasks");
    contracts::client_task_store_contract(&tasks, runs.as_ref()).await;
}

#[tokio::test]
async fn two_processes_appending_one_transition_produce_one_append_and_conflicts() {
    let Some(server) = start_postgres() else { return };
    // Two ledgers with pools of their own: a gateway and a worker on one server.
    let first = Arc::new(PgRunLedger::open(&server.url).await.expect("open"));
    let second = Arc::new(PgRunLedger::open(&server.url).await.expect("reopen"));
    let mut record = sample_run("race-run", IntelligenceMode::Server, 0);
    record.status = RunStatus::Running;
    first
        .create_started(record, transition("race-run", 1, RunStatus::Running, 1))
        .await
        .expect("create_started");
    for seq in 2..=6 {
        let writers = (0..10).map(|n| {
            let ledger: Arc<dyn RunLedger> = if n % 2 == 0 { first.clone() } else { second.clone() };
            tokio::spawn(async move {
                ledger
                    .append_transition(transition(
                        "race-run",
                        seq,
                        RunStatus::Running,
                        i64::try_from(seq).unwrap_or(0),
                    ))
                    .await
            })
        });
        let mut appended = 0;
        for answer in futures::future::join_all(writers).await {
            match answer.expect("writer task") {
                Ok(_) => appended += 1,
                Err(e) => assert_eq!(
                    e.kind,
                    PortErrorKind::Conflict,
                    "a losing append is a conflict: {e}"
                ),
            }
        }
        assert_eq!(appended, 1, "exactly one of 10 racing appends of seq {seq} lands");
    }
    let log = second.transitions("race-run", 0).await.expect("transitions");
    let seqs: Vec<u64> = log.iter().map(|t| t.seq).collect();
    assert_eq!(
        seqs,
        vec![1, 2, 3, 4, 5, 6],
        "the log has no gap and no duplicate"
    );
}

#[tokio::test]
async fn two_gateways_claiming_one_client_task_produce_one_claim() {
    let Some(server) = start_postgres() else { return };
    let runs = Arc::new(PgRunLedger::open(&server.url).await.expect("open runs"));
    runs.create(sample_run("run-c", IntelligenceMode::Client, 0))
        .await
        .expect("client run");
    let first = Arc::new(
        PgClientTaskStore::open(&server.url, runs.clone())
            .await
            .expect("open"),
    );
    let second = Arc::new(
        PgClientTaskStore::open(&server.url, runs.clone())
            .await
            .expect("reopen"),
    );
    let task = first
        .post("run-c", "design", 1, serde_json::json!({"goal": "g"}), t(1))
        .await
        .expect("post");
    let claimants = (0..10).map(|n| {
        let store: Arc<dyn ClientTaskStore> = if n % 2 == 0 { first.clone() } else { second.clone() };
        let id = task.id.clone();
        tokio::spawn(async move {
            store
                .claim(
                    &id,
                    &metaforge_ports::Claimant {
                        identity: format!("client-{n}"),
                        session: None,
                    },
                    t(2),
                )
                .await
        })
    });
    let mut winners = Vec::new();
    for answer in futures::future::join_all(claimants).await {
        match answer.expect("claimant task") {
            Ok(claimed) => winners.push(claimed.claimed_by),
            Err(e) => assert_eq!(
                e.kind,
                PortErrorKind::Conflict,
                "a losing claim is a conflict: {e}"
            ),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one claim wins: {winners:?}");
    let stored = second.get(&task.id).await.expect("get");
    assert_eq!(stored.claimed_by, winners[0], "the stored claimant is the winner");
}

#[tokio::test]
async fn a_terminal_run_and_the_transition_log_resist_hand_written_statements() {
    let Some(server) = start_postgres() else { return };
    let ledger = PgRunLedger::open(&server.url).await.expect("open");
    ledger
        .create(sample_run("done", IntelligenceMode::Server, 0))
        .await
        .expect("create");
    ledger
        .set_status("done", RunStatus::Completed, None, t(1))
        .await
        .expect("complete");
    assert_eq!(
        kind_of(&ledger.set_status("done", RunStatus::Running, None, t(2)).await),
        Some(PortErrorKind::Conflict),
        "the ledger refuses to reopen a terminal run"
    );
    let pool = sqlx::PgPool::connect(&server.url).await.expect("raw connection");
    let reopened = sqlx::query("UPDATE metaforge_runs.runs SET status = 'running' WHERE id = 'done'")
        .execute(&pool)
        .await;
    let message = reopened.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("a terminal run is never reopened"),
        "the trigger refuses it too: {message:?}"
    );
    let mut logged = sample_run("logged", IntelligenceMode::Server, 0);
    logged.status = RunStatus::Running;
    ledger
        .create_started(logged, transition("logged", 1, RunStatus::Running, 1))
        .await
        .expect("create_started");
    let erased = sqlx::query("DELETE FROM metaforge_runs.run_transitions WHERE run_id = 'logged'")
        .execute(&pool)
        .await;
    let message = erased.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("run_transitions is append-only"),
        "the transition log refuses a hand-written delete: {message:?}"
    );
    assert_eq!(
        ledger.get("done").await.expect("get").status,
        RunStatus::Completed
    );
}
