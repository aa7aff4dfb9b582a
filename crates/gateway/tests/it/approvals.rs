//! Proposals, versions and the one approval ledger through the gateway's routes.

use super::common::{app_with, get, post, send};
use axum::http::StatusCode;
use serde_json::{Value, json};

const KEY: &str = "sk-alice-0001";

fn app() -> axum::Router {
    app_with("alice:sk-alice-0001", None)
}

fn full_context() -> Value {
    json!({
        "manufacturingContext": {"route": "vendor"},
        "targetMaturity": "physically_validated",
        "loadsAndUse": "20 kg shelf load"
    })
}

fn caller_proposal() -> Value {
    let mut body = full_context();
    body["template"] = json!("mech_v1");
    body["operations"] = json!([
        {"op": "add_deliverable", "phase": "design", "value": "test_plan", "rationale": "bench test before release"}
    ]);
    body["caller"] = json!({"client": "claude-code", "model": "claude-opus-4-8"});
    body
}

async fn propose(app: &axum::Router) -> Value {
    let (status, _, body) = send(
        app,
        post("/v1/design-flows/propose", &caller_proposal(), Some(KEY)),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body
}

#[tokio::test]
async fn a_caller_proposal_is_stored_and_held_once_and_approving_it_approves_the_version() {
    let app = app();
    let body = propose(&app).await;
    assert_eq!(body["status"], "proposed");
    assert_eq!(body["proposed_by"]["client"], "claude-code");
    assert!(body["generatedBy"].is_null());
    assert_eq!(body["requirementsPending"], true);
    let approval_id = body["approvalId"].as_str().unwrap_or_default().to_owned();
    let version_id = body["version_id"].as_str().unwrap_or_default().to_owned();

    let (_, _, pending) = send(&app, get("/v1/approvals", Some(KEY))).await;
    let holds = pending["approvals"].as_array().cloned().unwrap_or_default();
    assert_eq!(holds.len(), 1, "exactly one held approval: {pending}");
    assert_eq!(holds[0]["kind"], "design_flow_proposal");
    assert_eq!(holds[0]["flow_version_id"], version_id.as_str());

    let (status, _, version) = send(
        &app,
        get(&format!("/v1/design-flows/versions/{version_id}"), Some(KEY)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(version["version"]["status"], "proposed");
    assert_eq!(version["version"]["origin"], "caller");

    let decision = json!({"decision": "approve", "note": "looks right"});
    let (status, _, decided) = send(
        &app,
        post(
            &format!("/v1/approvals/{approval_id}/decision"),
            &decision,
            Some(KEY),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(decided["status"], "approved");
    assert_eq!(
        decided["approver"], "alice",
        "the approver is the authenticated identity"
    );

    let (_, _, version) = send(
        &app,
        get(&format!("/v1/design-flows/versions/{version_id}"), Some(KEY)),
    )
    .await;
    assert_eq!(version["version"]["status"], "approved");
    assert_eq!(version["version"]["approver"], "alice");

    let reject = json!({"decision": "reject"});
    let (status, _, conflict) = send(
        &app,
        post(
            &format!("/v1/chat/tool_approvals/{approval_id}"),
            &reject,
            Some(KEY),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        conflict["message"]
            .as_str()
            .unwrap_or_default()
            .contains("approved"),
        "{conflict}"
    );
}

#[tokio::test]
async fn a_decision_cannot_name_its_own_approver() {
    let app = app();
    let body = propose(&app).await;
    let id = body["approvalId"].as_str().unwrap_or_default().to_owned();
    let forged = json!({"decision": "approve", "approver": "mallory"});
    let (status, _, err) = send(
        &app,
        post(&format!("/v1/approvals/{id}/decision"), &forged, Some(KEY)),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert!(err["message"].as_str().unwrap_or_default().contains("approver"));
}

#[tokio::test]
async fn missing_context_answers_needs_input_and_stores_nothing() {
    let app = app();
    let body = json!({"template": "mech_v1", "operations": []});
    let (status, _, answer) = send(&app, post("/v1/design-flows/propose", &body, Some(KEY))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["status"], "needs_input");
    let ids: Vec<&str> = answer["questions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|q| q["id"].as_str())
        .collect();
    assert_eq!(ids, ["manufacturing_route", "target_maturity", "loads_and_use"]);
    assert!(answer["approvalId"].is_null());
    let (_, _, pending) = send(&app, get("/v1/approvals", Some(KEY))).await;
    assert_eq!(pending["approvals"].as_array().map(Vec::len), Some(0));
}

#[tokio::test]
async fn strict_caller_operations_refuse_unknown_phases_and_missing_rationale() {
    let app = app();
    let mut body = full_context();
    body["template"] = json!("mech_v1");
    body["operations"] = json!([
        {"op": "drop_phase", "phase": "nonexistent", "rationale": "x"},
        {"op": "add_deliverable", "phase": "design", "value": "test_plan"}
    ]);
    let (status, _, err) = send(&app, post("/v1/design-flows/propose", &body, Some(KEY))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(err["error"], "invalid_proposal");
    assert_eq!(err["details"]["refused"].as_array().map(Vec::len), Some(2));
    let unknown_template = json!({"template": "nope_v9", "operations": []});
    let (status, _, err) = send(
        &app,
        post("/v1/design-flows/propose", &unknown_template, Some(KEY)),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(err["error"], "unknown_template");
}

#[tokio::test]
async fn the_generator_path_without_a_model_is_503_and_proposes_nothing() {
    let app = app();
    let mut body = full_context();
    body["intent"] = json!("a wall shelf");
    let (status, _, err) = send(&app, post("/v1/design-flows/propose", &body, Some(KEY))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(err["error"], "unavailable");
    let (_, _, pending) = send(&app, get("/v1/approvals", Some(KEY))).await;
    assert_eq!(pending["approvals"].as_array().map(Vec::len), Some(0));
}

#[tokio::test]
async fn saving_an_edit_holds_a_version_and_bad_edits_store_nothing() {
    let app = app();
    let template = metaforge_domain::flow::template("design_v1").map(|f| serde_json::to_value(f).ok());
    let mut flow = template.ok().flatten().unwrap_or_default();
    let (status, _, err) = send(
        &app,
        post("/v1/design-flows/versions", &json!({"flow": flow}), Some(KEY)),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(err["error"], "identical_to_template");

    flow["phases"][4]["enforce_deliverables"] = json!(false);
    let (status, _, err) = send(
        &app,
        post("/v1/design-flows/versions", &json!({"flow": flow}), Some(KEY)),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(err["error"], "invariant_violations");
    assert!(
        err["details"]["violations"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v["rule"] == "gates-enforce-what-they-require")
    );

    flow["phases"][4]["enforce_deliverables"] = json!(true);
    flow["phases"][4]["required_deliverables"] = json!(["cad_model", "drawing"]);
    flow["phases"][4]["expected_artifacts"] = json!(["cad_model", "drawing"]);
    let (status, _, saved) = send(
        &app,
        post("/v1/design-flows/versions", &json!({"flow": flow}), Some(KEY)),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{saved}");
    assert_eq!(saved["version"]["status"], "proposed");
    assert!(
        saved["diff"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|l| l.as_str().unwrap_or_default().contains("drawing"))
    );
    let (_, _, pending) = send(&app, get("/v1/approvals", Some(KEY))).await;
    assert_eq!(pending["approvals"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn a_waiter_closes_its_hold_idempotently_and_a_person_cannot_answer_it_afterwards() {
    let app = app();
    let park = json!({"tool": "twin.commit_geometry", "arguments": {"wp": 1}, "caller": "remote", "timeout_seconds": 60});
    let (status, _, hold) = send(&app, post("/v1/chat/tool_approvals", &park, Some(KEY))).await;
    assert_eq!(status, StatusCode::CREATED, "{hold}");
    assert_eq!(hold["status"], "awaiting_approval");
    assert!(hold["deadline"].is_string());
    let id = hold["id"].as_str().unwrap_or_default().to_owned();

    let resolve = json!({"resolution": "timed_out"});
    let (status, _, first) = send(
        &app,
        post(
            &format!("/v1/chat/tool_approvals/{id}/resolve"),
            &resolve,
            Some(KEY),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["outcome"], "resolved");
    assert_eq!(first["approval"]["status"], "timed_out");
    let (status, _, again) = send(
        &app,
        post(
            &format!("/v1/chat/tool_approvals/{id}/resolve"),
            &resolve,
            Some(KEY),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["outcome"], "already_closed");

    let (status, _, err) = send(
        &app,
        post(
            &format!("/v1/chat/tool_approvals/{id}"),
            &json!({"decision": "approve"}),
            Some(KEY),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        err["message"].as_str().unwrap_or_default().contains("timed_out"),
        "{err}"
    );
}

#[tokio::test]
async fn resolving_a_decided_hold_is_409_naming_its_state() {
    let app = app();
    let park = json!({"tool": "project.delete", "caller": "remote"});
    let (_, _, hold) = send(&app, post("/v1/chat/tool_approvals", &park, Some(KEY))).await;
    let id = hold["id"].as_str().unwrap_or_default().to_owned();
    let (status, _, _) = send(
        &app,
        post(
            &format!("/v1/chat/tool_approvals/{id}"),
            &json!({"decision": "reject"}),
            Some(KEY),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, err) = send(
        &app,
        post(
            &format!("/v1/chat/tool_approvals/{id}/resolve"),
            &json!({"resolution": "canceled"}),
            Some(KEY),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        err["message"].as_str().unwrap_or_default().contains("rejected"),
        "{err}"
    );
}

#[tokio::test]
async fn unknown_ids_are_404_and_bad_enums_are_400_naming_the_field() {
    let app = app();
    for path in [
        "/v1/approvals/nope",
        "/v1/chat/tool_approvals/nope",
        "/v1/design-flows/versions/nope",
    ] {
        let (status, _, body) = send(&app, get(path, Some(KEY))).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(body["error"], "not_found");
    }
    let (status, _, body) = send(
        &app,
        post(
            "/v1/approvals/x/decision",
            &json!({"decision": "maybe"}),
            Some(KEY),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"]["field"], "decision", "{body}");
    let (status, _, body) = send(&app, get("/v1/approvals?status=weird", Some(KEY))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"]["field"], "status");
}

#[tokio::test]
async fn an_absurd_timeout_is_refused_not_overflowed() {
    let app = app();
    let park = json!({"tool": "x.y", "caller": "remote", "timeout_seconds": 9_223_372_036_854_775_808_u64});
    let (status, _, err) = send(&app, post("/v1/chat/tool_approvals", &park, Some(KEY))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap_or_default()
            .contains("timeout_seconds")
    );
}

/// Issue 38 item 10: the pending queue comes a page at a time (default 100, at most 500) with
/// its total and a cursor, over both list routes; a bad page size or cursor is a 400 naming it.
#[tokio::test]
async fn the_pending_queue_is_paged_with_a_total_and_a_cursor() {
    let app = app();
    for n in 0..5 {
        let (status, _, hold) = send(
            &app,
            post(
                "/v1/chat/tool_approvals",
                &json!({"tool": "twin.write", "arguments": {"n": n}}),
                Some(KEY),
            ),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{hold}");
    }
    for route in ["/v1/approvals", "/v1/chat/tool_approvals"] {
        let (_, _, whole) = send(&app, get(route, Some(KEY))).await;
        assert_eq!(whole["total"], 5, "{whole}");
        assert!(whole.get("next_cursor").is_none(), "one page: {whole}");
        let mut seen = Vec::new();
        let mut path = format!("{route}?limit=2");
        loop {
            let (status, _, page) = send(&app, get(&path, Some(KEY))).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            assert_eq!(page["total"], 5);
            seen.extend(
                page["approvals"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| h["arguments"]["n"].clone()),
            );
            match page["next_cursor"].as_str() {
                Some(cursor) => {
                    let encoded = cursor.replace('|', "%7C").replace(':', "%3A").replace('+', "%2B");
                    path = format!("{route}?limit=2&after={encoded}");
                }
                None => break,
            }
        }
        assert_eq!(
            seen,
            [0, 1, 2, 3, 4].map(|n| json!(n)),
            "every hold once, oldest first"
        );
    }
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("after=not-a-cursor", "after"),
    ] {
        let (status, _, body) = send(&app, get(&format!("/v1/approvals?{query}"), Some(KEY))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["details"]["field"], field, "{query}: {body}");
    }
}
