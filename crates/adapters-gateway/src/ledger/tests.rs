//! The remote ledger against a local axum server that answers each path with a scripted status:
//! the error mapping, the park body, and the refusals.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use metaforge_ports::{ApprovalDecision, ApprovalLedger, PortErrorKind, ResolveOutcome, WaiterResolution};
use serde_json::{Value, json};

use super::{RemoteApprovalLedger, sample_record};
use crate::client::GatewayClient;

#[derive(Clone, Default)]
struct Seen {
    bodies: Arc<Mutex<Vec<Value>>>,
    keys: Arc<Mutex<Vec<Option<String>>>>,
}

fn record_json(id: &str, status: &str) -> Value {
    let mut record = serde_json::to_value(sample_record(Some(90))).unwrap();
    record["id"] = json!(id);
    record["status"] = json!(status);
    record
}

/// ids name the answer: `missing` 404, `decided` 409, `bad` 422, `broken` 500, else 200.
async fn scripted(id: &str) -> (StatusCode, Json<Value>) {
    let error = |status: StatusCode, message: &str| (status, Json(json!({"error": "x", "message": message})));
    match id {
        "missing" => error(StatusCode::NOT_FOUND, "approval missing not found"),
        "decided" => error(StatusCode::CONFLICT, "approval decided is approved: looks fine"),
        "bad" => error(StatusCode::UNPROCESSABLE_ENTITY, "resolution: unknown variant"),
        "broken" => error(StatusCode::INTERNAL_SERVER_ERROR, "database is locked"),
        id => (StatusCode::OK, Json(record_json(id, "awaiting_approval"))),
    }
}

async fn start() -> (String, Seen) {
    let seen = Seen::default();
    let app = axum::Router::new()
        .route(
            "/v1/chat/tool_approvals",
            post(
                |State(seen): State<Seen>, headers: axum::http::HeaderMap, Json(body): Json<Value>| async move {
                    seen.bodies.lock().unwrap().push(body);
                    seen.keys.lock().unwrap().push(
                        headers
                            .get("x-api-key")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned),
                    );
                    (StatusCode::CREATED, Json(record_json("gateway-id", "awaiting_approval")))
                },
            )
            .get(|| async { Json(json!({"approvals": [record_json("a", "awaiting_approval")]})) }),
        )
        .route(
            "/v1/chat/tool_approvals/{id}",
            get(|Path(id): Path<String>| async move { scripted(&id).await }),
        )
        .route(
            "/v1/chat/tool_approvals/{id}/resolve",
            post(|Path(id): Path<String>| async move {
                match id.as_str() {
                    "closed" => (
                        StatusCode::OK,
                        Json(json!({"outcome": "already_closed", "approval": record_json(&id, "timed_out")})),
                    ),
                    "open" => (
                        StatusCode::OK,
                        Json(json!({"outcome": "resolved", "approval": record_json(&id, "timed_out")})),
                    ),
                    other => scripted(other).await,
                }
            }),
        )
        .with_state(seen.clone());
    let listener = metaforge_test_support::net::tokio_listener().await;
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn ledger(base: &str) -> RemoteApprovalLedger {
    RemoteApprovalLedger::new(GatewayClient::new(base, Some("sekrit".into())).unwrap())
}

#[tokio::test]
async fn gateway_statuses_map_to_port_error_kinds() {
    let (base, _) = start().await;
    let ledger = ledger(&base);
    let cases = [
        ("missing", PortErrorKind::NotFound),
        ("decided", PortErrorKind::Conflict),
        ("bad", PortErrorKind::Invalid),
        ("broken", PortErrorKind::Unavailable),
    ];
    for (id, kind) in cases {
        let err = ledger.get(id).await.unwrap_err();
        assert_eq!(err.kind, kind, "GET {id}: {err}");
        let err = ledger
            .resolve(id, WaiterResolution::TimedOut, None)
            .await
            .unwrap_err();
        assert_eq!(err.kind, kind, "resolve {id}: {err}");
    }
}

#[tokio::test]
async fn a_conflict_keeps_the_gateways_message() {
    let (base, _) = start().await;
    let err = ledger(&base)
        .resolve("decided", WaiterResolution::TimedOut, None)
        .await
        .unwrap_err();
    assert_eq!(err.message, "approval decided is approved: looks fine");
}

#[tokio::test]
async fn an_unreachable_gateway_is_unavailable() {
    let port = metaforge_test_support::net::unused_port();
    let err = ledger(&format!("http://127.0.0.1:{port}"))
        .get("x")
        .await
        .unwrap_err();
    assert_eq!(err.kind, PortErrorKind::Unavailable, "{err}");
}

#[tokio::test]
async fn park_sends_the_waiters_timeout_and_key_and_returns_the_gateways_record() {
    let (base, seen) = start().await;
    let parked = ledger(&base).park(sample_record(Some(90))).await.unwrap();
    assert_eq!(parked.id, "gateway-id");
    let bodies = seen.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0]["tool"], "test.write");
    assert_eq!(bodies[0]["caller"], "remote");
    assert_eq!(bodies[0]["timeout_seconds"], 60, "deadline 90 s minus 30 s grace");
    assert_eq!(seen.keys.lock().unwrap()[0].as_deref(), Some("sekrit"));
}

#[tokio::test]
async fn resolve_tells_resolved_from_already_closed() {
    let (base, _) = start().await;
    let ledger = ledger(&base);
    let open = ledger
        .resolve("open", WaiterResolution::TimedOut, None)
        .await
        .unwrap();
    assert!(matches!(open, ResolveOutcome::Resolved { .. }));
    let closed = ledger
        .resolve("closed", WaiterResolution::Canceled, None)
        .await
        .unwrap();
    assert!(matches!(closed, ResolveOutcome::AlreadyClosed { .. }));
}

#[tokio::test]
async fn the_sidecar_never_decides_and_restores_nothing() {
    let (base, _) = start().await;
    let ledger = ledger(&base);
    let decision = ApprovalDecision {
        approve: true,
        approver: "agent".into(),
        note: None,
    };
    let err = ledger.decide("a", decision).await.unwrap_err();
    assert_eq!(err.kind, PortErrorKind::Invalid);
    assert!(err.message.contains("never decides"), "{}", err.message);
    assert!(
        ledger
            .restore(&metaforge_ports::GoneParkers::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(ledger.list_pending().await.unwrap().len(), 1);
}

#[test]
fn a_base_url_without_a_scheme_is_refused() {
    assert!(GatewayClient::new("127.0.0.1:8787", None).is_err());
    assert!(GatewayClient::new("http://127.0.0.1:8787/", None).is_ok());
}
