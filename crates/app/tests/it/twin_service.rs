//! The twin as the record of a run's work (`app::twin`) over the embedded SQLite twin and the
//! in-memory double alike: a run's commits land on `run/<id>` (created from `main` on its first
//! write) stamped with the run and phase, `recorded_deliverables` lists one phase's artifacts,
//! merging fast-forwards `main` and is refused (changing nothing) once `main` moved, and bad input
//! writes nothing. Also the engine-backed run scopes.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers and doubles outside #[test] fns: a surprise must fail the test loudly"
)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use metaforge_adapters_store::SqliteTwinStore;
use metaforge_app::twin::{
    DecisionInput, EngineRunScopes, LateRunScopes, LinkInput, NodeFilter, RunMerge, RunScope, RunScopes,
    TwinError, TwinService, WorkProductInput, WriteTarget, merge_run_branch, recorded_deliverables,
};
use metaforge_ports::{
    CallerClass, CallerContext, ClientTaskStore, EdgeDirection, FlowEngine, FlowEngineKind, FlowRef,
    GateAnswer, InputChannel, IntelligenceMode, PhaseState, PhaseStatus, PortError, PortErrorKind, RunLedger,
    RunRecord, RunSettings, RunState, RunStatus, RunView, StartRun, TWIN_MAIN_BRANCH, TwinEdgeType,
    TwinNodeType, TwinStore, sha256_hex,
};
use metaforge_test_support::doubles::{MemoryClientTaskStore, MemoryRunLedger, MemoryTwinStore};
use metaforge_test_support::{ManualClock, SequentialIds};
use serde_json::{Value, json};

/// One engine under test; the temp dir lives as long as the SQLite file is used.
struct Engine {
    name: &'static str,
    store: Arc<dyn TwinStore>,
    service: TwinService,
    _dir: Option<tempfile::TempDir>,
}

async fn engines() -> Vec<Engine> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn TwinStore> =
        Arc::new(SqliteTwinStore::open(&dir.path().join("twin.db")).await.unwrap());
    let memory: Arc<dyn TwinStore> = Arc::new(MemoryTwinStore::new());
    [("sqlite", sqlite, Some(dir)), ("memory", memory, None)]
        .into_iter()
        .map(|(name, store, dir)| Engine {
            name,
            service: TwinService::new(
                Arc::clone(&store),
                Arc::new(ManualClock::fixed()),
                Arc::new(SequentialIds::new(name)),
            ),
            store,
            _dir: dir,
        })
        .collect()
}

fn run(run_id: &str, phase: &str) -> WriteTarget {
    WriteTarget::Run(RunScope {
        run_id: run_id.to_owned(),
        phase: phase.to_owned(),
    })
}

fn product(artifact: &str, content: &str) -> WorkProductInput {
    WorkProductInput {
        artifact: artifact.to_owned(),
        title: format!("the {artifact}"),
        content: Some(content.to_owned()),
        ..WorkProductInput::default()
    }
}

async fn heads(store: &dyn TwinStore) -> BTreeMap<String, Option<String>> {
    store
        .branches()
        .await
        .unwrap()
        .into_iter()
        .map(|b| (b.name, b.head))
        .collect()
}

#[tokio::test]
async fn a_runs_commit_lands_on_its_branch_created_from_main_stamped_with_run_and_phase() {
    for e in engines().await {
        let base = e
            .service
            .commit_work_product(&WriteTarget::Main, "local", &product("requirements", "R1"))
            .await
            .unwrap();
        assert_eq!(base.branch, TWIN_MAIN_BRANCH);
        let done = e
            .service
            .commit_work_product(
                &run("r1", "design"),
                "service:r1",
                &product("cad_model", "solid bracket"),
            )
            .await
            .unwrap();
        assert_eq!(done.branch, "run/r1", "{}", e.name);
        let node = e.store.node("run/r1", &done.node.id).await.unwrap();
        assert_eq!(node.node_type, TwinNodeType::WorkProduct);
        assert_eq!(node.properties["artifact"], "cad_model");
        assert_eq!(node.properties["run_id"], "r1");
        assert_eq!(node.properties["phase"], "design");
        assert_eq!(
            node.properties["content_hash"],
            json!(sha256_hex("solid bracket"))
        );
        assert_eq!(node, done.node, "{}: the answer is the node as stored", e.name);
        // The branch started from main: main's node is there, and main does not see the run's.
        assert!(e.store.node("run/r1", &base.node.id).await.is_ok(), "{}", e.name);
        assert_eq!(
            e.store
                .node(TWIN_MAIN_BRANCH, &done.node.id)
                .await
                .unwrap_err()
                .kind,
            PortErrorKind::NotFound
        );
        let log = e.store.log("run/r1").await.unwrap();
        assert_eq!(log[0].author, "service:r1");
        assert_eq!(
            log[1].id, base.commit.id,
            "{}: run/r1 branched at main's head",
            e.name
        );
    }
}

