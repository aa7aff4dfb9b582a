//! The run tools through `SidecarHost::call_with`, in process over the real run service and
//! embedded engine (in-memory doubles; client phases by the real `ClientPhaseBrain`): starting a
//! run and the 409-style refusal that holds nothing, reads that are never held, a claim held for
//! a person, twin writes of a claimed phase landing on the run's branch, gates asked by
//! elicitation with only the allowed decisions and recorded as the person with `surface: chat`,
//! the answers that decide nothing (no elicitation, from the arguments, for a gate that moved on,
//! from a caller that is no person's client), the client-task grants and their confirmation, the
//! run resource and the prompt — and a mech_v1 run driven through the tools to completion.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers and doubles outside #[test] fns: a surprise must fail the test loudly"
)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::channel::mpsc::UnboundedReceiver;
use metaforge_api::{FlowBindings, GateDecisionBody, RunBindings, RunReply};
use metaforge_app::runs::{
    ClientPhaseBrain, EmbeddedEngine, EngineOptions, EnginePorts, PhaseBrains, RunEngine, RunService,
    RunServicePorts, RunServiceSettings,
};
use metaforge_app::twin::{EngineRunScopes, RunScopes, TwinService};
use metaforge_ports::{
    ApprovalKind, ApprovalLedger, ApprovalStatus, BusEvent, CallFacts, CallerClass, CallerContext,
    CallerGrants, ClassClaim, Clock, DecisionSurface, EventBus, FlowEngine, GateDecisionKind,
    HostCallOutcome, InputChannel, PortError, PortErrorKind, PublishReceipt, RunEvent, RunLedger,
    TWIN_MAIN_BRANCH, ToolHost, ToolOutput, TwinNodeQuery, TwinNodeType, TwinStore, gate_approval_id,
    run_branch,
};
use metaforge_sidecar::{
    BindingsRunScopes, ClientTaskGrants, FlowStores, HoldPolicy, InProcessFlowBindings, InProcessRunBindings,
    LateRunBindings, RunToolSettings, SidecarCallerGrants, SidecarHost, SidecarRuns, SidecarTwin,
    host_with_stores, with_runs, with_twin,
};
use metaforge_test_support::doubles::{
    MemoryApprovalLedger, MemoryClientTaskStore, MemoryFlowVersionStore, MemoryRunLedger, MemoryTwinStore,
    MemoryUsageStore, ScriptedPhaseBrain,
};
use metaforge_test_support::{ManualClock, SequentialIds};
use serde_json::{Map, Value, json};

/// A bus that takes every notice (the ledger is the record).
struct NullBus;

#[async_trait]
impl EventBus for NullBus {
    async fn publish(&self, _event: BusEvent) -> Result<PublishReceipt, PortError> {
        Ok(PublishReceipt {
            delivered: 0,
            persisted: false,
        })
    }
    fn subscribe(&self, _kind: &str) -> Result<UnboundedReceiver<BusEvent>, PortError> {
        Ok(futures::channel::mpsc::unbounded().1)
    }
    fn is_durable(&self) -> bool {
        false
    }
    async fn replay(&self, _: &str, _: &str, _: usize, _: u64) -> Result<Vec<BusEvent>, PortError> {
        Err(PortError::new(PortErrorKind::Unavailable, "not durable"))
    }
}

struct Rig {
    host: Arc<SidecarHost>,
    bindings: Arc<InProcessRunBindings>,
    flows: Arc<InProcessFlowBindings>,
    grants: Arc<ClientTaskGrants>,
    engine: EmbeddedEngine,
    approvals: Arc<MemoryApprovalLedger>,
    runs: Arc<MemoryRunLedger>,
    twin: Arc<MemoryTwinStore>,
    stores: FlowStores,
}

const WAIT: Duration = Duration::from_secs(10);

