//! The phase brains: the client brain posts one task per `run:phase:attempt`, waits for the
//! client's submission through the store, and reports what the twin recorded; the server brain
//! runs P→G→E as the design-flow worker and reports what the twin recorded, not what it said.

#![expect(
    clippy::unwrap_used,
    reason = "integration tests: a failed expectation is a failed test"
)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metaforge_agent::{Agent, AgentPorts, ModelProfile, ModelTarget, ProviderModels, ToolBox, ToolBoxes};
use metaforge_app::runs::{ClientPhaseBrain, PHASE_SYSTEM_PROMPT, ServerPhaseBrain, recorded_deliverables};
use metaforge_ports::{
    ApiFamily, Billing, CallerClass, CallerContext, ClientTaskStatus, ClientTaskStore, Clock, ContentPart,
    FeedbackSource, IntelligenceMode, LlmRole, PhaseBrain, PhaseBrief, PhaseFailureKind, PhaseFeedback,
    RunLedger, ToolOutput, ToolSource, TwinChangeSet, TwinCommitRequest, TwinNode, TwinNodeType, TwinStore,
    run_branch,
};
use metaforge_test_support::contracts::sample_run;
use metaforge_test_support::doubles::{
    FakeToolSource, MemoryApprovalLedger, MemoryClientTaskStore, MemoryRunLedger, MemoryTwinStore,
    ScriptStep, ScriptedLlm, descriptor,
};
use metaforge_test_support::{ManualClock, SequentialIds};
use serde_json::{Map, Value, json};

fn brief(run_id: &str, phase: &str, attempt: u32) -> PhaseBrief {
    PhaseBrief {
        run_id: run_id.to_owned(),
        project_id: Some("proj-1".into()),
        flow_version_id: "v-1".into(),
        intelligence: IntelligenceMode::Client,
        phase: phase.to_owned(),
        title: "Mechanical Design".into(),
        goal: "Complete the 'Mechanical Design' phase.".into(),
        disciplines: vec!["mechanical".into()],
        expected_artifacts: vec!["cad_model".into(), "drawing".into()],
        required_deliverables: vec!["cad_model".into(), "drawing".into()],
        items: vec!["bracket".into()],
        flow_context: "Mechanical Design Flow (mech_v1 1.1.0)".into(),
        model: None,
        attempt,
        key: format!("{run_id}:{phase}:{attempt}"),
        feedback: None,
        earlier: Vec::new(),
    }
}

fn work_product(id: &str, run_id: &str, phase: &str, artifact: &str) -> TwinNode {
    let mut properties = Map::new();
    properties.insert("artifact".into(), json!(artifact));
    properties.insert("phase".into(), json!(phase));
    properties.insert("run_id".into(), json!(run_id));
    TwinNode::new(id, TwinNodeType::WorkProduct, properties)
}

async fn record(twin: &dyn TwinStore, clock: &ManualClock, run_id: &str, nodes: Vec<TwinNode>) {
    let branch = run_branch(run_id);
    if twin.create_branch(&branch, "main").await.is_err() {
        // Exists already.
    }
    twin.commit(TwinCommitRequest {
        id: format!("c-{}", nodes.first().map(|n| n.id.clone()).unwrap_or_default()),
        branch,
        expected_head: None,
        message: "work".into(),
        author: "agent:design-flow".into(),
        at: clock.now(),
        changes: TwinChangeSet {
            upsert_nodes: nodes,
            ..TwinChangeSet::default()
        },
    })
    .await
    .unwrap();
}

