//! The approval ledger contract (FORGE-89, FORGE-406/466).

use metaforge_ports::{
    ApprovalDecision, ApprovalKind, ApprovalLedger, ApprovalRecord, ApprovalStatus, ApprovalTrigger, Clock,
    GoneParkers, ORPHANED_APPROVAL_REASON, PortErrorKind, ResolveOutcome, WaiterResolution,
};

use super::kind_of;
use crate::ManualClock;

fn hold(id: &str, clock: &ManualClock) -> ApprovalRecord {
    ApprovalRecord {
        id: id.to_owned(),
        kind: ApprovalKind::ToolCall,
        tool: "twin.commit_geometry".to_owned(),
        arguments: serde_json::json!({"node": "n1", "nested": {"b": 2, "a": [1, 2]}}),
        caller: "remote".to_owned(),
        status: ApprovalStatus::AwaitingApproval,
        reason: None,
        approver: None,
        flow_version_id: None,
        created_at: clock.now(),
        decided_at: None,
        deadline: None,
        requested_by: None,
    }
}

fn approve(by: &str) -> ApprovalDecision {
    ApprovalDecision {
        approve: true,
        approver: by.to_owned(),
        note: Some("looks right".to_owned()),
    }
}

/// Runs every approval-ledger rule against `ledger`, whose time is `clock`.
pub async fn approval_ledger_contract(ledger: &dyn ApprovalLedger, clock: &ManualClock) {
    // Park, then read back exactly what was parked.
    let mut first = hold("a-1", clock);
    first.requested_by = Some("alice".to_owned());
    let parked = ledger.park(first).await.expect("park a-1");
    assert_eq!(
        parked.requested_by.as_deref(),
        Some("alice"),
        "the requester is kept"
    );
    assert_eq!(
        ledger.get("a-1").await.expect("get a-1"),
        parked,
        "a parked hold reads back unchanged"
    );
    assert_eq!(
        kind_of(&ledger.park(hold("a-1", clock)).await),
        Some(PortErrorKind::Conflict),
        "parking an existing id is a conflict"
    );

    // Bad input writes nothing.
    let mut bad = hold("a-bad", clock);
    bad.status = ApprovalStatus::Approved;
    assert_eq!(
        kind_of(&ledger.park(bad).await),
        Some(PortErrorKind::Invalid),
        "a new hold must be awaiting_approval"
    );
    let mut bad = hold("a-bad", clock);
    bad.tool = " ".to_owned();
    assert_eq!(
        kind_of(&ledger.park(bad).await),
        Some(PortErrorKind::Invalid),
        "a hold needs a tool"
    );
    assert_eq!(
        kind_of(&ledger.get("a-bad").await),
        Some(PortErrorKind::NotFound),
        "a refused park wrote nothing"
    );
    assert_eq!(kind_of(&ledger.get("nope").await), Some(PortErrorKind::NotFound));
    assert_eq!(
        kind_of(&ledger.decide("nope", approve("ana")).await),
        Some(PortErrorKind::NotFound)
    );
    assert_eq!(
        kind_of(&ledger.resolve("nope", WaiterResolution::TimedOut, None).await),
        Some(PortErrorKind::NotFound)
    );
    assert_eq!(
        kind_of(&ledger.history("nope").await),
        Some(PortErrorKind::NotFound)
    );

    clock.advance(chrono::Duration::seconds(1));
    ledger.park(hold("a-2", clock)).await.expect("park a-2");
    let pending: Vec<String> = ledger
        .list_pending()
        .await
        .expect("pending")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(
        pending,
        vec!["a-1", "a-2"],
        "pending holds are listed oldest first"
    );

    // A decision: only with an approver, exactly once.
    assert_eq!(
        kind_of(
            &ledger
                .decide(
                    "a-1",
                    ApprovalDecision {
                        approver: "".into(),
                        ..approve("x")
                    }
                )
                .await
        ),
        Some(PortErrorKind::Invalid)
    );
    assert_eq!(
        ledger.get("a-1").await.expect("get").status,
        ApprovalStatus::AwaitingApproval,
        "a refused decision changed nothing"
    );
    clock.advance(chrono::Duration::seconds(1));
    let decided = ledger.decide("a-1", approve("ana")).await.expect("decide a-1");
    assert_eq!(decided.status, ApprovalStatus::Approved);
    assert_eq!(
        decided.approver.as_deref(),
        Some("ana"),
        "the approver comes from the decision"
    );
    assert_eq!(decided.decided_at, Some(clock.now()));
    assert_eq!(
        ledger.get("a-1").await.expect("get"),
        decided,
        "the decision is durable"
    );
    let again = ledger
        .decide(
            "a-1",
            ApprovalDecision {
                approve: false,
                approver: "bob".into(),
                note: None,
            },
        )
        .await;
    assert_eq!(
        kind_of(&again),
        Some(PortErrorKind::Conflict),
        "a decided hold cannot be decided again"
    );
    assert!(
        again.err().is_some_and(|e| e.message.contains("approved")),
        "the conflict names the state"
    );
    assert_eq!(
        kind_of(&ledger.resolve("a-1", WaiterResolution::TimedOut, None).await),
        Some(PortErrorKind::Conflict),
        "a waiter cannot overwrite a person's decision"
    );
    let history = ledger.history("a-1").await.expect("history");
    assert_eq!(history.len(), 2, "park + decision");
    assert_eq!(history[0].trigger, ApprovalTrigger::Park);
    assert_eq!(history[0].from, None);
    assert_eq!(history[1].trigger, ApprovalTrigger::Decision);
    assert_eq!(history[1].from, Some(ApprovalStatus::AwaitingApproval));
    assert_eq!(history[1].to, ApprovalStatus::Approved);
    assert_eq!(history[1].approver.as_deref(), Some("ana"));

    // A waiter's close is idempotent.
    let closed = ledger
        .resolve("a-2", WaiterResolution::TimedOut, Some("window closed".into()))
        .await
        .expect("resolve");
    assert!(
        matches!(closed, ResolveOutcome::Resolved { .. }),
        "an open hold is resolved"
    );
    assert_eq!(closed.record().status, ApprovalStatus::TimedOut);
    let again = ledger
        .resolve("a-2", WaiterResolution::Canceled, None)
        .await
        .expect("resolve again");
    assert!(
        matches!(again, ResolveOutcome::AlreadyClosed { .. }),
        "closing a closed hold changes nothing"
    );
    assert_eq!(
        again.record().status,
        ApprovalStatus::TimedOut,
        "the first close stands"
    );
    let late = ledger.decide("a-2", approve("ana")).await;
    assert_eq!(
        kind_of(&late),
        Some(PortErrorKind::Conflict),
        "answering a timed_out hold is a conflict"
    );
    assert!(
        late.err()
            .is_some_and(|e| e.message.contains("timed_out") && e.message.contains("window closed")),
        "the conflict names the state and reason"
    );
    let history = ledger.history("a-2").await.expect("history");
    assert_eq!(
        history.iter().map(|h| h.trigger).collect::<Vec<_>>(),
        vec![ApprovalTrigger::Park, ApprovalTrigger::Waiter]
    );

    // Deadline expiry on read.
    let mut with_deadline = hold("a-3", clock);
    with_deadline.deadline = Some(clock.now() + chrono::Duration::seconds(60));
    ledger.park(with_deadline).await.expect("park a-3");
    clock.advance(chrono::Duration::seconds(59));
    assert!(
        ledger
            .list_pending()
            .await
            .expect("pending")
            .iter()
            .any(|r| r.id == "a-3"),
        "before its deadline a hold stays open"
    );
    clock.advance(chrono::Duration::seconds(2));
    assert!(
        !ledger
            .list_pending()
            .await
            .expect("pending")
            .iter()
            .any(|r| r.id == "a-3"),
        "a read after the deadline expires the hold"
    );
    let expired = ledger.get("a-3").await.expect("get a-3");
    assert_eq!(expired.status, ApprovalStatus::TimedOut);
    assert!(expired.reason.as_deref().is_some_and(|r| r.contains("deadline")));
    let history = ledger.history("a-3").await.expect("history");
    assert_eq!(
        history.last().map(|h| h.trigger),
        Some(ApprovalTrigger::Deadline),
        "expiry is recorded with trigger=deadline"
    );
    assert_eq!(
        kind_of(&ledger.decide("a-3", approve("ana")).await),
        Some(PortErrorKind::Conflict)
    );

    // Restore at start: open holds become failed, orphaned; closed ones are untouched.
    clock.advance(chrono::Duration::seconds(1));
    ledger.park(hold("a-4", clock)).await.expect("park a-4");
    ledger.park(hold("a-5", clock)).await.expect("park a-5");
    let mut overdue = hold("a-6", clock);
    overdue.deadline = Some(clock.now());
    ledger.park(overdue).await.expect("park a-6");
    // At its deadline a decision still lands; one second later the hold is past it.
    clock.advance(chrono::Duration::seconds(1));
    let orphaned = ledger.restore(&GoneParkers::default()).await.expect("restore");
    let mut ids: Vec<String> = orphaned.iter().map(|r| r.id.clone()).collect();
    ids.sort();
    assert_eq!(ids, vec!["a-4", "a-5"], "restore marks exactly the open holds");
    assert_eq!(
        ledger.get("a-6").await.expect("get a-6").status,
        ApprovalStatus::TimedOut,
        "a hold past its deadline at restart timed out, it was not orphaned"
    );
    for id in ["a-4", "a-5"] {
        let r = ledger.get(id).await.expect("get orphan");
        assert_eq!(r.status, ApprovalStatus::Failed);
        assert_eq!(r.reason.as_deref(), Some(ORPHANED_APPROVAL_REASON));
        let h = ledger.history(id).await.expect("history");
        assert_eq!(h.last().map(|h| h.trigger), Some(ApprovalTrigger::Restart));
    }
    assert_eq!(
        ledger.get("a-1").await.expect("get").status,
        ApprovalStatus::Approved,
        "restore leaves decided holds alone"
    );
    assert!(ledger.list_pending().await.expect("pending").is_empty());
    assert!(matches!(
        ledger.resolve("a-4", WaiterResolution::Canceled, None).await,
        Ok(ResolveOutcome::AlreadyClosed { .. })
    ));
    assert_eq!(
        ledger
            .restore(&GoneParkers::default())
            .await
            .expect("restore again")
            .len(),
        0,
        "a second restore finds nothing"
    );

    let recent = ledger.list_recent(2).await.expect("recent");
    assert_eq!(recent.len(), 2, "list_recent honours its limit");
    assert_eq!(recent[0].id, "a-6", "newest first");

    // A run's gate hold is listed with the others and survives a restart: its waiter is the run
    // engine, which resumes the run parked at it; the engine records the decision on it.
    clock.advance(chrono::Duration::seconds(1));
    let mut gate = hold("gate:r-1:design:1", clock);
    gate.kind = ApprovalKind::Gate;
    gate.tool = "run.gate".to_owned();
    gate.arguments = serde_json::json!({"run_id": "r-1", "phase": "design"});
    ledger.park(gate).await.expect("park a gate hold");
    assert!(
        ledger
            .restore(&GoneParkers::default())
            .await
            .expect("restore with a gate")
            .is_empty(),
        "a restart never orphans a gate hold"
    );
    let pending = ledger.list_pending().await.expect("pending");
    assert_eq!(
        pending
            .iter()
            .map(|r| (r.id.as_str(), r.kind))
            .collect::<Vec<_>>(),
        vec![("gate:r-1:design:1", ApprovalKind::Gate)],
        "a parked gate is listed with kind gate"
    );
    let decided = ledger
        .decide("gate:r-1:design:1", approve("ana"))
        .await
        .expect("the engine records a gate's decision");
    assert_eq!(decided.status, ApprovalStatus::Approved);
    assert_eq!(decided.approver.as_deref(), Some("ana"));

    pending_pages_contract(ledger, clock).await;
}