async fn rig() -> Rig {
    let clock = Arc::new(ManualClock::fixed());
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let approvals = Arc::new(MemoryApprovalLedger::new(dyn_clock.clone()));
    let versions = Arc::new(MemoryFlowVersionStore::new());
    let runs = Arc::new(MemoryRunLedger::new());
    let tasks = Arc::new(MemoryClientTaskStore::new(runs.clone()));
    let twin = Arc::new(MemoryTwinStore::new());
    let client = ClientPhaseBrain::new(tasks.clone(), twin.clone(), dyn_clock.clone())
        .with_poll(Duration::from_millis(5));
    let engine = EmbeddedEngine::new(
        EnginePorts {
            runs: runs.clone(),
            versions: versions.clone(),
            approvals: approvals.clone(),
            tasks: tasks.clone(),
            twin: twin.clone(),
            bus: Arc::new(NullBus),
            clock: dyn_clock.clone(),
            ids: Arc::new(SequentialIds::new("evt")),
        },
        PhaseBrains {
            server: Arc::new(ScriptedPhaseBrain::new()),
            client: Arc::new(client),
        },
        EngineOptions {
            deadline_tick: Duration::from_millis(10),
            retry_delay: Duration::ZERO,
            effect_retry: Duration::from_millis(20),
        },
    );
    engine.resume_all().await.unwrap();
    let service = Arc::new(RunService::new(
        Arc::new(engine.clone()) as Arc<dyn RunEngine>,
        RunServicePorts {
            runs: runs.clone(),
            versions: versions.clone(),
            tasks: tasks.clone(),
            usage: Arc::new(MemoryUsageStore::new()),
            clock: dyn_clock.clone(),
            ids: Arc::new(SequentialIds::new("run")),
        },
        RunServiceSettings::default(),
    ));
    let stores = FlowStores {
        approvals: approvals.clone(),
        versions,
        clock: dyn_clock.clone(),
        ids: Arc::new(SequentialIds::new("id")),
    };
    let scopes: Arc<dyn RunScopes> = Arc::new(EngineRunScopes::new(
        Arc::new(engine.clone()) as Arc<dyn FlowEngine>,
        Some(tasks),
    ));
    let twin_tools = SidecarTwin::new(
        Arc::new(TwinService::new(
            twin.clone(),
            dyn_clock,
            Arc::new(SequentialIds::new("twin")),
        )),
        scopes,
    );
    let bindings = Arc::new(InProcessRunBindings::new(service));
    let grants = Arc::new(ClientTaskGrants::new());
    let tools = SidecarRuns::new(bindings.clone(), grants.clone()).with_settings(RunToolSettings {
        gate_poll: Duration::from_millis(5),
        default_gate_wait: Duration::from_secs(5),
    });
    let policy = HoldPolicy {
        timeout: Duration::from_secs(10),
        poll: Duration::from_millis(5),
    };
    let host = with_runs(
        with_twin(host_with_stores(stores.clone(), policy), &twin_tools),
        &tools,
    );
    Rig {
        host: Arc::new(host),
        bindings,
        flows: Arc::new(InProcessFlowBindings::new(stores.clone())),
        grants,
        engine,
        approvals,
        runs,
        twin,
        stores,
    }
}

fn caller(class: CallerClass, session: Option<&str>, channel: InputChannel) -> CallerContext {
    CallerContext {
        class,
        session: session.map(str::to_owned),
        input_channel: channel,
        identity: None,
    }
}

/// A person's chat session: remote, asking by elicitation, session `s-ana`.
fn ana() -> CallerContext {
    as_identity(
        caller(CallerClass::Remote, Some("s-ana"), InputChannel::Elicitation),
        "ana",
    )
}

/// `caller` as authenticated by `identity`'s key.
fn as_identity(caller: CallerContext, identity: &str) -> CallerContext {
    CallerContext {
        identity: Some(identity.to_owned()),
        ..caller
    }
}

fn as_ana() -> CallFacts {
    CallFacts {
        answers: None,
        approved_hold: None,
    }
}

