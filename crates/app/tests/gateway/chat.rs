//! `POST /v1/chat/completions` and `GET /v1/harness/providers` over the real pipeline and the real
//! OpenAI-compatible adapter, against a local upstream whose answers the test scripts and against
//! aimock (a real multi-provider mock server the test starts and stops by PID).

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use http_body_util::BodyExt;
use metaforge_adapters_llm::{HttpSettings, OpenAiCompatibleProvider};
use metaforge_app::approvals::ApprovalService;
use metaforge_app::flows::FlowService;
use metaforge_app::gateway::GatewayState;
use metaforge_app::gateway::chat::UsageStoreSink;
use metaforge_app::gateway::providers::ProviderRow;
use metaforge_app::pipeline::{
    Candidate, CredentialRotor, FallbackAlarm, ProviderEntry, ProviderPipeline, RetryPolicy, RoleModelSlots,
};
use metaforge_ports::usage_store::UsageStore;
use metaforge_ports::{Billing, Clock, IdGen, UsageEvent};
use metaforge_test_support::doubles::{MemoryApprovalLedger, MemoryFlowVersionStore, MemoryUsageStore};
use metaforge_test_support::{ManualClock, SequentialIds};
use tower::ServiceExt;

use crate::common::{MemorySelection, app_over, get, post, send};

/// What the scripted upstream answers next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ok,
    RateLimited,
}

/// A local OpenAI-compatible upstream: JSON or SSE by the request's `stream` flag, or 429.
async fn upstream(mode: Arc<Mutex<Mode>>) -> String {
    use axum::response::IntoResponse;
    let handler = move |axum::Json(body): axum::Json<serde_json::Value>| {
        let mode = *mode.lock().unwrap();
        async move {
            if mode == Mode::RateLimited {
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "1")],
                    r#"{"error":{"message":"slow down","type":"rate_limit"}}"#,
                )
                    .into_response();
            }
            if body["stream"] == serde_json::json!(true) {
                let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
                    format!(
                        "data: {}\n\n",
                        serde_json::json!({"id": "u1", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
                            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                    )
                };
                let usage = serde_json::json!({"id": "u1", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
                    "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}});
                let text = [
                    chunk(
                        serde_json::json!({"role": "assistant", "content": "Hel"}),
                        serde_json::Value::Null,
                    ),
                    chunk(serde_json::json!({"content": "lo"}), serde_json::Value::Null),
                    chunk(serde_json::json!({}), serde_json::json!("stop")),
                    format!("data: {usage}\n\n"),
                    "data: [DONE]\n\n".to_owned(),
                ]
                .concat();
                return ([("content-type", "text/event-stream")], text).into_response();
            }
            axum::Json(serde_json::json!({"id": "u1", "object": "chat.completion", "model": "gpt-4o-mini",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}))
            .into_response()
        }
    };
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

/// A harness where `chat` and `summarisation` route to openai, which is credentialed.
fn openai_harness() -> metaforge_app::gateway::harness::HarnessConfig {
    let table = metaforge_domain::routing::RoutingTable::from_json(
        r#"{"roles": {"chat": "openai:gpt-4o-mini", "summarisation": "openai:gpt-4o-mini"}}"#,
    )
    .unwrap();
    metaforge_app::gateway::harness::HarnessConfig {
        table,
        env_routes: BTreeMap::new(),
        credentialed: ["openai".to_owned()].into_iter().collect(),
        default_route: None,
        selection: Arc::new(MemorySelection::default()),
    }
}

/// The gateway state with a pipeline whose `openai` adapter calls `url`.
fn state_with_pipeline(url: &str) -> (Arc<GatewayState>, Arc<MemoryUsageStore>) {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::fixed());
    let ids: Arc<dyn IdGen> = Arc::new(SequentialIds::new("id"));
    let ledger = Arc::new(MemoryApprovalLedger::new(Arc::clone(&clock)));
    let versions = Arc::new(MemoryFlowVersionStore::new());
    let usage = Arc::new(MemoryUsageStore::new());
    let adapter = Arc::new(OpenAiCompatibleProvider::new(url, HttpSettings::default(), false).unwrap());
    let chain = vec![Candidate {
        provider: "openai".into(),
        model: "gpt-4o-mini".into(),
    }];
    let slots = RoleModelSlots::new(BTreeMap::from([("chat".to_owned(), chain)])).unwrap();
    let pipeline = ProviderPipeline::new(
        vec![ProviderEntry {
            id: "openai".into(),
            adapter,
            billing: Billing::Metered,
        }],
        slots,
        RetryPolicy::default(),
        CredentialRotor::new(None),
        Arc::new(FallbackAlarm::new()),
        Arc::new(UsageStoreSink::new(usage.clone(), Arc::clone(&clock))),
    )
    .unwrap();
    let state = Arc::new(GatewayState {
        metrics: None,
        approvals: Arc::new(ApprovalService::new(
            ledger.clone(),
            versions.clone(),
            Arc::clone(&clock),
            Arc::clone(&ids),
        )),
        flows: Arc::new(FlowService::new(versions, ledger, Arc::clone(&clock), ids)),
        usage: usage.clone(),
        clock,
        harness: openai_harness(),
        providers: vec![ProviderRow {
            id: "openai".into(),
            family: "openai_compatible".into(),
            configured: true,
            configured_reason: "credential from environment".into(),
            base_url: url.to_owned(),
            base_url_source: "explicit (env override)".into(),
        }],
        pipeline: Some(Arc::new(pipeline)),
    });
    (state, usage)
}