/// The pending queue a page at a time: every pending hold exactly once, in queue order, across
/// pages of any size, with the queue's total on each page; holds parked at the same instant are
/// ordered by id and never skipped at a page boundary.
async fn pending_pages_contract(ledger: &dyn ApprovalLedger, clock: &ManualClock) {
    clock.advance(chrono::Duration::seconds(1));
    for id in ["p-3", "p-1", "p-2"] {
        ledger.park(hold(id, clock)).await.expect("park at one instant");
    }
    clock.advance(chrono::Duration::seconds(1));
    for id in ["p-5", "p-4"] {
        ledger.park(hold(id, clock)).await.expect("park");
        clock.advance(chrono::Duration::milliseconds(1));
    }
    let whole: Vec<String> = ledger
        .list_pending()
        .await
        .expect("pending")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert!(whole.len() >= 5, "{whole:?}");
    assert_eq!(
        whole[whole.len() - 5..],
        ["p-1", "p-2", "p-3", "p-5", "p-4"],
        "oldest first, then by id"
    );
    for size in [1, 2, 3, whole.len(), whole.len() + 10] {
        let mut seen = Vec::new();
        let mut after = None;
        let mut pages = 0;
        loop {
            let page = ledger.pending_page(after.as_ref(), size).await.expect("a page");
            pages += 1;
            assert!(page.holds.len() <= size, "page size {size}");
            assert_eq!(page.total, whole.len(), "the total is the whole queue's");
            seen.extend(page.holds.iter().map(|r| r.id.clone()));
            match page.next {
                Some(next) => {
                    assert_eq!(page.holds.len(), size, "only the last page is short");
                    let token = next.encode();
                    after =
                        Some(metaforge_ports::PendingCursor::parse(&token).expect("the token reads back"));
                }
                None => break,
            }
            assert!(pages <= whole.len() + 1, "pages of {size} never end");
        }
        assert_eq!(
            seen, whole,
            "pages of {size} list every pending hold once, in order"
        );
    }
    let decided = ledger.decide("p-2", approve("ana")).await.expect("decide p-2");
    assert_eq!(decided.status, ApprovalStatus::Approved);
    let first = ledger.pending_page(None, 1).await.expect("a page");
    assert_eq!(first.total, whole.len() - 1, "a decided hold leaves the queue");
}