fn answered(answers: Value) -> CallFacts {
    CallFacts {
        answers: Some(answers.as_object().cloned().unwrap()),
        approved_hold: None,
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

fn structured(outcome: HostCallOutcome) -> Value {
    done(outcome).structured.unwrap()
}

impl Rig {
    async fn call(
        &self,
        who: &CallerContext,
        facts: &CallFacts,
        tool: &str,
        arguments: Value,
    ) -> HostCallOutcome {
        self.host
            .call_with(who, facts, tool, args(arguments))
            .await
            .unwrap()
    }

    async fn start_client_run(&self) -> String {
        let started = structured(
            self.call(
                &ana(),
                &as_ana(),
                "flow.start_run",
                json!({"template_id": "mech_v1", "intelligence": "client", "project_id": "p-shelf"}),
            )
            .await,
        );
        assert_eq!(started["status"], "started", "{started}");
        started["run"]["id"].as_str().unwrap().to_owned()
    }

    /// The open task of `run` once its phase is posted.
    async fn open_task(&self, run: &str) -> Value {
        let until = tokio::time::Instant::now() + WAIT;
        loop {
            let tasks = structured(
                self.call(
                    &ana(),
                    &as_ana(),
                    "phase.list_tasks",
                    json!({"run_id": run, "status": "open"}),
                )
                .await,
            );
            if let Some(task) = tasks["tasks"].as_array().and_then(|t| t.first()) {
                return task.clone();
            }
            assert!(tokio::time::Instant::now() < until, "no open task for {run}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Approves the next held `tool` call as `olga`, a person at the approvals queue.
    fn approve_next_hold(&self, tool: &'static str) -> tokio::task::JoinHandle<String> {
        let approvals = self.approvals.clone();
        let service = self.stores.approval_service();
        tokio::spawn(async move {
            loop {
                let pending = approvals.list_pending().await.unwrap();
                if let Some(hold) = pending
                    .iter()
                    .find(|h| h.kind == ApprovalKind::ToolCall && h.tool == tool)
                {
                    service.decide(&hold.id, true, "olga", None).await.unwrap();
                    return hold.id.clone();
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    }

    /// Claims `task` as ana (the claim approved by a person), records its required deliverables
    /// as ana's client-task session, and hands it back.
    async fn work_phase(&self, task: &Value) {
        let task_id = task["id"].as_str().unwrap();
        let approver = self.approve_next_hold("phase.claim");
        let claimed = structured(
            self.call(&ana(), &as_ana(), "phase.claim", json!({"task_id": task_id}))
                .await,
        );
        assert_eq!(claimed["status"], "claimed", "{claimed}");
        approver.await.unwrap();
        let worker = as_identity(
            caller(CallerClass::ClientTask, Some("s-ana"), InputChannel::Elicitation),
            "ana",
        );
        for artifact in task["brief"]["required_deliverables"].as_array().unwrap() {
            let artifact = artifact.as_str().unwrap();
            let written = structured(
                self.call(
                    &worker,
                    &as_ana(),
                    "twin.commit_work_product",
                    json!({"artifact": artifact, "title": format!("{artifact} of {}", task["phase"]), "content": format!("the {artifact}")}),
                )
                .await,
            );
            assert_eq!(
                written["branch"],
                run_branch(task["run_id"].as_str().unwrap()),
                "{written}"
            );
        }
        let submitted = structured(
            self.call(
                &worker,
                &as_ana(),
                "phase.submit",
                json!({"task_id": task_id, "summary": format!("did {}", task["phase"])}),
            )
            .await,
        );
        assert_eq!(submitted["status"], "submitted", "{submitted}");
        assert_eq!(submitted["grant_ended"], true);
    }

    /// Waits for `run`'s next gate as ana and returns the questions and the fallback result.
    async fn ask(&self, run: &str) -> (Vec<metaforge_ports::InputQuestion>, Value) {
        match self
            .call(&ana(), &as_ana(), "flow.await_gate", json!({"run_id": run}))
            .await
        {
            HostCallOutcome::NeedsInput {
                questions, result, ..
            } => (questions, result.structured.unwrap()),
            HostCallOutcome::Done(out) => panic!("expected the person to be asked, got {out:?}"),
        }
    }

    /// Works phases until the run parks at a gate; returns that gate's phase.
    async fn work_until_gate(&self, run: &str) -> String {
        loop {
            let state = self.bindings_state(run).await;
            if let Some(gate) = state["gate"].as_object() {
                return gate["phase"].as_str().unwrap().to_owned();
            }
            let task = self.open_task(run).await;
            self.work_phase(&task).await;
            self.wait_for(run, |s| {
                s["gate"].is_object()
                    || s["phases"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|p| p["status"] == "running" && p["id"] != task["phase"])
            })
            .await;
        }
    }

    async fn bindings_state(&self, run: &str) -> Value {
        structured(
            self.call(&ana(), &as_ana(), "flow.status", json!({"run_id": run}))
                .await,
        )
    }

    async fn wait_for(&self, run: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let until = tokio::time::Instant::now() + WAIT;
        loop {
            let state = self.bindings_state(run).await;
            if ready(&state) {
                return state;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "run {run} never got there: {state}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn gate_decisions(&self, run: &str) -> Vec<(String, DecisionSurface)> {
        self.runs
            .transitions(run, 0)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|t| match t.event {
                Some(RunEvent::GateDecided {
                    approver, surface, ..
                }) => Some((approver, surface)),
                _ => None,
            })
            .collect()
    }
}

#[tokio::test]
async fn start_run_starts_a_client_run_and_refuses_an_unapproved_version_409_style_without_holding_it() {
    let rig = rig().await;
    let run = rig.start_client_run().await;
    let detail = structured(
        rig.call(&ana(), &as_ana(), "run.get", json!({"run_id": run}))
            .await,
    );
    assert_eq!(detail["intelligence"], "client");
    assert_eq!(detail["project_id"], "p-shelf");
    // A proposal is stored as a version held for a person: not approved yet.
    let proposed = structured(
        rig.call(
            &ana(),
            &as_ana(),
            "flow.propose",
            json!({"template_id": "mech_v1", "context": {"manufacturing_context": {"route": "vendor"},
                   "target_maturity": "sim_validated", "loads_and_use": "a 20 kg shelf load"},
                   "operations": [{"op": "add_deliverable", "phase": "design", "value": "test_plan", "rationale": "load-tested"}]}),
        )
        .await,
    );
    let version = proposed["flow_version_id"].as_str().unwrap();
    let pending_before = rig.approvals.list_pending().await.unwrap().len();
    let runs_before = rig.runs.list(None).await.unwrap().len();
    let refused = done(
        rig.call(
            &ana(),
            &as_ana(),
            "flow.start_run",
            json!({"flow_version_id": version}),
        )
        .await,
    );
    assert!(refused.is_error);
    let body = refused.structured.unwrap();
    assert_eq!(body["status"], "conflict", "{body}");
    assert_eq!(body["error"], "not_approved");
    assert_eq!(body["flow_version_id"], version);
    assert_eq!(
        rig.approvals.list_pending().await.unwrap().len(),
        pending_before,
        "nothing was held"
    );
    assert_eq!(
        rig.runs.list(None).await.unwrap().len(),
        runs_before,
        "no run was recorded"
    );
    // A bad intelligence is the service's invalid_field, naming it.
    let bad = structured(
        rig.call(
            &ana(),
            &as_ana(),
            "flow.start_run",
            json!({"template_id": "mech_v1", "intelligence": "psychic"}),
        )
        .await,
    );
    assert_eq!(
        (bad["status"].as_str(), bad["error"].as_str()),
        (Some("invalid"), Some("invalid_field"))
    );
    assert_eq!(bad["field"], "intelligence");
}

#[tokio::test]
async fn run_administration_is_refused_for_run_worker_classes_and_reads_are_never_held() {
    let rig = rig().await;
    let run = rig.start_client_run().await;
    for class in [CallerClass::Service, CallerClass::ClientTask] {
        let who = caller(class, Some("s-x"), InputChannel::None);
        for (tool, arguments) in [
            ("flow.start_run", json!({"template_id": "mech_v1"})),
            ("flow.status", json!({"run_id": run})),
            ("run.list", json!({})),
        ] {
            let answer = structured(rig.call(&who, &CallFacts::default(), tool, arguments).await);
            assert_eq!(answer["status"], "refused", "{tool} as {class:?}: {answer}");
        }
    }
    // A person's client follows the run without anyone being asked.
    let remote = caller(CallerClass::Remote, None, InputChannel::None);
    let state = structured(
        rig.call(
            &remote,
            &CallFacts::default(),
            "flow.status",
            json!({"run_id": run}),
        )
        .await,
    );
    let phases: Vec<&str> = state["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases,
        [
            "intent",
            "needs",
            "requirements",
            "feasibility",
            "design",
            "simulation",
            "release"
        ]
    );
    assert_eq!(state["live"], true);
    assert_eq!(state["awaiting_gate"], false);
    let listed = structured(
        rig.call(
            &remote,
            &CallFacts::default(),
            "run.list",
            json!({"status": "running"}),
        )
        .await,
    );
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1);
    assert!(
        rig.approvals.list_pending().await.unwrap().is_empty(),
        "no read was held"
    );
    // An unknown run is named.
    let missing = structured(
        rig.call(
            &remote,
            &CallFacts::default(),
            "run.get",
            json!({"run_id": "nope"}),
        )
        .await,
    );
    assert_eq!(
        (missing["error"].as_str(), missing["id"].as_str()),
        (Some("not_found"), Some("nope"))
    );
}

#[tokio::test]
async fn a_claim_is_held_until_a_person_approves_it_and_records_the_sessions_grant() {
    let rig = rig().await;
    let run = rig.start_client_run().await;
    let task = rig.open_task(&run).await;
    let task_id = task["id"].as_str().unwrap().to_owned();
    let claiming = {
        let host = rig.host.clone();
        let task_id = task_id.clone();
        tokio::spawn(async move {
            host.call_with(
                &ana(),
                &as_ana(),
                "phase.claim",
                args(json!({"task_id": task_id})),
            )
            .await
        })
    };
    // The claim waits for a person: it is a held tool call, and the task is still open.
    let hold = loop {
        if let Some(hold) = rig
            .approvals
            .list_pending()
            .await
            .unwrap()
            .into_iter()
            .find(|h| h.tool == "phase.claim")
        {
            break hold;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(hold.kind, ApprovalKind::ToolCall);
    assert_eq!(hold.caller, "remote");
    assert!(rig.grants.get("s-ana").is_none());
    rig.stores
        .approval_service()
        .decide(&hold.id, true, "olga", None)
        .await
        .unwrap();
    let claimed = structured(claiming.await.unwrap().unwrap());
    assert_eq!(claimed["status"], "claimed");
    // The task store records the authenticated identity, never the session a client names.
    assert_eq!(claimed["task"]["claimed_by"], "ana");
    let grant = rig.grants.get("s-ana").unwrap();
    assert_eq!(
        (grant.task_id.as_str(), grant.identity.as_deref()),
        (task_id.as_str(), Some("ana"))
    );
    // A second claim of the same task is refused before anyone is asked.
    let again = structured(
        rig.call(&ana(), &as_ana(), "phase.claim", json!({"task_id": task_id}))
            .await,
    );
    assert_eq!(
        (again["status"].as_str(), again["error"].as_str()),
        (Some("conflict"), Some("not_open"))
    );
    assert!(rig.approvals.list_pending().await.unwrap().is_empty());
    // A client-task session holding a claim cannot take another without a person.
    let worker = as_identity(
        caller(CallerClass::ClientTask, Some("s-ana"), InputChannel::None),
        "ana",
    );
    let second = structured(
        rig.call(&worker, &as_ana(), "phase.claim", json!({"task_id": task_id}))
            .await,
    );
    assert_eq!(second["status"], "refused");
}

#[tokio::test]
async fn a_claimed_phases_twin_writes_land_on_the_runs_branch_and_only_the_claimant_submits() {
    let rig = rig().await;
    let run = rig.start_client_run().await;
    // Through to feasibility, whose gate requires a feasibility report.
    for _ in 0..3 {
        let task = rig.open_task(&run).await;
        rig.work_phase(&task).await;
    }
    let task = rig.open_task(&run).await;
    assert_eq!(task["phase"], "feasibility");
    let task_id = task["id"].as_str().unwrap();
    let approver = rig.approve_next_hold("phase.claim");
    structured(
        rig.call(&ana(), &as_ana(), "phase.claim", json!({"task_id": task_id}))
            .await,
    );
    approver.await.unwrap();
    let worker = as_identity(
        caller(CallerClass::ClientTask, Some("s-ana"), InputChannel::None),
        "ana",
    );
    let written = structured(
        rig.call(
            &worker,
            &as_ana(),
            "twin.commit_work_product",
            json!({"artifact": "feasibility_report", "title": "Feasibility", "content": "feasible"}),
        )
        .await,
    );
    assert_eq!(written["branch"], run_branch(&run));
    assert_eq!(
        (written["run_id"].as_str(), written["phase"].as_str()),
        (Some(run.as_str()), Some("feasibility"))
    );
    let on_main = rig
        .twin
        .find_nodes(
            TWIN_MAIN_BRANCH,
            &TwinNodeQuery {
                node_type: Some(TwinNodeType::WorkProduct),
                property: None,
            },
        )
        .await
        .unwrap();
    assert!(
        on_main
            .iter()
            .all(|n| n.properties.get("phase") != Some(&json!("feasibility"))),
        "nothing of the run on main yet"
    );
    // Someone else's session cannot hand the phase back.
    let other = caller(CallerClass::Remote, Some("s-bob"), InputChannel::None);
    let refused = structured(
        rig.call(
            &other,
            &CallFacts::default(),
            "phase.submit",
            json!({"task_id": task_id, "summary": "not mine"}),
        )
        .await,
    );
    assert_eq!(refused["status"], "conflict", "{refused}");
    // Issue 38 item 2: another key sending ana's session header is not ana. It cannot hand the
    // phase back, and its twin writes do not land on the run's branch.
    let spoofer = as_identity(
        caller(CallerClass::Remote, Some("s-ana"), InputChannel::None),
        "bob",
    );
    let spoofed = structured(
        rig.call(
            &spoofer,
            &CallFacts::default(),
            "phase.submit",
            json!({"task_id": task_id, "summary": "in ana's name"}),
        )
        .await,
    );
    assert_eq!(spoofed["status"], "conflict", "{spoofed}");
    assert!(
        spoofed["message"].as_str().unwrap().contains("submitted by bob"),
        "{spoofed}"
    );
    let scopes = BindingsRunScopes::new(rig.bindings.clone(), rig.grants.clone());
    assert_eq!(
        scopes.scope_of(&spoofer).await.unwrap(),
        None,
        "ana's grant is not bob's"
    );
    assert!(
        scopes
            .scope_of(&as_identity(
                caller(CallerClass::Remote, Some("s-ana"), InputChannel::None),
                "ana"
            ))
            .await
            .unwrap()
            .is_some(),
        "ana's own session keeps its scope"
    );
    // An empty summary is the service's refusal, naming the field; nothing is handed back.
    let empty = structured(
        rig.call(
            &worker,
            &as_ana(),
            "phase.submit",
            json!({"task_id": task_id, "summary": "  "}),
        )
        .await,
    );
    assert_eq!(
        (empty["error"].as_str(), empty["field"].as_str()),
        (Some("invalid_field"), Some("summary"))
    );
    let submitted = structured(
        rig.call(
            &worker,
            &as_ana(),
            "phase.submit",
            json!({"task_id": task_id, "summary": "feasible"}),
        )
        .await,
    );
    assert_eq!(submitted["status"], "submitted");
    assert!(rig.grants.get("s-ana").is_none(), "submitting ended the grant");
    let state = rig.wait_for(&run, |s| s["gate"].is_object()).await;
    assert_eq!(state["gate"]["phase"], "feasibility");
    assert_eq!(
        state["gate"]["ready"], true,
        "the gate read the run's branch: {state}"
    );
}

#[tokio::test]
async fn await_gate_asks_only_the_allowed_decisions_and_records_the_answer_as_the_person_from_the_chat() {
    let rig = rig().await;
    let run = rig.start_client_run().await;
    let gate = rig.work_until_gate(&run).await;
    assert_eq!(gate, "feasibility");
    let (questions, details) = rig.ask(&run).await;
    let decision = questions.iter().find(|q| q.id == "decision").unwrap();
    assert_eq!(decision.choices, ["approve", "reject", "retry", "rework"]);
    assert!(!decision.optional);
    let reason = questions.iter().find(|q| q.id == "reason").unwrap();
    assert!(reason.optional && reason.choices.is_empty());
    let rework = questions.iter().find(|q| q.id == "rework_phase").unwrap();
    assert_eq!(
        rework.choices,
        ["intent", "needs", "requirements"],
        "only earlier phases"
    );
    assert_eq!(details["decided"], false);
    assert_eq!(
        details["allowed"],
        json!(["approve", "reject", "retry", "rework"])
    );
    // The person's answer, from the form.
    let decided = structured(
        rig.call(
            &ana(),
            &answered(json!({"decision": "approve", "reason": "feasible", "rework_phase": ""})),
            "flow.await_gate",
            json!({"run_id": run}),
        )
        .await,
    );
    assert_eq!(decided["status"], "decided", "{decided}");
    assert_eq!(
        (decided["approver"].as_str(), decided["surface"].as_str()),
        (Some("ana"), Some("chat"))
    );
    assert_eq!(
        rig.gate_decisions(&run).await,
        [("ana".to_owned(), DecisionSurface::Chat)]
    );
    let hold = rig
        .approvals
        .get(&gate_approval_id(&run, "feasibility", 1))
        .await
        .unwrap();
    assert_eq!(
        (hold.status, hold.approver.as_deref()),
        (ApprovalStatus::Approved, Some("ana"))
    );
    let next = rig.open_task(&run).await;
    assert_eq!(next["phase"], "design");
}

#[tokio::test]
async fn nothing_is_decided_without_the_persons_form_or_for_a_gate_that_moved_on() {
    let rig = rig().await;
    let run = rig.start_client_run().await;
    rig.work_until_gate(&run).await;
    // A client with no elicitation gets the details; the same call with the decision in its
    // arguments (the agent answering for the person) decides nothing either.
    let blind = as_identity(
        caller(CallerClass::Remote, Some("s-ana"), InputChannel::None),
        "ana",
    );
    for arguments in [
        json!({"run_id": run}),
        json!({"run_id": run, "answers": {"decision": "approve"}, "decision": "approve", "approve": true}),
    ] {
        let outcome = rig.call(&blind, &as_ana(), "flow.await_gate", arguments).await;
        let HostCallOutcome::NeedsInput { result, .. } = outcome else {
            panic!("expected the person to be asked");
        };
        assert_eq!(result.structured.unwrap()["decided"], false);
    }
    // Answers from a caller that is no person's client are never recorded.
    for class in [CallerClass::Service, CallerClass::Untrusted] {
        let who = caller(class, Some("s-ana"), InputChannel::Elicitation);
        let answer = structured(
            rig.call(
                &who,
                &answered(json!({"decision": "approve"})),
                "flow.await_gate",
                json!({"run_id": run}),
            )
            .await,
        );
        assert_eq!(answer["decided"], false, "{class:?}: {answer}");
    }
    // Answers for a session that was never asked decide nothing.
    let stranger = caller(CallerClass::Remote, Some("s-zed"), InputChannel::Elicitation);
    let unasked = structured(
        rig.call(
            &stranger,
            &answered(json!({"decision": "approve"})),
            "flow.await_gate",
            json!({"run_id": run}),
        )
        .await,
    );
    assert_eq!(unasked["error"], "not_asked");
    assert!(rig.gate_decisions(&run).await.is_empty());
    // Ana is asked; meanwhile a person decides at the dashboard and the run moves to the next gate.
    rig.ask(&run).await;
    let by_olga = GateDecisionBody {
        decision: GateDecisionKind::Approve.into(),
        reason: None,
        phase: None,
        gate_phase: Some("feasibility".into()),
        surface: Some(DecisionSurface::Api.into()),
    };
    let decided = rig.bindings.answer_gate(&run, by_olga, "olga").await.unwrap();
    assert!(matches!(decided, RunReply::Done(_)), "{decided:?}");
    let late = structured(
        rig.call(
            &ana(),
            &answered(json!({"decision": "reject"})),
            "flow.await_gate",
            json!({"run_id": run}),
        )
        .await,
    );
    assert_eq!(late["error"], "gate_changed", "{late}");
    assert_eq!(
        rig.gate_decisions(&run).await,
        [("olga".to_owned(), DecisionSurface::Api)]
    );
}

#[tokio::test]
async fn a_refused_answer_leaves_the_gate_open_and_names_what_is_missing() {
    let rig = rig().await;
    let run = rig.start_client_run().await;
    rig.work_until_gate(&run).await;
    rig.ask(&run).await;
    let refused = structured(
        rig.call(
            &ana(),
            &answered(json!({"decision": "retry"})),
            "flow.await_gate",
            json!({"run_id": run}),
        )
        .await,
    );
    assert_eq!(refused["error"], "missing", "{refused}");
    assert_eq!(refused["field"], "reason");
    let state = rig.bindings_state(&run).await;
    assert_eq!(state["gate"]["phase"], "feasibility", "the gate is still open");
    // An answer that is no decision at all is refused naming it.
    rig.ask(&run).await;
    let nonsense = structured(
        rig.call(
            &ana(),
            &answered(json!({"decision": "maybe"})),
            "flow.await_gate",
            json!({"run_id": run}),
        )
        .await,
    );
    assert_eq!(nonsense["error"], "invalid_arguments");
    assert!(
        nonsense["validation_errors"][0]
            .as_str()
            .unwrap()
            .starts_with("answers.decision"),
        "{nonsense}"
    );
    assert!(rig.gate_decisions(&run).await.is_empty());
}

#[tokio::test]
async fn a_mech_v1_client_run_driven_through_the_tools_completes_into_main() {
    let rig = rig().await;
    let run = rig.start_client_run().await;
    let mut gates = Vec::new();
    loop {
        let state = rig.bindings_state(&run).await;
        if state["status"] == "completed" {
            break;
        }
        if state["gate"].is_object() {
            let (_, details) = rig.ask(&run).await;
            gates.push(details["gate"]["phase"].as_str().unwrap().to_owned());
            let decided = structured(
                rig.call(
                    &ana(),
                    &answered(json!({"decision": "approve"})),
                    "flow.await_gate",
                    json!({"run_id": run}),
                )
                .await,
            );
            assert_eq!(decided["status"], "decided", "{decided}");
            continue;
        }
        let task = rig.open_task(&run).await;
        rig.work_phase(&task).await;
        rig.wait_for(&run, |s| {
            s["gate"].is_object()
                || s["status"] == "completed"
                || s["phases"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["status"] == "running" && p["id"] != task["phase"])
        })
        .await;
    }
    assert_eq!(gates, ["feasibility", "design", "simulation", "release"]);
    assert!(
        rig.gate_decisions(&run)
            .await
            .iter()
            .all(|(who, surface)| who == "ana" && *surface == DecisionSurface::Chat)
    );
    let main = rig
        .twin
        .find_nodes(
            TWIN_MAIN_BRANCH,
            &TwinNodeQuery {
                node_type: Some(TwinNodeType::WorkProduct),
                property: None,
            },
        )
        .await
        .unwrap();
    let mut artifacts: Vec<&str> = main
        .iter()
        .filter_map(|n| n.properties.get("artifact").and_then(Value::as_str))
        .collect();
    artifacts.sort_unstable();
    artifacts.dedup();
    assert_eq!(
        artifacts,
        [
            "cad_model",
            "drawing",
            "feasibility_report",
            "release_package",
            "simulation_result",
            "verification_report"
        ]
    );
    // The resource reads the finished run.
    let text = rig
        .host
        .read_resource(&format!("metaforge://flow/run/{run}"))
        .await
        .unwrap();
    assert_eq!(text.mime_type, "text/markdown");
    assert!(text.text.contains("- Status: completed"), "{}", text.text);
    assert!(
        text.text
            .contains("| 7 | Release (`release`) | passed | G8 Release Gate |"),
        "{}",
        text.text
    );
}

#[tokio::test]
async fn the_run_resource_shows_the_open_gate_and_the_prompt_names_the_tools() {
    let rig = rig().await;
    let run = rig.start_client_run().await;
    rig.work_until_gate(&run).await;
    let text = rig
        .host
        .read_resource(&format!("metaforge://flow/run/{run}"))
        .await
        .unwrap()
        .text;
    assert!(
        text.contains("## Open gate: G3 Feasibility Review on `feasibility`"),
        "{text}"
    );
    assert!(
        text.contains("- Allowed decisions: approve, reject, retry, rework"),
        "{text}"
    );
    assert!(text.contains("- State: live"), "{text}");
    let missing = rig
        .host
        .read_resource("metaforge://flow/run/nope")
        .await
        .unwrap_err();
    assert_eq!(missing.kind, PortErrorKind::NotFound);
    let prompts = rig.host.prompts();
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0].name, "metaforge:flow");
    let prompt = rig
        .host
        .prompt("metaforge:flow", &args(json!({"template_id": "mech_v1"})))
        .await
        .unwrap();
    for tool in [
        "flow.start_run",
        "phase.list_tasks",
        "phase.claim",
        "twin.commit_work_product",
        "phase.submit",
        "flow.await_gate",
    ] {
        assert!(prompt.text.contains(tool), "the prompt names {tool}");
    }
    assert!(prompt.text.contains("Do not answer for them"));
    assert_eq!(
        rig.host.prompt("nope", &Map::new()).await.unwrap_err().kind,
        PortErrorKind::NotFound
    );
}

fn claim_of(session: &str, identity: Option<&str>, project: Option<&str>) -> ClassClaim {
    ClassClaim {
        class: CallerClass::ClientTask,
        session: session.to_owned(),
        project: project.map(str::to_owned),
        identity: identity.map(str::to_owned),
        tool: Some("twin.commit_work_product".into()),
    }
}

#[tokio::test]
async fn a_client_task_grant_is_confirmed_only_while_its_claim_holds_and_only_when_the_owner_opted_in() {
    let rig = rig().await;
    let run = rig.start_client_run().await;
    let flows: Arc<dyn FlowBindings> = rig.flows.clone();
    let on = SidecarCallerGrants::new(rig.bindings.clone(), flows.clone(), rig.grants.clone(), true);
    let off = SidecarCallerGrants::new(rig.bindings.clone(), flows, rig.grants.clone(), false);
    let claim = claim_of("s-ana", Some("ana"), Some("p-shelf"));
    assert!(!on.confirm(&claim).await, "no claim yet");
    let task = rig.open_task(&run).await;
    let approver = rig.approve_next_hold("phase.claim");
    structured(
        rig.call(&ana(), &as_ana(), "phase.claim", json!({"task_id": task["id"]}))
            .await,
    );
    approver.await.unwrap();
    assert!(
        on.confirm(&claim).await,
        "claimed, running, client mode, same project"
    );
    assert!(!off.confirm(&claim).await, "METAFORGE_CLIENT_TASK_WRITES is off");
    assert!(
        !on.confirm(&claim_of("s-ana", Some("mallory"), Some("p-shelf")))
            .await,
        "another identity"
    );
    assert!(
        !on.confirm(&claim_of("s-ana", Some("ana"), Some("p-other"))).await,
        "another project"
    );
    assert!(
        !on.confirm(&claim_of("s-bob", Some("ana"), Some("p-shelf"))).await,
        "another session"
    );
    // The twin scopes the session's writes by the same grant while the phase is in flight.
    let scopes = BindingsRunScopes::new(rig.bindings.clone(), rig.grants.clone());
    let scope = scopes
        .scope_of(&as_identity(
            caller(CallerClass::ClientTask, Some("s-ana"), InputChannel::None),
            "ana",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (scope.run_id.as_str(), scope.phase.as_str()),
        (run.as_str(), "intent")
    );
    // A task withdrawn under the session ends its grant at the next confirmation.
    rig.engine
        .cancel(&run, "olga", Some("stop".into()))
        .await
        .unwrap();
    assert!(!on.confirm(&claim).await);
    assert!(
        rig.grants.get("s-ana").is_none(),
        "the grant ended with the claim"
    );
    assert!(
        scopes
            .scope_of(&as_identity(
                caller(CallerClass::ClientTask, Some("s-ana"), InputChannel::None),
                "ana"
            ))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_service_key_call_is_confirmed_only_on_a_running_server_mode_run_of_an_approved_version_in_its_project()
 {
    let rig = rig().await;
    let client_run = rig.start_client_run().await;
    let started = structured(
        rig.call(
            &ana(),
            &as_ana(),
            "flow.start_run",
            json!({"template_id": "mech_v1", "intelligence": "server", "project_id": "p-shelf"}),
        )
        .await,
    );
    assert_eq!(started["status"], "started", "{started}");
    let run = started["run"]["id"].as_str().unwrap().to_owned();
    let flows: Arc<dyn FlowBindings> = rig.flows.clone();
    let grants = SidecarCallerGrants::new(rig.bindings.clone(), flows, rig.grants.clone(), false);
    let service = |session: &str, project: Option<&str>| ClassClaim {
        class: CallerClass::Service,
        session: session.to_owned(),
        project: project.map(str::to_owned),
        identity: None,
        tool: Some("twin.commit_work_product".into()),
    };
    assert!(grants.confirm(&service(&run, Some("p-shelf"))).await);
    // Issue 38 item 11: a client-mode run's phases are a person's client's, never the key's.
    assert!(
        !grants.confirm(&service(&client_run, Some("p-shelf"))).await,
        "a client-mode run is not the service worker's"
    );
    assert!(
        !grants.confirm(&service(&run, None)).await,
        "the call names no project"
    );
    assert!(!grants.confirm(&service(&run, Some("p-other"))).await);
    assert!(!grants.confirm(&service("no-such-run", Some("p-shelf"))).await);
    rig.engine.cancel(&run, "olga", None).await.unwrap();
    assert!(
        !grants.confirm(&service(&run, Some("p-shelf"))).await,
        "the run ended"
    );
}

#[tokio::test]
async fn run_tools_before_the_run_service_is_composed_answer_unavailable_and_do_nothing() {
    let rig = rig().await;
    let late = Arc::new(LateRunBindings::new());
    let tools = SidecarRuns::new(late.clone(), Arc::new(ClientTaskGrants::new()));
    let host = with_runs(SidecarHost::new(), &tools);
    let answer = structured(
        host.call(&ana(), "flow.start_run", args(json!({"template_id": "mech_v1"})))
            .await
            .unwrap(),
    );
    assert_eq!(answer["status"], "unavailable", "{answer}");
    assert!(late.set(rig.bindings.clone()));
    assert!(!late.set(rig.bindings.clone()), "set once");
    let started = structured(
        host.call(&ana(), "flow.start_run", args(json!({"template_id": "mech_v1"})))
            .await
            .unwrap(),
    );
    assert_eq!(started["status"], "started");
}
