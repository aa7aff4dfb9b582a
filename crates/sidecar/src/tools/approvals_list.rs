//! `approvals.list`: what is waiting for a person (read only; deciding happens elsewhere).

use std::sync::Arc;

use metaforge_ports::{ApprovalLedger, CallFacts, CallerContext, HostCallOutcome, ToolHints, ToolOutput};
use serde_json::json;

use crate::args::ApprovalsListArgs;
use crate::envelope::ToolError;
use crate::typed::{READ_ONLY, TypedTool};

/// `approvals.list` over the one approval ledger.
pub struct ApprovalsList {
    approvals: Arc<dyn ApprovalLedger>,
}

impl ApprovalsList {
    /// The tool over `approvals`.
    pub fn new(approvals: Arc<dyn ApprovalLedger>) -> Self {
        Self { approvals }
    }
}

#[async_trait::async_trait]
impl TypedTool for ApprovalsList {
    const NAME: &'static str = "approvals.list";
    const TITLE: &'static str = "List approvals";
    const DESCRIPTION: &'static str = "Holds waiting for a person (or, with recent, the latest of \
        any state). Read only: approving happens in the MetaForge approvals queue.";
    const HINTS: ToolHints = READ_ONLY;
    type Args = ApprovalsListArgs;

    async fn run(
        &self,
        _caller: &CallerContext,
        _facts: &CallFacts,
        args: ApprovalsListArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        let records = match args.recent {
            Some(n) => self.approvals.list_recent(n).await?,
            None => self.approvals.list_pending().await?,
        };
        Ok(HostCallOutcome::Done(ToolOutput::json(json!({
            "count": records.len(),
            "approvals": records,
        }))))
    }
}
