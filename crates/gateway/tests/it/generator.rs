//! The generator path of `POST /v1/design-flows/propose`: one model call through the real
//! pipeline and the real OpenAI-compatible adapter to local upstreams the test scripts, the
//! answer read leniently, the proposal stored with origin `server` and held once with
//! `generated_by` — and nothing stored whenever the generator cannot do its job.
#![expect(
    clippy::disallowed_methods,
    reason = "the opt-in real-model test reads where the model server is"
)]

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::StatusCode;
use metaforge_app::pipeline::RetryPolicy;
use metaforge_test_support::doubles::MemoryUsageStore;
use metaforge_test_support::upstream::{Reply, Scripted};
use serde_json::{Value, json};

use crate::common::{
    MemorySelection, app_over, get, post, recorded, send, serve_upstream, state_over_upstreams,
};

/// What a scripted upstream answers.
#[derive(Clone)]
enum Script {
    /// A chat completion whose assistant text is this.
    Answer(String),
    /// HTTP 500 every time.
    Fail,
}

/// A local OpenAI-compatible upstream answering by `script`; its base URL and the upstream,
/// which keeps every request body.
async fn upstream(script: Script) -> (String, Scripted) {
    serve_upstream(move |_| match &script {
        Script::Fail => Reply::json(
            500,
            r#"{"error":{"message":"upstream down","type":"server_error"}}"#,
        ),
        Script::Answer(text) => Reply::json(
            200,
            json!({
                "id": "g1", "object": "chat.completion", "model": "served-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 812, "completion_tokens": 64, "total_tokens": 876}
            })
            .to_string(),
        ),
    })
    .await
}

/// The gateway over in-memory ledgers; `flow_generator` routes to `openai:gpt-4o-mini` (at
/// `primary`), with `deepseek:deepseek-chat` (at `fallback`) behind it when given.
struct Rig {
    app: axum::Router,
    usage: Arc<MemoryUsageStore>,
}

fn rig(primary: &str, fallback: Option<&str>) -> Rig {
    rig_with_model(primary, "gpt-4o-mini", fallback)
}

fn rig_with_model(primary: &str, model: &str, fallback: Option<&str>) -> Rig {
    let primary_route = format!("openai:{model}");
    let mut providers = vec![("openai", primary)];
    let mut chain = vec![primary_route.as_str()];
    if let Some(url) = fallback {
        providers.push(("deepseek", url));
        chain.push("deepseek:deepseek-chat");
    }
    let table = metaforge_domain::routing::RoutingTable::from_json(
        &json!({"roles": {"flow_generator": primary_route}}).to_string(),
    )
    .unwrap();
    let harness = metaforge_app::routing::RouteResolver {
        table,
        env_routes: BTreeMap::new(),
        credentialed: ["openai".to_owned(), "deepseek".to_owned()].into_iter().collect(),
        default_route: None,
        selection: Arc::new(MemorySelection::default()),
    };
    let no_retries = RetryPolicy {
        api_max_retries: 0,
        ..RetryPolicy::default()
    };
    let (state, usage) = state_over_upstreams(&providers, "flow_generator", &chain, no_retries, harness);
    Rig {
        app: app_over(state),
        usage,
    }
}

fn request(context: Value) -> Value {
    let mut body = context;
    body["intent"] = json!("A wall shelf I can make with what I have.");
    body
}

fn full_context() -> Value {
    json!({
        "manufacturingContext": {"route": "in_house", "processes": ["FDM printing"],
            "machines": ["Prusa MK4, 250x210x220 mm"], "stockMaterials": ["PETG"]},
        "targetMaturity": "physically_validated",
        "loadsAndUse": "holds 5 kg of books"
    })
}

const GOOD_ANSWER: &str = r#"Here is the tailoring:
```json
{"template": "mech_v1",
 "operations": [
   {"op": "add_deliverable", "phase": "design", "value": "bom", "rationale": "the print needs a parts list"},
   {"op": "drop_phase", "phase": "no_such_phase", "rationale": "misremembered"},
   {"op": "set_model", "phase": "design", "value": "anthropic:gpt-4o", "rationale": "a strong model"},
   {"op": "drop_phase", "phase": "design"}
 ],
 "questions": ["Which wall type will it hang on?", "What finish do you want?", "Is PETG colour important?", "A fourth?"]}
```"#;

async fn nothing_stored(app: &axum::Router) {
    let (_, _, pending) = send(app, get("/v1/approvals", None)).await;
    assert_eq!(
        pending["approvals"].as_array().map(Vec::len),
        Some(0),
        "{pending}"
    );
    let (_, _, versions) = send(app, get("/v1/design-flows/versions", None)).await;
    assert_eq!(
        versions["versions"].as_array().map(Vec::len),
        Some(0),
        "{versions}"
    );
}

