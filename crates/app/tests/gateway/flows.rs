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