#[tokio::test]
async fn recorded_deliverables_lists_only_that_phases_artifacts_on_that_runs_branch() {
    for e in engines().await {
        let s = &e.service;
        s.commit_work_product(&run("r1", "design"), "svc", &product("cad_model", "a"))
            .await
            .unwrap();
        s.commit_work_product(&run("r1", "design"), "svc", &product("drawing", "b"))
            .await
            .unwrap();
        s.commit_work_product(&run("r1", "design"), "svc", &product(" cad_model ", "c"))
            .await
            .unwrap();
        s.commit_work_product(&run("r1", "verify"), "svc", &product("simulation_result", "d"))
            .await
            .unwrap();
        s.commit_work_product(&run("r2", "design"), "svc", &product("bom", "e"))
            .await
            .unwrap();
        s.commit_work_product(&WriteTarget::Main, "local", &product("test_plan", "f"))
            .await
            .unwrap();
        s.record_decision(
            &run("r1", "design"),
            "svc",
            &DecisionInput {
                decision: "aluminium".into(),
                rationale: "stiffness per gram".into(),
                ..DecisionInput::default()
            },
        )
        .await
        .unwrap();
        let store = e.store.as_ref();
        assert_eq!(
            recorded_deliverables(store, "r1", "design").await.unwrap(),
            ["cad_model", "drawing"],
            "{}",
            e.name
        );
        assert_eq!(
            recorded_deliverables(store, "r1", "verify").await.unwrap(),
            ["simulation_result"]
        );
        assert_eq!(
            recorded_deliverables(store, "r2", "design").await.unwrap(),
            ["bom"]
        );
        assert!(
            recorded_deliverables(store, "r1", "release")
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            recorded_deliverables(store, "r9", "design")
                .await
                .unwrap()
                .is_empty(),
            "a run that wrote nothing has recorded nothing"
        );
    }
}

#[tokio::test]
async fn an_earlier_runs_merged_work_is_not_a_later_runs_deliverable() {
    for e in engines().await {
        // r0 recorded a design deliverable and was merged; r1 branches from that main.
        e.service
            .commit_work_product(&run("r0", "design"), "svc", &product("cad_model", "old"))
            .await
            .unwrap();
        merge_run_branch(e.store.as_ref(), "r0").await.unwrap();
        e.service
            .commit_work_product(&run("r1", "verify"), "svc", &product("simulation_result", "x"))
            .await
            .unwrap();
        let r1 = e.store.as_ref();
        assert_eq!(
            e.store
                .find_nodes(
                    "run/r1",
                    &metaforge_ports::TwinNodeQuery {
                        node_type: None,
                        property: Some(("phase".into(), json!("design"))),
                    }
                )
                .await
                .unwrap()
                .len(),
            1,
            "{}: r0's design work product is on r1's branch",
            e.name
        );
        assert!(
            recorded_deliverables(r1, "r1", "design")
                .await
                .unwrap()
                .is_empty(),
            "{}: but it is r0's, not r1's",
            e.name
        );
    }
}

#[tokio::test]
async fn merging_a_run_fast_forwards_main_to_its_branch() {
    for e in engines().await {
        e.service
            .commit_work_product(&WriteTarget::Main, "local", &product("requirements", "R"))
            .await
            .unwrap();
        let done = e
            .service
            .commit_work_product(&run("r1", "design"), "svc", &product("cad_model", "x"))
            .await
            .unwrap();
        let merged = merge_run_branch(e.store.as_ref(), "r1").await.unwrap();
        assert_eq!(
            merged,
            RunMerge::Merged {
                head: Some(done.commit.id.clone())
            },
            "{}",
            e.name
        );
        assert_eq!(
            e.store.node(TWIN_MAIN_BRANCH, &done.node.id).await.unwrap(),
            done.node
        );
        assert!(
            e.store
                .diff(TWIN_MAIN_BRANCH, "run/r1")
                .await
                .unwrap()
                .nodes_added
                .is_empty()
        );
        // Merging again changes nothing.
        assert_eq!(
            e.service.merge_run_branch("r1").await.unwrap(),
            RunMerge::Merged {
                head: Some(done.commit.id)
            }
        );
    }
}