/// Two processes on one ledger: `first` and `second` are two handles on the same store, opened
/// naming the processes `first_name` and `second_name`. A restore orphans only the holds of the
/// processes it is told are gone, and names the parkers of the holds still open.
pub async fn approval_parkers_contract(
    first: &dyn ApprovalLedger,
    first_name: &str,
    second: &dyn ApprovalLedger,
    second_name: &str,
    clock: &ManualClock,
) {
    first.park(hold("p-1", clock)).await.expect("park p-1");
    second.park(hold("p-2", clock)).await.expect("park p-2");
    let mut gate = hold("gate:r-9:design:1", clock);
    gate.kind = ApprovalKind::Gate;
    first.park(gate).await.expect("park a gate hold");
    let both: std::collections::BTreeSet<String> = [first_name.to_owned(), second_name.to_owned()].into();
    assert_eq!(
        second.open_parkers().await.expect("parkers"),
        both,
        "either handle names both parkers"
    );
    assert!(
        second
            .restore(&GoneParkers::default())
            .await
            .expect("restore with no one gone")
            .is_empty(),
        "no hold of a named, live process is orphaned"
    );
    let orphaned = second
        .restore(&GoneParkers::of([first_name.to_owned()]))
        .await
        .expect("restore the first's holds");
    assert_eq!(
        orphaned.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        vec!["p-1"],
        "only the gone process's tool-call hold is orphaned, never its gate"
    );
    assert_eq!(
        first.get("p-2").await.expect("get p-2").status,
        ApprovalStatus::AwaitingApproval,
        "the live process's hold still waits"
    );
    assert_eq!(
        first.get("gate:r-9:design:1").await.expect("get the gate").status,
        ApprovalStatus::AwaitingApproval
    );
    assert_eq!(
        first.open_parkers().await.expect("parkers"),
        both,
        "the gate keeps its parker named while it waits"
    );
    let again = first
        .restore(&GoneParkers::of([first_name.to_owned()]))
        .await
        .expect("restore again");
    assert!(again.is_empty(), "a second sweep finds nothing");
    let orphaned = first
        .restore(&GoneParkers::of([second_name.to_owned()]))
        .await
        .expect("restore the second's holds");
    assert_eq!(
        orphaned.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        vec!["p-2"]
    );
}
