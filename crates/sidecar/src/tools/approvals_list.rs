//! `approvals.list`: what is waiting for a person (read only; deciding happens elsewhere).

use std::sync::{Arc, OnceLock};

use metaforge_ports::{
    ApprovalLedger, CallerContext, HostCallOutcome, PortError, ToolDescriptor, ToolOutput,
};
use serde_json::{Map, Value, json};

use super::{read_only, schema_once};
use crate::args::{ApprovalsListArgs, parse};
use crate::envelope::{ToolError, at_boundary};
use crate::host::SidecarTool;

const TOOL: &str = "approvals.list";

/// `approvals.list` over the one approval ledger.
pub struct ApprovalsList {
    approvals: Arc<dyn ApprovalLedger>,
}

impl ApprovalsList {
    /// The tool over `approvals`.
    pub fn new(approvals: Arc<dyn ApprovalLedger>) -> Self {
        Self { approvals }
    }

    async fn list(&self, arguments: Map<String, Value>) -> Result<HostCallOutcome, ToolError> {
        let args: ApprovalsListArgs = parse(arguments)?;
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

#[async_trait::async_trait]
impl SidecarTool for ApprovalsList {
    fn descriptor(&self) -> ToolDescriptor {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        ToolDescriptor {
            name: TOOL.to_owned(),
            title: Some("List approvals".to_owned()),
            description: "Holds waiting for a person (or, with recent, the latest of any state). \
                          Read only: approving happens in the MetaForge approvals queue."
                .to_owned(),
            input_schema: schema_once::<ApprovalsListArgs>(&SCHEMA),
            hints: read_only(),
        }
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        at_boundary(TOOL, self.list(arguments).await)
    }
}