#[tokio::test]
async fn a_merge_after_main_moved_is_refused_and_changes_nothing() {
    for e in engines().await {
        e.service
            .commit_work_product(&run("r1", "design"), "svc", &product("cad_model", "x"))
            .await
            .unwrap();
        let moved = e
            .service
            .commit_work_product(&WriteTarget::Main, "local", &product("note", "a chat write"))
            .await
            .unwrap();
        let before = heads(e.store.as_ref()).await;
        let err = merge_run_branch(e.store.as_ref(), "r1").await.unwrap_err();
        match &err {
            TwinError::MainMoved {
                run_id,
                branch,
                main_head,
            } => {
                assert_eq!((run_id.as_str(), branch.as_str()), ("r1", "run/r1"));
                assert_eq!(main_head, &moved.commit.id);
            }
            other => panic!("{}: expected MainMoved, got {other:?}", e.name),
        }
        assert!(err.to_string().contains("main moved"), "{err}");
        assert_eq!(
            heads(e.store.as_ref()).await,
            before,
            "{}: nothing changed",
            e.name
        );
    }
}

#[tokio::test]
async fn merging_a_run_that_wrote_nothing_reports_nothing_recorded() {
    for e in engines().await {
        let before = heads(e.store.as_ref()).await;
        assert_eq!(
            merge_run_branch(e.store.as_ref(), "r0").await.unwrap(),
            RunMerge::NothingRecorded
        );
        assert_eq!(heads(e.store.as_ref()).await, before);
    }
}

#[tokio::test]
async fn bad_input_is_refused_naming_the_field_and_writes_nothing() {
    for e in engines().await {
        let existing = e
            .service
            .commit_work_product(&WriteTarget::Main, "local", &product("cad_model", "x"))
            .await
            .unwrap();
        let before = heads(e.store.as_ref()).await;
        let no_content = WorkProductInput {
            content: None,
            ..product("cad_model", "")
        };
        let wrong_hash = WorkProductInput {
            content_hash: Some("a".repeat(64)),
            ..product("cad_model", "x")
        };
        let not_a_hash = WorkProductInput {
            content: None,
            content_hash: Some("abc".into()),
            ..product("cad_model", "")
        };
        let reserved = WorkProductInput {
            properties: json!({"phase": "release"}).as_object().cloned().unwrap(),
            ..product("cad_model", "x")
        };
        let blank = product("  ", "x");
        let decision_unknown = DecisionInput {
            decision: "steel".into(),
            rationale: "cheap".into(),
            about: vec![existing.node.id.clone(), "ghost".into()],
            ..DecisionInput::default()
        };
        let no_rationale = DecisionInput {
            decision: "steel".into(),
            rationale: " ".into(),
            ..DecisionInput::default()
        };
        let target = run("r1", "design");
        let cases: Vec<(&str, TwinError)> = vec![
            (
                "content",
                e.service
                    .commit_work_product(&target, "svc", &no_content)
                    .await
                    .unwrap_err(),
            ),
            (
                "content_hash",
                e.service
                    .commit_work_product(&target, "svc", &wrong_hash)
                    .await
                    .unwrap_err(),
            ),
            (
                "content_hash",
                e.service
                    .commit_work_product(&target, "svc", &not_a_hash)
                    .await
                    .unwrap_err(),
            ),
            (
                "properties.phase",
                e.service
                    .commit_work_product(&target, "svc", &reserved)
                    .await
                    .unwrap_err(),
            ),
            (
                "artifact",
                e.service
                    .commit_work_product(&target, "svc", &blank)
                    .await
                    .unwrap_err(),
            ),
            (
                "about[1]",
                e.service
                    .record_decision(&target, "svc", &decision_unknown)
                    .await
                    .unwrap_err(),
            ),
            (
                "rationale",
                e.service
                    .record_decision(&target, "svc", &no_rationale)
                    .await
                    .unwrap_err(),
            ),
            (
                "to",
                e.service
                    .link(
                        &target,
                        "svc",
                        &LinkInput {
                            from: existing.node.id.clone(),
                            to: "ghost".into(),
                            edge_type: TwinEdgeType::DependsOn,
                            properties: serde_json::Map::new(),
                        },
                    )
                    .await
                    .unwrap_err(),
            ),
            (
                "to",
                e.service
                    .link(
                        &target,
                        "svc",
                        &LinkInput {
                            from: existing.node.id.clone(),
                            to: existing.node.id.clone(),
                            edge_type: TwinEdgeType::DependsOn,
                            properties: serde_json::Map::new(),
                        },
                    )
                    .await
                    .unwrap_err(),
            ),
            (
                "node_id",
                e.service
                    .commit_work_product(
                        &target,
                        "svc",
                        &WorkProductInput {
                            replaces: Some("ghost".into()),
                            ..product("cad_model", "y")
                        },
                    )
                    .await
                    .unwrap_err(),
            ),
        ];
        for (field, err) in cases {
            assert_eq!(err.field(), Some(field), "{}: {err}", e.name);
        }
        assert_eq!(
            heads(e.store.as_ref()).await,
            before,
            "{}: no branch created, no commit made",
            e.name
        );
    }
}

