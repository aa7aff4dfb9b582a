//! Design-flow routes: catalogue and validation.

use axum::body::Body;
use axum::http::{Request, StatusCode};

async fn call(req: Request<Body>) -> (StatusCode, serde_json::Value) {
    let (status, _, body) = super::common::send(&super::common::app_with("", None), req).await;
    (status, body)
}

fn post(path: &str, body: &str) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

#[tokio::test]
async fn the_catalogue_lists_every_template_with_startability() {
    let (status, body) = call(
        Request::builder()
            .uri("/v1/design-flows")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<&str> = body["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["design_v1", "mech_v1", "hardware_v1"]);
    assert_eq!(body["default_flow"], "design_v1");
    for flow in body["flows"].as_array().unwrap() {
        assert_eq!(flow["startable"], true, "{}", flow["id"]);
        assert!(!flow["gates"].as_array().unwrap().is_empty());
    }
}

#[tokio::test]
async fn validate_reports_a_decorative_gate_without_saving() {
    let flow = serde_json::json!({
        "flow": {"id": "x", "version": "1", "title": "X", "phases": [
            {"id": "design", "title": "Design", "expected_artifacts": ["cad_model"],
             "required_deliverables": ["cad_model"], "enforce_deliverables": false,
             "gate": {"name": "G6 Release Review"}},
            {"id": "simulation", "title": "Sim", "depends_on": ["design"],
             "expected_artifacts": ["simulation_result"], "required_deliverables": ["simulation_result"],
             "gate": {"name": "G7 Release Gate"}}
        ]}
    });
    let (status, body) = call(post("/v1/design-flows/validate", &flow.to_string())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["valid"], false);
    let rules: Vec<&str> = body["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["rule"].as_str().unwrap())
        .collect();
    assert!(rules.contains(&"gates-enforce-what-they-require"), "{rules:?}");
    let decorative = body["violations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["rule"] == "gates-enforce-what-they-require")
        .unwrap();
    assert_eq!(decorative["phase"], "design");
}

#[tokio::test]
async fn a_malformed_body_is_a_400_naming_the_field() {
    let (status, body) = call(post(
        "/v1/design-flows/validate",
        r#"{"flow": {"id": "x", "version": "1", "title": "X", "phases": [{"id": 3, "title": "t"}]}}"#,
    ))
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "invalid_request");
    assert_eq!(body["details"]["field"], "flow.phases[0].id", "{body}");
    let (status, body) = call(post("/v1/design-flows/validate", "{not json")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"]["field"], "body");
}

#[tokio::test]
async fn a_body_that_is_not_an_object_is_refused() {
    let (status, body) = call(post("/v1/design-flows/propose", "[null, null]")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"]["field"], "body");
    assert!(body["message"].as_str().is_some_and(|m| m.contains("object")));
}

#[tokio::test]
async fn a_nested_object_sent_as_an_array_is_refused_naming_it() {
    let body =
        r#"{"context": [null, null], "flow": {"id": "x", "version": "1", "title": "X", "phases": []}}"#;
    let (status, body) = call(post("/v1/design-flows/validate", body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"]["field"], "context", "{body}");
}

/// A chain of `n` minimal phases; the last one releases.
fn chain(n: usize) -> serde_json::Value {
    let phases: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let mut p = serde_json::json!({"id": format!("p{i}"), "title": "P", "expected_artifacts": [format!("a{i}")]});
            if i > 0 {
                p["depends_on"] = serde_json::json!([format!("p{}", i - 1)]);
            }
            p
        })
        .collect();
    serde_json::json!({"id": "big", "version": "1", "title": "Big", "phases": phases})
}

#[tokio::test]
async fn a_flow_over_max_phases_is_a_422_naming_the_limit_and_one_at_it_is_validated() {
    use metaforge_domain::flow::MAX_PHASES;
    let over = serde_json::json!({"flow": chain(MAX_PHASES + 1)});
    let (status, body) = call(post("/v1/design-flows/validate", &over.to_string())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"], "too_large");
    assert_eq!(body["details"]["limit"], "MAX_PHASES");
    assert_eq!(body["details"]["field"], "flow.phases");
    assert_eq!(body["details"]["max"], MAX_PHASES);
    assert_eq!(body["details"]["actual"], MAX_PHASES + 1);
    assert!(body["message"].as_str().unwrap().contains("MAX_PHASES"), "{body}");
    assert!(
        body.to_string().len() < 1_000,
        "the 422 does not echo the flow back"
    );

    let at = serde_json::json!({"flow": chain(MAX_PHASES)});
    let (status, body) = call(post("/v1/design-flows/validate", &at.to_string())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["violations"].is_array());

    // Saving a version of an oversized flow is refused the same way, before anything else.
    let (status, body) = call(post("/v1/design-flows/versions", &over.to_string())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["details"]["limit"], "MAX_PHASES");
}

#[tokio::test]
async fn a_proposal_over_max_operations_is_a_422_naming_the_limit() {
    use metaforge_domain::flow::MAX_OPERATIONS;
    let ops: Vec<serde_json::Value> = (0..=MAX_OPERATIONS)
        .map(|_| serde_json::json!({"op": "set_disciplines", "phase": "design", "value": ["mechanical"], "rationale": "r"}))
        .collect();
    let request = serde_json::json!({
        "template": "mech_v1", "operations": ops,
        "manufacturingContext": {"route": "vendor"}, "targetMaturity": "physically_validated", "loadsAndUse": "20 kg"
    });
    let (status, body) = call(post("/v1/design-flows/propose", &request.to_string())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // The request's field table answers first (same limit, same code, same details shape).
    assert_eq!(body["error"], "too_large");
    assert_eq!(body["details"]["field"], "operations");
    assert_eq!(body["details"]["max"], MAX_OPERATIONS);
    assert_eq!(body["details"]["actual"], MAX_OPERATIONS + 1);
}

#[tokio::test]
async fn a_proposal_names_its_template_as_http_or_as_the_mcp_tool_does_and_gets_one_version_id() {
    for (template_field, context) in [
        (
            "template",
            serde_json::json!({"manufacturingContext": {"route": "vendor"}, "targetMaturity": "physically_validated", "loadsAndUse": "20 kg"}),
        ),
        (
            "template_id",
            serde_json::json!({"manufacturing_context": {"route": "vendor"}, "target_maturity": "physically_validated", "loads_and_use": "20 kg"}),
        ),
    ] {
        let mut request = context;
        request[template_field] = serde_json::json!("mech_v1");
        request["operations"] = serde_json::json!([
            {"op": "add_deliverable", "phase": "design", "value": "test_plan", "rationale": "bench test"}
        ]);
        let (status, body) = call(post("/v1/design-flows/propose", &request.to_string())).await;
        assert_eq!(status, StatusCode::CREATED, "{template_field}: {body}");
        assert_eq!(body["proposal"]["template_id"], "mech_v1", "{template_field}");
        assert!(body["versionId"].is_string(), "{body}");
        assert_eq!(body["versionId"], body["version_id"], "{body}");
    }
}
