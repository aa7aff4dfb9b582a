//! The `twin.*` tools through `SidecarHost::call` with each caller class, over the in-memory
//! twin and approval ledger: a local or remote write is held for a person and committed to `main`
//! only once approved; a service caller scoped to a running run writes that run's branch with no
//! hold; a run-worker class with no run phase is refused; bad arguments are refused before any
//! hold; reads are never held.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers and doubles outside #[test] fns: a surprise must fail the test loudly"
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use metaforge_app::twin::{RunScope, RunScopes, TwinService, recorded_deliverables};
use metaforge_domain::grounding::{GroundingInput, RegistryEntry, TurnStep, check_grounding};
use metaforge_domain::tool_gating::{Caller, Decision, decide};
use metaforge_ports::{
    ApprovalDecision, ApprovalKind, ApprovalLedger, ApprovalStatus, CallerClass, CallerContext,
    HostCallOutcome, InputChannel, PortError, TWIN_MAIN_BRANCH, ToolHost, ToolOutput, TwinStore, sha256_hex,
};
use metaforge_sidecar::{
    FlowStores, HoldPolicy, InProcessFlowBindings, SidecarHost, SidecarTwin, host_in_process_with_twin,
};
use metaforge_test_support::doubles::{MemoryApprovalLedger, MemoryFlowVersionStore, MemoryTwinStore};
use metaforge_test_support::{ManualClock, SequentialIds};
use serde_json::{Map, Value, json};

/// Run scopes from a table: the session names the scope (what the flow engine would confirm).
struct TableScopes(BTreeMap<String, RunScope>);

#[async_trait::async_trait]
impl RunScopes for TableScopes {
    async fn scope_of(&self, caller: &CallerContext) -> Result<Option<RunScope>, PortError> {
        Ok(caller.session.as_ref().and_then(|s| self.0.get(s)).cloned())
    }
}

struct World {
    approvals: Arc<MemoryApprovalLedger>,
    store: Arc<MemoryTwinStore>,
    twin: SidecarTwin,
    host: Arc<SidecarHost>,
}

/// Session `r1` is the worker of run `r1`, phase `design`.
fn world() -> World {
    let clock = Arc::new(ManualClock::fixed());
    let approvals = Arc::new(MemoryApprovalLedger::new(clock.clone()));
    let stores = FlowStores {
        approvals: approvals.clone(),
        versions: Arc::new(MemoryFlowVersionStore::new()),
        clock: clock.clone(),
        ids: Arc::new(SequentialIds::new("id")),
    };
    let store = Arc::new(MemoryTwinStore::new());
    let service = Arc::new(TwinService::new(
        store.clone(),
        clock,
        Arc::new(SequentialIds::new("twin")),
    ));
    let scopes = TableScopes(BTreeMap::from([(
        "r1".to_owned(),
        RunScope {
            run_id: "r1".into(),
            phase: "design".into(),
        },
    )]));
    let twin = SidecarTwin::new(service, Arc::new(scopes));
    let host = host_in_process_with_twin(
        InProcessFlowBindings::new(stores),
        HoldPolicy {
            timeout: Duration::from_secs(5),
            poll: Duration::from_millis(5),
        },
        Some(twin.clone()),
    );
    World {
        approvals,
        store,
        twin,
        host: Arc::new(host),
    }
}