async fn wait_for_status(tasks: &dyn ClientTaskStore, id: &str, status: ClientTaskStatus) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if tasks.get(id).await.is_ok_and(|t| t.status == status) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {id} never became {}",
            status.as_str()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn the_client_brain_posts_once_waits_for_the_submission_and_reports_what_the_twin_recorded() {
    let clock = Arc::new(ManualClock::fixed());
    let runs = Arc::new(MemoryRunLedger::new());
    runs.create(sample_run("run-b", IntelligenceMode::Client, 0))
        .await
        .unwrap();
    let tasks = Arc::new(MemoryClientTaskStore::new(runs.clone()));
    let twin = Arc::new(MemoryTwinStore::new());
    let brain = Arc::new(
        ClientPhaseBrain::new(tasks.clone(), twin.clone(), clock.clone()).with_poll(Duration::from_millis(5)),
    );

    let working = tokio::spawn({
        let brain = brain.clone();
        async move { brain.run_phase(brief("run-b", "design", 1)).await }
    });
    wait_for_status(tasks.as_ref(), "run-b:design:1", ClientTaskStatus::Open).await;
    let posted = tasks.get("run-b:design:1").await.unwrap();
    assert_eq!(posted.brief["goal"], "Complete the 'Mechanical Design' phase.");
    assert_eq!(
        posted.brief["required_deliverables"],
        json!(["cad_model", "drawing"])
    );

    // The client claims, records one work product (and another phase's, and another run's), and
    // submits a summary claiming two.
    tasks
        .claim(
            "run-b:design:1",
            &metaforge_ports::Claimant {
                identity: "claude".into(),
                session: None,
            },
            clock.now(),
        )
        .await
        .unwrap();
    record(
        twin.as_ref(),
        &clock,
        "run-b",
        vec![
            work_product("n-1", "run-b", "design", "cad_model"),
            work_product("n-2", "run-b", "release", "release_package"),
            work_product("n-3", "run-other", "design", "drawing"),
        ],
    )
    .await;
    tasks
        .submit(
            "run-b:design:1",
            "claude",
            json!({"summary": "CAD model and drawing done"}),
            clock.now(),
        )
        .await
        .unwrap();
    let outcome = working.await.unwrap().unwrap();
    assert_eq!(outcome.summary, "CAD model and drawing done");
    assert_eq!(
        outcome.deliverables,
        vec!["cad_model"],
        "the drawing is described but not recorded for this run's phase"
    );
    assert!(outcome.usage.is_empty());

    // Called again with the same key (a retry, a restart): the task and its submission are found.
    let again = brain.run_phase(brief("run-b", "design", 1)).await.unwrap();
    assert_eq!(again, outcome);
    assert_eq!(
        tasks.list(Some("run-b"), None).await.unwrap().len(),
        1,
        "posted once"
    );
}

#[tokio::test]
async fn the_client_brain_reopens_a_task_withdrawn_while_it_waits() {
    let clock = Arc::new(ManualClock::fixed());
    let runs = Arc::new(MemoryRunLedger::new());
    runs.create(sample_run("run-w", IntelligenceMode::Client, 0))
        .await
        .unwrap();
    let tasks = Arc::new(MemoryClientTaskStore::new(runs.clone()));
    let brain = Arc::new(
        ClientPhaseBrain::new(tasks.clone(), Arc::new(MemoryTwinStore::new()), clock.clone())
            .with_poll(Duration::from_millis(5)),
    );
    let working = tokio::spawn({
        let brain = brain.clone();
        async move { brain.run_phase(brief("run-w", "design", 2)).await }
    });
    wait_for_status(tasks.as_ref(), "run-w:design:2", ClientTaskStatus::Open).await;
    tasks
        .claim(
            "run-w:design:2",
            &metaforge_ports::Claimant {
                identity: "claude".into(),
                session: None,
            },
            clock.now(),
        )
        .await
        .unwrap();
    tasks.withdraw("run-w:design:2", clock.now()).await.unwrap();
    wait_for_status(tasks.as_ref(), "run-w:design:2", ClientTaskStatus::Open).await;
    tasks
        .claim(
            "run-w:design:2",
            &metaforge_ports::Claimant {
                identity: "codex".into(),
                session: None,
            },
            clock.now(),
        )
        .await
        .unwrap();
    tasks
        .submit("run-w:design:2", "codex", json!("nothing recorded"), clock.now())
        .await
        .unwrap();
    let outcome = working.await.unwrap().unwrap();
    assert_eq!(outcome.summary, "nothing recorded");
    assert!(outcome.deliverables.is_empty());
}

