//! The run ledger contract (FORGE-485).

use metaforge_ports::{
    FlowEngineKind, FlowRef, IntelligenceMode, PhaseState, PhaseStatus, PortErrorKind, RunCommand, RunEvent,
    RunLedger, RunRecord, RunSettings, RunState, RunStatus, RunTransition,
};

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
    assert_eq!(
        ledger
            .latest_transition("r-2")
            .await
            .expect("latest of a plain run"),
        None,
        "a run recorded without engine state has no transition"
    );
    assert_eq!(
        kind_of(
            &ledger
                .append_transition(transition("r-2", 2, RunStatus::Running, 8))
                .await
        ),
        Some(PortErrorKind::Conflict),
        "a run without engine state takes no transition"
    );

    transition_log_contract(ledger).await;
}

/// A two-phase run's state in `status` at `at_secs`.
pub fn sample_state(run_id: &str, status: RunStatus, at_secs: i64) -> RunState {
    let mut phases = vec![PhaseState::pending("design"), PhaseState::pending("release")];
    if let Some(first) = phases.first_mut() {
        first.status = PhaseStatus::Running;
        first.attempt = 1;
        first.started_at = Some(t(0));
    }
    RunState {
        run_id: run_id.to_owned(),
        flow: FlowRef {
            version_id: "v-1".into(),
            content_hash: "ab".repeat(32),
        },
        status,
        settings: RunSettings::default(),
        phases,
        gate: None,
        reworks_used: 0,
        decisions: Vec::new(),
        error: None,
        started_at: t(0),
        updated_at: t(at_secs),
    }
}

/// Transition `seq` of `run_id` into a state in `status` (the start when `seq` is 1).
pub fn transition(run_id: &str, seq: u64, status: RunStatus, at_secs: i64) -> RunTransition {
    let event = (seq > 1).then(|| RunEvent::PhaseFinished {
        flow_version_id: "v-1".into(),
        phase: "design".into(),
        attempt: 1,
        summary: format!("step {seq}"),
        deliverables: vec!["cad_model".into()],
        at: t(at_secs),
    });
    RunTransition {
        run_id: run_id.to_owned(),
        seq,
        event,
        state: sample_state(run_id, status, at_secs),
        commands: vec![RunCommand::StartPhase {
            run_id: run_id.to_owned(),
            flow_version_id: "v-1".into(),
            content_hash: "ab".repeat(32),
            phase: "design".into(),
            attempt: 1,
            key: format!("{run_id}:design:1"),
            feedback: None,
        }],
        reason: (status == RunStatus::AwaitingApproval)
            .then(|| "G6 Design Review: ready for review".to_owned()),
        at: t(at_secs),
    }
}

fn started(id: &str, at_secs: i64) -> RunRecord {
    let mut record = sample_run(id, IntelligenceMode::Server, at_secs);
    record.status = RunStatus::Running;
    record
}

