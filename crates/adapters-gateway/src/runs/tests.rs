//! The remote run bindings against a local axum server that records what it was sent and answers
//! each run id with a scripted status: whose key a gate answer and a claim present, the body a
//! gate answer carries, and how refusals and generic conflicts come back.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use metaforge_api::{GateDecisionBody, RefusalKind, RunBindings, RunReply};
use metaforge_ports::{Claimant, DecisionSurface, GateDecisionKind, PortErrorKind};
use serde_json::{Value, json};

use super::RemoteRunBindings;
use crate::client::GatewayClient;

/// One request the gateway saw: the key it presented and its body.
type Request = (Option<String>, Value);

#[derive(Clone, Default)]
struct Seen {
    requests: Arc<Mutex<Vec<Request>>>,
}

fn key_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn flow_state(run: &str) -> Value {
    json!({
        "run_id": run, "flow_engine": "embedded", "live": true, "reason": null, "status": "running",
        "flow_template_id": "mech_v1", "flow_version": "1.1.0", "flow_version_id": "v1",
        "flow_content_hash": "h", "phases": [], "phases_unavailable": null, "gate": null,
        "error": null, "usage": null, "usage_unavailable": "x"
    })
}

fn task(id: &str, claimed_by: &str) -> Value {
    json!({
        "id": id, "run_id": "r1", "phase": "intent", "attempt": 1, "status": "claimed",
        "claimed_by": claimed_by, "brief": {}, "submission": null,
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"
    })
}

/// Run ids name the answer: `refused` 409 with a run-service code, `gone` a generic 409.
async fn start() -> (String, Seen) {
    let seen = Seen::default();
    let app = axum::Router::new()
        .route(
            "/v1/runs/{id}/approval",
            post(
                |State(seen): State<Seen>,
                 Path(id): Path<String>,
                 headers: HeaderMap,
                 Json(body): Json<Value>| async move {
                    seen.requests.lock().unwrap().push((key_of(&headers), body));
                    match id.as_str() {
                        "refused" => (
                            StatusCode::CONFLICT,
                            Json(
                                json!({"error": "not_allowed", "message": "approve is not allowed",
                                        "details": {"allowed": ["reject", "retry"]}}),
                            ),
                        ),
                        "gone" => (
                            StatusCode::CONFLICT,
                            Json(json!({"error": "conflict", "message": "the run moved on"})),
                        ),
                        other => (StatusCode::OK, Json(flow_state(other))),
                    }
                },
            ),
        )
        .route(
            "/v1/client-tasks/{id}/claim",
            post(
                |State(seen): State<Seen>, Path(id): Path<String>, headers: HeaderMap| async move {
                    let key = key_of(&headers);
                    seen.requests.lock().unwrap().push((key.clone(), Value::Null));
                    let who = if key.as_deref() == Some("key-ana-0001") {
                        "ana"
                    } else {
                        "sidecar"
                    };
                    (StatusCode::OK, Json(task(&id, who)))
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

fn bindings(url: &str) -> RemoteRunBindings {
    RemoteRunBindings::new(GatewayClient::new(url, Some("key-sidecar-01".into())).unwrap())
        .with_identity_keys([
            ("ana".to_owned(), "key-ana-0001".to_owned()),
            ("sidecar".to_owned(), "key-sidecar-01".to_owned()),
        ])
}

fn approve() -> GateDecisionBody {
    GateDecisionBody {
        decision: GateDecisionKind::Approve.into(),
        reason: Some("fine".into()),
        phase: None,
        gate_phase: Some("design".into()),
        surface: Some(DecisionSurface::Chat.into()),
    }
}

#[tokio::test]
async fn a_gate_answer_presents_the_approvers_own_key_and_says_it_came_from_the_chat() {
    let (url, seen) = start().await;
    let answer = bindings(&url).answer_gate("r1", approve(), "ana").await.unwrap();
    assert!(
        matches!(answer, RunReply::Done(ref s) if s.run_id == "r1"),
        "{answer:?}"
    );
    let requests = seen.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].0.as_deref(), Some("key-ana-0001"));
    assert_eq!(
        requests[0].1,
        json!({"decision": "approve", "surface": "chat", "reason": "fine", "gate_phase": "design"})
    );
}

#[tokio::test]
async fn a_gate_answer_for_an_identity_without_a_key_is_refused_and_nothing_is_sent() {
    let (url, seen) = start().await;
    let err = bindings(&url)
        .answer_gate("r1", approve(), "mallory")
        .await
        .unwrap_err();
    assert_eq!(err.kind, PortErrorKind::Invalid);
    assert!(err.message.contains("mallory"), "{err}");
    assert!(
        seen.requests.lock().unwrap().is_empty(),
        "nothing reached the gateway"
    );
    // An open gateway (no keys anywhere) records everyone as `local`: that answer goes through.
    let open = RemoteRunBindings::new(GatewayClient::new(&url, None).unwrap());
    assert!(open.answer_gate("r1", approve(), "local").await.is_ok());
    assert!(open.answer_gate("r1", approve(), "ana").await.is_err());
}

#[tokio::test]
async fn a_run_service_refusal_comes_back_typed_and_a_generic_conflict_stays_an_error() {
    let (url, _) = start().await;
    let remote = bindings(&url);
    match remote.answer_gate("refused", approve(), "ana").await.unwrap() {
        RunReply::Refused(refused) => {
            assert_eq!(refused.kind, RefusalKind::Conflict);
            assert_eq!(refused.code, "not_allowed");
            assert_eq!(refused.details.unwrap()["allowed"], json!(["reject", "retry"]));
        }
        RunReply::Done(state) => panic!("expected a refusal, got {state:?}"),
    }
    let err = remote.answer_gate("gone", approve(), "ana").await.unwrap_err();
    assert_eq!(err.kind, PortErrorKind::Conflict);
    assert_eq!(err.message, "the run moved on");
}

#[tokio::test]
async fn a_claim_presents_the_claimants_key_when_held_else_the_sidecars() {
    let (url, seen) = start().await;
    let remote = bindings(&url);
    let ana = Claimant {
        identity: "ana".into(),
        session: Some("s-1".into()),
    };
    let claimed = remote.claim_client_task("r1:intent:1", &ana).await.unwrap();
    assert!(matches!(claimed, RunReply::Done(ref t) if t.claimed_by.as_deref() == Some("ana")));
    let stranger = Claimant {
        identity: "zed".into(),
        session: None,
    };
    remote.claim_client_task("r1:intent:1", &stranger).await.unwrap();
    let keys: Vec<_> = seen
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|(key, _)| key.clone())
        .collect();
    assert_eq!(
        keys,
        [Some("key-ana-0001".to_owned()), Some("key-sidecar-01".to_owned())]
    );
}
