//! The `/v1/twin` read routes over the router: branches, nodes by type and property, one node,
//! its edges, diffs and logs, 400/404 naming the parameter, and 503 when no twin is composed.

use std::sync::Arc;

use axum::http::StatusCode;
use metaforge_app::twin::{
    DecisionInput, LinkInput, RunScope, TwinService, WorkProductInput, WriteTarget, merge_run_branch,
};
use metaforge_ports::{TwinEdgeType, sha256_hex};
use metaforge_test_support::doubles::MemoryTwinStore;
use metaforge_test_support::{ManualClock, SequentialIds};
use serde_json::json;

use super::common::{app_over, get, send, state};

/// The router over a twin holding: on `main` a requirements work product; on `run/r1` (phase
/// design) a CAD model and a drawing depending on it, and a decision. Returns the ids.
async fn app_with_twin() -> (axum::Router, Arc<TwinService>, [String; 3]) {
    let twin = Arc::new(TwinService::new(
        Arc::new(MemoryTwinStore::new()),
        Arc::new(ManualClock::fixed()),
        Arc::new(SequentialIds::new("n")),
    ));
    let product = |artifact: &str, content: &str| WorkProductInput {
        artifact: artifact.to_owned(),
        title: format!("the {artifact}"),
        content: Some(content.to_owned()),
        ..WorkProductInput::default()
    };
    let run = WriteTarget::Run(RunScope {
        run_id: "r1".into(),
        phase: "design".into(),
    });
    let requirements = twin
        .commit_work_product(&WriteTarget::Main, "local", &product("requirements", "R1"))
        .await
        .unwrap();
    let cad = twin
        .commit_work_product(&run, "service:r1", &product("cad_model", "solid"))
        .await
        .unwrap();
    let drawing = twin
        .commit_work_product(&run, "service:r1", &product("drawing", "sheet"))
        .await
        .unwrap();
    twin.link(
        &run,
        "service:r1",
        &LinkInput {
            from: drawing.node.id.clone(),
            to: cad.node.id.clone(),
            edge_type: TwinEdgeType::DependsOn,
            properties: serde_json::Map::new(),
        },
    )
    .await
    .unwrap();
    twin.record_decision(
        &run,
        "service:r1",
        &DecisionInput {
            decision: "aluminium".into(),
            rationale: "stiffness per gram".into(),
            about: vec![cad.node.id.clone()],
            ..DecisionInput::default()
        },
    )
    .await
    .unwrap();
    let mut state = Arc::try_unwrap(state()).ok().unwrap();
    state.twin = Some(Arc::clone(&twin));
    let ids = [requirements.node.id, cad.node.id, drawing.node.id];
    (app_over(Arc::new(state)), twin, ids)
}

#[tokio::test]
async fn every_twin_route_answers_503_naming_why_when_no_twin_is_composed() {
    let app = app_over(state());
    for path in [
        "/v1/twin/branches",
        "/v1/twin/nodes",
        "/v1/twin/nodes/n1",
        "/v1/twin/nodes/n1/edges",
        "/v1/twin/diff?head=main",
        "/v1/twin/log",
    ] {
        let (status, _, body) = send(&app, get(path, None)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}");
        assert_eq!(body["error"], "unavailable");
        assert!(body["message"].as_str().unwrap().contains("twin"), "{body}");
    }
}