/// The transition log: created atomically with the run, appended with compare-and-set on the
/// sequence, the record's status following each state, terminal runs final, settling.
async fn transition_log_contract(ledger: &dyn RunLedger) {
    let first = transition("t-1", 1, RunStatus::Running, 10);
    let created = ledger
        .create_started(started("t-1", 10), first.clone())
        .await
        .expect("create_started");
    assert_eq!(created.status, RunStatus::Running);
    assert_eq!(created.history.len(), 1);
    assert_eq!(
        ledger.latest_transition("t-1").await.expect("latest"),
        Some(first.clone()),
        "the first transition reads back exactly (event, state, commands)"
    );
    assert_eq!(
        kind_of(&ledger.create_started(started("t-1", 10), first.clone()).await),
        Some(PortErrorKind::Conflict)
    );

    // Bad input writes nothing.
    let mut queued = started("t-bad", 10);
    queued.status = RunStatus::Queued;
    assert_eq!(
        kind_of(
            &ledger
                .create_started(queued, transition("t-bad", 1, RunStatus::Running, 10))
                .await
        ),
        Some(PortErrorKind::Invalid),
        "the record's status must be the first state's"
    );
    let mut second_first = transition("t-bad", 1, RunStatus::Running, 10);
    second_first.seq = 2;
    assert_eq!(
        kind_of(&ledger.create_started(started("t-bad", 10), second_first).await),
        Some(PortErrorKind::Invalid),
        "a run starts at seq 1"
    );
    let mut with_event = transition("t-bad", 2, RunStatus::Running, 10);
    with_event.seq = 1;
    assert_eq!(
        kind_of(&ledger.create_started(started("t-bad", 10), with_event).await),
        Some(PortErrorKind::Invalid),
        "the start has no event"
    );
    assert_eq!(
        kind_of(
            &ledger
                .create_started(
                    started("t-bad", 10),
                    transition("t-other", 1, RunStatus::Running, 10)
                )
                .await
        ),
        Some(PortErrorKind::Invalid),
        "the first transition is the new run's"
    );
    assert_eq!(kind_of(&ledger.get("t-bad").await), Some(PortErrorKind::NotFound));

    // Appending: the record follows the state; the history gains an entry per status change.
    let gate = ledger
        .append_transition(transition("t-1", 2, RunStatus::AwaitingApproval, 11))
        .await
        .expect("append 2");
    assert_eq!(gate.status, RunStatus::AwaitingApproval);
    assert_eq!(gate.reason.as_deref(), Some("G6 Design Review: ready for review"));
    assert_eq!(gate.updated_at, t(11));
    assert_eq!(gate.history.len(), 2);
    let mut same_status = transition("t-1", 3, RunStatus::AwaitingApproval, 12);
    same_status.reason = gate.reason.clone();
    let same = ledger.append_transition(same_status).await.expect("append 3");
    assert_eq!(
        same.history.len(),
        2,
        "an unchanged status and reason add no history"
    );

    // Compare-and-set on the sequence: a racing writer of the same seq, or a gap, is a conflict.
    let (a, b) = futures::join!(
        ledger.append_transition(transition("t-1", 4, RunStatus::Running, 13)),
        ledger.append_transition(transition("t-1", 4, RunStatus::Running, 14)),
    );
    assert_eq!(
        [a.is_ok(), b.is_ok()].iter().filter(|ok| **ok).count(),
        1,
        "exactly one of two writers of seq 4 wins"
    );
    assert!(
        [kind_of(&a), kind_of(&b)].contains(&Some(PortErrorKind::Conflict)),
        "the loser gets a conflict"
    );
    assert_eq!(
        kind_of(
            &ledger
                .append_transition(transition("t-1", 4, RunStatus::Running, 15))
                .await
        ),
        Some(PortErrorKind::Conflict),
        "a transition that exists is never overwritten"
    );
    assert_eq!(
        kind_of(
            &ledger
                .append_transition(transition("t-1", 6, RunStatus::Running, 15))
                .await
        ),
        Some(PortErrorKind::Conflict),
        "a gap in the sequence is a conflict"
    );
    let mut no_event = transition("t-1", 5, RunStatus::Running, 15);
    no_event.event = None;
    assert_eq!(
        kind_of(&ledger.append_transition(no_event).await),
        Some(PortErrorKind::Invalid)
    );
    let mut foreign = transition("t-1", 5, RunStatus::Running, 15);
    foreign.state.run_id = "t-2".into();
    assert_eq!(
        kind_of(&ledger.append_transition(foreign).await),
        Some(PortErrorKind::Invalid)
    );
    assert_eq!(
        kind_of(
            &ledger
                .append_transition(transition("nope", 2, RunStatus::Running, 15))
                .await
        ),
        Some(PortErrorKind::NotFound)
    );
    let log = ledger.transitions("t-1", 0).await.expect("log");
    assert_eq!(
        log.iter().map(|t| t.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4],
        "the log holds every acknowledged transition once, in order"
    );
    assert_eq!(log.first(), Some(&first));
    assert_eq!(
        ledger
            .transitions("t-1", 2)
            .await
            .expect("log after 2")
            .iter()
            .map(|t| t.seq)
            .collect::<Vec<_>>(),
        vec![3, 4]
    );
    assert_eq!(
        kind_of(&ledger.transitions("nope", 0).await),
        Some(PortErrorKind::NotFound)
    );
    assert_eq!(
        kind_of(&ledger.latest_transition("nope").await),
        Some(PortErrorKind::NotFound)
    );

    // Unsettled: every non-terminal run with state; a terminal one until it is settled.
    ledger
        .create_started(started("t-2", 20), transition("t-2", 1, RunStatus::Running, 20))
        .await
        .expect("create t-2");
    assert_eq!(unsettled(ledger).await, vec!["t-1", "t-2"]);
    ledger.mark_settled("t-2", 1).await.expect("settle a running run");
    assert_eq!(
        unsettled(ledger).await,
        vec!["t-1", "t-2"],
        "a run that is not terminal is always picked up"
    );
    let mut done = transition("t-1", 5, RunStatus::Completed, 16);
    done.commands = vec![RunCommand::CompleteRun { run_id: "t-1".into() }];
    let completed = ledger.append_transition(done).await.expect("complete");
    assert_eq!(completed.status, RunStatus::Completed);
    assert_eq!(completed.reason, None);
    assert_eq!(
        unsettled(ledger).await,
        vec!["t-1", "t-2"],
        "effects not yet confirmed"
    );
    assert_eq!(
        kind_of(&ledger.mark_settled("t-1", 6).await),
        Some(PortErrorKind::Invalid),
        "a transition that has not happened cannot be settled"
    );
    ledger.mark_settled("t-1", 5).await.expect("settle");
    ledger
        .mark_settled("t-1", 5)
        .await
        .expect("settling again changes nothing");
    ledger
        .mark_settled("t-1", 2)
        .await
        .expect("settling never moves back");
    assert_eq!(unsettled(ledger).await, vec!["t-2"]);
    assert_eq!(
        kind_of(&ledger.mark_settled("nope", 1).await),
        Some(PortErrorKind::NotFound)
    );

    // A terminal run takes no further transition.
    let reopen = ledger
        .append_transition(transition("t-1", 6, RunStatus::Running, 17))
        .await;
    assert_eq!(kind_of(&reopen), Some(PortErrorKind::Conflict));
    assert!(reopen.err().is_some_and(|e| e.message.contains("terminal")));
    assert_eq!(ledger.get("t-1").await.expect("get").status, RunStatus::Completed);
    assert_eq!(ledger.transitions("t-1", 0).await.expect("log").len(), 5);

    published_claims(ledger).await;
}