#[tokio::test]
async fn a_runs_own_run_and_phase_may_be_repeated_in_properties_but_never_changed() {
    for e in engines().await {
        let repeated = WorkProductInput {
            properties: json!({"run_id": "r1", "phase": "design", "units": "mm"})
                .as_object()
                .cloned()
                .unwrap(),
            ..product("cad_model", "x")
        };
        let done = e
            .service
            .commit_work_product(&run("r1", "design"), "svc", &repeated)
            .await
            .unwrap();
        assert_eq!(done.node.properties["units"], "mm");
        assert_eq!(
            recorded_deliverables(e.store.as_ref(), "r1", "design")
                .await
                .unwrap(),
            ["cad_model"],
            "{}",
            e.name
        );
        let other_run = WorkProductInput {
            properties: json!({"run_id": "r2"}).as_object().cloned().unwrap(),
            ..product("cad_model", "x")
        };
        let err = e
            .service
            .check_work_product(&run("r1", "design"), &other_run)
            .await
            .unwrap_err();
        assert_eq!(err.field(), Some("properties.run_id"));
        let on_main = e
            .service
            .check_work_product(&WriteTarget::Main, &repeated)
            .await
            .unwrap_err();
        assert_eq!(
            on_main.field(),
            Some("properties.run_id"),
            "a chat write names no run"
        );
    }
}

#[tokio::test]
async fn a_content_hash_given_with_its_content_must_agree_and_is_kept_lower_case() {
    for e in engines().await {
        let hash = sha256_hex("step file").to_ascii_uppercase();
        let done = e
            .service
            .commit_work_product(
                &WriteTarget::Main,
                "local",
                &WorkProductInput {
                    content_hash: Some(hash.clone()),
                    uri: Some("file:///tmp/bracket.step".into()),
                    ..product("cad_model", "step file")
                },
            )
            .await
            .unwrap();
        assert_eq!(
            done.node.properties["content_hash"],
            json!(hash.to_ascii_lowercase())
        );
        assert_eq!(done.node.properties["uri"], "file:///tmp/bracket.step");
        let by_hash_only = e
            .service
            .commit_work_product(
                &WriteTarget::Main,
                "local",
                &WorkProductInput {
                    content: None,
                    content_hash: Some(sha256_hex("elsewhere")),
                    ..product("cad_model", "")
                },
            )
            .await
            .unwrap();
        assert!(by_hash_only.node.properties.get("content").is_none());
    }
}

