//! Every ledger's records survive closing and reopening its file (a gateway restart), and a
//! second handle on the same file (another process) sees the same state.

use std::sync::Arc;

use metaforge_adapters_store::{
    SqliteClientTaskStore, SqliteRunLedger, SqliteSessionStore, SqliteTwinStore, SqliteUsageStore,
};
use metaforge_ports::{
    ChatMessage, ChatSession, ClientTaskStatus, ClientTaskStore, IntelligenceMode, MessageRole, RunLedger,
    RunStatus, SessionStore, TWIN_MAIN_BRANCH, TwinChangeSet, TwinCommitRequest, TwinNode, TwinNodeType,
    TwinStore, UsageEvent, UsageStore,
};
use metaforge_test_support::contracts::{sample_run, t};

#[tokio::test]
async fn runs_and_client_tasks_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runs_path = dir.path().join("runs_ledger.db");
    let tasks_path = dir.path().join("client_tasks.db");
    {
        let runs = Arc::new(SqliteRunLedger::open(&runs_path).await.expect("runs"));
        let tasks = SqliteClientTaskStore::open(&tasks_path, runs.clone())
            .await
            .expect("tasks");
        runs.create(sample_run("r-1", IntelligenceMode::Client, 0))
            .await
            .expect("create");
        runs.set_status("r-1", RunStatus::AwaitingApproval, Some("gate g1".into()), t(1))
            .await
            .expect("gate");
        tasks
            .post("r-1", "design", 1, serde_json::json!({"goal": "g"}), t(2))
            .await
            .expect("post");
        tasks
            .claim(
                "r-1:design:1",
                &metaforge_ports::Claimant {
                    identity: "codex".into(),
                    session: Some("s-codex".into()),
                },
                t(3),
            )
            .await
            .expect("claim");
    }
    let runs = Arc::new(SqliteRunLedger::open(&runs_path).await.expect("reopen runs"));
    let tasks = SqliteClientTaskStore::open(&tasks_path, runs.clone())
        .await
        .expect("reopen tasks");
    let run = runs.get("r-1").await.expect("run");
    assert_eq!(
        run.status,
        RunStatus::AwaitingApproval,
        "a run parked at a gate reads as parked, not queued"
    );
    assert_eq!(run.reason.as_deref(), Some("gate g1"));
    assert_eq!(run.history.len(), 2);
    let task = tasks.get("r-1:design:1").await.expect("task");
    assert_eq!(
        task.status,
        ClientTaskStatus::Claimed,
        "a claimed task survives the restart"
    );
    assert_eq!(task.claimed_by.as_deref(), Some("codex"));
}

#[tokio::test]
async fn usage_sessions_and_twin_are_shared_by_two_handles_on_one_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let usage_a = SqliteUsageStore::open(&dir.path().join("llm_usage.db"))
        .await
        .expect("a");
    let usage_b = SqliteUsageStore::open(&dir.path().join("llm_usage.db"))
        .await
        .expect("b");
    let event = UsageEvent {
        run_id: Some("r-1".into()),
        provider: "anthropic".into(),
        model: "m".into(),
        at: Some(t(0)),
        ..UsageEvent::default()
    };
    usage_a.record(event.clone()).await.expect("gateway writes");
    usage_b.record(event.clone()).await.expect("worker writes");
    assert_eq!(
        usage_a.events_for_run("r-1").await.expect("read").len(),
        2,
        "one file, both writers"
    );

    let sessions_path = dir.path().join("sessions.db");
    {
        let s = SqliteSessionStore::open(&sessions_path).await.expect("sessions");
        s.create_session(ChatSession {
            id: "s-1".into(),
            parent_session_id: None,
            project_id: None,
            title: None,
            created_at: t(0),
            limits: Default::default(),
        })
        .await
        .expect("create");
        s.append_message(ChatMessage {
            id: "m-1".into(),
            session_id: "s-1".into(),
            role: MessageRole::User,
            content: "torque spec for the hinge".into(),
            created_at: t(1),
        })
        .await
        .expect("append");
    }
    let s = SqliteSessionStore::open(&sessions_path).await.expect("reopen");
    assert_eq!(
        s.search("hinge torque", 5).await.expect("search").len(),
        1,
        "the FTS index survives a restart"
    );

    let twin_path = dir.path().join("twin.db");
    {
        let twin = SqliteTwinStore::open(&twin_path).await.expect("twin");
        twin.commit(TwinCommitRequest {
            id: "c-1".into(),
            branch: TWIN_MAIN_BRANCH.into(),
            expected_head: None,
            message: "m".into(),
            author: "a".into(),
            at: t(0),
            changes: TwinChangeSet {
                upsert_nodes: vec![TwinNode::new(
                    "n-1",
                    TwinNodeType::WorkProduct,
                    serde_json::Map::new(),
                )],
                ..TwinChangeSet::default()
            },
        })
        .await
        .expect("commit");
    }
    let twin = SqliteTwinStore::open(&twin_path).await.expect("reopen twin");
    assert_eq!(twin.log(TWIN_MAIN_BRANCH).await.expect("log").len(), 1);
    assert!(twin.node(TWIN_MAIN_BRANCH, "n-1").await.is_ok());
}