/// Usage recording runs on the runtime; wait (bounded) until `n` events are stored.
async fn recorded(usage: &MemoryUsageStore, n: usize) -> Vec<UsageEvent> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let events = usage
            .events_since(chrono::DateTime::<chrono::Utc>::MIN_UTC)
            .await
            .unwrap();
        if events.len() >= n || Instant::now() > deadline {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn body(model: &str, stream: bool) -> serde_json::Value {
    serde_json::json!({"model": model, "stream": stream,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn chat_completion_without_a_pipeline_is_503_naming_why_and_records_nothing() {
    let state = crate::common::state();
    let app = app_over(Arc::clone(&state));
    let (status, _, json) = send(
        &app,
        post("/v1/chat/completions", &body("gate_check", false), None),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(json["error"], "unavailable");
    assert!(
        json["message"].as_str().unwrap().contains("no provider pipeline"),
        "{json}"
    );
    let events = state
        .usage
        .events_since(chrono::DateTime::<chrono::Utc>::MIN_UTC)
        .await
        .unwrap();
    assert!(events.is_empty());
}

#[tokio::test]
async fn role_completion_is_openai_shaped_names_who_served_and_records_usage_for_the_caller() {
    let url = upstream(Arc::new(Mutex::new(Mode::Ok))).await;
    let (state, usage) = state_with_pipeline(&url);
    let app = app_over(state);
    let (status, headers, json) = send(&app, post("/v1/chat/completions", &body("chat", false), None)).await;
    assert_eq!(status, StatusCode::OK, "{json}");
    assert_eq!(headers["x-metaforge-served-by"], "openai:gpt-4o-mini");
    assert!(headers.get("x-metaforge-fell-back-from").is_none());
    assert_eq!(json["object"], "chat.completion");
    assert_eq!(json["choices"][0]["message"]["role"], "assistant");
    assert_eq!(json["choices"][0]["message"]["content"], "Hello");
    assert_eq!(json["choices"][0]["finish_reason"], "stop");
    assert_eq!(json["usage"]["total_tokens"], 11);
    let events = recorded(&usage, 1).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].role.as_deref(), Some("chat"));
    assert_eq!(events[0].caller.as_deref(), Some("local"));
    assert_eq!(events[0].provider, "openai");
    assert_eq!(events[0].prompt_tokens, Some(9));
}

#[tokio::test]
async fn streamed_completion_is_sse_chunks_ending_with_done_and_records_usage() {
    let url = upstream(Arc::new(Mutex::new(Mode::Ok))).await;
    let (state, usage) = state_with_pipeline(&url);
    let app = app_over(state);
    let res = app
        .clone()
        .oneshot(post(
            "/v1/chat/completions",
            &body("openai:gpt-4o-mini", true),
            None,
        ))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["x-metaforge-served-by"], "openai:gpt-4o-mini");
    assert!(
        res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let text = String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
    let chunks: Vec<serde_json::Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "Hello");
    assert!(chunks.iter().any(|c| c["choices"][0]["finish_reason"] == "stop"));
    let events = recorded(&usage, 1).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].completion_tokens, Some(2));
}

