//! Every SQLite ledger, the embedded twin and the in-process bus pass their port's contract.

use std::path::Path;
use std::sync::Arc;

use futures::FutureExt;
use metaforge_adapters_store::{
    InProcessEventBus, SqliteApprovalLedger, SqliteClientTaskStore, SqliteFlowVersionStore, SqliteRunLedger,
    SqliteSessionStore, SqliteTwinStore, SqliteUsageStore,
};
use metaforge_test_support::{ManualClock, contracts};

#[expect(
    clippy::expect_used,
    reason = "test helper: a failed connection fails the test"
)]
async fn raw(path: &Path) -> sqlx::SqlitePool {
    sqlx::SqlitePool::connect_with(sqlx::sqlite::SqliteConnectOptions::new().filename(path))
        .await
        .expect("raw connection")
}

#[tokio::test]
async fn sqlite_approval_ledger_honours_the_contract() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::fixed());
    let ledger = SqliteApprovalLedger::open(&dir.path().join("tool_approvals_ledger.db"), clock.clone())
        .await
        .expect("open");
    contracts::approval_ledger_contract(&ledger, &clock).await;
}

#[tokio::test]
async fn sqlite_approval_ledger_orphans_only_the_holds_of_gone_parkers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::fixed());
    let path = dir.path().join("tool_approvals_ledger.db");
    let first = SqliteApprovalLedger::open(&path, clock.clone())
        .await
        .expect("open")
        .with_parker("host-a/1/one");
    let second = SqliteApprovalLedger::open(&path, clock.clone())
        .await
        .expect("reopen")
        .with_parker("host-b/2/two");
    contracts::approval_parkers_contract(&first, "host-a/1/one", &second, "host-b/2/two", &clock).await;
}

#[tokio::test]
async fn sqlite_flow_version_store_honours_the_contract() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("flow_versions.db");
    let store = SqliteFlowVersionStore::open(&path).await.expect("open");
    let tamper = move |id: String, frozen: String| {
        let path = path.clone();
        async move {
            let pool = raw(&path).await;
            sqlx::query("UPDATE flow_versions SET frozen = ? WHERE id = ?")
                .bind(frozen)
                .bind(id)
                .execute(&pool)
                .await
                .expect("tamper");
        }
        .boxed()
    };
    contracts::flow_version_store_contract(&store, &tamper).await;
}

#[tokio::test]
async fn sqlite_run_ledger_honours_the_contract() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = SqliteRunLedger::open(&dir.path().join("runs.db"))
        .await
        .expect("open");
    contracts::run_ledger_contract(&ledger).await;
}

#[tokio::test]
async fn sqlite_run_ledger_leases_honour_the_contract() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = SqliteRunLedger::open(&dir.path().join("runs.db"))
        .await
        .expect("open");
    contracts::lease_store_contract(&ledger).await;
}

#[tokio::test]
async fn sqlite_client_task_store_honours_the_contract() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runs = Arc::new(
        SqliteRunLedger::open(&dir.path().join("runs.db"))
            .await
            .expect("runs"),
    );
    let tasks = SqliteClientTaskStore::open(&dir.path().join("client_tasks.db"), runs.clone())
        .await
        .expect("open");
    contracts::client_task_store_contract(&tasks, runs.as_ref()).await;
}

#[tokio::test]
async fn sqlite_usage_store_honours_the_contract() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteUsageStore::open(&dir.path().join("llm_usage.db"))
        .await
        .expect("open");
    contracts::usage_store_contract(&store).await;
}

#[tokio::test]
async fn sqlite_session_store_honours_the_contract() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteSessionStore::open(&dir.path().join("sessions.db"))
        .await
        .expect("open");
    contracts::session_store_contract(&store).await;
}

#[tokio::test]
async fn sqlite_twin_store_honours_the_contract() {
    let dir = tempfile::tempdir().expect("tempdir");
    let twin = SqliteTwinStore::open(&dir.path().join("twin.db"))
        .await
        .expect("open");
    contracts::twin_store_contract(&twin, "").await;
}

#[tokio::test]
async fn in_process_event_bus_honours_the_contract() {
    contracts::event_bus_contract(&InProcessEventBus::new(), "inproc").await;
}
