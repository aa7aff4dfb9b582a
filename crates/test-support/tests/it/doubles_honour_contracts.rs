//! The in-memory doubles pass the same contract suites as the real adapters, so a unit test
//! using a double exercises the behaviour production has.

use std::sync::Arc;

use futures::FutureExt;
use metaforge_test_support::ManualClock;
use metaforge_test_support::contracts;
use metaforge_test_support::doubles::{
    MemoryApprovalLedger, MemoryClientTaskStore, MemoryFlowVersionStore, MemoryRunLedger, MemorySessionStore,
    MemoryTwinStore, MemoryUsageStore,
};

#[tokio::test]
async fn memory_approval_ledger_honours_the_contract() {
    let clock = Arc::new(ManualClock::fixed());
    let ledger = MemoryApprovalLedger::new(clock.clone());
    contracts::approval_ledger_contract(&ledger, &clock).await;
}

#[tokio::test]
async fn memory_approval_ledger_orphans_only_the_holds_of_gone_parkers() {
    let clock = Arc::new(ManualClock::fixed());
    let first = MemoryApprovalLedger::new(clock.clone()).with_parker("host-a/1/one");
    let second = first.shared_with("host-b/2/two");
    contracts::approval_parkers_contract(&first, "host-a/1/one", &second, "host-b/2/two", &clock).await;
}

#[tokio::test]
async fn memory_flow_version_store_honours_the_contract() {
    let store = Arc::new(MemoryFlowVersionStore::new());
    let tamper_target = store.clone();
    let tamper = move |id: String, frozen: String| {
        tamper_target.corrupt(&id, &frozen);
        async {}.boxed()
    };
    contracts::flow_version_store_contract(store.as_ref(), &tamper).await;
}

#[tokio::test]
async fn memory_run_ledger_honours_the_contract() {
    contracts::run_ledger_contract(&MemoryRunLedger::new()).await;
}

#[tokio::test]
async fn memory_client_task_store_honours_the_contract() {
    let runs = Arc::new(MemoryRunLedger::new());
    let tasks = MemoryClientTaskStore::new(runs.clone());
    contracts::client_task_store_contract(&tasks, runs.as_ref()).await;
}

#[tokio::test]
async fn memory_usage_store_honours_the_contract() {
    contracts::usage_store_contract(&MemoryUsageStore::new()).await;
}

#[tokio::test]
async fn memory_session_store_honours_the_contract() {
    contracts::session_store_contract(&MemorySessionStore::new()).await;
}

#[tokio::test]
async fn memory_twin_store_honours_the_contract() {
    contracts::twin_store_contract(&MemoryTwinStore::new(), "").await;
}
