//! The client-task contract (FORGE-581/582).

use metaforge_ports::{ClientTaskStatus, ClientTaskStore, IntelligenceMode, PortErrorKind, RunLedger};

use super::{kind_of, runs::sample_run, t};

/// Runs every client-task rule against `tasks`, whose run checks read `runs`.
pub async fn client_task_store_contract(tasks: &dyn ClientTaskStore, runs: &dyn RunLedger) {
    runs.create(sample_run("run-c", IntelligenceMode::Client, 0))
        .await
        .expect("client run");
    runs.create(sample_run("run-s", IntelligenceMode::Server, 0))
        .await
        .expect("server run");
    let brief = serde_json::json!({"goal": "size the bracket", "deliverables": ["step"]});

    assert_eq!(
        kind_of(&tasks.post("run-x", "design", 1, brief.clone(), t(1)).await),
        Some(PortErrorKind::NotFound),
        "no task for a run that does not exist"
    );
    assert_eq!(
        kind_of(&tasks.post("run-s", "design", 1, brief.clone(), t(1)).await),
        Some(PortErrorKind::Conflict),
        "no task for a server-mode run"
    );
    assert_eq!(
        kind_of(&tasks.post("run-c", "", 1, brief.clone(), t(1)).await),
        Some(PortErrorKind::Invalid)
    );

    let posted = tasks
        .post("run-c", "design", 1, brief.clone(), t(1))
        .await
        .expect("post");
    assert_eq!(posted.id, "run-c:design:1", "the id is run:phase:attempt");
    assert_eq!(posted.status, ClientTaskStatus::Open);
    assert_eq!(posted.brief, brief);
    assert_eq!(tasks.get("run-c:design:1").await.expect("get"), posted);

    let claimed = tasks
        .claim("run-c:design:1", &who("claude-code", Some(" s-1 ")), t(2))
        .await
        .expect("claim");
    assert_eq!(claimed.status, ClientTaskStatus::Claimed);
    assert_eq!(claimed.claimed_by.as_deref(), Some("claude-code"));
    assert_eq!(
        claimed.claim_session.as_deref(),
        Some("s-1"),
        "the session is kept beside the identity, trimmed"
    );
    assert_eq!(
        kind_of(&tasks.claim("run-c:design:1", &who("codex", None), t(3)).await),
        Some(PortErrorKind::Conflict),
        "a claimed task cannot be claimed again"
    );
    let reposted = tasks
        .post("run-c", "design", 1, serde_json::json!({"other": true}), t(3))
        .await
        .expect("repost");
    assert_eq!(reposted, claimed, "a retried activity finds the task as it is");
    assert_eq!(
        kind_of(
            &tasks
                .submit("run-c:design:1", "codex", serde_json::json!({}), t(4))
                .await
        ),
        Some(PortErrorKind::Conflict),
        "only the claimant submits"
    );
    let submission = serde_json::json!({"summary": "done", "nodes": ["n-1"]});
    let submitted = tasks
        .submit("run-c:design:1", "claude-code", submission.clone(), t(4))
        .await
        .expect("submit");
    assert_eq!(submitted.status, ClientTaskStatus::Submitted);
    assert_eq!(submitted.submission, Some(submission.clone()));
    assert_eq!(
        tasks
            .post("run-c", "design", 1, brief.clone(), t(5))
            .await
            .expect("repost")
            .submission,
        Some(submission),
        "a retry finds the submission"
    );
    assert_eq!(
        kind_of(&tasks.withdraw("run-c:design:1", t(5)).await),
        Some(PortErrorKind::Conflict),
        "a submitted task cannot be withdrawn"
    );

    tasks
        .post("run-c", "verify", 1, brief.clone(), t(6))
        .await
        .expect("post verify");
    tasks
        .claim("run-c:verify:1", &who("claude-code", None), t(7))
        .await
        .expect("claim verify");
    let withdrawn = tasks.withdraw("run-c:verify:1", t(8)).await.expect("withdraw");
    assert_eq!(withdrawn.status, ClientTaskStatus::Withdrawn);
    assert_eq!(
        tasks
            .withdraw("run-c:verify:1", t(8))
            .await
            .expect("withdraw again")
            .status,
        ClientTaskStatus::Withdrawn,
        "withdraw is idempotent"
    );
    assert_eq!(
        kind_of(&tasks.claim("run-c:verify:1", &who("codex", None), t(9)).await),
        Some(PortErrorKind::Conflict)
    );
    let reopened = tasks
        .post("run-c", "verify", 1, brief.clone(), t(9))
        .await
        .expect("reopen");
    assert_eq!(
        reopened.status,
        ClientTaskStatus::Open,
        "the retry reopens a withdrawn task"
    );
    assert_eq!(reopened.claimed_by, None);
    assert_eq!(reopened.claim_session, None);

    let open: Vec<String> = tasks
        .list(Some("run-c"), Some(ClientTaskStatus::Open))
        .await
        .expect("list")
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(open, vec!["run-c:verify:1"]);
    assert_eq!(tasks.list(None, None).await.expect("list").len(), 2);
    assert_eq!(
        kind_of(&tasks.get("run-c:design:9").await),
        Some(PortErrorKind::NotFound)
    );
}

/// A claimant: `identity`, working in `session`.
fn who(identity: &str, session: Option<&str>) -> metaforge_ports::Claimant {
    metaforge_ports::Claimant {
        identity: identity.to_owned(),
        session: session.map(str::to_owned),
    }
}
