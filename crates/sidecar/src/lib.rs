//! The `metaforge mcp serve` sidecar's use cases: the tools and resources it exposes to
//! external harnesses, served through the [`ToolHost`](metaforge_ports::ToolHost) port by the MCP
//! adapter.
//!
//! The sidecar never offers a tool that approves anything (FORGE-400): approving happens where a
//! person is, through the one approval ledger. Tools see the caller class the transport decided
//! from the connection; arguments never choose it.
//!
//! Code map: [`args`] (each tool's arguments as a type, its schema generated from it, and
//! [`ArgError`]) · [`envelope`] (every answer shape, and the tool boundary) · [`bindings`] (the
//! in-process [`FlowBindings`](metaforge_api::FlowBindings)) · [`tools`] (one module per tool) ·
//! [`host`] (the [`ToolHost`](metaforge_ports::ToolHost) and its gating) · [`held`] (where a held
//! write waits) · [`tools::twin`] (the `twin.*` tools, registered by [`with_twin`] when a twin is
//! composed) · [`tools::runs`] (the run tools, resource and prompt over the
//! [`RunBindings`](metaforge_api::RunBindings) port, registered by [`with_runs`]) ·
//! [`run_bindings`] (the in-process and late-set run bindings) · [`grants`] (who a call works for
//! beyond its connection: client-task grants, the transport's caller grants, the remote twin's run
//! scopes).

// A door names every variant of our own enums (issue 11, W4).
#![deny(clippy::wildcard_enum_match_arm)]

pub mod args;
pub mod bindings;
pub mod envelope;
pub mod grants;
pub mod held;
pub mod host;
pub mod run_bindings;
pub mod tools;
pub mod typed;

pub use args::ArgError;
pub use bindings::{FlowStores, InProcessFlowBindings};
pub use envelope::held_proposal_output;
pub use grants::{BindingsRunScopes, ClientTaskGrants, Grant, SidecarCallerGrants};
pub use held::{HeldOutcome, HeldWrites, HoldPolicy};
pub use host::{SidecarHost, SidecarPrompt, SidecarResource, SidecarTool};
pub use run_bindings::{InProcessRunBindings, LateRunBindings};
pub use tools::approvals_list::ApprovalsList;
pub use tools::flow_read::{FlowList, FlowValidate};
pub use tools::propose::FlowPropose;
pub use tools::runs::{RunToolSettings, SidecarRuns};
pub use tools::twin::SidecarTwin;
pub use tools::version::{FlowVersion, FlowVersionResource};
pub use typed::{ToolGate, TypedTool};

use std::sync::Arc;

use metaforge_api::FlowBindings;

/// The full sidecar host over local stores: the flow reads, `flow.propose` and `flow.version`
/// through in-process bindings without a generator, `approvals.list`, the version resource, and
/// held writes waiting in the approval ledger for at most `policy.timeout`.
pub fn host_with_stores(stores: FlowStores, policy: HoldPolicy) -> SidecarHost {
    host_in_process(InProcessFlowBindings::new(stores), policy)
}

/// The full sidecar host over in-process `bindings` (with the generator when they carry one,
/// as inside `metaforge up`): the flow reads, `flow.propose`, `flow.version`, `approvals.list`,
/// the version resource, and held writes waiting in the same stores' approval ledger.
pub fn host_in_process(bindings: InProcessFlowBindings, policy: HoldPolicy) -> SidecarHost {
    host_in_process_with_twin(bindings, policy, None)
}

/// [`host_in_process`], plus the `twin.*` tools over `twin` when one is given (writes held in the
/// same approval ledger as every other held write).
pub fn host_in_process_with_twin(
    bindings: InProcessFlowBindings,
    policy: HoldPolicy,
    twin: Option<SidecarTwin>,
) -> SidecarHost {
    let host = in_process(bindings, policy);
    match twin {
        Some(twin) => with_twin(host, &twin),
        None => host,
    }
}

/// `host` with the `twin.*` tools over `twin` added: `twin.commit_work_product`,
/// `twin.commit_geometry`, `twin.record_decision`, `twin.link` (writes: `twin_write`, ask tier)
/// and `twin.query`, `twin.get_node`, `twin.diff` (reads). A write that must be held waits in
/// `host`'s held writes; a host without them refuses it (fail closed).
pub fn with_twin(host: SidecarHost, twin: &SidecarTwin) -> SidecarHost {
    twin.tools().into_iter().fold(host, SidecarHost::with_tool)
}

/// `host` with the run tools over `runs` added: `flow.start_run`, `flow.status`,
/// `flow.await_gate`, `run.list`, `run.get`, `phase.list_tasks`, `phase.claim` (held in `host`'s
/// held writes; a host without them refuses it) and `phase.submit`, the resource
/// `metaforge://flow/run/{id}` and the prompt `metaforge:flow`.
pub fn with_runs(host: SidecarHost, runs: &SidecarRuns) -> SidecarHost {
    runs.tools()
        .into_iter()
        .fold(host, SidecarHost::with_tool)
        .with_resource(runs.resource())
        .with_prompt(runs.prompt())
}

fn in_process(bindings: InProcessFlowBindings, policy: HoldPolicy) -> SidecarHost {
    let stores = bindings.stores().clone();
    let bindings = Arc::new(bindings);
    let shared: Arc<dyn FlowBindings> = bindings.clone();
    read_only_host()
        .with_tool(Arc::new(FlowPropose::over(bindings)))
        .with_tool(Arc::new(FlowVersion::new(Arc::clone(&shared))))
        .with_tool(Arc::new(ApprovalsList::new(Arc::clone(&stores.approvals))))
        .with_resource(Arc::new(FlowVersionResource::new(shared)))
        .with_held_writes(HeldWrites {
            approvals: Arc::new(stores.approval_service()),
            policy,
        })
}

/// The sidecar host whose flow writes go through `bindings` and whose held writes wait in
/// `held` (the gateway's ledger in remote mode): flow.list, flow.validate, flow.propose,
/// flow.version.
pub fn host_with_bindings(bindings: Arc<dyn FlowBindings>, held: HeldWrites) -> SidecarHost {
    read_only_host()
        .with_tool(Arc::new(FlowPropose::over(Arc::clone(&bindings))))
        .with_tool(Arc::new(FlowVersion::new(bindings)))
        .with_held_writes(held)
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