/// The published mark: compare-and-set, never back, one winner among racing claims.
async fn published_claims(ledger: &dyn RunLedger) {
    let mut run = sample_run("p-1", IntelligenceMode::Server, 30);
    run.flow_engine = FlowEngineKind::Temporal;
    ledger.create(run).await.expect("create p-1");
    assert_eq!(ledger.claim_published("p-1", 3).await.expect("claim"), Some(0));
    assert_eq!(
        ledger.claim_published("p-1", 3).await.expect("claim again"),
        None,
        "transitions 1..3 are claimed once"
    );
    assert_eq!(
        ledger.claim_published("p-1", 2).await.expect("claim below"),
        None,
        "the mark never moves back"
    );
    assert_eq!(ledger.claim_published("p-1", 5).await.expect("claim on"), Some(3));
    let racers: Vec<_> = (0..8).map(|_| ledger.claim_published("p-1", 9)).collect();
    let answers = futures::future::join_all(racers).await;
    let winners: Vec<_> = answers
        .into_iter()
        .filter_map(|a| a.expect("a racing claim"))
        .collect();
    assert_eq!(
        winners,
        vec![5],
        "of racing claims exactly one wins, from where the mark was"
    );
    assert_eq!(
        kind_of(&ledger.claim_published("nope", 1).await),
        Some(PortErrorKind::NotFound)
    );
}

async fn unsettled(ledger: &dyn RunLedger) -> Vec<String> {
    ledger
        .unsettled()
        .await
        .expect("unsettled")
        .into_iter()
        .map(|r| r.id)
        .filter(|id| id.starts_with("t-"))
        .collect()
}