#[tokio::test]
async fn every_provider_rate_limited_is_429_with_retry_after_and_the_attempts() {
    let url = upstream(Arc::new(Mutex::new(Mode::RateLimited))).await;
    let (state, usage) = state_with_pipeline(&url);
    let app = app_over(state);
    let (status, headers, json) = send(&app, post("/v1/chat/completions", &body("chat", false), None)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{json}");
    assert!(headers.get("retry-after").is_some());
    assert_eq!(json["error"], "rate_limited");
    assert!(!json["details"]["attempts"].as_array().unwrap().is_empty());
    assert!(
        usage
            .events_since(chrono::DateTime::<chrono::Utc>::MIN_UTC)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn bad_requests_are_400_naming_the_field_or_model() {
    let (state, _) = state_with_pipeline("http://127.0.0.1:9/v1");
    let app = app_over(state);
    let cases = [
        (
            serde_json::json!({"model": "anthropic:gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
            "model",
            "gpt-4o",
        ),
        (
            serde_json::json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
            "model",
            "gpt-4o",
        ),
        (
            serde_json::json!({"model": "nosuch:m", "messages": [{"role": "user", "content": "hi"}]}),
            "model",
            "nosuch",
        ),
        (
            serde_json::json!({"model": "chat", "messages": [{"role": "robot", "content": "hi"}]}),
            "messages[0].role",
            "robot",
        ),
        (
            serde_json::json!({"model": "chat", "messages": []}),
            "messages",
            "at least one",
        ),
        (serde_json::json!({"model": "chat"}), "body", "messages"),
    ];
    for (request, field, named) in cases {
        let (status, _, json) = send(&app, post("/v1/chat/completions", &request, None)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{request} → {json}");
        assert_eq!(json["details"]["field"], field, "{request} → {json}");
        assert!(
            json["message"].as_str().unwrap().contains(named),
            "{request} → {json}"
        );
    }
}

#[tokio::test]
async fn providers_view_lists_rows_and_the_fallback_alarm() {
    let (state, _) = state_with_pipeline("http://127.0.0.1:9/v1");
    let app = app_over(state);
    let (status, _, json) = send(&app, get("/v1/harness/providers", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json["providers"][0]["id"], "openai");
    assert_eq!(json["providers"][0]["base_url_source"], "explicit (env override)");
    assert_eq!(json["pipeline"], true);
    assert_eq!(json["fallback_count"], 0);
    assert!(json["last_fallback"].is_null());

    let app = app_over(crate::common::state());
    let (_, _, json) = send(&app, get("/v1/harness/providers", None)).await;
    assert_eq!(json["pipeline"], false);
    assert!(json["fallback_count"].is_null(), "unknown is not 0: {json}");
}

struct Aimock(Child);

impl Drop for Aimock {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_aimock() -> (Aimock, u16) {
    let node_dir = std::env::var("METAFORGE_NODE_DIR").unwrap_or_else(|_| "/var/tmp/metaforge-node".into());
    let cli = PathBuf::from(&node_dir).join("node_modules/@copilotkit/aimock/dist/cli.js");
    assert!(cli.exists(), "aimock is not installed at {}", cli.display());
    let fixtures =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../adapters-llm/tests/fixtures/aimock.json");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("node")
        .arg(&cli)
        .args(["-p", &port.to_string(), "-h", "127.0.0.1", "-f"])
        .arg(&fixtures)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mock = Aimock(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "aimock did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    (mock, port)
}

#[tokio::test]
async fn chat_completions_against_aimock_json_and_sse() {
    let (_mock, port) = start_aimock();
    let (state, usage) = state_with_pipeline(&format!("http://127.0.0.1:{port}/v1"));
    let app = app_over(state);
    let (status, headers, json) = send(&app, post("/v1/chat/completions", &body("chat", false), None)).await;
    assert_eq!(status, StatusCode::OK, "{json}");
    assert_eq!(headers["x-metaforge-served-by"], "openai:gpt-4o-mini");
    assert_eq!(
        json["choices"][0]["message"]["content"],
        "Hello from aimock! How can I help?"
    );

    let res = app
        .clone()
        .oneshot(post("/v1/chat/completions", &body("chat", true), None))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let text = String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    let content: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(content, "Hello from aimock! How can I help?");
    assert!(text.trim_end().ends_with("data: [DONE]"));
    let events = recorded(&usage, 2).await;
    assert_eq!(events.len(), 2, "{events:?}");
}
