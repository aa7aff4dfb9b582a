//! The run convention end to end on the embedded engine: a phase brain that writes each required
//! deliverable as the run's worker (scoped by `EngineRunScopes` asking the real engine) lands it on
//! `run/<id>` stamped with the run and phase, `recorded_deliverables` is what the gate reads, and
//! the completed run's branch is in `main`.

#![expect(
    clippy::unwrap_used,
    reason = "integration tests: a failed expectation is a failed test"
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use metaforge_app::runs::{EmbeddedEngine, EngineOptions, EnginePorts, PhaseBrains};
use metaforge_app::twin::{
    EngineRunScopes, LateRunScopes, RunMerge, RunScopes, TwinService, WorkProductInput, WriteTarget,
    merge_run_branch, recorded_deliverables,
};
use metaforge_domain::flow::{Flow, freeze, template};
use metaforge_ports::{
    CallerClass, CallerContext, Clock, FlowEngine, FlowVersionDecision, FlowVersionOrigin, FlowVersionRecord,
    FlowVersionStatus, FlowVersionStore, InputChannel, IntelligenceMode, PhaseBrain, PhaseBrief,
    PhaseFailure, PhaseFailureKind, PhaseOutcome, RunSettings, RunStatus, StartRun, TWIN_MAIN_BRANCH,
    TwinNodeQuery, TwinNodeType, TwinStore, sha256_hex,
};
use metaforge_test_support::doubles::{
    MemoryApprovalLedger, MemoryClientTaskStore, MemoryFlowVersionStore, MemoryRunLedger, MemoryTwinStore,
};
use metaforge_test_support::{ManualClock, SequentialIds};

/// A brain that works as the run's service worker: asks the scopes where it writes (never the
/// brief), commits every required deliverable there, and reports what the twin recorded.
struct TwinWorker {
    twin: Arc<TwinService>,
    scopes: Arc<dyn RunScopes>,
    seen: Mutex<Vec<(String, Option<String>)>>,
}

fn retryable(reason: String) -> PhaseFailure {
    PhaseFailure {
        kind: PhaseFailureKind::Retryable,
        reason,
    }
}

#[async_trait]
impl PhaseBrain for TwinWorker {
    async fn run_phase(&self, brief: PhaseBrief) -> Result<PhaseOutcome, PhaseFailure> {
        let worker = CallerContext {
            class: CallerClass::Service,
            session: Some(brief.run_id.clone()),
            input_channel: InputChannel::None,
            identity: None,
        };
        let scope = self
            .scopes
            .scope_of(&worker)
            .await
            .map_err(|e| retryable(e.to_string()))?;
        self.seen
            .lock()
            .unwrap()
            .push((brief.phase.clone(), scope.as_ref().map(|s| s.phase.clone())));
        let Some(scope) = scope else {
            return Err(retryable("no run scope confirmed".into()));
        };
        let target = WriteTarget::Run(scope);
        for artifact in &brief.required_deliverables {
            let content = format!("{artifact} of {}", brief.phase);
            self.twin
                .commit_work_product(
                    &target,
                    &format!("service:{}", brief.run_id),
                    &WorkProductInput {
                        artifact: artifact.clone(),
                        title: format!("{} ({})", artifact, brief.phase),
                        content: Some(content),
                        ..WorkProductInput::default()
                    },
                )
                .await
                .map_err(|e| retryable(e.to_string()))?;
        }
        let deliverables = recorded_deliverables(self.twin.store().as_ref(), &brief.run_id, &brief.phase)
            .await
            .map_err(|e| retryable(e.to_string()))?;
        Ok(PhaseOutcome {
            summary: format!("recorded {}", deliverables.join(", ")),
            deliverables,
            usage: Vec::new(),
        })
    }
}

/// mech_v1 with every gate an auto-approved checkpoint: it passes only when its deliverables are
/// recorded, and nobody has to answer it.
fn unattended_mech() -> Flow {
    let mut flow = template("mech_v1").unwrap();
    for phase in &mut flow.phases {
        if let Some(gate) = phase.gate.as_mut() {
            gate.auto_approve = true;
        }
    }
    flow
}

