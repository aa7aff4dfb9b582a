//! Holds created where no approver can see them (FORGE-406): a standalone MCP sidecar without
//! `METAFORGE_GATEWAY_URL` parks holds in its own queue, which no person's page reads, so each
//! one can only time out.
//!
//! [`UnreachableApproverLedger`] wraps such a process's ledger: every hold it parks is still
//! parked (nothing is lost and the call still waits, fail closed), but it logs
//! `approval_hold_unreachable` at error level and increments
//! `metaforge_unreachable_approval_hold_total{kind}`, which the `ApprovalHoldWithNoApprover`
//! alert fires on. The gateway (and `metaforge up`) is where approvers are, and never wraps.

use std::sync::Arc;

use metaforge_ports::approval_ledger::{
    ApprovalDecision, ApprovalLedger, ApprovalTransition, ResolveOutcome, WaiterResolution,
};
use metaforge_ports::{ApprovalRecord, GoneParkers, PortError};

/// Holds parked where no approver can reach them, by approval kind.
pub const UNREACHABLE_HOLD_TOTAL: &str = "metaforge_unreachable_approval_hold_total";

/// A ledger in a process no approver can reach: parks as the inner ledger does, and says so.
pub struct UnreachableApproverLedger {
    inner: Arc<dyn ApprovalLedger>,
}

impl UnreachableApproverLedger {
    /// Wraps `inner`, the ledger of a process with no reachable approver.
    pub fn new(inner: Arc<dyn ApprovalLedger>) -> Self {
        Self { inner }
    }
}

#[async_trait::async_trait]
impl ApprovalLedger for UnreachableApproverLedger {
    async fn park(&self, record: ApprovalRecord) -> Result<ApprovalRecord, PortError> {
        let parked = self.inner.park(record).await?;
        tracing::error!(
            event = "approval_hold_unreachable",
            approval_id = %parked.id,
            tool = %parked.tool,
            kind = parked.kind.as_str(),
            "a hold was parked in a process no approver is known to reach; unless a gateway shares this METAFORGE_HOME it can only time out (set METAFORGE_GATEWAY_URL to park holds in the gateway's ledger)"
        );
        metrics::counter!(UNREACHABLE_HOLD_TOTAL, "kind" => parked.kind.as_str()).increment(1);
        Ok(parked)
    }

    async fn get(&self, id: &str) -> Result<ApprovalRecord, PortError> {
        self.inner.get(id).await
    }

    async fn list_pending(&self) -> Result<Vec<ApprovalRecord>, PortError> {
        self.inner.list_pending().await
    }

    async fn pending_page(
        &self,
        after: Option<&metaforge_ports::PendingCursor>,
        limit: usize,
    ) -> Result<metaforge_ports::PendingPage, PortError> {
        self.inner.pending_page(after, limit).await
    }

    async fn list_recent(&self, limit: usize) -> Result<Vec<ApprovalRecord>, PortError> {
        self.inner.list_recent(limit).await
    }

    async fn decide(&self, id: &str, decision: ApprovalDecision) -> Result<ApprovalRecord, PortError> {
        self.inner.decide(id, decision).await
    }

    async fn resolve(
        &self,
        id: &str,
        resolution: WaiterResolution,
        reason: Option<String>,
    ) -> Result<ResolveOutcome, PortError> {
        self.inner.resolve(id, resolution, reason).await
    }

    async fn restore(&self, gone: &GoneParkers) -> Result<Vec<ApprovalRecord>, PortError> {
        self.inner.restore(gone).await
    }

    async fn open_parkers(&self) -> Result<std::collections::BTreeSet<String>, PortError> {
        self.inner.open_parkers().await
    }

    async fn history(&self, id: &str) -> Result<Vec<ApprovalTransition>, PortError> {
        self.inner.history(id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metaforge_ports::{ApprovalKind, ApprovalStatus};
    use metaforge_test_support::ManualClock;
    use metaforge_test_support::doubles::MemoryApprovalLedger;

    fn hold(id: &str) -> ApprovalRecord {
        ApprovalRecord {
            id: id.to_owned(),
            kind: ApprovalKind::ToolCall,
            tool: "twin.commit_geometry".to_owned(),
            arguments: serde_json::json!({}),
            caller: "remote".to_owned(),
            status: ApprovalStatus::AwaitingApproval,
            reason: None,
            approver: None,
            flow_version_id: None,
            created_at: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
            decided_at: None,
            deadline: None,
            requested_by: None,
        }
    }

    #[tokio::test]
    async fn a_hold_parked_where_no_approver_can_reach_it_is_kept_and_counted_by_kind() {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let inner = Arc::new(MemoryApprovalLedger::new(Arc::new(ManualClock::fixed())));
        let ledger = UnreachableApproverLedger::new(inner.clone());
        let parked = {
            let _guard = metrics::set_default_local_recorder(&recorder);
            ledger.park(hold("h-1")).await.unwrap()
        };
        assert_eq!(parked.status, ApprovalStatus::AwaitingApproval);
        assert_eq!(
            inner.list_pending().await.unwrap().len(),
            1,
            "the hold is still parked"
        );
        let counted: Vec<(String, String)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == UNREACHABLE_HOLD_TOTAL)
            .map(|(key, _, _, value)| {
                let kind = key
                    .key()
                    .labels()
                    .find(|l| l.key() == "kind")
                    .map(|l| l.value().to_owned())
                    .unwrap_or_default();
                (kind, format!("{value:?}"))
            })
            .collect();
        assert_eq!(counted, [("tool_call".to_owned(), "Counter(1)".to_owned())]);
    }
}
