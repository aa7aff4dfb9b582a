//! Model-based property test: any sequence of ledger operations gives the same answers and the
//! same records on the SQLite ledger as on the in-memory model, and the state machine's
//! invariants hold throughout (a closed hold never changes again; every change is audited).

use std::sync::Arc;

use metaforge_adapters_store::SqliteApprovalLedger;
use metaforge_ports::{
    ApprovalDecision, ApprovalKind, ApprovalLedger, ApprovalRecord, ApprovalStatus, Clock, PortError,
    WaiterResolution,
};
use metaforge_test_support::ManualClock;
use metaforge_test_support::doubles::MemoryApprovalLedger;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Park { hold: u8, deadline_secs: Option<u8> },
    Decide { hold: u8, approve: bool },
    Resolve { hold: u8, canceled: bool },
    Advance { secs: u8 },
    Restore,
    Get { hold: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4, proptest::option::of(1u8..60))
            .prop_map(|(hold, deadline_secs)| Op::Park { hold, deadline_secs }),
        (0u8..4, any::<bool>()).prop_map(|(hold, approve)| Op::Decide { hold, approve }),
        (0u8..4, any::<bool>()).prop_map(|(hold, canceled)| Op::Resolve { hold, canceled }),
        (1u8..90).prop_map(|secs| Op::Advance { secs }),
        Just(Op::Restore),
        (0u8..4).prop_map(|hold| Op::Get { hold }),
    ]
}

/// What an operation answered, reduced to what must agree across engines.
fn outcome<T: std::fmt::Debug>(r: &Result<T, PortError>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {:?}", e.kind),
    }
}

async fn apply(ledger: &dyn ApprovalLedger, clock: &ManualClock, op: &Op) -> String {
    match op {
        Op::Park { hold, deadline_secs } => outcome(
            &ledger
                .park(ApprovalRecord {
                    id: format!("h{hold}"),
                    kind: ApprovalKind::ToolCall,
                    tool: "t".into(),
                    arguments: serde_json::json!({"h": hold}),
                    caller: "remote".into(),
                    status: ApprovalStatus::AwaitingApproval,
                    reason: None,
                    approver: None,
                    flow_version_id: None,
                    created_at: clock.now(),
                    decided_at: None,
                    deadline: deadline_secs.map(|s| clock.now() + chrono::Duration::seconds(i64::from(s))),
                    requested_by: None,
                })
                .await,
        ),
        Op::Decide { hold, approve } => outcome(
            &ledger
                .decide(
                    &format!("h{hold}"),
                    ApprovalDecision {
                        approve: *approve,
                        approver: "ana".into(),
                        note: None,
                    },
                )
                .await,
        ),
        Op::Resolve { hold, canceled } => {
            let how = if *canceled {
                WaiterResolution::Canceled
            } else {
                WaiterResolution::TimedOut
            };
            outcome(
                &ledger
                    .resolve(&format!("h{hold}"), how, Some("waiter".into()))
                    .await,
            )
        }
        Op::Advance { secs } => {
            clock.advance(chrono::Duration::seconds(i64::from(*secs)));
            "advanced".into()
        }
        Op::Restore => outcome(&ledger.restore(&metaforge_ports::GoneParkers::default()).await),
        Op::Get { hold } => outcome(&ledger.get(&format!("h{hold}")).await),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn sqlite_ledger_agrees_with_the_model_and_closed_holds_never_change(ops in proptest::collection::vec(op(), 1..25)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let sql_clock = Arc::new(ManualClock::fixed());
            let mem_clock = Arc::new(ManualClock::fixed());
            let sql = SqliteApprovalLedger::open(&dir.path().join("a.db"), sql_clock.clone()).await.unwrap();
            let mem = MemoryApprovalLedger::new(mem_clock.clone());
            let mut closed: std::collections::HashMap<String, ApprovalRecord> = Default::default();
            for op in &ops {
                let a = apply(&sql, &sql_clock, op).await;
                let b = apply(&mem, &mem_clock, op).await;
                prop_assert_eq!(&a, &b, "engines disagree on {:?}", op);
                for hold in 0..4u8 {
                    let id = format!("h{hold}");
                    // Read both at the same instant: a read expires overdue holds, so reading
                    // only one engine would let their decided_at drift apart.
                    let sql_read = sql.get(&id).await;
                    prop_assert_eq!(outcome(&sql_read), outcome(&mem.get(&id).await), "engines disagree reading {}", id);
                    if let Ok(record) = sql_read {
                        if let Some(before) = closed.get(&id) {
                            prop_assert_eq!(before, &record, "a closed hold changed");
                        } else if record.status.is_final() {
                            closed.insert(id.clone(), record.clone());
                        }
                        let history = sql.history(&id).await.unwrap();
                        let expected = if record.status.is_final() { 2 } else { 1 };
                        prop_assert_eq!(history.len(), expected, "one park entry plus one closing entry");
                        prop_assert_eq!(history.last().map(|h| h.to), Some(record.status));
                    }
                }
            }
            Ok(())
        })?;
    }
}
