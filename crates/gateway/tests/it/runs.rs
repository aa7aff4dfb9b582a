//! Design-flow runs through the gateway's routes: the real `EmbeddedEngine` over the in-memory
//! doubles, phase work by test-support's `ScriptedPhaseBrain` (server mode) or the real
//! `ClientPhaseBrain` (client mode, tasks answered over `/v1/client-tasks`). Starts from an
//! approved version and from a template, refusals that record nothing, a run to completion
//! through human gates answered over `POST …/approval`, retry and rework, refused decisions
//! naming the allowed ones, gates in the one approval ledger, flow-state with the engine stopped,
//! cancel, SSE events resumed after `Last-Event-ID`, client tasks, usage per run, `/health`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures::channel::mpsc::UnboundedReceiver;
use http_body_util::BodyExt;
use metaforge_app::approvals::ApprovalService;
use metaforge_app::flow_generator::PipelineGenerator;
use metaforge_app::flows::FlowService;
use metaforge_app::runs::{
    ClientPhaseBrain, EmbeddedEngine, EngineOptions, EnginePorts, PhaseBrains, RunEngine, RunService,
    RunServicePorts, RunServiceSettings,
};
use metaforge_gateway::{self as gateway, AuthState, GatewayState, parse_api_keys};
use metaforge_ports::usage_store::UsageStore;
use metaforge_ports::{
    BusEvent, Clock, EventBus, IdGen, PortError, PortErrorKind, PublishReceipt, RunLedger, TwinChangeSet,
    TwinCommitRequest, TwinNode, TwinNodeType, TwinStore, UsageEvent, run_branch,
};
use metaforge_test_support::doubles::{
    BrainStep, MemoryApprovalLedger, MemoryClientTaskStore, MemoryFlowVersionStore, MemoryRunLedger,
    MemoryTwinStore, MemoryUsageStore, ScriptedPhaseBrain,
};
use metaforge_test_support::{ManualClock, SequentialIds};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::common::{get, harness, post, send};

const ANA: &str = "sk-ana-0001";
const BOB: &str = "sk-bob-0002";
const WAIT: Duration = Duration::from_secs(10);

/// A bus that takes every notice (the ledger is the record; the SSE stream comes from the engine).
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

/// The gateway over a running embedded engine and the doubles it shares with the routes.
struct Rig {
    app: axum::Router,
    engine: EmbeddedEngine,
    brain: Arc<ScriptedPhaseBrain>,
    runs: Arc<MemoryRunLedger>,
    versions: Arc<MemoryFlowVersionStore>,
    approvals: Arc<MemoryApprovalLedger>,
    twin: Arc<MemoryTwinStore>,
    usage: Arc<MemoryUsageStore>,
    clock: Arc<ManualClock>,
}

impl Rig {
    async fn new() -> Self {
        Self::with_brain(ScriptedPhaseBrain::new()).await
    }

