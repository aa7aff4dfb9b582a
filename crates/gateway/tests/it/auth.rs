//! The gateway's security envelope: keys, public paths, rate limits, request ids, OpenAPI.

use super::common::{app_with, get, send};
use axum::http::StatusCode;

#[tokio::test]
async fn health_is_public_but_every_other_route_needs_a_key() {
    let app = app_with("alice:sk-alice-0001", None);
    assert_eq!(send(&app, get("/health", None)).await.0, StatusCode::OK);
    for path in [
        "/metrics",
        "/openapi.json",
        "/v1/design-flows",
        "/v1/approvals",
        "/v1/chat/tool_approvals",
    ] {
        let (status, _, body) = send(&app, get(path, None)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(body["error"], "unauthorized", "{path}");
        assert!(body["message"].as_str().is_some_and(|m| m.contains("API key")));
    }
}

#[tokio::test]
async fn a_valid_key_in_either_header_is_accepted_and_a_wrong_one_is_not() {
    let app = app_with("alice:sk-alice-0001", None);
    let bearer = axum::http::Request::builder()
        .uri("/openapi.json")
        .header("authorization", "Bearer sk-alice-0001")
        .body(axum::body::Body::empty())
        .unwrap_or_default();
    assert_eq!(send(&app, bearer).await.0, StatusCode::OK);
    assert_eq!(
        send(&app, get("/metrics", Some("sk-alice-0001"))).await.0,
        StatusCode::OK
    );
    assert_eq!(
        send(&app, get("/metrics", Some("sk-alice-0002"))).await.0,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn the_rate_limit_answers_429_with_retry_after() {
    let app = app_with("alice:sk-alice-0001", Some(2));
    let key = Some("sk-alice-0001");
    assert_eq!(send(&app, get("/metrics", key)).await.0, StatusCode::OK);
    assert_eq!(send(&app, get("/metrics", key)).await.0, StatusCode::OK);
    let (status, headers, body) = send(&app, get("/metrics", key)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["error"], "rate_limited");
    let retry: u64 = headers["retry-after"]
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(retry >= 1);
}

#[tokio::test]
async fn request_ids_are_generated_or_echoed() {
    let app = app_with("", None);
    let (_, headers, _) = send(&app, get("/health", None)).await;
    assert!(!headers["x-request-id"].is_empty());
    let with_id = axum::http::Request::builder()
        .uri("/health")
        .header("x-request-id", "abc-123")
        .body(axum::body::Body::empty())
        .unwrap_or_default();
    let (_, headers, _) = send(&app, with_id).await;
    assert_eq!(headers["x-request-id"], "abc-123");
}

#[tokio::test]
async fn the_openapi_document_is_3_1_and_lists_every_route() {
    let app = app_with("", None);
    let (status, _, doc) = send(&app, get("/openapi.json", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")));
    for (path, method) in [
        ("/health", "get"),
        ("/metrics", "get"),
        ("/v1/design-flows", "get"),
        ("/v1/design-flows/validate", "post"),
        ("/v1/design-flows/versions", "post"),
        ("/v1/design-flows/versions/{id}", "get"),
        ("/v1/design-flows/propose", "post"),
        ("/v1/chat/tool_approvals", "get"),
        ("/v1/chat/tool_approvals", "post"),
        ("/v1/chat/tool_approvals/{id}", "get"),
        ("/v1/chat/tool_approvals/{id}", "post"),
        ("/v1/chat/tool_approvals/{id}/resolve", "post"),
        ("/v1/approvals", "get"),
        ("/v1/approvals/{id}", "get"),
        ("/v1/approvals/{id}/decision", "post"),
    ] {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} missing from OpenAPI"
        );
    }
}

#[tokio::test]
async fn a_wrong_credential_is_refused_even_beside_a_right_one() {
    let app = app_with("alice:sk-alice-0001,bob:sk-bob-00001", None);
    let mixed = axum::http::Request::builder()
        .uri("/v1/approvals")
        .header("x-api-key", "sk-alice-0001")
        .header("authorization", "Bearer not-a-key")
        .body(axum::body::Body::empty())
        .unwrap_or_default();
    assert_eq!(send(&app, mixed).await.0, StatusCode::UNAUTHORIZED);
    let two_people = axum::http::Request::builder()
        .uri("/v1/approvals")
        .header("x-api-key", "sk-alice-0001")
        .header("authorization", "Bearer sk-bob-00001")
        .body(axum::body::Body::empty())
        .unwrap_or_default();
    assert_eq!(
        send(&app, two_people).await.0,
        StatusCode::UNAUTHORIZED,
        "one request, one identity"
    );
}

#[tokio::test]
async fn every_operation_documents_the_envelope_errors() {
    let app = app_with("", None);
    let (_, _, doc) = send(&app, get("/openapi.json", None)).await;
    assert_eq!(doc["components"]["securitySchemes"]["api_key"]["in"], "header");
    assert_eq!(
        doc["components"]["securitySchemes"]["api_key"]["name"],
        "X-API-Key"
    );
    let post = &doc["paths"]["/v1/design-flows/propose"]["post"]["responses"];
    for code in ["400", "401", "413", "429", "422", "503"] {
        assert!(post[code].is_object(), "propose documents {code}");
    }
}