#[tokio::test]
async fn a_generated_proposal_is_applied_leniently_stored_as_server_origin_and_held_once_with_generated_by() {
    let (url, seen) = upstream(Script::Answer(GOOD_ANSWER.to_owned())).await;
    let rig = rig(&url, None);
    let (status, _, body) = send(
        &rig.app,
        post("/v1/design-flows/propose", &request(full_context()), None),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["status"], "proposed");
    assert_eq!(
        body["generatedBy"],
        json!({"provider": "openai", "model": "gpt-4o-mini", "fellBackFrom": null})
    );
    assert!(body["proposed_by"].is_null());
    assert_eq!(body["proposal"]["template_id"], "mech_v1");
    assert_eq!(body["proposal"]["mode"], "lenient");
    let applied: Vec<&str> = body["proposal"]["applied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["op"].as_str().unwrap())
        .collect();
    assert_eq!(applied, ["add_deliverable"]);
    let skipped: Vec<(u64, String)> = body["proposal"]["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["index"].as_u64().unwrap(),
                p["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(skipped.len(), 3, "{skipped:?}");
    assert!(skipped[0].1.contains("unknown phase 'no_such_phase'"));
    assert!(skipped[1].1.contains("not routable"), "{skipped:?}");
    assert!(skipped[2].1.contains("rationale"));
    assert_eq!(
        body["openQuestions"],
        json!([
            "Which wall type will it hang on?",
            "What finish do you want?",
            "Is PETG colour important?"
        ])
    );

    // One stored version (origin server) and one held approval carrying generated_by.
    let version_id = body["version_id"].as_str().unwrap();
    let (status, _, version) = send(
        &rig.app,
        get(&format!("/v1/design-flows/versions/{version_id}"), None),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(version["version"]["origin"], "server");
    assert_eq!(version["version"]["status"], "proposed");
    let (_, _, pending) = send(&rig.app, get("/v1/approvals", None)).await;
    let holds = pending["approvals"].as_array().unwrap();
    assert_eq!(holds.len(), 1);
    assert_eq!(holds[0]["kind"], "design_flow_proposal");
    assert_eq!(holds[0]["arguments"]["generated_by"]["provider"], "openai");
    assert_eq!(holds[0]["arguments"]["generated_by"]["model"], "gpt-4o-mini");

    // The model was told the rules and the context, under the generator role's output cap.
    let requests = seen.bodies();
    assert_eq!(requests.len(), 1);
    let sent = requests[0].to_string();
    assert!(sent.contains("derive process and material choices"), "{sent}");
    assert!(sent.contains("Prusa MK4"));
    assert!(sent.contains("holds 5 kg of books"));

    // FORGE-476: the call's tokens are attributed to the flow_generator role and the caller.
    let events = recorded(&rig.usage, 1).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].role.as_deref(), Some("flow_generator"));
    assert_eq!(events[0].caller.as_deref(), Some("local"));
    assert_eq!(events[0].provider, "openai");
}

#[tokio::test]
async fn a_fallback_that_answers_is_named_with_the_primary_it_fell_back_from() {
    let (down, _) = upstream(Script::Fail).await;
    let (up, _) = upstream(Script::Answer(
        r#"{"template": "mech_v1", "operations": [{"op": "add_deliverable", "phase": "design", "value": "bom", "rationale": "parts list"}]}"#.to_owned(),
    ))
    .await;
    let rig = rig(&down, Some(&up));
    let (status, _, body) = send(
        &rig.app,
        post("/v1/design-flows/propose", &request(full_context()), None),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        body["generatedBy"],
        json!({"provider": "deepseek", "model": "deepseek-chat", "fellBackFrom": "openai:gpt-4o-mini"})
    );
    let (_, _, pending) = send(&rig.app, get("/v1/approvals", None)).await;
    assert_eq!(
        pending["approvals"][0]["arguments"]["generated_by"]["fellBackFrom"],
        "openai:gpt-4o-mini"
    );
}

#[tokio::test]
async fn no_reachable_model_is_503_with_every_attempt_and_proposes_nothing() {
    let (down, _) = upstream(Script::Fail).await;
    let rig = rig(&down, None);
    let (status, _, err) = send(
        &rig.app,
        post("/v1/design-flows/propose", &request(full_context()), None),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{err}");
    assert_eq!(err["error"], "unavailable");
    assert_eq!(err["details"]["role"], "flow_generator");
    assert_eq!(err["details"]["attempts"][0]["provider"], "openai");
    assert_eq!(err["details"]["attempts"][0]["status"], 500);
    nothing_stored(&rig.app).await;
}

#[tokio::test]
async fn an_answer_without_a_proposal_is_503_and_proposes_nothing() {
    let (url, _) = upstream(Script::Answer("I would keep the flow as it is.".to_owned())).await;
    let rig = rig(&url, None);
    let (status, _, err) = send(
        &rig.app,
        post("/v1/design-flows/propose", &request(full_context()), None),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{err}");
    assert_eq!(err["error"], "generator_answer_unusable");
    assert_eq!(err["details"]["excerpt"], "I would keep the flow as it is.");
    nothing_stored(&rig.app).await;
}

#[tokio::test]
async fn a_generated_flow_dropping_simulation_with_unknown_loads_is_422_and_stores_nothing() {
    let (url, _) = upstream(Script::Answer(
        r#"{"template": "mech_v1", "operations": [{"op": "drop_phase", "phase": "simulation", "rationale": "practical load testing will suffice"}]}"#.to_owned(),
    ))
    .await;
    let rig = rig(&url, None);
    let mut context = full_context();
    context["loadsAndUse"] = json!("unknown");
    let (status, _, err) = send(
        &rig.app,
        post("/v1/design-flows/propose", &request(context), None),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(err["error"], "invalid_proposal");
    assert!(
        err["details"]["violations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["rule"] == "physical-verification-kept"),
        "{err}"
    );
    nothing_stored(&rig.app).await;
}

#[tokio::test]
async fn missing_context_asks_the_required_questions_then_at_most_three_from_the_model() {
    let (url, seen) = upstream(Script::Answer(GOOD_ANSWER.to_owned())).await;
    let rig = rig(&url, None);
    let context = json!({"manufacturingContext": {"route": "vendor"}});
    let (status, _, body) = send(
        &rig.app,
        post("/v1/design-flows/propose", &request(context), None),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "needs_input");
    let asked: Vec<(String, String)> = body["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["id"].as_str().unwrap().to_owned(),
                q["source"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("target_maturity", "server"),
        ("loads_and_use", "server"),
        ("model_1", "model"),
        ("model_2", "model"),
        ("model_3", "model"),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    assert_eq!(asked, expected);
    assert!(body["approvalId"].is_null());
    // The model was told which questions the server is already asking.
    let sent = seen.bodies()[0].to_string();
    assert!(sent.contains("Do not propose operations now"), "{sent}");
    nothing_stored(&rig.app).await;
}

#[tokio::test]
async fn missing_context_with_no_model_still_asks_the_required_questions_and_says_which_are_absent() {
    let (down, _) = upstream(Script::Fail).await;
    let rig = rig(&down, None);
    let (status, _, body) = send(
        &rig.app,
        post("/v1/design-flows/propose", &request(json!({})), None),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "needs_input");
    let sources: Vec<&str> = body["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["server", "server", "server"]);
    assert!(
        body["assumptions"][0]
            .as_str()
            .unwrap()
            .starts_with("The product-specific questions are absent")
    );
    nothing_stored(&rig.app).await;
}

#[tokio::test]
async fn the_generator_path_needs_an_intent() {
    let (url, seen) = upstream(Script::Answer(GOOD_ANSWER.to_owned())).await;
    let rig = rig(&url, None);
    let (status, _, err) = send(&rig.app, post("/v1/design-flows/propose", &full_context(), None)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert_eq!(err["details"]["field"], "intent");
    assert!(seen.bodies().is_empty(), "no model call for a bad request");
    nothing_stored(&rig.app).await;
}

/// Opt-in real inference (`cargo xtask e2e --real-model`): the generator path against
/// llama-cpp-python serving SmolLM2-135M. A model that small rarely writes a usable proposal, so
/// either outcome the spec allows is accepted — a proposal held once with the real model named in
/// `generatedBy`, or 503 `generator_answer_unusable` with its excerpt and nothing stored — but the
/// wire path must work end to end: any other status fails.
#[tokio::test]
#[ignore = "needs a local llama-cpp-python server: cargo xtask e2e --real-model"]
async fn real_model_the_generator_path_runs_against_a_real_small_model() {
    let url = std::env::var("METAFORGE_E2E_OPENAI_BASE_URL")
        .expect("run through `cargo xtask e2e --real-model`, which sets METAFORGE_E2E_OPENAI_BASE_URL");
    let rig = rig_with_model(&url, "smollm2", None);
    let (status, _, body) = send(
        &rig.app,
        post("/v1/design-flows/propose", &request(full_context()), None),
    )
    .await;
    eprintln!("real model propose: {status} {body}");
    match status {
        StatusCode::CREATED => {
            assert_eq!(body["generatedBy"]["provider"], "openai");
            assert_eq!(body["generatedBy"]["model"], "smollm2");
            let (_, _, pending) = send(&rig.app, get("/v1/approvals", None)).await;
            assert_eq!(pending["approvals"].as_array().map(Vec::len), Some(1));
        }
        StatusCode::SERVICE_UNAVAILABLE => {
            assert_eq!(body["error"], "generator_answer_unusable", "{body}");
            assert!(!body["details"]["excerpt"].as_str().unwrap_or_default().is_empty());
            nothing_stored(&rig.app).await;
        }
        StatusCode::UNPROCESSABLE_ENTITY => {
            // A real answer whose operations break an invariant is refused, and nothing stored.
            assert_eq!(body["error"], "invalid_proposal", "{body}");
            nothing_stored(&rig.app).await;
        }
        other => panic!("unexpected {other}: {body}"),
    }
    let events = recorded(&rig.usage, 1).await;
    assert_eq!(events[0].role.as_deref(), Some("flow_generator"));
    assert!(
        events[0].prompt_tokens.is_some(),
        "llama.cpp reports usage: {:?}",
        events[0]
    );
}
