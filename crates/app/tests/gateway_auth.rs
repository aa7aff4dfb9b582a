//! The gateway's security envelope: keys, public paths, rate limits, request ids, OpenAPI.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a broken fixture should fail the test loudly"
)]

use std::num::NonZeroU32;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use metaforge_app::gateway::{self, AuthState, GatewayState, parse_api_keys};
use tower::ServiceExt;

fn app(keys: &str, per_minute: Option<u32>) -> axum::Router {
    let auth = AuthState::new(
        parse_api_keys(keys).unwrap(),
        per_minute.and_then(NonZeroU32::new),
    );
    gateway::build(Arc::new(GatewayState { metrics: None }), Arc::new(auth), 1024)
}

async fn send(
    app: &axum::Router,
    req: Request<Body>,
) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, headers, json)
}

fn get(path: &str) -> Request<Body> {
    Request::builder().uri(path).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn health_is_public_but_every_other_route_needs_a_key() {
    let app = app("alice:sk-alice-0001", None);
    let (status, _, _) = send(&app, get("/health")).await;
    assert_eq!(status, StatusCode::OK);
    for path in ["/metrics", "/openapi.json", "/v1/design-flows"] {
        let (status, _, body) = send(&app, get(path)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(body["error"], "unauthorized", "{path}");
        assert!(body["message"].as_str().unwrap().contains("API key"));
    }
}

#[tokio::test]
async fn a_valid_key_in_either_header_is_accepted_and_a_wrong_one_is_not() {
    let app = app("alice:sk-alice-0001", None);
    let bearer = Request::builder()
        .uri("/openapi.json")
        .header("authorization", "Bearer sk-alice-0001")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, bearer).await.0, StatusCode::OK);
    let x_key = Request::builder()
        .uri("/metrics")
        .header("x-api-key", "sk-alice-0001")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, x_key).await.0, StatusCode::OK);
    let wrong = Request::builder()
        .uri("/metrics")
        .header("x-api-key", "sk-alice-0002")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, wrong).await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_rate_limit_answers_429_with_retry_after() {
    let app = app("alice:sk-alice-0001", Some(2));
    let req = || {
        Request::builder()
            .uri("/metrics")
            .header("x-api-key", "sk-alice-0001")
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(send(&app, req()).await.0, StatusCode::OK);
    assert_eq!(send(&app, req()).await.0, StatusCode::OK);
    let (status, headers, body) = send(&app, req()).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["error"], "rate_limited");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1);
}

#[tokio::test]
async fn request_ids_are_generated_or_echoed() {
    let app = app("", None);
    let (_, headers, _) = send(&app, get("/health")).await;
    assert!(!headers["x-request-id"].is_empty());
    let with_id = Request::builder()
        .uri("/health")
        .header("x-request-id", "abc-123")
        .body(Body::empty())
        .unwrap();
    let (_, headers, _) = send(&app, with_id).await;
    assert_eq!(headers["x-request-id"], "abc-123");
}

#[tokio::test]
async fn the_openapi_document_is_3_1_and_lists_the_routes() {
    let app = app("", None);
    let (status, _, doc) = send(&app, get("/openapi.json")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    assert!(doc["paths"]["/health"]["get"].is_object());
    assert!(doc["paths"]["/metrics"]["get"].is_object());
}
