//! The held-write round trip end to end: `metaforge mcp serve --http` over the SQLite ledgers in
//! a fresh METAFORGE_HOME, a remote MCP client (the project's own) proposing a flow, and a person's
//! decision taken in the ledger the sidecar wrote to.

use std::process::Stdio;
use std::sync::Arc;

use metaforge_adapters_store::{SqliteApprovalLedger, SqliteFlowVersionStore, StorePaths};
use metaforge_app::approvals::ApprovalService;
use metaforge_ports::{
    ApprovalKind, ApprovalLedger, ApprovalStatus, Clock, FlowVersionStatus, FlowVersionStore, PortErrorKind,
    ToolSource,
};
use serde_json::json;

use crate::common::{Ids, Wall, args, mcp_client, proposal_arguments, start_sidecar};

#[tokio::test]
async fn a_remote_flow_propose_is_held_once_and_a_persons_decision_approves_the_version() {
    let home = tempfile::tempdir().unwrap();
    let (_sidecar, url) = start_sidecar(home.path(), |sidecar| {
        sidecar.env("RUST_LOG", "warn").stderr(Stdio::inherit());
    });
    let client = mcp_client(url);
    let proposed = client
        .call_tool("flow.propose", proposal_arguments())
        .await
        .unwrap();
    println!(
        "flow.propose over {:?}: {}",
        client.protocol_version().await,
        proposed.text()
    );
    let proposal = proposed.structured.unwrap();
    assert_eq!(proposal["status"], "proposed");
    let approval_id = proposal["approval_id"].as_str().unwrap().to_owned();
    let version_id = proposal["flow_version_id"].as_str().unwrap().to_owned();

    // The person's side: the same SQLite files.
    let home_path = home.path().to_path_buf();
    let paths = StorePaths::resolve(
        |name| (name == "METAFORGE_HOME").then(|| home_path.display().to_string()),
        None,
    )
    .unwrap();
    let clock: Arc<dyn Clock> = Arc::new(Wall);
    let approvals = SqliteApprovalLedger::open(paths.tool_approvals.as_ref().unwrap(), clock.clone())
        .await
        .unwrap();
    let versions = SqliteFlowVersionStore::open(paths.flow_versions.as_ref().unwrap())
        .await
        .unwrap();
    let versions_read = SqliteFlowVersionStore::open(paths.flow_versions.as_ref().unwrap())
        .await
        .unwrap();
    let pending = approvals.list_pending().await.unwrap();
    assert_eq!(pending.len(), 1, "exactly one held approval: {pending:?}");
    assert_eq!(pending[0].id, approval_id);
    assert_eq!(pending[0].kind, ApprovalKind::DesignFlowProposal);
    assert_eq!(pending[0].caller, "remote");
    assert_eq!(
        versions.get(&version_id).await.unwrap().status,
        FlowVersionStatus::Proposed
    );

    // A person decides through the approvals service, as the gateway's decision route does.
    let service = ApprovalService::new(
        Arc::new(approvals),
        Arc::new(versions),
        clock.clone(),
        Arc::new(Ids),
    );
    let decided = service.decide(&approval_id, true, "alice", None).await.unwrap();
    assert_eq!(decided.status, ApprovalStatus::Approved);
    let version = versions_read.get(&version_id).await.unwrap();
    assert_eq!(version.status, FlowVersionStatus::Approved);
    assert_eq!(version.approver.as_deref(), Some("alice"));
    let second = service
        .decide(&approval_id, false, "bob", None)
        .await
        .unwrap_err();
    assert_eq!(second.kind, PortErrorKind::Conflict);
    println!("second decision: {second}");

    // The sidecar reads the decision back from the same store.
    let read = client
        .call_tool("flow.version", args(json!({"id": version_id})))
        .await
        .unwrap()
        .structured
        .unwrap();
    assert_eq!(read["status"], "approved");
    assert_eq!(read["approver"], "alice");
    client.close().await;
}