#[tokio::test]
async fn the_client_brain_fails_for_configuration_on_a_run_that_has_no_client_tasks() {
    let clock = Arc::new(ManualClock::fixed());
    let runs = Arc::new(MemoryRunLedger::new());
    runs.create(sample_run("run-s", IntelligenceMode::Server, 0))
        .await
        .unwrap();
    let tasks = Arc::new(MemoryClientTaskStore::new(runs.clone()));
    let brain = ClientPhaseBrain::new(tasks.clone(), Arc::new(MemoryTwinStore::new()), clock);
    let failure = brain.run_phase(brief("run-s", "design", 1)).await.unwrap_err();
    assert_eq!(failure.kind, PhaseFailureKind::Configuration);
    assert!(failure.reason.contains("server mode"), "{}", failure.reason);
    assert!(tasks.list(None, None).await.unwrap().is_empty());
}

/// The tools a phase turn gets, recording who asked for which disciplines.
struct RecordingToolBoxes {
    tools: Arc<dyn ToolBox>,
    asked: Mutex<Vec<(CallerContext, Option<Vec<String>>)>>,
}

/// The central registry's view of `sources` for a local caller.
async fn toolbox(sources: Vec<Arc<dyn ToolSource>>) -> Arc<dyn ToolBox> {
    let mut builder = metaforge_app::tools::ToolRegistry::builder();
    for source in sources {
        builder = builder.server(source, std::time::Duration::from_secs(5));
    }
    let registry = builder.build().await.unwrap();
    registry.for_turn(
        &CallerContext {
            class: CallerClass::Local,
            session: None,
            input_channel: metaforge_ports::InputChannel::None,
            identity: None,
        },
        None,
    )
}

impl ToolBoxes for RecordingToolBoxes {
    fn for_turn(&self, caller: &CallerContext, domains: Option<&[String]>) -> Arc<dyn ToolBox> {
        self.asked
            .lock()
            .unwrap()
            .push((caller.clone(), domains.map(<[String]>::to_vec)));
        self.tools.clone()
    }
}

fn profile(provider: &str) -> ModelProfile {
    ModelProfile {
        provider: provider.to_owned(),
        model: format!("{provider}-model"),
        family: ApiFamily::OpenaiCompatible,
        native_tools: true,
        context_window_tokens: 128_000,
        max_tools: None,
    }
}

fn target(provider: &str, llm: &Arc<ScriptedLlm>) -> ModelTarget {
    ModelTarget {
        profile: profile(provider),
        adapter: llm.clone(),
        billing: Billing::Metered,
    }
}

struct ServerRig {
    brain: ServerPhaseBrain,
    worker: Arc<ScriptedLlm>,
    evaluator: Arc<ScriptedLlm>,
    boxes: Arc<RecordingToolBoxes>,
    twin_server: Arc<FakeToolSource>,
}

async fn server_rig(
    roles: &[&str],
    worker_steps: Vec<ScriptStep>,
    evaluator_steps: Vec<ScriptStep>,
) -> ServerRig {
    let clock = Arc::new(ManualClock::fixed());
    let twin = Arc::new(MemoryTwinStore::new());
    let worker = Arc::new(ScriptedLlm::new(worker_steps));
    let evaluator = Arc::new(ScriptedLlm::new(evaluator_steps));
    let mut table = BTreeMap::new();
    for role in roles {
        let targets = if *role == "evaluator" {
            vec![target("openai", &worker), target("anthropic", &evaluator)]
        } else {
            vec![target("openai", &worker)]
        };
        table.insert((*role).to_owned(), targets);
    }
    // The twin's commit tool records a work product on the branch it is given.
    let twin_for_tool = twin.clone();
    let commit_clock = clock.clone();
    let twin_server = Arc::new(FakeToolSource::new("twin").with_tool(
        descriptor(
            "commit_work_product",
            json!({"type": "object", "properties": {"artifact": {"type": "string"}}, "required": ["artifact"]}),
            false,
        ),
        Duration::ZERO,
        move |args: &Map<String, Value>| {
            let artifact = args["artifact"].as_str().unwrap_or_default().to_owned();
            let twin = twin_for_tool.clone();
            let at = commit_clock.now();
            let name = artifact.clone();
            futures::executor::block_on(async move {
                let artifact = name;
                let branch = run_branch("run-p");
                let _exists = twin.create_branch(&branch, "main").await;
                twin.commit(TwinCommitRequest {
                    id: format!("commit-{artifact}"),
                    branch,
                    expected_head: None,
                    message: format!("record {artifact}"),
                    author: "agent:design-flow".into(),
                    at,
                    changes: TwinChangeSet {
                        upsert_nodes: vec![work_product(&format!("wp-{artifact}"), "run-p", "design", &artifact)],
                        ..TwinChangeSet::default()
                    },
                })
                .await
            })?;
            Ok(ToolOutput::json(json!({"recorded": artifact})))
        },
    ));
    let tools = toolbox(vec![twin_server.clone() as Arc<dyn ToolSource>]).await;
    let boxes = Arc::new(RecordingToolBoxes {
        tools: tools.clone(),
        asked: Mutex::new(Vec::new()),
    });
    let agent = Agent::new(AgentPorts {
        model: Arc::new(ProviderModels::new(table)),
        tools,
        approvals: Some(Arc::new(MemoryApprovalLedger::new(clock.clone()))),
        clock,
        ids: Arc::new(SequentialIds::new("hold")),
    });
    ServerRig {
        brain: ServerPhaseBrain::new(agent, boxes.clone(), twin),
        worker,
        evaluator,
        boxes,
        twin_server,
    }
}