    async fn with_brain(brain: ScriptedPhaseBrain) -> Self {
        let clock = Arc::new(ManualClock::fixed());
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let ids: Arc<dyn IdGen> = Arc::new(SequentialIds::new("id"));
        let runs = Arc::new(MemoryRunLedger::new());
        let versions = Arc::new(MemoryFlowVersionStore::new());
        let approvals = Arc::new(MemoryApprovalLedger::new(dyn_clock.clone()));
        let tasks = Arc::new(MemoryClientTaskStore::new(runs.clone()));
        let twin = Arc::new(MemoryTwinStore::new());
        let usage = Arc::new(MemoryUsageStore::new());
        let brain = Arc::new(brain);
        let client_brain = ClientPhaseBrain::new(tasks.clone(), twin.clone(), dyn_clock.clone())
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
                server: brain.clone(),
                client: Arc::new(client_brain),
            },
            EngineOptions {
                deadline_tick: Duration::from_millis(10),
                retry_delay: Duration::ZERO,
                effect_retry: Duration::from_millis(20),
            },
        );
        engine.resume_all().await.unwrap();
        let run_engine: Arc<dyn RunEngine> = Arc::new(engine.clone());
        let service = RunService::new(
            run_engine,
            RunServicePorts {
                runs: runs.clone(),
                versions: versions.clone(),
                tasks,
                usage: usage.clone(),
                clock: dyn_clock.clone(),
                ids: Arc::new(SequentialIds::new("run")),
            },
            RunServiceSettings::default(),
        );
        let flows = Arc::new(FlowService::new(
            versions.clone(),
            approvals.clone(),
            dyn_clock.clone(),
            ids.clone(),
        ));
        let harness = Arc::new(harness());
        let generator = Arc::new(PipelineGenerator::new(None, harness.clone(), flows.clone()));
        let state = GatewayState {
            metrics: None,
            approvals: Arc::new(ApprovalService::new(
                approvals.clone(),
                versions.clone(),
                dyn_clock.clone(),
                ids,
            )),
            flows,
            usage: usage.clone(),
            clock: dyn_clock,
            harness,
            generator,
            providers: Vec::new(),
            chat: None,
            pipeline: None,
            mcp_servers: Arc::new(metaforge_app::tools::ServerStatuses::none()),
            runs: Some(Arc::new(service)),
            twin: None,
        };
        let auth = AuthState::new(parse_api_keys(&format!("ana:{ANA},bob:{BOB}")).unwrap(), None);
        Self {
            app: gateway::build(Arc::new(state), Arc::new(auth), 1 << 20),
            engine,
            brain,
            runs,
            versions,
            approvals,
            twin,
            usage,
            clock,
        }
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let (status, _, body) = send(&self.app, get(path, Some(ANA))).await;
        (status, body)
    }

    async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.post_as(ANA, path, body).await
    }

    async fn post_as(&self, key: &str, path: &str, body: &Value) -> (StatusCode, Value) {
        let (status, _, body) = send(&self.app, post(path, body, Some(key))).await;
        (status, body)
    }

    /// Starts a run and returns its id.
    async fn start(&self, body: &Value) -> String {
        let (status, run) = self.post("/v1/runs", body).await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        run["id"].as_str().unwrap().to_owned()
    }

    /// A caller-proposed mech_v1 version (a test plan added), stored and held for approval.
    async fn proposed_version(&self) -> (String, String) {
        let proposal = json!({
            "template": "mech_v1",
            "manufacturingContext": {"route": "vendor"},
            "targetMaturity": "physically_validated",
            "loadsAndUse": "20 kg shelf load",
            "operations": [{"op": "add_deliverable", "phase": "design", "value": "test_plan",
                            "rationale": "bench test before release"}],
        });
        let (status, body) = self.post("/v1/design-flows/propose", &proposal).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        (
            body["version_id"].as_str().unwrap().to_owned(),
            body["approvalId"].as_str().unwrap().to_owned(),
        )
    }

    /// A proposed version approved by bob (four eyes are off here; the approver is the key's).
    async fn approved_version(&self) -> String {
        let (version_id, approval_id) = self.proposed_version().await;
        let (status, decided) = self
            .post_as(
                BOB,
                &format!("/v1/approvals/{approval_id}/decision"),
                &json!({"decision": "approve"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{decided}");
        version_id
    }

    async fn flow_state(&self, run_id: &str) -> Value {
        let (status, body) = self.get(&format!("/v1/runs/{run_id}/flow-state")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    /// Waits until the run is parked at `phase`'s gate and the gate's hold is parked.
    async fn parked_at(&self, run_id: &str, phase: &str) -> Value {
        self.wait_for(run_id, &format!("parked at {phase}"), |s| {
            s["gate"]["phase"] == phase && s["gate"]["approval_id"].is_string()
        })
        .await
    }

    async fn wait_for(&self, run_id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let state = self.flow_state(run_id).await;
            if done(&state) {
                return state;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for run {run_id} {what}: {state}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn approve(&self, run_id: &str, phase: &str) -> Value {
        self.parked_at(run_id, phase).await;
        let (status, body) = self
            .post(
                &format!("/v1/runs/{run_id}/approval"),
                &json!({"decision": "approve", "gate_phase": phase, "reason": "looks right"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    /// Approves every gate of a design_v1-shaped run, in order, until it completes.
    async fn approve_through(&self, run_id: &str, gates: &[&str]) -> Value {
        for gate in gates {
            self.approve(run_id, gate).await;
        }
        self.wait_for(run_id, "completed", |s| s["status"] == "completed")
            .await
    }

    /// Every hold in the one approval ledger, as JSON.
    async fn holds(&self) -> Vec<Value> {
        use metaforge_ports::ApprovalLedger as _;
        self.approvals
            .list_recent(500)
            .await
            .unwrap()
            .into_iter()
            .map(|h| serde_json::to_value(h).unwrap())
            .collect()
    }

    /// No run and no gate hold was recorded.
    async fn nothing_recorded(&self) -> bool {
        self.runs.list(None).await.unwrap().is_empty()
            && self.holds().await.iter().all(|h| h["kind"] != "gate")
    }
}

const DESIGN_GATES: [&str; 4] = ["feasibility", "design", "simulation", "release"];
const MECH_GATES: [&str; 4] = ["feasibility", "design", "simulation", "release"];

#[tokio::test]
async fn a_run_starts_on_an_approved_version_and_pins_it_by_id_and_hash() {
    let rig = Rig::new().await;
    let version_id = rig.approved_version().await;
    let (_, version) = rig.get(&format!("/v1/design-flows/versions/{version_id}")).await;
    let (status, run) = rig
        .post(
            "/v1/runs",
            &json!({"flow_version_id": version_id, "project_id": "shelf"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_eq!(run["flow_engine"], "embedded");
    assert_eq!(run["intelligence"], "server");
    assert_eq!(run["flow_version_id"], version_id.as_str());
    assert_eq!(run["flow_content_hash"], version["version"]["content_hash"]);
    assert_eq!(run["flow_template_id"], "mech_v1");
    assert_eq!(run["flow_version"], "1.1.0");
    assert_eq!(run["project_id"], "shelf");
    let run_id = run["id"].as_str().unwrap();
    // The version's own phases are listed, and its added deliverable is required.
    let state = rig.parked_at(run_id, "feasibility").await;
    assert_eq!(state["live"], true);
    assert_eq!(state["flow_version_id"], version_id.as_str());
    let design = state["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "design")
        .unwrap();
    assert!(
        design["required_deliverables"]
            .as_array()
            .unwrap()
            .contains(&json!("test_plan")),
        "{design}"
    );
    let (status, listed) = rig.get("/v1/runs?project_id=shelf").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1, "{listed}");
    let (_, other) = rig.get("/v1/runs?project_id=other").await;
    assert_eq!(other["runs"], json!([]));
}

#[tokio::test]
async fn a_run_from_a_template_pins_one_approved_template_version_shared_by_every_such_run() {
    let rig = Rig::new().await;
    let first = rig.start(&json!({})).await;
    let (_, run) = rig.get(&format!("/v1/runs/{first}")).await;
    assert_eq!(run["flow_template_id"], "design_v1", "design_v1 is the default");
    let version_id = run["flow_version_id"].as_str().unwrap().to_owned();
    assert!(
        version_id.starts_with("template-design_v1-1.1.0-"),
        "{version_id}"
    );
    let (status, version) = rig.get(&format!("/v1/design-flows/versions/{version_id}")).await;
    assert_eq!(status, StatusCode::OK, "{version}");
    assert_eq!(version["version"]["origin"], "template");
    assert_eq!(version["version"]["status"], "approved");
    assert_eq!(version["version"]["approver"], "template");
    assert_eq!(run["flow_content_hash"], version["version"]["content_hash"]);

    let second = rig.start(&json!({"template_id": "design_v1"})).await;
    let (_, again) = rig.get(&format!("/v1/runs/{second}")).await;
    assert_eq!(again["flow_version_id"], version_id.as_str());
    let (_, mech) = rig.post("/v1/runs", &json!({"template_id": "mech_v1"})).await;
    assert_eq!(mech["flow_template_id"], "mech_v1");
    assert_ne!(mech["flow_version_id"], version_id.as_str());
}

#[tokio::test]
async fn an_unapproved_or_corrupt_version_is_refused_409_and_nothing_is_recorded() {
    let rig = Rig::new().await;
    let (proposed, _) = rig.proposed_version().await;
    let (status, err) = rig.post("/v1/runs", &json!({"flow_version_id": proposed})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(err["error"], "not_approved");
    assert_eq!(err["details"]["flow_version_id"], proposed.as_str());
    assert!(rig.nothing_recorded().await);

    let approved = rig.approved_version().await;
    rig.versions.corrupt(&approved, r#"{"id":"tampered"}"#);
    let (status, err) = rig.post("/v1/runs", &json!({"flow_version_id": approved})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(err["error"], "corrupt");
    assert!(rig.nothing_recorded().await);

    let (status, err) = rig
        .post("/v1/runs", &json!({"flow_version_id": "no-such-version"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(err["error"], "unknown_flow_version");
    assert_eq!(err["details"]["field"], "flow_version_id");
    let (status, err) = rig
        .post("/v1/runs", &json!({"template_id": "no_such_flow"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(err["error"], "unknown_template");
    let (_, runs) = rig.get("/v1/runs").await;
    assert_eq!(runs["runs"], json!([]), "no run was recorded: {runs}");
    assert!(rig.nothing_recorded().await);
}

#[tokio::test]
async fn a_bad_intelligence_is_422_naming_the_field_and_nothing_is_recorded() {
    let rig = Rig::new().await;
    // An empty or blank field is not the deployment default: it names no mode.
    for bad in ["model", "Server", "llm", "", " "] {
        let (status, err) = rig
            .post(
                "/v1/runs",
                &json!({"template_id": "design_v1", "intelligence": bad}),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {err}");
        assert_eq!(err["error"], "invalid_field");
        assert_eq!(err["details"]["field"], "intelligence");
        assert!(
            err["message"].as_str().unwrap().contains("server, client"),
            "{err}"
        );
    }
    let (status, err) = rig
        .post(
            "/v1/runs",
            &json!({"template_id": "design_v1", "approver": "mallory"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert!(rig.nothing_recorded().await);
    // Nothing at all, not even the template's version.
    assert!(
        metaforge_ports::FlowVersionStore::list(rig.versions.as_ref(), None)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_run_completes_through_human_gates_answered_over_the_approval_route_by_the_keys_identity() {
    let rig = Rig::new().await;
    let version_id = rig.approved_version().await;
    let run_id = rig.start(&json!({"flow_version_id": version_id})).await;
    let parked = rig.parked_at(&run_id, "feasibility").await;
    assert_eq!(parked["status"], "awaiting_approval");
    assert_eq!(parked["gate"]["ready"], true);
    assert_eq!(
        parked["gate"]["allowed"],
        json!(["approve", "reject", "retry", "rework"])
    );
    let (_, record) = rig.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(record["status"], "awaiting_approval");
    assert_eq!(
        record["approval_reason"], parked["gate"]["approval_reason"],
        "the record's approval reason is the gate's"
    );

    let done = rig.approve_through(&run_id, &MECH_GATES).await;
    assert!(
        done["phases"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["status"] == "passed"),
        "{done}"
    );
    let (_, record) = rig.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(record["status"], "completed");
    // Every gate hold was decided by the key's identity, never by a body field.
    let holds = rig.holds().await;
    let gates: Vec<&Value> = holds.iter().filter(|h| h["kind"] == "gate").collect();
    assert_eq!(gates.len(), MECH_GATES.len(), "{holds:?}");
    assert!(
        gates
            .iter()
            .all(|h| h["approver"] == "ana" && h["status"] == "approved"),
        "{gates:?}"
    );
}

#[tokio::test]
async fn retry_takes_a_reason_to_the_phase_and_rework_reruns_the_phase_it_names() {
    let rig = Rig::new().await;
    let run_id = rig.start(&json!({"template_id": "design_v1"})).await;
    rig.approve(&run_id, "feasibility").await;
    rig.parked_at(&run_id, "design").await;
    let path = format!("/v1/runs/{run_id}/approval");

    // A retry without a reason is refused naming the field; nothing moves.
    let (status, err) = rig.post(&path, &json!({"decision": "retry"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(err["details"]["field"], "reason");
    let (status, _) = rig
        .post(&path, &json!({"decision": "retry", "reason": "add fillets"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let state = rig.parked_at(&run_id, "design").await;
    let design = state["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "design")
        .unwrap();
    assert_eq!(design["attempt"], 2, "{design}");
    let retried = rig
        .brain
        .briefs()
        .into_iter()
        .rfind(|b| b.phase == "design")
        .unwrap();
    let feedback = retried.feedback.unwrap();
    assert_eq!(feedback.reason, "add fillets");
    assert_eq!(feedback.approver, "ana");

    // A rework must name an earlier phase; naming one re-runs it and every later phase.
    let (status, err) = rig
        .post(
            &path,
            &json!({"decision": "rework", "reason": "loads changed", "phase": "release"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(err["details"]["field"], "phase");
    let (status, err) = rig
        .post(&path, &json!({"decision": "approve", "phase": "feasibility"}))
        .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "only a rework takes a phase: {err}"
    );
    let (status, body) = rig
        .post(
            &path,
            &json!({"decision": "rework", "reason": "loads changed", "phase": "feasibility"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let state = rig.parked_at(&run_id, "feasibility").await;
    let feasibility = state["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "feasibility")
        .unwrap();
    assert_eq!(feasibility["attempt"], 2, "{feasibility}");
    let reworked = rig
        .brain
        .briefs()
        .into_iter()
        .rfind(|b| b.phase == "feasibility")
        .unwrap();
    assert_eq!(reworked.feedback.unwrap().reason, "loads changed");
    let design = state["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "design")
        .unwrap();
    assert_eq!(design["status"], "pending", "later phases run again: {design}");
}

#[tokio::test]
async fn a_decision_the_gate_does_not_allow_or_for_a_gate_not_open_is_409_naming_the_allowed_ones() {
    // The design phase records nothing: its gate is not ready and allows no approve.
    let rig = Rig::with_brain(ScriptedPhaseBrain::new().with(
        "design",
        vec![BrainStep::Finish {
            summary: "described a CAD model, recorded none".into(),
            deliverables: Vec::new(),
        }],
    ))
    .await;
    let run_id = rig.start(&json!({})).await;
    rig.approve(&run_id, "feasibility").await;
    let parked = rig.parked_at(&run_id, "design").await;
    assert_eq!(parked["gate"]["ready"], false);
    assert_eq!(parked["gate"]["allowed"], json!(["reject", "retry", "rework"]));
    let path = format!("/v1/runs/{run_id}/approval");
    let (status, err) = rig.post(&path, &json!({"decision": "approve"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(err["error"], "not_ready");
    assert_eq!(err["details"]["allowed"], json!(["reject", "retry", "rework"]));
    assert_eq!(err["details"]["open_gate"], "design");
    assert!(
        err["details"]["findings"][0]
            .as_str()
            .unwrap()
            .contains("cad_model"),
        "{err}"
    );
    // An answer for a gate that is not open names the open one and what it allows.
    let (status, err) = rig
        .post(&path, &json!({"decision": "reject", "gate_phase": "release"}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(err["error"], "no_open_gate");
    assert_eq!(err["details"]["open_gate"], "design");
    assert_eq!(err["details"]["allowed"], json!(["reject", "retry", "rework"]));
    // Nothing moved.
    let still = rig.parked_at(&run_id, "design").await;
    assert_eq!(still["gate"]["approval_id"], parked["gate"]["approval_id"]);
    // A body naming an approver is refused: the approver is the key's identity.
    let (status, _) = rig
        .post(&path, &json!({"decision": "reject", "approver": "mallory"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_gate_is_listed_as_kind_gate_and_its_generic_decision_points_at_the_run() {
    let rig = Rig::new().await;
    let run_id = rig.start(&json!({})).await;
    let parked = rig.parked_at(&run_id, "feasibility").await;
    let approval_id = parked["gate"]["approval_id"].as_str().unwrap();
    let (_, pending) = rig.get("/v1/approvals").await;
    let hold = pending["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["id"] == approval_id)
        .cloned()
        .unwrap();
    assert_eq!(hold["kind"], "gate", "{hold}");
    let (status, err) = rig
        .post(
            &format!("/v1/approvals/{approval_id}/decision"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(err["error"], "gate_decided_through_run");
    assert_eq!(err["details"]["run_id"], run_id.as_str());
    assert_eq!(err["details"]["phase"], "feasibility");
    assert_eq!(err["details"]["route"], format!("/v1/runs/{run_id}/approval"));
    let (_, still) = rig.get(&format!("/v1/approvals/{approval_id}")).await;
    assert_eq!(still["status"], "awaiting_approval", "{still}");
}

#[tokio::test]
async fn flow_state_with_the_engine_stopped_reads_not_live_and_every_status_unknown() {
    let rig = Rig::new().await;
    let run_id = rig.start(&json!({})).await;
    rig.parked_at(&run_id, "feasibility").await;
    rig.engine.shutdown().await;
    let state = rig.flow_state(&run_id).await;
    assert_eq!(state["live"], false, "{state}");
    assert!(state["reason"].as_str().unwrap().contains("stopped"), "{state}");
    assert_eq!(state["status"], "unknown");
    assert!(state["gate"].is_null());
    let phases = state["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 7, "the run's shape still lists: {state}");
    assert!(
        phases.iter().all(|p| p["status"] == "unknown"),
        "never pending: {state}"
    );
    // Starting or answering is 503 while the engine is down; the health report says so.
    let (status, err) = rig.post("/v1/runs", &json!({})).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{err}");
    let (status, _) = rig
        .post(
            &format!("/v1/runs/{run_id}/approval"),
            &json!({"decision": "approve", "gate_phase": "feasibility"}),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (_, health) = rig.get("/health").await;
    assert_eq!(health["design_flow_worker"]["status"], "absent", "{health}");
    assert_eq!(health["status"], "degraded");
}

#[tokio::test]
async fn a_run_whose_version_cannot_be_read_lists_no_phases_and_says_so() {
    let rig = Rig::new().await;
    let version_id = rig.approved_version().await;
    let run_id = rig.start(&json!({"flow_version_id": version_id})).await;
    rig.parked_at(&run_id, "feasibility").await;
    rig.engine.shutdown().await;
    rig.versions.corrupt(&version_id, "{}");
    let state = rig.flow_state(&run_id).await;
    assert_eq!(state["phases"], json!([]), "{state}");
    assert!(
        state["phases_unavailable"]
            .as_str()
            .unwrap()
            .contains(&version_id),
        "{state}"
    );
    assert_eq!(state["flow_version_id"], version_id.as_str());
}

#[tokio::test]
async fn a_run_is_canceled_once_and_never_reopens() {
    let rig = Rig::new().await;
    let run_id = rig.start(&json!({})).await;
    let parked = rig.parked_at(&run_id, "feasibility").await;
    let path = format!("/v1/runs/{run_id}/cancel");
    let (status, state) = rig.post(&path, &json!({"reason": "wrong shelf"})).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    assert_eq!(state["status"], "canceled");
    let (_, record) = rig.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(record["status"], "canceled");
    let (_, hold) = rig
        .get(&format!(
            "/v1/approvals/{}",
            parked["gate"]["approval_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(hold["status"], "canceled", "the gate hold closed: {hold}");
    let (status, err) = rig.post(&path, &json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(err["error"], "terminal");
    let (status, err) = rig
        .post(
            &format!("/v1/runs/{run_id}/approval"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(err["details"]["allowed"], json!([]));
    let (status, _) = rig.post("/v1/runs/no-such-run/cancel", &json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// The SSE frames of a finished stream as (id, event, data).
async fn sse(rig: &Rig, run_id: &str, last_event_id: Option<&str>) -> Vec<(String, String, Value)> {
    let mut request = Request::builder()
        .uri(format!("/v1/runs/{run_id}/events"))
        .header("x-api-key", ANA);
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let response = rig
        .app
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let collected = tokio::time::timeout(WAIT, response.into_body().collect()).await;
    assert!(collected.is_ok(), "the stream ends when the run has ended");
    let body = collected.unwrap().unwrap().to_bytes();
    let text = String::from_utf8(body.to_vec()).unwrap();
    text.split("\n\n")
        .filter(|frame| frame.contains("data:"))
        .map(|frame| {
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_owned())
                    .unwrap_or_default()
            };
            (
                field("id:"),
                field("event:"),
                serde_json::from_str(&field("data:")).unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_runs_events_stream_in_order_with_seq_index_ids_and_resume_after_last_event_id() {
    let rig = Rig::new().await;
    let run_id = rig.start(&json!({})).await;
    rig.approve_through(&run_id, &DESIGN_GATES).await;
    let all = sse(&rig, &run_id, None).await;
    let first = all.first().unwrap();
    assert_eq!((first.0.as_str(), first.1.as_str()), ("1.0", "run.started"));
    assert_eq!(all.last().unwrap().1, "run.completed");
    let keys: Vec<(u64, u32)> = all
        .iter()
        .map(|(id, _, _)| metaforge_app::runs::parse_event_id(id).unwrap())
        .collect();
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "in order, each once: {keys:?}"
    );
    for (id, event, data) in &all {
        assert_eq!(data["kind"], event.as_str());
        assert_eq!(format!("{}.{}", data["seq"], data["index"]), *id);
    }
    let gates_opened = all.iter().filter(|(_, e, _)| e == "run.gate_opened").count();
    assert_eq!(gates_opened, DESIGN_GATES.len());

    // Reconnecting after an event resumes right after it.
    let middle = &all[all.len() / 2].0;
    let resumed = sse(&rig, &run_id, Some(middle)).await;
    assert_eq!(resumed, all[all.len() / 2 + 1..].to_vec());
    // A Last-Event-ID that is not one of ours is refused naming the header.
    let (status, _, err) = send(
        &rig.app,
        Request::builder()
            .uri(format!("/v1/runs/{run_id}/events"))
            .header("x-api-key", ANA)
            .header("last-event-id", "yesterday")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(err["details"]["field"], "last-event-id");
}

/// Records a work product for `phase` on the run's twin branch, as a client's twin tools would.
async fn record_work(rig: &Rig, run_id: &str, phase: &str, artifact: &str) {
    let mut properties = serde_json::Map::new();
    properties.insert("artifact".into(), json!(artifact));
    properties.insert("phase".into(), json!(phase));
    properties.insert("run_id".into(), json!(run_id));
    rig.twin
        .commit(TwinCommitRequest {
            id: format!("c-{phase}-{artifact}"),
            branch: run_branch(run_id),
            expected_head: None,
            message: "work".into(),
            author: "client".into(),
            at: rig.clock.now(),
            changes: TwinChangeSet {
                upsert_nodes: vec![TwinNode::new(
                    format!("wp-{phase}-{artifact}"),
                    TwinNodeType::WorkProduct,
                    properties,
                )],
                ..TwinChangeSet::default()
            },
        })
        .await
        .unwrap();
}

/// Waits for the run's open client task of `phase` and returns its id.
async fn open_task(rig: &Rig, run_id: &str, phase: &str) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, body) = rig
            .get(&format!("/v1/client-tasks?run_id={run_id}&status=open"))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        if let Some(task) = body["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["phase"] == phase)
        {
            return task["id"].as_str().unwrap().to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no open task for {phase}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_client_mode_runs_tasks_are_listed_claimed_and_submitted_over_client_tasks() {
    let rig = Rig::new().await;
    let (_, run) = rig
        .post(
            "/v1/runs",
            &json!({"template_id": "design_v1", "intelligence": "client"}),
        )
        .await;
    assert_eq!(run["intelligence"], "client", "{run}");
    let run_id = run["id"].as_str().unwrap().to_owned();
    for phase in ["intent", "needs", "requirements", "feasibility"] {
        let id = open_task(&rig, &run_id, phase).await;
        assert_eq!(id, format!("{run_id}:{phase}:1"));
        let (status, task) = rig.get(&format!("/v1/client-tasks/{id}")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(task["brief"]["phase"], phase, "{task}");
        let (status, claimed) = rig
            .post(&format!("/v1/client-tasks/{id}/claim"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::OK, "{claimed}");
        assert_eq!(claimed["claimed_by"], "ana", "the claimant is the key's identity");
        let (status, err) = rig
            .post_as(BOB, &format!("/v1/client-tasks/{id}/claim"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "one claim wins: {err}");
        let (status, err) = rig
            .post_as(
                BOB,
                &format!("/v1/client-tasks/{id}/submit"),
                &json!({"summary": "not mine"}),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "only the claimant submits: {err}");
        let (status, err) = rig
            .post(&format!("/v1/client-tasks/{id}/submit"), &json!({"summary": " "}))
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
        assert_eq!(err["details"]["field"], "summary");
        if phase == "feasibility" {
            record_work(&rig, &run_id, phase, "feasibility_report").await;
        }
        let (status, submitted) = rig
            .post(
                &format!("/v1/client-tasks/{id}/submit"),
                &json!({"summary": format!("{phase} done"), "details": {"notes": 1}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{submitted}");
        assert_eq!(submitted["status"], "submitted");
        assert_eq!(submitted["submission"]["summary"], format!("{phase} done"));
    }
    // The gate checks what the twin recorded: the feasibility report is there, so it is ready.
    let parked = rig.parked_at(&run_id, "feasibility").await;
    assert_eq!(parked["gate"]["ready"], true, "{parked}");
    let feasibility = parked["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "feasibility")
        .unwrap();
    assert_eq!(feasibility["deliverables"], json!(["feasibility_report"]));
    assert_eq!(feasibility["summary"], "feasibility done");
    let (status, _) = rig.get("/v1/client-tasks?status=lost").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = rig.get("/v1/client-tasks/no:such:1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

fn usage_event(run_id: &str, phase: &str, role: &str, model: &str, prompt: u64) -> UsageEvent {
    UsageEvent {
        run_id: Some(run_id.to_owned()),
        phase: Some(phase.to_owned()),
        role: Some(role.to_owned()),
        provider: "anthropic".into(),
        model: model.to_owned(),
        prompt_tokens: Some(prompt),
        completion_tokens: Some(10),
        cost_usd: Some(0.01),
        at: Some(ManualClock::fixed().now()),
        ..UsageEvent::default()
    }
}

#[tokio::test]
async fn a_runs_usage_is_totalled_by_phase_role_and_model_from_the_events_carrying_its_id() {
    let rig = Rig::new().await;
    let run_id = rig.start(&json!({})).await;
    let other = rig.start(&json!({})).await;
    for event in [
        usage_event(&run_id, "feasibility", "phase_brain", "claude-opus-4-8", 100),
        usage_event(
            &run_id,
            "feasibility",
            "evaluator",
            "claude-haiku-4-5-20251001",
            40,
        ),
        usage_event(&run_id, "design", "phase_brain", "claude-opus-4-8", 200),
        usage_event(&other, "design", "phase_brain", "claude-opus-4-8", 9_999),
    ] {
        rig.usage.record(event).await.unwrap();
    }
    let (status, run) = rig.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(status, StatusCode::OK);
    let usage = &run["usage"];
    assert_eq!(usage["calls"], 3, "{usage}");
    assert_eq!(usage["prompt_tokens"], 340);
    assert_eq!(usage["by_phase"]["feasibility"]["calls"], 2);
    assert_eq!(usage["by_phase"]["design"]["prompt_tokens"], 200);
    assert_eq!(usage["by_role"]["phase_brain"]["calls"], 2);
    assert_eq!(usage["by_role"]["evaluator"]["calls"], 1);
    assert_eq!(
        usage["by_model"]["anthropic:claude-opus-4-8"]["prompt_tokens"],
        300
    );
    assert!(run["usage_unavailable"].is_null());
    let state = rig.flow_state(&run_id).await;
    assert_eq!(state["usage"], *usage, "flow-state carries the same totals");
    // A run with no calls has null cost, never 0.
    let third = rig.start(&json!({})).await;
    let (_, none) = rig.get(&format!("/v1/runs/{third}")).await;
    assert_eq!(none["usage"]["calls"], 0);
    assert!(none["usage"]["cost_usd"].is_null(), "{none}");
}

#[tokio::test]
async fn health_reports_the_design_flow_worker_and_the_model_routing_verdict() {
    let rig = Rig::new().await;
    let (_, health) = rig.get("/health").await;
    assert_eq!(
        health["design_flow_worker"],
        json!({"status": "ok", "engine": "embedded"}),
        "{health}"
    );
    // The test harness routes summarisation to a provider without credentials.
    assert_eq!(health["model_routing"]["status"], "degraded");
    let (_, routing) = rig.get("/v1/harness/routing").await;
    assert_eq!(
        health["model_routing"]["problems"], routing["problems"],
        "one computation"
    );
    assert_eq!(health["status"], "ok", "routing is informational: {health}");
    let (_, _, public) = send(&rig.app, get("/health", None)).await;
    assert_eq!(public["design_flow_worker"], json!({"status": "ok"}));
    assert_eq!(public["model_routing"], json!({"status": "degraded"}));
}

#[tokio::test]
async fn without_a_run_service_the_run_routes_answer_503_naming_why() {
    let app = super::common::app_with("ana:sk-ana-0001", None);
    for (method, path) in [
        ("POST", "/v1/runs"),
        ("GET", "/v1/runs"),
        ("GET", "/v1/runs/r1/flow-state"),
        ("GET", "/v1/client-tasks"),
    ] {
        let request = if method == "POST" {
            post(path, &json!({}), Some(ANA))
        } else {
            get(path, Some(ANA))
        };
        let (status, _, err) = send(&app, request).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {err}");
        assert!(
            err["message"].as_str().unwrap().contains("no flow engine"),
            "{err}"
        );
    }
    let (_, _, health) = send(&app, get("/health", Some(ANA))).await;
    assert_eq!(health["design_flow_worker"]["status"], "absent");
}

#[tokio::test]
async fn the_openapi_document_lists_every_run_and_client_task_route_with_what_it_answers() {
    let app = super::common::app_with("", None);
    let (_, _, doc) = send(&app, get("/openapi.json", None)).await;
    for (path, method, codes) in [
        (
            "/v1/runs",
            "post",
            &["201", "400", "401", "409", "422", "503"][..],
        ),
        ("/v1/runs", "get", &["200", "400", "401", "503"][..]),
        ("/v1/runs/{id}", "get", &["200", "401", "404", "503"][..]),
        (
            "/v1/runs/{id}/flow-state",
            "get",
            &["200", "401", "404", "503"][..],
        ),
        (
            "/v1/runs/{id}/approval",
            "post",
            &["200", "400", "401", "404", "409", "422", "503"][..],
        ),
        (
            "/v1/runs/{id}/cancel",
            "post",
            &["200", "400", "401", "404", "409", "503"][..],
        ),
        (
            "/v1/runs/{id}/events",
            "get",
            &["200", "400", "401", "404", "503"][..],
        ),
        ("/v1/client-tasks", "get", &["200", "400", "401", "503"][..]),
        ("/v1/client-tasks/{id}", "get", &["200", "401", "404", "503"][..]),
        (
            "/v1/client-tasks/{id}/claim",
            "post",
            &["200", "401", "404", "409", "503"][..],
        ),
        (
            "/v1/client-tasks/{id}/submit",
            "post",
            &["200", "400", "401", "404", "409", "422", "503"][..],
        ),
    ] {
        let responses = &doc["paths"][path][method]["responses"];
        for code in codes {
            assert!(
                responses[*code].is_object(),
                "{method} {path} documents {code}: {responses}"
            );
        }
    }
    let detail = &doc["components"]["schemas"]["RunDetail"];
    assert!(detail.is_object(), "RunDetail is a component");
}

/// The run's console page as a signed-in person sees it.
async fn console_page(rig: &Rig, path: &str) -> (StatusCode, String) {
    let (cookie, _) = super::console::sign_in(&rig.app, ANA).await;
    let request = Request::builder()
        .uri(path)
        .header("cookie", cookie)
        .body(Body::empty())
        .unwrap();
    let (status, _, page) = super::console::fetch(&rig.app, request).await;
    (status, page)
}

#[tokio::test]
async fn the_console_draws_a_parked_run_with_its_gate_card_and_an_outage_as_a_banner_with_every_status_unknown()
 {
    let rig = Rig::new().await;
    let run_id = rig.start(&json!({})).await;
    rig.parked_at(&run_id, "feasibility").await;
    let (status, page) = console_page(&rig, &format!("/runs/{run_id}")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains("class=\"node s-passed\" data-phase=\"intent\""),
        "{page}"
    );
    assert!(
        page.contains("class=\"node s-awaiting_gate\" data-phase=\"feasibility\""),
        "{page}"
    );
    assert!(
        page.contains("class=\"gatecard\""),
        "the gate card is on its node: {page}"
    );
    assert!(
        page.contains(&format!("action=\"/runs/{run_id}/gate\"")),
        "answerable there: {page}"
    );
    assert!(!page.contains("class=\"banner\""), "live: no outage banner");
    assert!(
        page.contains("not recorded"),
        "a lane with nothing captured says so: {page}"
    );
    rig.engine.shutdown().await;
    let (status, page) = console_page(&rig, &format!("/runs/{run_id}/graph")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("class=\"banner\" role=\"alert\""), "{page}");
    assert!(page.contains("Live state unavailable"), "{page}");
    assert!(
        !page.contains("s-pending") && !page.contains("s-passed"),
        "never a known status: {page}"
    );
    assert_eq!(
        page.matches("class=\"node s-unknown\"").count(),
        7,
        "every phase still listed, unknown: {page}"
    );
    assert!(
        !page.contains("class=\"gatecard\""),
        "no gate is answerable from an unknown state"
    );
}
