//! The `metaforge mcp serve` sidecar's use cases: the tools and resources it exposes to
//! external harnesses, served through the [`ToolHost`] port by the MCP adapter.
//!
//! The sidecar never offers a tool that approves anything (FORGE-400): approving happens where a
//! person is, through the one approval ledger. Tools see the caller class the transport decided
//! from the connection; arguments never choose it.

// A door names every variant of our own enums (issue 11, W4).
#![deny(clippy::wildcard_enum_match_arm)]

pub mod bound;
pub mod flow_read;
pub mod flow_write;
pub mod held;
pub mod host;

pub use bound::{
    BoundFlowPropose, BoundFlowVersion, InProcessFlowBindings, held_proposal_output, host_with_bindings,
};
pub use flow_read::{FlowList, FlowValidate};
pub use flow_write::{ApprovalsList, FlowPropose, FlowStores, FlowVersion, FlowVersionResource};
pub use held::{HeldOutcome, HeldWrites, HoldPolicy};
pub use host::{SidecarHost, SidecarResource, SidecarTool};

use std::sync::Arc;

/// The full sidecar host: the flow reads, `flow.propose`, `flow.version`, `approvals.list`, the
/// version resource, and held writes waiting in the approval ledger for at most `policy.timeout`.
pub fn host_with_stores(stores: FlowStores, policy: HoldPolicy) -> SidecarHost {
    read_only_host()
        .with_tool(Arc::new(FlowPropose::new(stores.clone())))
        .with_tool(Arc::new(FlowVersion::new(stores.clone())))
        .with_tool(Arc::new(ApprovalsList::new(stores.clone())))
        .with_resource(Arc::new(FlowVersionResource::new(stores.clone())))
        .with_held_writes(HeldWrites {
            approvals: Arc::new(stores.approval_service()),
            policy,
        })
}

/// The sidecar's host with every tool and resource that needs no store: the flow reads.
///
/// Stores (approval ledger, flow-version store) are added by the composition root as they are
/// wired; this is the part every sidecar serves.
pub fn read_only_host() -> SidecarHost {
    SidecarHost::new()
        .with_tool(Arc::new(FlowList))
        .with_tool(Arc::new(FlowValidate))
}