#[tokio::test]
async fn a_run_whose_worker_records_its_deliverables_on_its_branch_completes_into_main() {
    let clock = Arc::new(ManualClock::fixed());
    let runs = Arc::new(MemoryRunLedger::new());
    let versions = Arc::new(MemoryFlowVersionStore::new());
    let tasks = Arc::new(MemoryClientTaskStore::new(runs.clone()));
    let store: Arc<dyn TwinStore> = Arc::new(MemoryTwinStore::new());
    let twin = Arc::new(TwinService::new(
        Arc::clone(&store),
        clock.clone(),
        Arc::new(SequentialIds::new("twin")),
    ));
    let late = Arc::new(LateRunScopes::new());
    let brain = Arc::new(TwinWorker {
        twin: Arc::clone(&twin),
        scopes: late.clone(),
        seen: Mutex::new(Vec::new()),
    });
    let engine = Arc::new(EmbeddedEngine::new(
        EnginePorts {
            runs: runs.clone(),
            versions: versions.clone(),
            approvals: Arc::new(MemoryApprovalLedger::new(clock.clone())),
            tasks: tasks.clone(),
            twin: Arc::clone(&store),
            bus: Arc::new(metaforge_adapters_store::InProcessEventBus::new()),
            clock: clock.clone(),
            ids: Arc::new(SequentialIds::new("evt")),
        },
        PhaseBrains {
            server: brain.clone(),
            client: brain.clone(),
        },
        EngineOptions {
            deadline_tick: Duration::from_millis(10),
            retry_delay: Duration::ZERO,
            effect_retry: Duration::from_millis(20),
        },
    ));
    assert!(late.set(Arc::new(EngineRunScopes::new(
        engine.clone() as Arc<dyn FlowEngine>,
        Some(tasks)
    ))));
    engine.resume_all().await.unwrap();

    let flow = unattended_mech();
    let frozen = freeze(&flow).unwrap();
    versions
        .save(FlowVersionRecord {
            id: "v1".into(),
            template_id: flow.id.clone(),
            template_version: flow.version.clone(),
            status: FlowVersionStatus::Proposed,
            content_hash: sha256_hex(&frozen),
            frozen,
            origin: FlowVersionOrigin::Server,
            approval_id: None,
            approver: None,
            created_at: clock.now(),
            decided_at: None,
        })
        .await
        .unwrap();
    let version = versions
        .decide(
            "v1",
            FlowVersionDecision {
                status: FlowVersionStatus::Approved,
                approver: "ana".into(),
                approval_id: None,
                at: clock.now(),
            },
        )
        .await
        .unwrap();
    engine
        .start(StartRun {
            run_id: "run-1".into(),
            project_id: None,
            intelligence: IntelligenceMode::Server,
            version,
            settings: RunSettings::default(),
        })
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let done = loop {
        let state = engine.state("run-1").await.unwrap().state.unwrap();
        let main_has_work = store.log(TWIN_MAIN_BRANCH).await.is_ok_and(|l| !l.is_empty());
        if state.status.is_terminal() && main_has_work {
            break state;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run did not complete and merge: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);

    // Every phase's worker was scoped to exactly the phase the engine had in flight.
    let seen = brain.seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for (phase, scoped) in &seen {
        assert_eq!(scoped.as_deref(), Some(phase.as_str()));
    }
    // Each phase recorded what its gate required, on the run's branch, stamped with run and phase.
    for phase in flow.phases.iter().filter(|p| !p.required_deliverables.is_empty()) {
        let mut required = phase.required_deliverables.clone();
        required.sort();
        assert_eq!(
            recorded_deliverables(store.as_ref(), "run-1", &phase.id)
                .await
                .unwrap(),
            required,
            "{}",
            phase.id
        );
    }
    // The completed run's branch is in main: main holds every work product, and merging again
    // changes nothing.
    let on_main = store
        .find_nodes(
            TWIN_MAIN_BRANCH,
            &TwinNodeQuery {
                node_type: Some(TwinNodeType::WorkProduct),
                property: None,
            },
        )
        .await
        .unwrap();
    let recorded: usize = flow.phases.iter().map(|p| p.required_deliverables.len()).sum();
    assert_eq!(on_main.len(), recorded);
    assert!(on_main.iter().all(|n| n.properties["run_id"] == "run-1"));
    assert!(
        store
            .diff(TWIN_MAIN_BRANCH, "run/run-1")
            .await
            .unwrap()
            .nodes_added
            .is_empty()
    );
    assert!(matches!(
        merge_run_branch(store.as_ref(), "run-1").await.unwrap(),
        RunMerge::Merged { .. }
    ));
    // A finished run grants its worker no scope any more.
    let after = late
        .scope_of(&CallerContext {
            class: CallerClass::Service,
            session: Some("run-1".into()),
            input_channel: InputChannel::None,
            identity: None,
        })
        .await
        .unwrap();
    assert_eq!(after, None);
    engine.shutdown().await;
}
