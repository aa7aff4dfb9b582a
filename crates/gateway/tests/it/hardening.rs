//! Issue 12: what a hostile or careless client found, pinned through the real router.

use std::sync::Arc;

use super::common::{app_with, get, harness, post, send, state_with_policy};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use metaforge_domain::approvals::ApproverPolicy;
use metaforge_gateway::{self as gateway, AuthState, parse_api_keys};
use metaforge_test_support::doubles::MemoryUsageStore;
use serde_json::{Value, json};

const ALICE: &str = "sk-alice-0001";
const BOB: &str = "sk-bob-00001";

fn keyed() -> axum::Router {
    app_with(&format!("alice:{ALICE},bob:{BOB}"), None)
}

fn proposal() -> Value {
    json!({
        "template": "mech_v1",
        "operations": [{"op": "add_deliverable", "phase": "design", "value": "test_plan", "rationale": "bench test"}],
        "manufacturingContext": {"route": "vendor"},
        "targetMaturity": "physically_validated",
        "loadsAndUse": "20 kg"
    })
}

async fn propose(app: &axum::Router, key: &str) -> (String, String) {
    let (status, _, body) = send(app, post("/v1/design-flows/propose", &proposal(), Some(key))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    (
        body["approvalId"].as_str().unwrap().to_owned(),
        body["version_id"].as_str().unwrap().to_owned(),
    )
}

fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::empty()).unwrap()
}

