//! The run ledger contract (FORGE-485).

use metaforge_ports::{FlowEngineKind, IntelligenceMode, PortErrorKind, RunLedger, RunRecord, RunStatus};

use super::{kind_of, t};

/// A queued run on the embedded engine in the given mode.
pub fn sample_run(id: &str, intelligence: IntelligenceMode, at_secs: i64) -> RunRecord {
    RunRecord {
        id: id.to_owned(),
        project_id: Some("proj-1".into()),
        flow_engine: FlowEngineKind::Embedded,
        intelligence,
        template_id: "tpl-a".into(),
        template_version: "1.0.0".into(),
        flow_version_id: "v-1".into(),
        content_hash: "ab".repeat(32),
        status: RunStatus::Queued,
        reason: None,
        history: Vec::new(),
        created_at: t(at_secs),
        updated_at: t(at_secs),
    }
}

/// Runs every run-ledger rule against `ledger`.
pub async fn run_ledger_contract(ledger: &dyn RunLedger) {
    let created = ledger
        .create(sample_run("r-1", IntelligenceMode::Server, 0))
        .await
        .expect("create");
    assert_eq!(created.history.len(), 1, "creation is the first history entry");
    assert_eq!(created.history[0].status, RunStatus::Queued);
    assert_eq!(created.flow_engine, FlowEngineKind::Embedded);
    assert_eq!(created.content_hash, "ab".repeat(32));
    assert_eq!(ledger.get("r-1").await.expect("get"), created);
    assert_eq!(
        kind_of(
            &ledger
                .create(sample_run("r-1", IntelligenceMode::Server, 0))
                .await
        ),
        Some(PortErrorKind::Conflict)
    );
    let mut bad = sample_run("r-bad", IntelligenceMode::Server, 0);
    bad.flow_version_id = String::new();
    assert_eq!(kind_of(&ledger.create(bad).await), Some(PortErrorKind::Invalid));
    assert_eq!(kind_of(&ledger.get("r-bad").await), Some(PortErrorKind::NotFound));

    let running = ledger
        .set_status("r-1", RunStatus::Running, None, t(1))
        .await
        .expect("running");
    assert_eq!(running.status, RunStatus::Running);
    assert_eq!(running.updated_at, t(1));
    let same = ledger
        .set_status("r-1", RunStatus::Running, None, t(2))
        .await
        .expect("same");
    assert_eq!(same.history.len(), 2, "re-setting the same status adds nothing");
    let gate = ledger
        .set_status(
            "r-1",
            RunStatus::AwaitingApproval,
            Some("gate design_review: 3/3 checks".into()),
            t(3),
        )
        .await
        .expect("gate");
    assert_eq!(gate.reason.as_deref(), Some("gate design_review: 3/3 checks"));
    ledger
        .set_status("r-1", RunStatus::Running, None, t(4))
        .await
        .expect("resume");
    let done = ledger
        .set_status("r-1", RunStatus::Completed, None, t(5))
        .await
        .expect("complete");
    assert_eq!(
        done.history.iter().map(|h| h.status).collect::<Vec<_>>(),
        vec![
            RunStatus::Queued,
            RunStatus::Running,
            RunStatus::AwaitingApproval,
            RunStatus::Running,
            RunStatus::Completed
        ],
        "every status is in the history, in order"
    );
    let reopen = ledger.set_status("r-1", RunStatus::Running, None, t(6)).await;
    assert_eq!(
        kind_of(&reopen),
        Some(PortErrorKind::Conflict),
        "a terminal run is never reopened"
    );
    assert!(reopen.err().is_some_and(|e| e.message.contains("completed")));
    assert_eq!(ledger.get("r-1").await.expect("get").status, RunStatus::Completed);
    assert_eq!(
        kind_of(&ledger.set_status("missing", RunStatus::Running, None, t(1)).await),
        Some(PortErrorKind::NotFound)
    );

    ledger
        .create(sample_run("r-2", IntelligenceMode::Client, 7))
        .await
        .expect("create r-2");
    let queued: Vec<String> = ledger
        .list(Some(RunStatus::Queued))
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(queued, vec!["r-2"]);
    assert_eq!(ledger.list(None).await.expect("list").len(), 2);
}