/// (role, run, phase, caller) of one usage event.
type Attribution<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>, Option<&'a str>);

fn user_text(request: &metaforge_ports::LlmRequest) -> String {
    request
        .messages
        .iter()
        .filter(|m| m.role == LlmRole::User)
        .flat_map(|m| m.content.iter())
        .filter_map(|p| match p {
            ContentPart::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn the_server_brain_runs_pge_as_the_service_worker_and_reports_what_the_twin_recorded() {
    let rig = server_rig(
        &["planner", "phase_brain", "evaluator"],
        vec![
            ScriptStep::text("1. record the CAD model"),
            ScriptStep::calls(&[(
                "c1",
                "mcp_twin_commit_work_product",
                json!({"artifact": "cad_model"}),
            )]),
            ScriptStep::text("Recorded the CAD model and the drawing."),
        ],
        vec![ScriptStep::text(r#"{"passed": true, "findings": []}"#)],
    )
    .await;
    let mut phase = brief("run-p", "design", 2);
    phase.intelligence = IntelligenceMode::Server;
    phase.feedback = Some(PhaseFeedback {
        source: FeedbackSource::Retry,
        gate_phase: "design".into(),
        gate: "G6 Design Review".into(),
        reason: "tolerances are missing".into(),
        findings: vec!["required deliverable 'drawing' is not recorded".into()],
        approver: "ana".into(),
    });
    let outcome = rig.brain.run_phase(phase).await.unwrap();
    assert_eq!(outcome.summary, "Recorded the CAD model and the drawing.");
    assert_eq!(
        outcome.deliverables,
        vec!["cad_model"],
        "the twin's record counts, not the prose"
    );
    assert_eq!(rig.twin_server.calls_of("commit_work_product"), 1);

    let asked = rig.boxes.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0].0.class,
        CallerClass::Service,
        "the worker's caller class (FORGE-487)"
    );
    assert_eq!(asked[0].0.session.as_deref(), Some("run-p"));
    assert_eq!(
        asked[0].1,
        Some(vec!["mechanical".to_owned()]),
        "tools scoped to the phase's disciplines"
    );

    let requests = rig.worker.requests();
    let generator = &requests[1];
    assert_eq!(generator.system.stable, PHASE_SYSTEM_PROMPT);
    let task = user_text(generator);
    let feedback_at = task.find("A retry was asked").unwrap();
    let phase_at = task
        .find("Phase: Mechanical Design ('design'), attempt 2")
        .unwrap();
    assert!(feedback_at < phase_at, "the feedback comes first: {task}");
    assert!(task.contains("tolerances are missing"));
    assert!(task.contains("Required deliverables (the gate checks these are recorded): cad_model, drawing"));
    assert!(task.contains("Deliverable slots: bracket"));
    assert!(task.contains("run/run-p"));
    assert_eq!(
        rig.evaluator.requests().len(),
        1,
        "the evaluator ran on a second provider"
    );

    let roles: Vec<Attribution<'_>> = outcome
        .usage
        .iter()
        .map(|u| {
            (
                u.role.as_deref(),
                u.run_id.as_deref(),
                u.phase.as_deref(),
                u.caller.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        vec![
            (Some("planner"), Some("run-p"), Some("design"), Some("service")),
            (
                Some("phase_brain"),
                Some("run-p"),
                Some("design"),
                Some("service")
            ),
            (
                Some("phase_brain"),
                Some("run-p"),
                Some("design"),
                Some("service")
            ),
            (Some("evaluator"), Some("run-p"), Some("design"), Some("service")),
        ],
        "usage is attributed to the run and phase; the generator runs on phase_brain"
    );
}

#[tokio::test]
async fn no_model_for_phase_brain_is_a_configuration_failure_before_any_call() {
    let rig = server_rig(&["planner", "evaluator"], Vec::new(), Vec::new()).await;
    let failure = rig
        .brain
        .run_phase(brief("run-p", "design", 1))
        .await
        .unwrap_err();
    assert_eq!(failure.kind, PhaseFailureKind::Configuration);
    assert!(failure.reason.contains("phase_brain"), "{}", failure.reason);
    assert!(rig.worker.requests().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn a_model_call_failing_mid_phase_is_retryable() {
    let rig = server_rig(
        &["planner", "phase_brain", "evaluator"],
        vec![ScriptStep::text("1. plan")],
        Vec::new(),
    )
    .await;
    let failure = rig
        .brain
        .run_phase(brief("run-p", "design", 1))
        .await
        .unwrap_err();
    assert_eq!(failure.kind, PhaseFailureKind::Retryable, "{}", failure.reason);
}

#[tokio::test]
async fn recorded_deliverables_read_the_run_branch_only() {
    let clock = ManualClock::fixed();
    let twin = MemoryTwinStore::new();
    assert!(
        recorded_deliverables(&twin, "run-q", "design")
            .await
            .unwrap()
            .is_empty(),
        "no branch yet: nothing recorded"
    );
    record(
        &twin,
        &clock,
        "run-q",
        vec![
            work_product("a", "run-q", "design", "drawing"),
            work_product("b", "run-q", "design", "cad_model"),
            work_product("c", "run-q", "design", "cad_model"),
        ],
    )
    .await;
    assert_eq!(
        recorded_deliverables(&twin, "run-q", "design").await.unwrap(),
        vec!["cad_model", "drawing"],
        "sorted, once each"
    );
    assert!(
        recorded_deliverables(&twin, "run-q", "release")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_phase_with_no_tools_fails_retryably_instead_of_running_toolless() {
    let rig = server_rig(
        &["planner", "phase_brain", "evaluator"],
        vec![ScriptStep::text("1. plan")],
        Vec::new(),
    )
    .await;
    let empty = toolbox(Vec::new()).await;
    let boxes = Arc::new(RecordingToolBoxes {
        tools: empty,
        asked: Mutex::new(Vec::new()),
    });
    let clock = Arc::new(ManualClock::fixed());
    let agent = Agent::new(AgentPorts {
        model: Arc::new(ProviderModels::new(BTreeMap::from([
            ("planner".to_owned(), vec![target("openai", &rig.worker)]),
            ("phase_brain".to_owned(), vec![target("openai", &rig.worker)]),
            ("evaluator".to_owned(), vec![target("openai", &rig.worker)]),
        ]))),
        tools: toolbox(Vec::new()).await,
        approvals: None,
        clock,
        ids: Arc::new(SequentialIds::new("hold")),
    });
    let brain = ServerPhaseBrain::new(agent, boxes, Arc::new(MemoryTwinStore::new()));
    let failure = brain.run_phase(brief("run-p", "design", 1)).await.unwrap_err();
    assert_eq!(failure.kind, PhaseFailureKind::Retryable);
    assert!(failure.reason.contains("no tools"), "{}", failure.reason);
    assert!(rig.worker.requests().is_empty(), "nothing was sent");
}