/// Item 5: a proposal waits for a person; a waiter's resolve is refused and changes nothing.
#[tokio::test]
async fn a_waiters_resolve_cannot_close_a_flow_proposal_but_closes_a_held_tool_call() {
    let app = keyed();
    let (approval, version) = propose(&app, ALICE).await;
    let resolve = json!({"resolution": "canceled"});
    let (status, _, body) = send(
        &app,
        post(
            &format!("/v1/chat/tool_approvals/{approval}/resolve"),
            &resolve,
            Some(ALICE),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "person_decision_required");
    assert_eq!(body["details"]["kind"], "design_flow_proposal");
    let (_, _, record) = send(&app, get(&format!("/v1/approvals/{approval}"), Some(ALICE))).await;
    assert_eq!(record["status"], "awaiting_approval");
    let (_, _, stored) = send(
        &app,
        get(&format!("/v1/design-flows/versions/{version}"), Some(ALICE)),
    )
    .await;
    assert_eq!(stored["version"]["status"], "proposed");

    let (status, _, hold) = send(
        &app,
        post(
            "/v1/chat/tool_approvals",
            &json!({"tool": "twin.write"}),
            Some(ALICE),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{hold}");
    let id = hold["id"].as_str().unwrap();
    // Issue 38 item 7: another key does not wait on alice's hold; it stays open.
    let (status, _, refused) = send(
        &app,
        post(
            &format!("/v1/chat/tool_approvals/{id}/resolve"),
            &resolve,
            Some(BOB),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert_eq!(refused["error"], "not_the_waiter");
    assert_eq!(
        (
            refused["details"]["caller"].as_str(),
            refused["details"]["requested_by"].as_str()
        ),
        (Some("bob"), Some("alice"))
    );
    let (_, _, record) = send(&app, get(&format!("/v1/approvals/{id}"), Some(ALICE))).await;
    assert_eq!(record["status"], "awaiting_approval", "nothing was closed");
    let (status, _, closed) = send(
        &app,
        post(
            &format!("/v1/chat/tool_approvals/{id}/resolve"),
            &resolve,
            Some(ALICE),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{closed}");
    assert_eq!(closed["approval"]["status"], "canceled");
}

/// Item 6: the caller class of a parked hold comes from the transport, never the body; a relay
/// may only lower it to `untrusted`.
#[tokio::test]
async fn a_parked_holds_caller_class_comes_from_the_transport_not_the_body() {
    let cases = [
        (keyed(), Some(ALICE), "service", "remote"),
        (keyed(), Some(ALICE), "local", "remote"),
        (keyed(), Some(ALICE), "untrusted", "untrusted"),
        (app_with("", None), None, "service", "local"),
        (app_with("", None), None, "client_task", "local"),
    ];
    for (app, key, claimed, recorded) in cases {
        let body = json!({"tool": "twin.write", "caller": claimed});
        let (status, _, hold) = send(&app, post("/v1/chat/tool_approvals", &body, key)).await;
        assert_eq!(status, StatusCode::CREATED, "{hold}");
        assert_eq!(hold["caller"], recorded, "claimed {claimed}");
    }
}

/// Item 7: public health says ok/degraded per component only; the detail needs a key.
#[tokio::test]
async fn public_health_says_only_ok_or_degraded_and_the_detail_needs_a_key() {
    let app = keyed();
    let (status, _, public) = send(&app, get("/health", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(public["status"], "ok");
    assert_eq!(public["ledgers"], json!({"status": "ok"}));
    assert_eq!(public["usage"], json!({"status": "ok"}));
    assert!(public.get("llm_usage_24h").is_none(), "{public}");
    assert!(public.get("version").is_none(), "{public}");
    let (_, _, detail) = send(&app, get("/health", Some(ALICE))).await;
    assert_eq!(detail["llm_usage_24h"]["available"], true, "{detail}");
    assert!(detail["version"].is_string());
    let (status, _, _) = send(&app, get("/health", Some("sk-wrong-0001"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a presented key is checked");
    let (_, _, local) = send(&app_with("", None), get("/health", None)).await;
    assert_eq!(
        local["llm_usage_24h"]["available"], true,
        "open loopback is `local`: {local}"
    );
}

/// Issue 15: the MCP tool servers are one health component: `{status}` without a key, each
/// server's state and reason with one; degraded when any is unavailable.
#[tokio::test]
async fn health_reports_each_mcp_server_and_degrades_when_one_is_unavailable() {
    use metaforge_app::tools::{ServerStatus, ServerStatuses};
    let statuses = Arc::new(ServerStatuses::none());
    let with_servers = |statuses: &Arc<ServerStatuses>| {
        let mut state = Arc::try_unwrap(super::common::state())
            .ok()
            .expect("a fresh state has one owner");
        state.mcp_servers = Arc::clone(statuses);
        let auth = AuthState::new(parse_api_keys(&format!("alice:{ALICE}")).unwrap(), None);
        gateway::build(Arc::new(state), Arc::new(auth), 1 << 20)
    };
    // None configured: ok, and an empty map in the detail.
    let app = with_servers(&statuses);
    let (_, _, public) = send(&app, get("/health", None)).await;
    assert_eq!(public["mcp_servers"], json!({"status": "ok"}), "{public}");
    let (_, _, detail) = send(&app, get("/health", Some(ALICE))).await;
    assert_eq!(detail["mcp_servers"], json!({"status": "ok", "servers": {}}));

    statuses.set("everything", ServerStatus::Ok { tools: 12 });
    statuses.set("old", ServerStatus::Disabled);
    let (_, _, detail) = send(&app, get("/health", Some(ALICE))).await;
    assert_eq!(
        detail["status"], "ok",
        "a disabled server degrades nothing: {detail}"
    );
    assert_eq!(
        detail["mcp_servers"]["servers"]["everything"],
        json!({"status": "ok", "tools": 12})
    );
    assert_eq!(
        detail["mcp_servers"]["servers"]["old"],
        json!({"status": "disabled"})
    );

    statuses.set(
        "cad",
        ServerStatus::Unavailable {
            reason: "mcp server cad: cannot start freecad-mcp: No such file or directory".to_owned(),
        },
    );
    let (_, _, public) = send(&app, get("/health", None)).await;
    assert_eq!(public["status"], "degraded");
    assert_eq!(
        public["mcp_servers"],
        json!({"status": "degraded"}),
        "no names or reasons without a key: {public}"
    );
    let (_, _, detail) = send(&app, get("/health", Some(ALICE))).await;
    assert_eq!(detail["status"], "degraded");
    assert_eq!(detail["mcp_servers"]["status"], "degraded");
    assert_eq!(
        detail["mcp_servers"]["servers"]["cad"],
        json!({"status": "unavailable", "reason": "mcp server cad: cannot start freecad-mcp: No such file or directory"})
    );
}

/// Item 8: per-field limits with a 422 naming the field; nothing stored; nothing huge echoed.
#[tokio::test]
async fn stored_fields_over_their_limit_are_refused_naming_the_field_and_nothing_is_stored() {
    use metaforge_gateway::limits::{MAX_LOADS_AND_USE_CHARS, MAX_NOTE_CHARS, MAX_OPERATIONS};
    let app = keyed();
    let mut loads = proposal();
    loads["loadsAndUse"] = json!("k".repeat(MAX_LOADS_AND_USE_CHARS + 1));
    let mut many = proposal();
    let op = many["operations"][0].clone();
    many["operations"] = Value::Array(vec![op; MAX_OPERATIONS + 1]);
    let mut rationale = proposal();
    rationale["operations"][0]["rationale"] = json!("r".repeat(100_000));
    for (body, field) in [
        (loads, "loadsAndUse"),
        (many, "operations"),
        (rationale, "operations[0].rationale"),
    ] {
        let (status, _, error) = send(&app, post("/v1/design-flows/propose", &body, Some(ALICE))).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{field}");
        assert_eq!(error["error"], "too_large");
        assert_eq!(error["details"]["field"], field);
        assert!(error.to_string().len() < 1_000, "never echoed: {field}");
    }
    let (_, _, pending) = send(&app, get("/v1/approvals?status=all", Some(ALICE))).await;
    assert_eq!(pending["approvals"], json!([]), "nothing stored");

    let (approval, _) = propose(&app, ALICE).await;
    let note = json!({"decision": "reject", "note": "n".repeat(MAX_NOTE_CHARS + 1)});
    let (status, _, error) = send(
        &app,
        post(&format!("/v1/approvals/{approval}/decision"), &note, Some(BOB)),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(error["details"]["field"], "note");
    let (_, _, record) = send(&app, get(&format!("/v1/approvals/{approval}"), Some(BOB))).await;
    assert_eq!(record["status"], "awaiting_approval", "nothing decided");

    // A refusal that names a bad value (serde's unknown variant) cuts it short.
    let huge = json!({"decision": "x".repeat(200_000)});
    let (status, _, error) = send(
        &app,
        post(&format!("/v1/approvals/{approval}/decision"), &huge, Some(BOB)),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error.to_string().len() < 1_200,
        "clipped: {} bytes",
        error.to_string().len()
    );
}

/// A gateway with four eyes on and two people, alice and bob.
fn four_eyes_app() -> axum::Router {
    let state = state_with_policy(
        harness(),
        Arc::new(MemoryUsageStore::new()),
        Vec::new(),
        None,
        ApproverPolicy::Separate,
    );
    let keys = parse_api_keys(&format!("alice:{ALICE},bob:{BOB}")).unwrap();
    gateway::build(state, Arc::new(AuthState::new(keys, None)), 1 << 20)
}

/// Four eyes: with `Separate`, the proposer cannot decide; another person can.
#[tokio::test]
async fn four_eyes_refuses_a_decision_by_the_proposer_with_403_and_accepts_another_person() {
    let app = four_eyes_app();
    let (approval, version) = propose(&app, ALICE).await;
    let approve = json!({"decision": "approve"});
    for path in [
        format!("/v1/approvals/{approval}/decision"),
        format!("/v1/chat/tool_approvals/{approval}"),
    ] {
        let (status, _, body) = send(&app, post(&path, &approve, Some(ALICE))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["error"], "separate_approver_required");
        assert!(body["message"].as_str().unwrap().contains("alice"));
    }
    let (status, _, decided) = send(
        &app,
        post(&format!("/v1/approvals/{approval}/decision"), &approve, Some(BOB)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(decided["approver"], "bob");
    let (_, _, stored) = send(
        &app,
        get(&format!("/v1/design-flows/versions/{version}"), Some(BOB)),
    )
    .await;
    assert_eq!(stored["version"]["status"], "approved");
}

/// Four eyes covers held tool calls too: the key that parked a hold over HTTP is recorded as its
/// requester (its caller stays the transport's class), and that identity may not decide it.
#[tokio::test]
async fn four_eyes_refuses_a_decision_by_the_key_that_parked_a_tool_call() {
    let app = four_eyes_app();
    let (status, _, parked) = send(
        &app,
        post(
            "/v1/chat/tool_approvals",
            &json!({"tool": "twin.commit_geometry", "arguments": {}, "timeout_seconds": 60}),
            Some(ALICE),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{parked}");
    assert_eq!(parked["caller"], "remote");
    assert_eq!(parked["requested_by"], "alice");
    let id = parked["id"].as_str().unwrap();
    let approve = json!({"decision": "approve"});
    let (status, _, body) = send(
        &app,
        post(&format!("/v1/approvals/{id}/decision"), &approve, Some(ALICE)),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"], "separate_approver_required");
    let (status, _, decided) = send(
        &app,
        post(&format!("/v1/approvals/{id}/decision"), &approve, Some(BOB)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(decided["approver"], "bob");
}

/// Without four eyes (the default) the proposer may decide, as before.
#[tokio::test]
async fn without_four_eyes_the_proposer_may_decide() {
    let app = keyed();
    let (approval, _) = propose(&app, ALICE).await;
    let (status, _, body) = send(
        &app,
        post(
            &format!("/v1/approvals/{approval}/decision"),
            &json!({"decision": "approve"}),
            Some(ALICE),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Item 9: every error is the JSON shape, whichever layer produced it.
#[tokio::test]
async fn every_error_the_router_sends_is_the_json_error_shape() {
    let app = keyed();
    let long_uri = format!("/v1/approvals/{}", "a".repeat(10_000));
    let big_header = "h".repeat(40_000);
    let cases: Vec<(Request<Body>, StatusCode, &str)> = vec![
        (
            request("GET", "/no/such/route", &[("x-api-key", ALICE)]),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            request("DELETE", "/health", &[("x-api-key", ALICE)]),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            request("GET", "/v1/approvals/%FF%FE", &[("x-api-key", ALICE)]),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            request("GET", &long_uri, &[("x-api-key", ALICE)]),
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
        ),
        (
            request("GET", "/health", &[("x-padding", big_header.as_str())]),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "header_fields_too_large",
        ),
        (
            request("GET", "/no/such/route", &[]),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
    ];
    for (req, want, code) in cases {
        let label = format!(
            "{} {}",
            req.method(),
            req.uri().path().chars().take(40).collect::<String>()
        );
        let (status, headers, body) = send(&app, req).await;
        assert_eq!(status, want, "{label}: {body}");
        assert_eq!(body["error"], code, "{label}: {body}");
        assert!(body["message"].is_string(), "{label}");
        assert!(
            headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json"),
            "{label}"
        );
        if want == StatusCode::METHOD_NOT_ALLOWED {
            assert!(headers.contains_key("allow"), "405 keeps Allow");
        }
    }
}

/// Item 11: the auth scheme is case-insensitive.
#[tokio::test]
async fn an_uppercase_bearer_scheme_is_accepted() {
    let app = keyed();
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let value = format!("{scheme} {ALICE}");
        let (status, _, body) = send(
            &app,
            request("GET", "/v1/approvals", &[("authorization", value.as_str())]),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{scheme}: {body}");
    }
}

/// Wrong keys are throttled per client address; the right key is still admitted from it.
#[tokio::test]
async fn repeated_wrong_keys_are_answered_429_while_the_right_key_is_still_admitted() {
    use metaforge_gateway::auth::DEFAULT_AUTH_FAILURES_PER_MINUTE;
    let app = keyed();
    for _ in 0..DEFAULT_AUTH_FAILURES_PER_MINUTE {
        let (status, _, _) = send(&app, get("/v1/approvals", Some("sk-guess-0001"))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let (status, headers, body) = send(&app, get("/v1/approvals", Some("sk-guess-0002"))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"], "auth_throttled");
    assert!(headers.contains_key("retry-after"));
    let (status, _, body) = send(&app, get("/v1/approvals", Some(ALICE))).await;
    assert_eq!(status, StatusCode::OK, "the right key is not locked out: {body}");
    // Requests with no key are not guesses: they never use up the window.
    let open = keyed();
    for _ in 0..(DEFAULT_AUTH_FAILURES_PER_MINUTE * 2) {
        assert_eq!(
            send(&open, get("/v1/approvals", None)).await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        send(&open, get("/v1/approvals", Some(ALICE))).await.0,
        StatusCode::OK
    );
}
