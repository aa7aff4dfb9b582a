//! Harness routes: effective routes with problems listed, and the durable selection.

use axum::http::StatusCode;
use serde_json::json;

use super::common::{app_over, get, send, state};

#[tokio::test]
async fn routing_shows_each_role_with_its_source_and_lists_unconfigured_providers() {
    let app = app_over(state());
    let (status, _, view) = send(&app, get("/v1/harness/routing", None)).await;
    assert_eq!(status, StatusCode::OK);
    let role = |name: &str| {
        view["roles"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["role"] == name)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(role("gate_check")["route"], "anthropic:claude-haiku-4-5-20251001");
    assert_eq!(role("gate_check")["source"], "table");
    assert_eq!(role("gate_check")["configured"], true);
    assert_eq!(role("chat")["source"], "default");
    assert!(role("summarisation")["route"].is_null());
    assert!(
        role("summarisation")["problem"]
            .as_str()
            .unwrap_or_default()
            .contains("openai")
    );
    assert_eq!(view["status"], "degraded");
}

#[tokio::test]
async fn a_project_scope_uses_the_projects_routes() {
    let app = app_over(state());
    let (_, _, view) = send(&app, get("/v1/harness/routing?project_id=shelf", None)).await;
    let chat = view["roles"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["role"] == "chat")
        .cloned();
    let chat = chat.unwrap_or_default();
    assert_eq!(chat["route"], "anthropic:claude-opus-4-8");
    assert_eq!(chat["source"], "project");
}

#[tokio::test]
async fn the_selection_is_stored_and_a_family_mismatch_is_400_naming_the_model() {
    let state = state();
    let app = app_over(state.clone());
    let (status, _, body) = send(&app, get("/v1/harness/selection", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body["selection"].is_null());
    let put = |route: &str| {
        axum::http::Request::builder()
            .method("PUT")
            .uri("/v1/harness/selection")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(json!({"selection": route}).to_string()))
            .unwrap_or_default()
    };
    let (status, _, err) = send(&app, put("anthropic:gpt-4o")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(err["details"]["field"], "selection");
    assert!(err["message"].as_str().unwrap_or_default().contains("gpt-4o"));
    let (status, _, err) = send(&app, put("nobody:model")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    let (status, _, ok) = send(&app, put("anthropic:claude-sonnet-4-5")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ok["selection"], "anthropic:claude-sonnet-4-5");
    let (_, _, view) = send(&app, get("/v1/harness/routing", None)).await;
    let chat = view["roles"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["role"] == "chat")
        .cloned();
    assert_eq!(chat.unwrap_or_default()["source"], "selection");
    assert_eq!(
        state.harness.selection.get().await.ok().flatten().as_deref(),
        Some("anthropic:claude-sonnet-4-5")
    );
}