fn caller(class: CallerClass, session: Option<&str>) -> CallerContext {
    CallerContext {
        class,
        session: session.map(str::to_owned),
        input_channel: InputChannel::None,
        identity: None,
    }
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

fn done(outcome: HostCallOutcome) -> ToolOutput {
    match outcome {
        HostCallOutcome::Done(out) => out,
        other @ HostCallOutcome::NeedsInput { .. } => panic!("expected a finished call, got {other:?}"),
    }
}

fn bracket() -> Value {
    json!({"artifact": "cad_model", "title": "Shelf bracket", "content": "solid bracket"})
}

async fn call(w: &World, who: &CallerContext, tool: &str, arguments: Value) -> ToolOutput {
    done(w.host.call(who, tool, args(arguments)).await.unwrap())
}

async fn nothing_committed(w: &World) -> bool {
    let branches = w.store.branches().await.unwrap();
    branches.len() == 1 && branches[0].head.is_none()
}

/// Decides the first hold parked, after checking nothing was written while it waited.
fn person_decides(w: &World, approve: bool) -> tokio::task::JoinHandle<metaforge_ports::ApprovalRecord> {
    let approvals = w.approvals.clone();
    let store = w.store.clone();
    tokio::spawn(async move {
        loop {
            if let Some(hold) = approvals.list_pending().await.unwrap().first().cloned() {
                let branches = store.branches().await.unwrap();
                assert!(
                    branches.iter().all(|b| b.head.is_none()),
                    "nothing is written while the call is held: {branches:?}"
                );
                approvals
                    .decide(
                        &hold.id,
                        ApprovalDecision {
                            approve,
                            approver: "alice".into(),
                            note: None,
                        },
                    )
                    .await
                    .unwrap();
                return hold;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

#[tokio::test]
async fn a_local_write_is_held_for_a_person_then_committed_to_main_once_approved() {
    let w = world();
    let decider = person_decides(&w, true);
    let out = call(
        &w,
        &caller(CallerClass::Local, Some("thread-1")),
        "twin.commit_work_product",
        bracket(),
    )
    .await;
    let hold = decider.await.unwrap();
    assert_eq!(hold.kind, ApprovalKind::ToolCall);
    assert_eq!(hold.tool, "twin.commit_work_product");
    assert_eq!(hold.caller, "local");
    assert_eq!(hold.arguments["artifact"], "cad_model");
    assert!(!out.is_error, "{}", out.text());
    let answer = out.structured.unwrap();
    assert_eq!(answer["status"], "committed");
    assert_eq!(answer["branch"], TWIN_MAIN_BRANCH);
    assert!(answer.get("run_id").is_none(), "a chat write belongs to no run");
    let node_id = answer["node_id"].as_str().unwrap();
    let node = w.store.node(TWIN_MAIN_BRANCH, node_id).await.unwrap();
    assert_eq!(
        node.properties["content_hash"],
        json!(sha256_hex("solid bracket"))
    );
    assert_eq!(answer["content_hash"], node.properties["content_hash"]);
    assert_eq!(
        w.store.log(TWIN_MAIN_BRANCH).await.unwrap()[0].author,
        "local:thread-1"
    );
    assert_eq!(
        w.approvals.get(&hold.id).await.unwrap().status,
        ApprovalStatus::Approved
    );
}

#[tokio::test]
async fn a_rejected_write_writes_nothing() {
    let w = world();
    let decider = person_decides(&w, false);
    let out = call(
        &w,
        &caller(CallerClass::Remote, None),
        "twin.record_decision",
        json!({"decision": "aluminium", "rationale": "stiffness per gram"}),
    )
    .await;
    decider.await.unwrap();
    assert!(out.is_error);
    assert_eq!(out.structured.unwrap()["status"], "rejected");
    assert!(nothing_committed(&w).await);
}

#[tokio::test]
async fn a_service_caller_on_a_running_run_writes_its_branch_without_a_hold() {
    let w = world();
    let worker = caller(CallerClass::Service, Some("r1"));
    let cad = call(
        &w,
        &worker,
        "twin.commit_geometry",
        json!({"title": "Bracket", "content": "solid"}),
    )
    .await;
    assert!(!cad.is_error, "{}", cad.text());
    let cad = cad.structured.unwrap();
    assert_eq!(cad["branch"], "run/r1");
    assert_eq!(
        cad["artifact"], "cad_model",
        "commit_geometry records the CAD model"
    );
    assert_eq!(
        (cad["run_id"].as_str(), cad["phase"].as_str()),
        (Some("r1"), Some("design"))
    );
    let drawing = call(
        &w,
        &worker,
        "twin.commit_work_product",
        json!({"artifact": "drawing", "title": "Bracket drawing", "content_hash": sha256_hex("pdf")}),
    )
    .await
    .structured
    .unwrap();
    let decision = call(
        &w,
        &worker,
        "twin.record_decision",
        json!({"decision": "M6 bolts", "rationale": "the wall plugs take M6", "about": [cad["node_id"]]}),
    )
    .await;
    assert!(!decision.is_error, "{}", decision.text());
    let link = call(
        &w,
        &worker,
        "twin.link",
        json!({"from": drawing["node_id"], "to": cad["node_id"], "type": "DEPENDS_ON"}),
    )
    .await;
    assert!(!link.is_error, "{}", link.text());
    assert_eq!(link.structured.unwrap()["edge_type"], "DEPENDS_ON");
    assert!(
        w.approvals.list_recent(100).await.unwrap().is_empty(),
        "a run's worker writes without a hold"
    );
    assert_eq!(
        recorded_deliverables(w.store.as_ref(), "r1", "design")
            .await
            .unwrap(),
        ["cad_model", "drawing"]
    );
    assert!(
        w.store.log(TWIN_MAIN_BRANCH).await.unwrap().is_empty(),
        "main is untouched until the run is merged"
    );
    let node = w
        .store
        .node("run/r1", cad["node_id"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(node.properties["run_id"], "r1");
    assert_eq!(node.properties["phase"], "design");
}

#[tokio::test]
async fn a_run_worker_class_with_no_confirmed_run_phase_is_refused_and_writes_nothing() {
    let w = world();
    for who in [
        caller(CallerClass::Service, Some("r-unknown")),
        caller(CallerClass::Service, None),
        caller(CallerClass::ClientTask, Some("session-x")),
    ] {
        let out = call(&w, &who, "twin.commit_work_product", bracket()).await;
        assert!(out.is_error);
        let envelope = out.structured.unwrap();
        assert_eq!(envelope["status"], "refused", "{who:?}: {envelope}");
        assert!(
            envelope["reason"].as_str().unwrap().contains("running run"),
            "{envelope}"
        );
    }
    assert!(nothing_committed(&w).await);
    assert!(w.approvals.list_recent(100).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_run_phase_the_caller_does_not_have_cannot_be_claimed_through_arguments() {
    let w = world();
    let out = call(
        &w,
        &caller(CallerClass::Service, Some("r1")),
        "twin.commit_work_product",
        json!({"artifact": "bom", "title": "BOM", "content": "x", "properties": {"phase": "release"}}),
    )
    .await;
    assert!(out.is_error);
    let envelope = out.structured.unwrap();
    assert_eq!(envelope["error"], "invalid_arguments");
    assert!(
        envelope["validation_errors"][0]
            .as_str()
            .unwrap()
            .starts_with("properties.phase:"),
        "{envelope}"
    );
    assert!(nothing_committed(&w).await);
}

#[tokio::test]
async fn bad_arguments_are_refused_before_any_hold() {
    let w = world();
    let existing = w
        .twin
        .service
        .commit_work_product(
            &metaforge_app::twin::WriteTarget::Main,
            "local",
            &metaforge_app::twin::WorkProductInput {
                artifact: "cad_model".into(),
                title: "seed".into(),
                content: Some("seed".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let heads_before = w.store.branches().await.unwrap();
    let too_long = "x".repeat(metaforge_app::limits::MAX_TWIN_CONTENT_CHARS + 1);
    let cases = [
        (
            "twin.commit_work_product",
            json!({"artifact": "cad_model"}),
            "title",
        ),
        (
            "twin.commit_work_product",
            json!({"artifact": "cad_model", "title": "t", "content": too_long}),
            "content",
        ),
        (
            "twin.commit_work_product",
            json!({"artifact": "cad_model", "title": "t", "content": "x", "content_hash": "0".repeat(64)}),
            "content_hash",
        ),
        (
            "twin.commit_work_product",
            json!({"artifact": "cad_model", "title": "t"}),
            "content",
        ),
        (
            "twin.record_decision",
            json!({"decision": "d", "rationale": "r", "about": [existing.node.id, "ghost"]}),
            "about[1]",
        ),
        (
            "twin.link",
            json!({"from": existing.node.id, "to": "ghost", "type": "VALIDATES"}),
            "to",
        ),
        (
            "twin.link",
            json!({"from": "a", "to": "b", "type": "LIKES"}),
            "type",
        ),
    ];
    for (tool, arguments, field) in cases {
        for class in [CallerClass::Local, CallerClass::Remote, CallerClass::Untrusted] {
            let out = call(&w, &caller(class, None), tool, arguments.clone()).await;
            assert!(out.is_error, "{tool} {arguments}");
            let envelope = out.structured.unwrap();
            assert_eq!(envelope["error"], "invalid_arguments", "{tool}: {envelope}");
            assert!(
                envelope.to_string().contains(field),
                "{tool}: the refusal names {field}: {envelope}"
            );
        }
    }
    assert!(
        w.approvals.list_recent(100).await.unwrap().is_empty(),
        "no person was asked to approve a call that was always going to be refused"
    );
    assert_eq!(w.store.branches().await.unwrap(), heads_before);
}

#[tokio::test]
async fn reads_are_never_held_whoever_calls() {
    let w = world();
    let worker = caller(CallerClass::Service, Some("r1"));
    let cad = call(&w, &worker, "twin.commit_work_product", bracket())
        .await
        .structured
        .unwrap();
    let id = cad["node_id"].as_str().unwrap();
    for who in [
        caller(CallerClass::Local, None),
        caller(CallerClass::Remote, None),
        caller(CallerClass::Untrusted, None),
        caller(CallerClass::ClientTask, None),
        worker.clone(),
    ] {
        let query = call(
            &w,
            &who,
            "twin.query",
            json!({"branch": "run/r1", "type": "WorkProduct", "properties": {"artifact": "cad_model"}}),
        )
        .await;
        assert!(!query.is_error, "{who:?}: {}", query.text());
        let query = query.structured.unwrap();
        assert_eq!(query["count"], 1);
        assert!(
            query["nodes"][0]["properties"].get("content").is_none(),
            "a listing leaves the text out"
        );
        let node = call(&w, &who, "twin.get_node", json!({"id": id, "branch": "run/r1"})).await;
        assert!(!node.is_error, "{}", node.text());
        assert_eq!(
            node.structured.unwrap()["node"]["properties"]["content"],
            "solid bracket"
        );
        let diff = call(&w, &who, "twin.diff", json!({"head": "run/r1"})).await;
        assert_eq!(diff.structured.unwrap()["summary"]["nodes_added"], 1);
    }
    assert!(w.approvals.list_recent(100).await.unwrap().is_empty());
}

#[tokio::test]
async fn reads_default_to_the_callers_branch_and_name_what_is_missing() {
    let w = world();
    let worker = caller(CallerClass::Service, Some("r1"));
    call(&w, &worker, "twin.commit_work_product", bracket()).await;
    let own = call(&w, &worker, "twin.query", json!({}))
        .await
        .structured
        .unwrap();
    assert_eq!(
        (own["branch"].as_str(), own["count"].as_u64()),
        (Some("run/r1"), Some(1))
    );
    let diff = call(&w, &worker, "twin.diff", json!({}))
        .await
        .structured
        .unwrap();
    assert_eq!(
        (diff["base"].as_str(), diff["head"].as_str()),
        (Some("main"), Some("run/r1"))
    );
    let local = caller(CallerClass::Local, None);
    let main = call(&w, &local, "twin.query", json!({}))
        .await
        .structured
        .unwrap();
    assert_eq!(
        (main["branch"].as_str(), main["count"].as_u64()),
        (Some("main"), Some(0))
    );
    let no_head = call(&w, &local, "twin.diff", json!({})).await.structured.unwrap();
    assert_eq!(no_head["error"], "invalid_arguments");
    assert!(
        no_head["validation_errors"][0]
            .as_str()
            .unwrap()
            .starts_with("head:")
    );
    let missing = call(&w, &local, "twin.get_node", json!({"id": "ghost"})).await;
    assert!(missing.is_error);
    assert_eq!(missing.structured.unwrap()["error"], "not_found");
    let no_branch = call(&w, &local, "twin.query", json!({"branch": "run/none"}))
        .await
        .structured
        .unwrap();
    assert!(
        no_branch["validation_errors"][0]
            .as_str()
            .unwrap()
            .starts_with("branch:")
    );
}

#[tokio::test]
async fn the_twin_writes_declare_twin_write_and_the_ask_tier_and_the_reads_are_read_only() {
    let w = world();
    let writes = [
        "twin.commit_geometry",
        "twin.commit_work_product",
        "twin.link",
        "twin.record_decision",
    ];
    let gates = w.host.declared_gates();
    assert_eq!(gates.keys().map(String::as_str).collect::<Vec<_>>(), writes);
    assert!(gates.values().all(|g| g == &["twin_write"]));
    for tool in w.twin.tools() {
        let descriptor = tool.descriptor();
        let spec = tool.gate_spec();
        let write = writes.contains(&descriptor.name.as_str());
        assert_eq!(
            descriptor.hints.read_only_hint,
            Some(!write),
            "{}",
            descriptor.name
        );
        assert_eq!(
            descriptor.hints.destructive_hint,
            Some(false),
            "{}",
            descriptor.name
        );
        assert_eq!(spec.requires_approval, write, "{}", descriptor.name);
        for (class, held) in [
            (CallerClass::Local, write),
            (CallerClass::Remote, write),
            (CallerClass::Untrusted, write),
            (CallerClass::Service, false),
            (CallerClass::ClientTask, false),
        ] {
            // The class rule alone (the schema check is pinned by the bad-arguments test).
            let unchecked = metaforge_domain::tool_gating::ToolSpec {
                input_schema: None,
                ..spec.clone()
            };
            let verdict = decide(&unchecked, &Caller::from(class), &json!({}));
            let expected = if held { Decision::Hold } else { Decision::Run };
            assert_eq!(verdict.decision, expected, "{} for {class:?}", descriptor.name);
        }
    }
}

#[tokio::test]
async fn the_grounding_guard_counts_a_commit_and_finds_its_node_id_in_the_answer() {
    let w = world();
    let arguments = bracket();
    let answer = call(
        &w,
        &caller(CallerClass::Service, Some("r1")),
        "twin.commit_work_product",
        arguments.clone(),
    )
    .await
    .structured
    .unwrap();
    let id = answer["node_id"].as_str().unwrap().to_owned();
    let registry = w
        .host
        .declared_gates()
        .into_iter()
        .map(|(tool, required_gates)| (tool, RegistryEntry { required_gates }))
        .collect();
    let step = |result: Value| TurnStep {
        tool: Some("twin.commit_work_product".into()),
        arguments: arguments.clone(),
        result,
        error: None,
    };
    let reply = format!("I committed the bracket to the twin as node id {id}.");
    let grounded = check_grounding(&GroundingInput {
        reply: reply.clone(),
        steps: vec![step(answer)],
        context_text: None,
        registry: Some(registry),
    });
    assert!(!grounded.flagged, "{:?}", grounded.banners);
    let ungrounded = check_grounding(&GroundingInput {
        reply,
        steps: vec![step(json!({"status": "error", "error": "refused"}))],
        context_text: None,
        registry: None,
    });
    assert!(ungrounded.flagged, "a refused commit grounds nothing");
}

/// A hold the agent loop parked itself for `arguments` (as its ask tier does), decided or not.
async fn agents_hold(w: &World, id: &str, arguments: Value, approve: Option<bool>) {
    let now = metaforge_ports::Clock::now(&ManualClock::fixed());
    w.approvals
        .park(metaforge_ports::ApprovalRecord {
            id: id.to_owned(),
            kind: ApprovalKind::ToolCall,
            tool: "twin.commit_work_product".to_owned(),
            arguments,
            caller: "local".to_owned(),
            status: ApprovalStatus::AwaitingApproval,
            reason: Some("ask tier".to_owned()),
            approver: None,
            flow_version_id: None,
            created_at: now,
            decided_at: None,
            deadline: None,
            requested_by: None,
        })
        .await
        .unwrap();
    if let Some(approve) = approve {
        w.approvals
            .decide(
                id,
                ApprovalDecision {
                    approve,
                    approver: "alice".into(),
                    note: None,
                },
            )
            .await
            .unwrap();
    }
}

async fn call_on_hold(w: &World, hold: &str, arguments: Value) -> ToolOutput {
    let facts = metaforge_ports::CallFacts {
        answers: None,
        approved_hold: Some(hold.to_owned()),
    };
    done(
        w.host
            .call_with(
                &caller(CallerClass::Local, Some("thread-1")),
                &facts,
                "twin.commit_work_product",
                args(arguments),
            )
            .await
            .unwrap(),
    )
}

#[tokio::test]
async fn a_write_on_the_agents_approved_hold_for_exactly_this_call_runs_without_a_second_hold() {
    let w = world();
    agents_hold(&w, "agent-hold-1", bracket(), Some(true)).await;
    let out = call_on_hold(&w, "agent-hold-1", bracket()).await;
    assert!(!out.is_error, "{}", out.text());
    assert_eq!(out.structured.unwrap()["status"], "committed");
    assert!(
        w.approvals.list_pending().await.unwrap().is_empty(),
        "no second hold was parked"
    );
}

#[tokio::test]
async fn a_hold_that_is_not_an_approval_of_this_exact_call_is_held_again_and_writes_nothing_when_rejected() {
    let w = world();
    agents_hold(
        &w,
        "approved-other-args",
        json!({"artifact": "bom", "title": "BOM", "content": "x"}),
        Some(true),
    )
    .await;
    agents_hold(&w, "rejected", bracket(), Some(false)).await;
    agents_hold(&w, "still-pending", bracket(), None).await;
    for hold in ["approved-other-args", "rejected", "still-pending", "no-such-hold"] {
        // The pending agent hold is the first listed; the person rejects the host's own hold.
        let approvals = w.approvals.clone();
        let decider = tokio::spawn(async move {
            loop {
                let pending = approvals.list_pending().await.unwrap();
                if let Some(own) = pending.iter().find(|h| h.id != "still-pending") {
                    approvals
                        .decide(
                            &own.id,
                            ApprovalDecision {
                                approve: false,
                                approver: "alice".into(),
                                note: None,
                            },
                        )
                        .await
                        .unwrap();
                    return own.clone();
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let out = call_on_hold(&w, hold, bracket()).await;
        let own = decider.await.unwrap();
        assert_ne!(own.id, hold, "{hold}: the host parked a hold of its own");
        assert!(
            out.is_error,
            "{hold}: a rejected hold runs nothing: {}",
            out.text()
        );
        assert!(nothing_committed(&w).await, "{hold}: nothing written");
    }
}