#[tokio::test]
async fn replacing_a_work_product_keeps_its_id_and_records_the_new_phase() {
    for e in engines().await {
        let first = e
            .service
            .commit_work_product(&run("r1", "design"), "svc", &product("cad_model", "v1"))
            .await
            .unwrap();
        let second = e
            .service
            .commit_work_product(
                &run("r1", "design"),
                "svc",
                &WorkProductInput {
                    replaces: Some(first.node.id.clone()),
                    ..product("cad_model", "v2")
                },
            )
            .await
            .unwrap();
        assert_eq!(second.node.id, first.node.id);
        assert_ne!(second.node.content_hash, first.node.content_hash);
        let found = e
            .service
            .find(
                "run/r1",
                &NodeFilter {
                    node_type: Some(TwinNodeType::WorkProduct),
                    ..NodeFilter::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(found.nodes.len(), 1, "{}: one work product, two versions", e.name);
        assert_eq!(e.store.log("run/r1").await.unwrap().len(), 2);
        // A decision is not a work product to replace.
        let decision = e
            .service
            .record_decision(
                &run("r1", "design"),
                "svc",
                &DecisionInput {
                    decision: "d".into(),
                    rationale: "r".into(),
                    ..DecisionInput::default()
                },
            )
            .await
            .unwrap();
        let err = e
            .service
            .check_work_product(
                &run("r1", "design"),
                &WorkProductInput {
                    replaces: Some(decision.node.id),
                    ..product("cad_model", "v3")
                },
            )
            .await
            .unwrap_err();
        assert_eq!(err.field(), Some("node_id"));
    }
}

#[tokio::test]
async fn decisions_and_links_are_recorded_and_read_back() {
    for e in engines().await {
        let cad = e
            .service
            .commit_work_product(&run("r1", "design"), "svc", &product("cad_model", "x"))
            .await
            .unwrap();
        let plan = e
            .service
            .commit_work_product(&run("r1", "design"), "svc", &product("test_plan", "y"))
            .await
            .unwrap();
        let decision = e
            .service
            .record_decision(
                &run("r1", "design"),
                "svc",
                &DecisionInput {
                    decision: "6061 aluminium".into(),
                    rationale: "stiffness per gram, machinable in house".into(),
                    alternatives: vec!["PLA".into(), "steel".into()],
                    about: vec![cad.node.id.clone()],
                    ..DecisionInput::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(decision.node.node_type, TwinNodeType::Decision);
        assert_eq!(
            decision.node.properties["rationale"],
            "stiffness per gram, machinable in house"
        );
        assert_eq!(decision.node.properties["about"], json!([cad.node.id]));
        assert_eq!(decision.node.properties["phase"], "design");
        let link = LinkInput {
            from: plan.node.id.clone(),
            to: cad.node.id.clone(),
            edge_type: TwinEdgeType::Validates,
            properties: serde_json::Map::new(),
        };
        let edge = e.service.link(&run("r1", "design"), "svc", &link).await.unwrap();
        let edges = e
            .service
            .edges("run/r1", &cad.node.id, EdgeDirection::Incoming, None)
            .await
            .unwrap();
        assert_eq!(edges, std::slice::from_ref(&edge.edge), "{}", e.name);
        let again = e
            .service
            .check_link(&run("r1", "design"), &link)
            .await
            .unwrap_err();
        assert!(again.to_string().contains(&edge.edge.id), "{again}");
        let diff = e.service.diff(TWIN_MAIN_BRANCH, "run/r1").await.unwrap();
        assert_eq!(diff.nodes_added.len(), 3);
        assert_eq!(diff.edges_added.len(), 1);
    }
}

#[tokio::test]
async fn queries_match_every_property_and_say_when_the_limit_cut_them() {
    for e in engines().await {
        for (phase, artifact) in [
            ("design", "cad_model"),
            ("design", "drawing"),
            ("verify", "cad_model"),
        ] {
            e.service
                .commit_work_product(&run("r1", phase), "svc", &product(artifact, phase))
                .await
                .unwrap();
        }
        let filter = |properties: Value, limit: usize| NodeFilter {
            node_type: Some(TwinNodeType::WorkProduct),
            properties: properties
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            limit,
        };
        let both = e
            .service
            .find(
                "run/r1",
                &filter(json!({"artifact": "cad_model", "phase": "design"}), 10),
            )
            .await
            .unwrap();
        assert_eq!(both.nodes.len(), 1, "{}", e.name);
        assert!(!both.truncated);
        let cut = e
            .service
            .find("run/r1", &filter(json!({"artifact": "cad_model"}), 1))
            .await
            .unwrap();
        assert_eq!((cut.nodes.len(), cut.truncated), (1, true));
        let err = e.service.find("run/r1", &filter(json!({}), 0)).await.unwrap_err();
        assert_eq!(err.field(), Some("limit"));
    }
}

#[tokio::test]
async fn reads_name_the_missing_branch_or_node_by_its_parameter() {
    for e in engines().await {
        let unknown_branch = e.service.node("run/none", "n1").await.unwrap_err();
        assert!(
            matches!(&unknown_branch, TwinError::UnknownBranch { field, .. } if field == "branch"),
            "{}: {unknown_branch:?}",
            e.name
        );
        let unknown_node = e.service.node(TWIN_MAIN_BRANCH, "n1").await.unwrap_err();
        assert!(matches!(&unknown_node, TwinError::UnknownNode { field, .. } if field == "id"));
        let edges = e
            .service
            .edges(TWIN_MAIN_BRANCH, "n1", EdgeDirection::Both, None)
            .await
            .unwrap_err();
        assert_eq!(edges.field(), Some("id"));
        let head = e.service.diff(TWIN_MAIN_BRANCH, "run/none").await.unwrap_err();
        assert_eq!(head.field(), Some("head"), "{head:?}");
        let base = e.service.diff("run/none", TWIN_MAIN_BRANCH).await.unwrap_err();
        assert_eq!(base.field(), Some("base"));
        let bad_name = e.service.log("no spaces", 10).await.unwrap_err();
        assert!(matches!(&bad_name, TwinError::Invalid { field, .. } if field == "branch"));
        let found = e
            .service
            .find("run/none", &NodeFilter::default())
            .await
            .unwrap_err();
        assert_eq!(found.field(), Some("branch"));
    }
}

// ----- the engine-backed run scopes ------------------------------------------------------------

/// A flow engine that answers `state` from a table (the rest is not used here).
#[derive(Default)]
struct TableEngine {
    views: Mutex<BTreeMap<String, RunView>>,
}

impl TableEngine {
    fn set(&self, run_id: &str, view: RunView) {
        self.views.lock().unwrap().insert(run_id.to_owned(), view);
    }
}

fn refused() -> PortError {
    PortError::new(PortErrorKind::Internal, "not used by these tests")
}

#[async_trait::async_trait]
impl FlowEngine for TableEngine {
    fn kind(&self) -> FlowEngineKind {
        FlowEngineKind::InProcess
    }
    async fn start(&self, _request: StartRun) -> Result<RunState, PortError> {
        Err(refused())
    }
    async fn decide_gate(&self, _run_id: &str, _answer: GateAnswer) -> Result<RunState, PortError> {
        Err(refused())
    }
    async fn state(&self, run_id: &str) -> Result<RunView, PortError> {
        self.views
            .lock()
            .unwrap()
            .get(run_id)
            .cloned()
            .ok_or_else(|| PortError::new(PortErrorKind::NotFound, format!("run {run_id}")))
    }
    async fn cancel(&self, _run_id: &str, _by: &str, _reason: Option<String>) -> Result<RunState, PortError> {
        Err(refused())
    }
}

fn view(run_id: &str, status: RunStatus, running: Option<&str>, live: bool) -> RunView {
    let at = chrono::DateTime::<chrono::Utc>::MIN_UTC;
    let phases = ["design", "verify"]
        .into_iter()
        .map(|id| {
            let mut phase = PhaseState::pending(id);
            if Some(id) == running {
                phase.status = PhaseStatus::Running;
                phase.attempt = 1;
            }
            phase
        })
        .collect();
    RunView {
        engine: FlowEngineKind::InProcess,
        live,
        reason: (!live).then(|| "the engine is restarting".to_owned()),
        state: Some(RunState {
            run_id: run_id.to_owned(),
            flow: FlowRef {
                version_id: "v1".into(),
                content_hash: "h".into(),
            },
            status,
            settings: RunSettings::default(),
            phases,
            gate: None,
            reworks_used: 0,
            decisions: Vec::new(),
            error: None,
            started_at: at,
            updated_at: at,
        }),
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

#[tokio::test]
async fn a_service_caller_is_scoped_to_the_phase_its_run_has_in_flight_and_to_nothing_else() {
    let engine = Arc::new(TableEngine::default());
    engine.set("r1", view("r1", RunStatus::Running, Some("design"), true));
    engine.set("r2", view("r2", RunStatus::AwaitingApproval, None, true));
    engine.set("r3", view("r3", RunStatus::Running, Some("design"), false));
    let scopes = EngineRunScopes::new(engine, None);
    let scope = scopes
        .scope_of(&caller(CallerClass::Service, Some("r1")))
        .await
        .unwrap();
    assert_eq!(
        scope,
        Some(RunScope {
            run_id: "r1".into(),
            phase: "design".into()
        })
    );
    for (class, session, why) in [
        (
            CallerClass::Service,
            Some("r2"),
            "parked at a gate: no phase in flight",
        ),
        (
            CallerClass::Service,
            Some("r3"),
            "the engine could not confirm it",
        ),
        (CallerClass::Service, Some("r9"), "an unknown run"),
        (CallerClass::Service, None, "no session names a run"),
        (
            CallerClass::Local,
            Some("r1"),
            "a local caller is not the run's worker",
        ),
    ] {
        assert_eq!(
            scopes.scope_of(&caller(class, session)).await.unwrap(),
            None,
            "{why}"
        );
    }
}

#[tokio::test]
async fn a_session_that_claimed_a_client_task_is_scoped_to_its_phase_while_the_engine_runs_it() {
    let clock = ManualClock::fixed();
    let runs = Arc::new(MemoryRunLedger::new());
    let at = metaforge_ports::Clock::now(&clock);
    runs.create(RunRecord {
        id: "r1".into(),
        project_id: None,
        flow_engine: FlowEngineKind::InProcess,
        intelligence: IntelligenceMode::Client,
        template_id: "mech_v1".into(),
        template_version: "1".into(),
        flow_version_id: "v1".into(),
        content_hash: "h".into(),
        status: RunStatus::Running,
        reason: None,
        history: Vec::new(),
        created_at: at,
        updated_at: at,
    })
    .await
    .unwrap();
    let tasks = Arc::new(MemoryClientTaskStore::new(runs));
    let task = tasks.post("r1", "design", 1, json!({}), at).await.unwrap();
    let ana = metaforge_ports::Claimant {
        identity: "ana".into(),
        session: Some("session-a".into()),
    };
    tasks.claim(&task.id, &ana, at).await.unwrap();
    let engine = Arc::new(TableEngine::default());
    engine.set("r1", view("r1", RunStatus::Running, Some("design"), true));
    let scopes = EngineRunScopes::new(engine.clone(), Some(tasks));
    let expected = Some(RunScope {
        run_id: "r1".into(),
        phase: "design".into(),
    });
    let as_ana = |class, session: &str| CallerContext {
        identity: Some("ana".into()),
        ..caller(class, Some(session))
    };
    for class in [CallerClass::ClientTask, CallerClass::Remote] {
        assert_eq!(
            scopes.scope_of(&as_ana(class, "session-a")).await.unwrap(),
            expected
        );
    }
    assert_eq!(
        scopes
            .scope_of(&as_ana(CallerClass::ClientTask, "session-b"))
            .await
            .unwrap(),
        None,
        "another session's claim grants nothing"
    );
    for stranger in [None, Some("bob".to_owned())] {
        let spoofed = CallerContext {
            identity: stranger.clone(),
            ..caller(CallerClass::Remote, Some("session-a"))
        };
        assert_eq!(
            scopes.scope_of(&spoofed).await.unwrap(),
            None,
            "ana's session id sent by {stranger:?} grants nothing"
        );
    }
    engine.set("r1", view("r1", RunStatus::Running, Some("verify"), true));
    assert_eq!(
        scopes
            .scope_of(&as_ana(CallerClass::ClientTask, "session-a"))
            .await
            .unwrap(),
        None,
        "the claimed phase is no longer in flight"
    );
}

#[tokio::test]
async fn late_scopes_grant_nothing_until_the_engine_is_set_then_ask_it() {
    let engine = Arc::new(TableEngine::default());
    engine.set("r1", view("r1", RunStatus::Running, Some("design"), true));
    let late = LateRunScopes::new();
    let worker = caller(CallerClass::Service, Some("r1"));
    assert_eq!(late.scope_of(&worker).await.unwrap(), None);
    assert!(late.set(Arc::new(EngineRunScopes::new(engine, None))));
    assert_eq!(
        late.scope_of(&worker).await.unwrap().map(|s| s.phase),
        Some("design".to_owned())
    );
    assert!(!late.set(Arc::new(metaforge_app::twin::NoRunScopes)), "set once");
    assert!(late.scope_of(&worker).await.unwrap().is_some());
}