#[tokio::test]
async fn branches_list_main_and_each_run_that_wrote() {
    let (app, _, _) = app_with_twin().await;
    let (status, _, body) = send(&app, get("/v1/twin/branches", None)).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = body["branches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["main", "run/r1"]);
    assert!(body["branches"][1]["head"].is_string());
}

#[tokio::test]
async fn nodes_are_listed_by_type_and_property_without_their_text() {
    let (app, _, [_, cad, _]) = app_with_twin().await;
    let (status, _, body) = send(&app, get("/v1/twin/nodes", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["branch"], "main");
    assert_eq!(body["nodes"].as_array().unwrap().len(), 1);
    let (_, _, body) = send(
        &app,
        get(
            "/v1/twin/nodes?branch=run/r1&type=WorkProduct&phase=design&artifact=cad_model",
            None,
        ),
    )
    .await;
    let nodes = body["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{body}");
    assert_eq!(nodes[0]["id"], cad);
    assert_eq!(nodes[0]["properties"]["content_hash"], json!(sha256_hex("solid")));
    assert!(nodes[0]["properties"].get("content").is_none(), "{body}");
    let (_, _, decisions) = send(&app, get("/v1/twin/nodes?branch=run/r1&type=Decision", None)).await;
    assert_eq!(
        decisions["nodes"][0]["properties"]["rationale"],
        "stiffness per gram"
    );
    let (_, _, by_property) = send(
        &app,
        get(
            "/v1/twin/nodes?branch=run/r1&property=title&value=the%20drawing",
            None,
        ),
    )
    .await;
    assert_eq!(by_property["nodes"].as_array().unwrap().len(), 1);
    let (_, _, cut) = send(&app, get("/v1/twin/nodes?branch=run/r1&limit=2", None)).await;
    assert_eq!(cut["nodes"].as_array().unwrap().len(), 2);
    assert_eq!(cut["truncated"], true);
}

#[tokio::test]
async fn a_bad_query_parameter_is_a_400_naming_it() {
    let (app, _, _) = app_with_twin().await;
    for (path, field) in [
        ("/v1/twin/nodes?type=Widget", "type"),
        ("/v1/twin/nodes?limit=0", "limit"),
        ("/v1/twin/nodes?limit=many", "limit"),
        ("/v1/twin/nodes?property=title", "value"),
        ("/v1/twin/nodes?value=x", "property"),
        ("/v1/twin/nodes?branch=has%20space", "branch"),
        ("/v1/twin/nodes/n1/edges?direction=sideways", "direction"),
        ("/v1/twin/nodes/n1/edges?type=LIKES", "type"),
        ("/v1/twin/diff", "head"),
        ("/v1/twin/log?limit=501", "limit"),
    ] {
        let (status, _, body) = send(&app, get(path, None)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body["details"]["field"], field, "{path}: {body}");
    }
    let (status, _, body) = send(&app, get("/v1/twin/nodes?colour=red", None)).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "an unknown parameter is refused: {body}"
    );
    assert!(body["message"].as_str().unwrap().contains("colour"), "{body}");
}

#[tokio::test]
async fn one_node_and_its_edges_are_read_and_a_missing_one_is_a_404_naming_it() {
    let (app, _, [requirements, cad, drawing]) = app_with_twin().await;
    let (status, _, body) = send(&app, get(&format!("/v1/twin/nodes/{cad}?branch=run/r1"), None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["node"]["properties"]["content"], "solid");
    assert_eq!(body["node"]["properties"]["run_id"], "r1");
    let (_, _, edges) = send(
        &app,
        get(
            &format!("/v1/twin/nodes/{cad}/edges?branch=run/r1&direction=incoming"),
            None,
        ),
    )
    .await;
    assert_eq!(edges["edges"][0]["from"], drawing);
    assert_eq!(edges["edges"][0]["edge_type"], "DEPENDS_ON");
    let (_, _, none) = send(
        &app,
        get(
            &format!("/v1/twin/nodes/{cad}/edges?branch=run/r1&direction=outgoing"),
            None,
        ),
    )
    .await;
    assert_eq!(none["edges"], json!([]));
    // The run's node is not on main; main's is.
    let (status, _, body) = send(&app, get(&format!("/v1/twin/nodes/{cad}"), None)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["details"]["field"], "id");
    assert_eq!(body["details"]["branch"], "main");
    assert_eq!(
        send(&app, get(&format!("/v1/twin/nodes/{requirements}"), None))
            .await
            .0,
        StatusCode::OK
    );
    let (status, _, body) = send(&app, get(&format!("/v1/twin/nodes/{cad}?branch=run/r2"), None)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["details"]["field"], "branch");
    let (status, _, body) = send(&app, get("/v1/twin/nodes/ghost/edges?branch=run/r1", None)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["details"]["field"], "id");
}

#[tokio::test]
async fn the_diff_shows_what_a_run_would_bring_into_main_and_the_log_its_commits() {
    let (app, twin, [_, cad, _]) = app_with_twin().await;
    let (status, _, body) = send(&app, get("/v1/twin/diff?head=run/r1", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (body["base"].as_str(), body["head"].as_str()),
        (Some("main"), Some("run/r1"))
    );
    assert_eq!(body["diff"]["nodes_added"].as_array().unwrap().len(), 3);
    assert_eq!(body["diff"]["edges_added"].as_array().unwrap().len(), 1);
    let (status, _, body) = send(&app, get("/v1/twin/diff?base=run/r0&head=run/r1", None)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["details"]["field"], "base");
    let (_, _, log) = send(&app, get("/v1/twin/log?branch=run/r1&limit=2", None)).await;
    assert_eq!(log["commits"].as_array().unwrap().len(), 2);
    assert_eq!(log["truncated"], true);
    assert_eq!(log["commits"][0]["author"], "service:r1");
    let (status, _, body) = send(&app, get("/v1/twin/log?branch=run/r2", None)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["details"]["field"], "branch");
    // After the run is merged, main holds its work and the diff is empty.
    merge_run_branch(twin.store().as_ref(), "r1").await.unwrap();
    let (_, _, merged) = send(&app, get("/v1/twin/diff?head=run/r1", None)).await;
    assert_eq!(merged["diff"]["nodes_added"], json!([]));
    assert_eq!(
        send(&app, get(&format!("/v1/twin/nodes/{cad}"), None)).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_twin_routes_are_in_the_openapi_document_with_their_errors() {
    let (app, _, _) = app_with_twin().await;
    let (_, _, doc) = send(&app, get("/openapi.json", None)).await;
    for path in [
        "/v1/twin/branches",
        "/v1/twin/nodes",
        "/v1/twin/nodes/{id}",
        "/v1/twin/nodes/{id}/edges",
        "/v1/twin/diff",
        "/v1/twin/log",
    ] {
        let get = &doc["paths"][path]["get"];
        assert!(get.is_object(), "GET {path} missing from OpenAPI");
        assert!(get["responses"]["503"].is_object(), "{path} documents 503");
    }
    let params: Vec<&str> = doc["paths"]["/v1/twin/nodes"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for name in [
        "branch", "type", "artifact", "phase", "run_id", "property", "value", "limit",
    ] {
        assert!(params.contains(&name), "{name} in {params:?}");
    }
    assert!(doc["components"]["schemas"]["TwinNode"].is_object());
    assert!(doc["paths"]["/v1/twin/nodes/{id}"]["get"]["responses"]["404"].is_object());
}
