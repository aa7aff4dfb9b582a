//! The twin-store contract (seed §5.7): typed nodes and edges, branches, commits, diff,
//! fast-forward merge and queries by type and property.

use metaforge_ports::{
    EdgeDirection, PortErrorKind, TWIN_MAIN_BRANCH, TwinChangeSet, TwinCommitRequest, TwinEdge, TwinEdgeType,
    TwinNode, TwinNodeQuery, TwinNodeType, TwinStore, twin_content_hash,
};
use serde_json::{Map, Value, json};

use super::{kind_of, t};

fn props(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn node(id: &str, ty: TwinNodeType, p: Value) -> TwinNode {
    TwinNode::new(id, ty, props(p))
}

fn edge(id: &str, ty: TwinEdgeType, from: &str, to: &str) -> TwinEdge {
    TwinEdge {
        id: id.to_owned(),
        edge_type: ty,
        from: from.to_owned(),
        to: to.to_owned(),
        properties: props(json!({"why": id})),
    }
}

fn commit(id: &str, branch: &str, at: i64, changes: TwinChangeSet) -> TwinCommitRequest {
    TwinCommitRequest {
        id: id.to_owned(),
        branch: branch.to_owned(),
        expected_head: None,
        message: format!("commit {id}"),
        author: "agent:mechanical".to_owned(),
        at: t(at),
        changes,
    }
}

/// Runs every twin rule against `twin`, which must be empty. `ns` prefixes every id so suites
/// can share one engine.
pub async fn twin_store_contract(twin: &dyn TwinStore, ns: &str) {
    let id = |s: &str| format!("{ns}{s}");
    let branches = twin.branches().await.expect("branches");
    assert!(
        branches
            .iter()
            .any(|b| b.name == TWIN_MAIN_BRANCH && b.head.is_none()),
        "main exists, empty"
    );

    // A first commit on main.
    let bracket = node(
        &id("n-bracket"),
        TwinNodeType::WorkProduct,
        json!({"name": "bracket", "discipline": "mechanical", "mass_kg": 1.5, "tags": ["a", "b"], "spec": {"load_kn": 40}}),
    );
    let steel = node(
        &id("n-steel"),
        TwinNodeType::Constraint,
        json!({"name": "steel grade", "discipline": "mechanical", "min_mpa": 250}),
    );
    let fea = node(
        &id("n-fea"),
        TwinNodeType::WorkProduct,
        json!({"name": "fea report", "discipline": "simulation"}),
    );
    let c1 = twin
        .commit(commit(
            &id("c-1"),
            TWIN_MAIN_BRANCH,
            1,
            TwinChangeSet {
                upsert_nodes: vec![bracket.clone(), steel.clone(), fea.clone()],
                add_edges: vec![
                    edge(&id("e-1"), TwinEdgeType::ConstrainedBy, &bracket.id, &steel.id),
                    edge(&id("e-2"), TwinEdgeType::Validates, &fea.id, &bracket.id),
                ],
                ..TwinChangeSet::default()
            },
        ))
        .await
        .expect("commit c-1");
    assert_eq!(c1.parent, None, "the first commit has no parent");
    let got = twin.node(TWIN_MAIN_BRANCH, &bracket.id).await.expect("node");
    assert_eq!(got, bracket, "a node reads back with properties and hash");
    assert_eq!(
        got.content_hash,
        twin_content_hash(TwinNodeType::WorkProduct, &bracket.properties)
    );

    // A stored hash is recomputed, never trusted.
    let mut lying = node(&id("n-lie"), TwinNodeType::Agent, json!({"name": "agent"}));
    lying.content_hash = "0".repeat(64);
    twin.commit(commit(
        &id("c-2"),
        TWIN_MAIN_BRANCH,
        2,
        TwinChangeSet {
            upsert_nodes: vec![lying.clone()],
            ..TwinChangeSet::default()
        },
    ))
    .await
    .expect("c-2");
    assert_eq!(
        twin.node(TWIN_MAIN_BRANCH, &lying.id)
            .await
            .expect("node")
            .content_hash,
        twin_content_hash(TwinNodeType::Agent, &lying.properties)
    );

    // Queries by type and by property (exact JSON equality).
    let wps: Vec<String> = twin
        .find_nodes(
            TWIN_MAIN_BRANCH,
            &TwinNodeQuery {
                node_type: Some(TwinNodeType::WorkProduct),
                property: None,
            },
        )
        .await
        .expect("by type")
        .into_iter()
        .map(|n| n.id)
        .collect();
    let mut expected = vec![bracket.id.clone(), fea.id.clone()];
    expected.sort();
    assert_eq!(wps, expected, "by type, sorted by id");
    let mech: Vec<String> = twin
        .find_nodes(
            TWIN_MAIN_BRANCH,
            &TwinNodeQuery {
                node_type: None,
                property: Some(("discipline".into(), json!("mechanical"))),
            },
        )
        .await
        .expect("by prop")
        .into_iter()
        .map(|n| n.id)
        .collect();
    let mut expected = vec![bracket.id.clone(), steel.id.clone()];
    expected.sort();
    assert_eq!(mech, expected);
    let both = twin
        .find_nodes(
            TWIN_MAIN_BRANCH,
            &TwinNodeQuery {
                node_type: Some(TwinNodeType::Constraint),
                property: Some(("discipline".into(), json!("mechanical"))),
            },
        )
        .await
        .expect("both");
    assert_eq!(both.len(), 1);
    assert_eq!(
        twin.find_nodes(
            TWIN_MAIN_BRANCH,
            &TwinNodeQuery {
                node_type: None,
                property: Some(("mass_kg".into(), json!(1.5)))
            }
        )
        .await
        .expect("number")
        .len(),
        1,
        "numbers match by value"
    );
    assert_eq!(
        twin.find_nodes(
            TWIN_MAIN_BRANCH,
            &TwinNodeQuery {
                node_type: None,
                property: Some(("mass_kg".into(), json!("1.5")))
            }
        )
        .await
        .expect("string")
        .len(),
        0,
        "a string is not a number"
    );
    assert_eq!(
        twin.find_nodes(
            TWIN_MAIN_BRANCH,
            &TwinNodeQuery {
                node_type: None,
                property: Some(("spec".into(), json!({"load_kn": 40})))
            }
        )
        .await
        .expect("object")
        .len(),
        1,
        "objects match structurally"
    );

    // Edges by direction and type.
    let out = twin
        .edges(TWIN_MAIN_BRANCH, &bracket.id, EdgeDirection::Outgoing, None)
        .await
        .expect("out");
    assert_eq!(
        out.iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
        vec![id("e-1")]
    );
    assert_eq!(out[0].edge_type, TwinEdgeType::ConstrainedBy);
    assert_eq!(out[0].properties.get("why"), Some(&json!(id("e-1"))));
    let inc = twin
        .edges(
            TWIN_MAIN_BRANCH,
            &bracket.id,
            EdgeDirection::Incoming,
            Some(TwinEdgeType::Validates),
        )
        .await
        .expect("in");
    assert_eq!(
        inc.iter().map(|e| e.from.clone()).collect::<Vec<_>>(),
        vec![fea.id.clone()]
    );
    assert_eq!(
        twin.edges(TWIN_MAIN_BRANCH, &bracket.id, EdgeDirection::Both, None)
            .await
            .expect("both")
            .len(),
        2
    );
    assert!(
        twin.edges(
            TWIN_MAIN_BRANCH,
            &bracket.id,
            EdgeDirection::Both,
            Some(TwinEdgeType::Contains)
        )
        .await
        .expect("none")
        .is_empty()
    );

    // Bad commits are refused whole.
    let dangling = twin
        .commit(commit(
            &id("c-bad"),
            TWIN_MAIN_BRANCH,
            3,
            TwinChangeSet {
                upsert_nodes: vec![node(
                    &id("n-ghost-parent"),
                    TwinNodeType::Component,
                    json!({"name": "x"}),
                )],
                add_edges: vec![edge(
                    &id("e-bad"),
                    TwinEdgeType::Contains,
                    &id("n-ghost-parent"),
                    &id("n-missing"),
                )],
                ..TwinChangeSet::default()
            },
        ))
        .await;
    assert_eq!(
        kind_of(&dangling),
        Some(PortErrorKind::Invalid),
        "an edge to a missing node is refused"
    );
    assert_eq!(
        kind_of(&twin.node(TWIN_MAIN_BRANCH, &id("n-ghost-parent")).await),
        Some(PortErrorKind::NotFound),
        "a refused commit writes nothing"
    );
    assert_eq!(
        kind_of(
            &twin
                .commit(commit(
                    &id("c-bad"),
                    TWIN_MAIN_BRANCH,
                    3,
                    TwinChangeSet::default()
                ))
                .await
        ),
        Some(PortErrorKind::Invalid),
        "an empty commit is refused"
    );
    assert_eq!(
        kind_of(
            &twin
                .commit(commit(
                    &id("c-bad"),
                    TWIN_MAIN_BRANCH,
                    3,
                    TwinChangeSet {
                        delete_nodes: vec![id("n-missing")],
                        ..TwinChangeSet::default()
                    }
                ))
                .await
        ),
        Some(PortErrorKind::Invalid)
    );
    assert_eq!(
        kind_of(
            &twin
                .commit(commit(
                    &id("c-bad"),
                    TWIN_MAIN_BRANCH,
                    3,
                    TwinChangeSet {
                        add_edges: vec![edge(&id("e-1"), TwinEdgeType::DependsOn, &bracket.id, &fea.id)],
                        ..TwinChangeSet::default()
                    }
                ))
                .await
        ),
        Some(PortErrorKind::Invalid),
        "an edge id is unique on a branch"
    );
    assert_eq!(
        kind_of(
            &twin
                .commit(commit(
                    &id("c-bad"),
                    "nope",
                    3,
                    TwinChangeSet {
                        upsert_nodes: vec![bracket.clone()],
                        ..TwinChangeSet::default()
                    }
                ))
                .await
        ),
        Some(PortErrorKind::NotFound)
    );
    assert_eq!(
        kind_of(
            &twin
                .commit(commit(
                    &id("c-1"),
                    TWIN_MAIN_BRANCH,
                    3,
                    TwinChangeSet {
                        upsert_nodes: vec![bracket.clone()],
                        ..TwinChangeSet::default()
                    }
                ))
                .await
        ),
        Some(PortErrorKind::Conflict),
        "a commit id is unique"
    );
    let mut stale = commit(
        &id("c-stale"),
        TWIN_MAIN_BRANCH,
        3,
        TwinChangeSet {
            upsert_nodes: vec![bracket.clone()],
            ..TwinChangeSet::default()
        },
    );
    stale.expected_head = Some(c1.id.clone());
    assert_eq!(
        kind_of(&twin.commit(stale).await),
        Some(PortErrorKind::Conflict),
        "a writer on a stale head is refused"
    );
    let log: Vec<String> = twin
        .log(TWIN_MAIN_BRANCH)
        .await
        .expect("log")
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(
        log,
        vec![id("c-2"), id("c-1")],
        "refused commits left no trace; newest first"
    );

    // Branch, change on the branch, diff, fast-forward merge.
    assert_eq!(
        kind_of(&twin.create_branch("bad name", TWIN_MAIN_BRANCH).await),
        Some(PortErrorKind::Invalid)
    );
    let feature = format!("{ns}feature");
    let created = twin
        .create_branch(&feature, TWIN_MAIN_BRANCH)
        .await
        .expect("branch");
    assert_eq!(
        created.head,
        Some(id("c-2")),
        "a branch starts at its source's head"
    );
    assert_eq!(
        kind_of(&twin.create_branch(&feature, TWIN_MAIN_BRANCH).await),
        Some(PortErrorKind::Conflict)
    );
    assert_eq!(
        kind_of(&twin.create_branch("x", "no-such-branch").await),
        Some(PortErrorKind::NotFound)
    );
    let heavier = node(
        &bracket.id,
        TwinNodeType::WorkProduct,
        json!({"name": "bracket", "discipline": "mechanical", "mass_kg": 1.9, "tags": ["a", "b"], "spec": {"load_kn": 40}}),
    );
    let bolt = node(&id("n-bolt"), TwinNodeType::Component, json!({"name": "M8 bolt"}));
    let mut on_feature = commit(
        &id("c-3"),
        &feature,
        4,
        TwinChangeSet {
            upsert_nodes: vec![heavier.clone(), bolt.clone()],
            delete_nodes: vec![fea.id.clone()],
            add_edges: vec![edge(&id("e-3"), TwinEdgeType::Contains, &bracket.id, &bolt.id)],
            remove_edges: vec![],
        },
    );
    on_feature.expected_head = Some(id("c-2"));
    let c3 = twin.commit(on_feature).await.expect("c-3");
    assert_eq!(c3.parent, Some(id("c-2")));
    assert_eq!(
        kind_of(&twin.node(&feature, &fea.id).await),
        Some(PortErrorKind::NotFound),
        "deleted on the branch"
    );
    assert!(
        twin.node(TWIN_MAIN_BRANCH, &fea.id).await.is_ok(),
        "main is untouched by the branch"
    );
    assert_eq!(
        twin.node(TWIN_MAIN_BRANCH, &bracket.id)
            .await
            .expect("main")
            .properties
            .get("mass_kg"),
        Some(&json!(1.5))
    );

    let diff = twin.diff(TWIN_MAIN_BRANCH, &feature).await.expect("diff");
    assert_eq!(
        diff.nodes_added.iter().map(|n| n.id.clone()).collect::<Vec<_>>(),
        vec![bolt.id.clone()]
    );
    assert_eq!(
        diff.nodes_removed
            .iter()
            .map(|n| n.id.clone())
            .collect::<Vec<_>>(),
        vec![fea.id.clone()]
    );
    assert_eq!(diff.nodes_changed.len(), 1);
    assert_eq!(
        diff.nodes_changed[0].before.properties.get("mass_kg"),
        Some(&json!(1.5))
    );
    assert_eq!(
        diff.nodes_changed[0].after.properties.get("mass_kg"),
        Some(&json!(1.9))
    );
    assert_eq!(
        diff.edges_added.iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
        vec![id("e-3")]
    );
    assert_eq!(
        diff.edges_removed
            .iter()
            .map(|e| e.id.clone())
            .collect::<Vec<_>>(),
        vec![id("e-2")],
        "deleting a node removes its edges"
    );
    assert_eq!(
        twin.diff(&feature, &feature).await.expect("self"),
        Default::default(),
        "a branch does not differ from itself"
    );

    let merged = twin
        .merge_fast_forward(&feature, TWIN_MAIN_BRANCH)
        .await
        .expect("ff");
    assert_eq!(merged.head, Some(id("c-3")));
    assert_eq!(
        twin.diff(TWIN_MAIN_BRANCH, &feature).await.expect("diff"),
        Default::default(),
        "after the merge main equals the branch"
    );
    assert_eq!(twin.log(TWIN_MAIN_BRANCH).await.expect("log").len(), 3);

    // Diverged branches cannot fast-forward.
    let other = format!("{ns}other");
    twin.create_branch(&other, TWIN_MAIN_BRANCH).await.expect("other");
    twin.commit(commit(
        &id("c-4"),
        TWIN_MAIN_BRANCH,
        5,
        TwinChangeSet {
            upsert_nodes: vec![node(&id("n-a"), TwinNodeType::Version, json!({"v": 1}))],
            ..TwinChangeSet::default()
        },
    ))
    .await
    .expect("c-4");
    twin.commit(commit(
        &id("c-5"),
        &other,
        6,
        TwinChangeSet {
            upsert_nodes: vec![node(&id("n-b"), TwinNodeType::Version, json!({"v": 2}))],
            ..TwinChangeSet::default()
        },
    ))
    .await
    .expect("c-5");
    assert_eq!(
        kind_of(&twin.merge_fast_forward(&other, TWIN_MAIN_BRANCH).await),
        Some(PortErrorKind::Conflict),
        "diverged histories do not fast-forward"
    );
    assert!(
        twin.node(TWIN_MAIN_BRANCH, &id("n-b")).await.is_err(),
        "a refused merge changes nothing"
    );
    assert_eq!(
        twin.merge_fast_forward(TWIN_MAIN_BRANCH, TWIN_MAIN_BRANCH)
            .await
            .expect("self")
            .head,
        Some(id("c-4"))
    );
    let names: Vec<String> = twin
        .branches()
        .await
        .expect("branches")
        .into_iter()
        .map(|b| b.name)
        .collect();
    assert!(
        names.contains(&feature) && names.contains(&other) && names.contains(&TWIN_MAIN_BRANCH.to_owned())
    );
}
