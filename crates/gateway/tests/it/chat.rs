//! `POST /v1/chat/completions` and `GET /v1/harness/providers` over the real pipeline and the real
//! OpenAI-compatible adapter, against a local upstream whose answers the test scripts and against
//! aimock (a real multi-provider mock server the test starts and kills with its process group;
//! without aimock those tests print why they are skipped).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use axum::http::StatusCode;
use http_body_util::BodyExt;
use metaforge_app::pipeline::RetryPolicy;
use metaforge_gateway::GatewayState;
use metaforge_test_support::doubles::MemoryUsageStore;
use metaforge_test_support::peers;
use metaforge_test_support::upstream::{Reply, Scripted};
use tower::ServiceExt;

use crate::common::{
    MemorySelection, app_over, get, nothing_recorded, post, recorded, send, serve_upstream,
    state_over_upstreams,
};

/// What the scripted upstream answers next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ok,
    RateLimited,
    ServerError,
    ToolCall,
}

/// A scripted local upstream: its base URL (`…/v1`) and the upstream, which keeps every request.
struct Upstream {
    url: String,
    scripted: Scripted,
}

impl Upstream {
    /// Every request body it received, in order.
    fn received(&self) -> Vec<serde_json::Value> {
        self.scripted.bodies()
    }
}

fn sse(frames: &[serde_json::Value]) -> String {
    let mut text: String = frames.iter().map(|f| format!("data: {f}\n\n")).collect();
    text.push_str("data: [DONE]\n\n");
    text
}

fn upstream_chunk(delta: serde_json::Value, finish: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"id": "u1", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn upstream_usage_chunk() -> serde_json::Value {
    serde_json::json!({"id": "u1", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
        "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}})
}

/// A local OpenAI-compatible upstream: JSON or SSE by the request's `stream` flag (text, or a
/// `get_weather` tool call streamed in OpenAI's fragments), 429, or 500.
async fn upstream(mode: Mode) -> Upstream {
    let respond = move |body: &serde_json::Value| {
        let null = serde_json::Value::Null;
        let stream = body["stream"] == serde_json::json!(true);
        match (mode, stream) {
                (Mode::RateLimited, _) => Reply::json_with(
                    429,
                    &[("retry-after", "1")],
                    r#"{"error":{"message":"slow down","type":"rate_limit"}}"#,
                ),
                (Mode::ServerError, _) => Reply::json(
                    500,
                    r#"{"error":{"message":"upstream exploded","type":"server_error"}}"#,
                ),
                (Mode::Ok, true) => Reply::Sse(sse(&[
                        upstream_chunk(serde_json::json!({"role": "assistant", "content": "Hel"}), null.clone()),
                        upstream_chunk(serde_json::json!({"content": "lo"}), null.clone()),
                        upstream_chunk(serde_json::json!({}), serde_json::json!("stop")),
                        upstream_usage_chunk(),
                ])),
                (Mode::ToolCall, true) => Reply::Sse(sse(&[
                        upstream_chunk(
                            serde_json::json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                                "id": "call_w1", "type": "function",
                                "function": {"name": "get_weather", "arguments": ""}}]}),
                            null.clone(),
                        ),
                        upstream_chunk(
                            serde_json::json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"location\":"}}]}),
                            null.clone(),
                        ),
                        upstream_chunk(
                            serde_json::json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
                            null.clone(),
                        ),
                        upstream_chunk(serde_json::json!({}), serde_json::json!("tool_calls")),
                        upstream_usage_chunk(),
                ])),
                (Mode::Ok, false) => Reply::json(
                    200,
                    serde_json::json!({"id": "u1", "object": "chat.completion",
                    "model": "gpt-4o-mini",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}})
                    .to_string(),
                ),
                (Mode::ToolCall, false) => Reply::json(
                    200,
                    serde_json::json!({"id": "u1", "object": "chat.completion",
                    "model": "gpt-4o-mini",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_w1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}}]},
                        "finish_reason": "tool_calls"}],
                    "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}})
                    .to_string(),
                ),
        }
    };
    let (url, scripted) = serve_upstream(respond).await;
    Upstream { url, scripted }
}

/// A harness where `chat` and `summarisation` route to openai, which is credentialed.
fn openai_harness() -> metaforge_app::routing::RouteResolver {
    let table = metaforge_domain::routing::RoutingTable::from_json(
        r#"{"roles": {"chat": "openai:gpt-4o-mini", "summarisation": "openai:gpt-4o-mini"}}"#,
    )
    .unwrap();
    metaforge_app::routing::RouteResolver {
        table,
        env_routes: BTreeMap::new(),
        credentialed: ["openai".to_owned()].into_iter().collect(),
        default_route: None,
        selection: Arc::new(MemorySelection::default()),
    }
}

/// The gateway state with a pipeline whose `openai` adapter calls `url`.
fn state_with_pipeline(url: &str) -> (Arc<GatewayState>, Arc<MemoryUsageStore>) {
    state_over(
        &[("openai", url)],
        &["openai:gpt-4o-mini"],
        RetryPolicy::default(),
    )
}

/// The gateway state with a pipeline over OpenAI-compatible `providers` (id, base URL) whose
/// `chat` role chain is `chain` (`provider:model`, primary first); the harness routes `chat` to
/// `openai:gpt-4o-mini`.
fn state_over(
    providers: &[(&str, &str)],
    chain: &[&str],
    policy: RetryPolicy,
) -> (Arc<GatewayState>, Arc<MemoryUsageStore>) {
    state_over_upstreams(providers, "chat", chain, policy, openai_harness())
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
    assert_eq!(json["error"]["code"], "unavailable", "{json}");
    assert_eq!(json["error"]["type"], "api_error", "{json}");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no provider pipeline"),
        "{json}"
    );
    let message = json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("METAFORGE_ROUTE_GATE_CHECK=") && message.contains("OPENAI_API_KEY"),
        "the answer names what to set for the role asked for: {json}"
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
    let url = upstream(Mode::Ok).await.url;
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
    let url = upstream(Mode::Ok).await.url;
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
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "no usage chunk unless stream_options.include_usage asks"
    );
    let events = recorded(&usage, 1).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].completion_tokens, Some(2));
}

#[tokio::test]
async fn every_provider_rate_limited_is_429_with_retry_after_and_the_attempts() {
    let url = upstream(Mode::RateLimited).await.url;
    let (state, usage) = state_with_pipeline(&url);
    let app = app_over(state);
    let (status, headers, json) = send(&app, post("/v1/chat/completions", &body("chat", false), None)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{json}");
    assert!(headers.get("retry-after").is_some());
    assert_eq!(json["error"]["code"], "rate_limited", "{json}");
    assert_eq!(json["error"]["type"], "rate_limit_error", "{json}");
    assert!(
        !json["error"]["details"]["attempts"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(nothing_recorded(&usage).await);
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
            serde_json::json!({"model": "", "messages": [{"role": "user", "content": "hi"}]}),
            "model",
            "provider:model",
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
        assert_eq!(json["error"]["param"], field, "{request} → {json}");
        assert!(
            json["error"]["message"].as_str().unwrap().contains(named),
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

/// aimock serving the adapters' fixtures; `None` (skipped) when aimock is not installed.
fn start_aimock() -> Option<(peers::Aimock, u16)> {
    let fixtures =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../adapters-llm/tests/fixtures/aimock.json");
    let mock = peers::start_aimock(&fixtures)?;
    let port = mock.port;
    Some((mock, port))
}

#[tokio::test]
async fn chat_completions_against_aimock_json_and_sse() {
    let Some((_mock, port)) = start_aimock() else {
        return;
    };
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

/// The `get_weather` tool in OpenAI's request shape.
fn weather_tool() -> serde_json::Value {
    serde_json::json!({"type": "function", "function": {"name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}})
}

/// A second tool, declared before `get_weather` so the pipeline's name sort is visible upstream.
fn time_tool() -> serde_json::Value {
    serde_json::json!({"type": "function", "function": {"name": "local_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}})
}

/// Every `data:` payload of an SSE body but the final `[DONE]`, which must be there.
async fn sse_chunks(res: axum::response::Response) -> Vec<serde_json::Value> {
    let text = String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test]
async fn tool_round_trip_sends_tools_and_history_upstream_in_openai_shape_and_returns_tool_calls() {
    let upstream = upstream(Mode::ToolCall).await;
    let (state, usage) = state_with_pipeline(&upstream.url);
    let app = app_over(state);

    // Leg 1: the client offers tools; the model calls one.
    let request = serde_json::json!({"model": "chat", "tools": [time_tool(), weather_tool()], "tool_choice": "auto",
        "messages": [{"role": "system", "content": "use tools"},
                     {"role": "user", "content": [{"type": "text", "text": "weather in "}, {"type": "text", "text": "Paris?"}]}]});
    let (status, headers, json) = send(&app, post("/v1/chat/completions", &request, None)).await;
    assert_eq!(status, StatusCode::OK, "{json}");
    assert_eq!(headers["x-metaforge-served-by"], "openai:gpt-4o-mini");
    let message = &json["choices"][0]["message"];
    assert!(message["content"].is_null(), "{json}");
    assert_eq!(
        message["tool_calls"],
        serde_json::json!([{"id": "call_w1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}}])
    );
    assert_eq!(json["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(json["usage"]["total_tokens"], 42);

    let sent = upstream.received()[0].clone();
    assert_eq!(
        sent["tools"],
        serde_json::json!([
            {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
                "parameters": {"properties": {"location": {"type": "string"}}, "required": ["location"], "type": "object"}}},
            {"type": "function", "function": {"name": "local_time", "description": "",
                "parameters": {"properties": {"zone": {"type": "string"}}, "type": "object"}}},
        ]),
        "tools go upstream in OpenAI's shape, sorted by name for prompt caching"
    );
    assert_eq!(sent["tool_choice"], "auto");
    assert_eq!(
        sent["messages"],
        serde_json::json!([{"role": "system", "content": "use tools"},
                           {"role": "user", "content": "weather in Paris?"}])
    );

    // Leg 2: the client replays the call and answers it; a named tool choice is forwarded.
    let request = serde_json::json!({"model": "chat", "tools": [weather_tool()],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "messages": [{"role": "user", "content": "weather in Paris and Rome?"},
                     {"role": "assistant", "content": null, "tool_calls": [
                         {"id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}},
                         {"id": "call_w2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Rome\"}"}}]},
                     {"role": "tool", "tool_call_id": "call_w1", "content": "18C, sunny"},
                     {"role": "tool", "tool_call_id": "call_w2", "content": [{"type": "text", "text": "21C, clear"}]}]});
    let (status, _, json) = send(&app, post("/v1/chat/completions", &request, None)).await;
    assert_eq!(status, StatusCode::OK, "{json}");
    let sent = upstream.received()[1].clone();
    assert_eq!(
        sent["tool_choice"],
        serde_json::json!({"type": "function", "function": {"name": "get_weather"}})
    );
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "{sent}");
    assert_eq!(messages[1]["role"], "assistant");
    assert!(messages[1]["content"].is_null());
    let calls = messages[1]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1]["id"], "call_w2");
    assert_eq!(calls[1]["function"]["name"], "get_weather");
    let arguments: serde_json::Value =
        serde_json::from_str(calls[1]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, serde_json::json!({"location": "Rome"}));
    assert_eq!(
        messages[2],
        serde_json::json!({"role": "tool", "tool_call_id": "call_w1", "content": "18C, sunny"})
    );
    assert_eq!(
        messages[3],
        serde_json::json!({"role": "tool", "tool_call_id": "call_w2", "content": "21C, clear"})
    );
    assert_eq!(recorded(&usage, 2).await.len(), 2);
}

#[tokio::test]
async fn streamed_tool_call_is_openai_tool_call_deltas_ending_with_finish_reason_tool_calls() {
    let upstream = upstream(Mode::ToolCall).await;
    let (state, usage) = state_with_pipeline(&upstream.url);
    let app = app_over(state);
    let request = serde_json::json!({"model": "chat", "stream": true, "tools": [weather_tool()],
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "weather in Paris?"}]});
    let res = app
        .clone()
        .oneshot(post("/v1/chat/completions", &request, None))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let chunks = sse_chunks(res).await;
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    let deltas: Vec<&serde_json::Value> = chunks
        .iter()
        .flat_map(|c| {
            c["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .collect();
    assert_eq!(
        deltas[0],
        &serde_json::json!({"index": 0, "id": "call_w1", "type": "function",
            "function": {"name": "get_weather", "arguments": ""}}),
        "the first delta opens the call with id, type and name"
    );
    assert!(
        deltas[1..]
            .iter()
            .all(|d| d["index"] == 0 && d.get("id").is_none())
    );
    let arguments: String = deltas
        .iter()
        .filter_map(|d| d["function"]["arguments"].as_str())
        .collect();
    assert_eq!(arguments, "{\"location\":\"Paris\"}");
    let finishes: Vec<&serde_json::Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finishes, [&serde_json::json!("tool_calls")]);
    let usage_chunks: Vec<&serde_json::Value> = chunks.iter().filter(|c| c.get("usage").is_some()).collect();
    assert_eq!(usage_chunks.len(), 1, "{chunks:?}");
    assert_eq!(usage_chunks[0]["choices"], serde_json::json!([]));
    assert_eq!(
        usage_chunks[0]["usage"],
        serde_json::json!({"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11})
    );
    assert_eq!(
        upstream.received()[0]["tools"][0]["function"]["name"],
        "get_weather"
    );
    assert_eq!(recorded(&usage, 1).await.len(), 1);
}

#[tokio::test]
async fn bad_tool_and_message_fields_are_400_naming_the_field_and_nothing_goes_upstream() {
    let upstream = upstream(Mode::ToolCall).await;
    let (state, usage) = state_with_pipeline(&upstream.url);
    let app = app_over(state);
    let user = serde_json::json!({"role": "user", "content": "weather?"});
    let call = |arguments: &str, kind: &str| {
        serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": kind, "function": {"name": "get_weather", "arguments": arguments}}]})
    };
    let good_call = call("{\"location\":\"Paris\"}", "function");
    let mut bad_schema = weather_tool();
    bad_schema["function"]["parameters"] = serde_json::json!("object");
    let mut bad_name = weather_tool();
    bad_name["function"]["name"] = serde_json::json!("get weather!");
    let mut retrieval = weather_tool();
    retrieval["type"] = serde_json::json!("retrieval");
    let cases = [
        (
            serde_json::json!({"tools": [retrieval]}),
            vec![user.clone()],
            "tools[0].type",
        ),
        (
            serde_json::json!({"tools": [bad_name]}),
            vec![user.clone()],
            "tools[0].function.name",
        ),
        (
            serde_json::json!({"tools": [weather_tool(), weather_tool()]}),
            vec![user.clone()],
            "tools[1].function.name",
        ),
        (
            serde_json::json!({"tools": [bad_schema]}),
            vec![user.clone()],
            "tools[0].function.parameters",
        ),
        (
            serde_json::json!({"tools": [weather_tool()], "tool_choice": "sometimes"}),
            vec![user.clone()],
            "tool_choice",
        ),
        (
            serde_json::json!({"tools": [weather_tool()], "tool_choice": {"type": "function", "function": {"name": "nosuch"}}}),
            vec![user.clone()],
            "tool_choice.function.name",
        ),
        (
            serde_json::json!({"tools": [weather_tool()], "tool_choice": {"type": "retrieval", "function": {"name": "get_weather"}}}),
            vec![user.clone()],
            "tool_choice.type",
        ),
        (
            serde_json::json!({"tool_choice": "required"}),
            vec![user.clone()],
            "tool_choice",
        ),
        (
            serde_json::json!({}),
            vec![user.clone(), call("location=Paris", "function")],
            "messages[1].tool_calls[0].function.arguments",
        ),
        (
            serde_json::json!({}),
            vec![user.clone(), call("{}", "code")],
            "messages[1].tool_calls[0].type",
        ),
        (
            serde_json::json!({}),
            vec![
                user.clone(),
                good_call.clone(),
                serde_json::json!({"role": "tool", "content": "18C"}),
            ],
            "messages[2].tool_call_id",
        ),
        (
            serde_json::json!({}),
            vec![
                user.clone(),
                good_call.clone(),
                serde_json::json!({"role": "tool", "tool_call_id": "call_9", "content": "18C"}),
            ],
            "messages[2].tool_call_id",
        ),
        (
            serde_json::json!({}),
            vec![serde_json::json!({"role": "tool", "tool_call_id": "call_1", "content": "18C"})],
            "messages[0].tool_call_id",
        ),
        (
            serde_json::json!({}),
            vec![user.clone(), good_call.clone(), good_call.clone()],
            "messages[2].tool_calls[0].id",
        ),
        (
            serde_json::json!({}),
            vec![
                serde_json::json!({"role": "user", "content": [{"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}),
            ],
            "messages[0].content[1].type",
        ),
        (
            serde_json::json!({}),
            vec![serde_json::json!({"role": "user", "content": [{"type": "text"}]})],
            "messages[0].content[0].text",
        ),
        (
            serde_json::json!({}),
            vec![serde_json::json!({"role": "user", "content": "hi", "tool_calls": []})],
            "messages[0].tool_calls",
        ),
        (
            serde_json::json!({}),
            vec![serde_json::json!({"role": "user", "content": "hi", "tool_call_id": "call_1"})],
            "messages[0].tool_call_id",
        ),
        (
            serde_json::json!({}),
            vec![serde_json::json!({"role": "user", "content": 5})],
            "messages[0].content",
        ),
        (
            serde_json::json!({"max_completion_tokens": 0}),
            vec![user.clone()],
            "max_completion_tokens",
        ),
        (
            serde_json::json!({"stream_options": {"include_usage": true}}),
            vec![user.clone()],
            "stream_options",
        ),
    ];
    for (extra, messages, field) in cases {
        let mut request = serde_json::json!({"model": "chat", "messages": messages});
        for (key, value) in extra.as_object().unwrap() {
            request[key] = value.clone();
        }
        let (status, _, json) = send(&app, post("/v1/chat/completions", &request, None)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{request} → {json}");
        assert_eq!(json["error"]["code"], "invalid_request", "{request} → {json}");
        assert_eq!(
            json["error"]["type"], "invalid_request_error",
            "{request} → {json}"
        );
        assert_eq!(json["error"]["param"], field, "{request} → {json}");
        assert!(
            json["error"]["message"].as_str().unwrap().contains(field),
            "{request} → {json}"
        );
    }
    assert!(upstream.received().is_empty(), "a refused request went upstream");
    assert!(nothing_recorded(&usage).await);
}

#[tokio::test]
async fn failed_primary_served_by_fallback_names_both_in_headers_and_raises_the_alarm() {
    let working = upstream(Mode::Ok).await;
    let exploding = upstream(Mode::ServerError).await;
    let no_retries = RetryPolicy {
        api_max_retries: 0,
        ..RetryPolicy::default()
    };
    for (primary_url, stream) in [
        (exploding.url.as_str(), false),
        ("http://127.0.0.1:9/v1", false),
        (exploding.url.as_str(), true),
    ] {
        let (state, usage) = state_over(
            &[("openai", primary_url), ("deepseek", working.url.as_str())],
            &["openai:gpt-4o-mini", "deepseek:deepseek-chat"],
            no_retries,
        );
        let app = app_over(state);
        let res = app
            .clone()
            .oneshot(post("/v1/chat/completions", &body("chat", stream), None))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{primary_url} stream={stream}");
        assert_eq!(res.headers()["x-metaforge-served-by"], "deepseek:deepseek-chat");
        assert_eq!(res.headers()["x-metaforge-fell-back-from"], "openai:gpt-4o-mini");
        let _ = res.into_body().collect().await.unwrap();

        let (status, _, view) = send(&app, get("/v1/harness/providers", None)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(view["fallback_count"], 1, "{view}");
        let last = &view["last_fallback"];
        assert_eq!(last["role"], "chat", "{view}");
        assert_eq!(last["primary"], "openai:gpt-4o-mini");
        assert_eq!(last["fallback"], "deepseek:deepseek-chat");
        assert!(!last["primary_error"].as_str().unwrap().is_empty(), "{view}");

        let events = recorded(&usage, 1).await;
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].provider, "deepseek");
    }
    assert_eq!(exploding.received().len(), 2, "one attempt per call, no retries");
}

#[tokio::test]
async fn tool_calls_against_aimock_json_and_sse() {
    let Some((_mock, port)) = start_aimock() else {
        return;
    };
    let (state, _) = state_with_pipeline(&format!("http://127.0.0.1:{port}/v1"));
    let app = app_over(state);
    let request = |stream: bool| {
        serde_json::json!({"model": "chat", "stream": stream, "tools": [weather_tool()],
            "messages": [{"role": "user", "content": "weather in Paris?"}]})
    };
    let expected = serde_json::json!({"location": "Paris", "unit": "celsius"});

    let (status, _, json) = send(&app, post("/v1/chat/completions", &request(false), None)).await;
    assert_eq!(status, StatusCode::OK, "{json}");
    assert_eq!(json["choices"][0]["finish_reason"], "tool_calls", "{json}");
    let call = &json["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    assert!(!call["id"].as_str().unwrap().is_empty());
    let arguments: serde_json::Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, expected);

    let res = app
        .clone()
        .oneshot(post("/v1/chat/completions", &request(true), None))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let chunks = sse_chunks(res).await;
    let deltas: Vec<&serde_json::Value> = chunks
        .iter()
        .flat_map(|c| {
            c["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .collect();
    assert_eq!(deltas[0]["function"]["name"], "get_weather", "{chunks:?}");
    assert!(deltas.iter().all(|d| d["index"] == 0));
    let streamed: String = deltas
        .iter()
        .filter_map(|d| d["function"]["arguments"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&streamed).unwrap(),
        expected
    );
    assert!(
        chunks
            .iter()
            .any(|c| c["choices"][0]["finish_reason"] == "tool_calls")
    );
}

#[tokio::test]
async fn a_bare_or_vendor_prefixed_model_name_as_openai_sdks_send_it_is_served_by_its_provider() {
    let upstream = upstream(Mode::Ok).await;
    let (state, usage) = state_with_pipeline(&upstream.url);
    let app = app_over(state);
    for model in ["gpt-4o-mini", "openai/gpt-4o-mini", " gpt-4o-mini "] {
        let (status, headers, json) =
            send(&app, post("/v1/chat/completions", &body(model, false), None)).await;
        assert_eq!(status, StatusCode::OK, "{model}: {json}");
        assert_eq!(headers["x-metaforge-served-by"], "openai:gpt-4o-mini", "{model}");
        assert_eq!(json["choices"][0]["message"]["content"], "Hello");
    }
    let sent: Vec<serde_json::Value> = upstream.received();
    assert_eq!(sent.len(), 3);
    assert!(
        sent.iter().all(|b| b["model"] == "gpt-4o-mini"),
        "the provider gets the bare model name: {sent:?}"
    );
    assert_eq!(recorded(&usage, 3).await.len(), 3);
}

/// Issue 38 item 15: a bare name no vendor claims and no route names is a 400 — it is never
/// handed to the `chat` route's provider to be answered under the name asked for; the route's own
/// model name, and the explicit forms, are served and named in the answer.
#[tokio::test]
async fn a_bare_model_name_is_served_only_by_its_vendor_or_a_route_that_names_it() {
    let upstream = upstream(Mode::Ok).await;
    let (state, _) = state_with_pipeline(&upstream.url);
    let app = app_over(state);
    for model in ["llama3.2", "gpt-9-ultra-preview-x"] {
        let (status, _, json) = send(&app, post("/v1/chat/completions", &body(model, false), None)).await;
        if model == "llama3.2" {
            assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
            assert_eq!(json["error"]["param"], "model", "{json}");
            assert!(
                json["error"]["message"].as_str().unwrap().contains("/v1/models"),
                "{json}"
            );
        } else {
            // An OpenAI-family name goes to OpenAI's own API (configured here), named as asked.
            assert_eq!(status, StatusCode::OK, "{json}");
        }
    }
    assert_eq!(
        upstream.received().len(),
        1,
        "only the vendor's own name went upstream"
    );
    // The chat route's model by its bare name, and any model by an explicit form.
    for (model, served) in [
        ("gpt-4o-mini", "openai:gpt-4o-mini"),
        ("openai/llama3.2", "openai:llama3.2"),
        ("openai:llama3.2", "openai:llama3.2"),
    ] {
        let (status, headers, json) =
            send(&app, post("/v1/chat/completions", &body(model, false), None)).await;
        assert_eq!(status, StatusCode::OK, "{model}: {json}");
        assert_eq!(headers["x-metaforge-served-by"], served, "{model}");
    }
    // Another vendor's model never goes to OpenAI's own API: its provider is named instead.
    let (status, _, json) = send(
        &app,
        post("/v1/chat/completions", &body("claude-opus-4-8", false), None),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'anthropic' is not configured"),
        "{json}"
    );
    assert_eq!(upstream.received().len(), 4, "nothing more went upstream");
}

#[tokio::test]
async fn a_model_nothing_here_serves_is_400_in_openai_shape_naming_the_accepted_forms() {
    // Only anthropic is configured: no provider here serves an OpenAI model.
    let app = app_over(crate::common::state());
    for model in ["gpt-4o-mini", "openai/gpt-4o-mini"] {
        let (status, _, json) = send(&app, post("/v1/chat/completions", &body(model, false), None)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{model}: {json}");
        let error = &json["error"];
        assert_eq!(error["type"], "invalid_request_error", "{json}");
        assert_eq!(error["param"], "model", "{json}");
        assert_eq!(error["code"], "invalid_request", "{json}");
        let message = error["message"].as_str().unwrap();
        for named in [
            model,
            "routing role",
            "provider:model",
            "gpt-4o-mini",
            "anthropic",
            "/v1/models",
        ] {
            assert!(message.contains(named), "{named} not in {message}");
        }
    }
}

#[tokio::test]
async fn errors_on_the_openai_routes_are_in_openai_shape_and_other_routes_keep_the_gateway_shape() {
    let app = crate::common::app_with("alice:sk-alice-0001", None);
    for (request, path) in [
        (
            post("/v1/chat/completions", &body("chat", false), None),
            "/v1/chat/completions",
        ),
        (get("/v1/models", None), "/v1/models"),
    ] {
        let (status, _, json) = send(&app, request).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(json["error"]["type"], "authentication_error", "{path}: {json}");
        assert_eq!(json["error"]["code"], "unauthorized", "{path}: {json}");
        assert!(json["error"]["param"].is_null(), "{path}: {json}");
        assert!(json["error"]["message"].as_str().unwrap().contains("API key"));
    }
    // A body that is not JSON: the extractor's 400, in OpenAI's shape, naming the body.
    let malformed = axum::http::Request::builder()
        .method("POST")
        .uri("/v1/chat/completions")
        .header("content-type", "application/json")
        .header("x-api-key", "sk-alice-0001")
        .body(axum::body::Body::from("{not json"))
        .unwrap();
    let (status, headers, json) = send(&app, malformed).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(json["error"]["param"], "body", "{json}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    assert!(
        !headers["x-request-id"].is_empty(),
        "the envelope headers survive"
    );
    let (status, _, json) = send(&app, get("/v1/harness/routing", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        json["error"], "unauthorized",
        "other routes keep {{error, message}}: {json}"
    );
}

#[tokio::test]
async fn models_lists_every_role_route_and_model_name_that_resolves_and_each_one_is_served() {
    let upstream = upstream(Mode::Ok).await;
    let (state, _) = state_with_pipeline(&upstream.url);
    let app = app_over(state);
    let (status, _, json) = send(&app, get("/v1/models", None)).await;
    assert_eq!(status, StatusCode::OK, "{json}");
    assert_eq!(json["object"], "list");
    let data = json["data"].as_array().unwrap();
    assert!(
        data.iter()
            .all(|m| m["object"] == "model" && m["owned_by"].is_string())
    );
    let owner = |id: &str| {
        data.iter()
            .find(|m| m["id"] == id)
            .map(|m| m["owned_by"].as_str().unwrap().to_owned())
    };
    assert_eq!(owner("chat").as_deref(), Some("metaforge"));
    assert_eq!(owner("summarisation").as_deref(), Some("metaforge"));
    assert_eq!(owner("openai:gpt-4o-mini").as_deref(), Some("openai"));
    assert_eq!(owner("gpt-4o-mini").as_deref(), Some("openai"));
    assert_eq!(owner("gate_check"), None, "a role without a route is not listed");
    let ids: Vec<&str> = data.iter().map(|m| m["id"].as_str().unwrap()).collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "each id once: {ids:?}");
    for id in ids {
        let (status, _, answer) = send(&app, post("/v1/chat/completions", &body(id, false), None)).await;
        assert_eq!(status, StatusCode::OK, "listed '{id}' is not served: {answer}");
    }
}

#[tokio::test]
async fn models_and_the_openai_error_shape_are_in_the_openapi_document() {
    let app = crate::common::app_with("", None);
    let (_, _, doc) = send(&app, get("/openapi.json", None)).await;
    let models = &doc["paths"]["/v1/models"]["get"]["responses"];
    assert!(models["200"].is_object(), "{models}");
    let error_ref = |path: &str, method: &str, code: &str| {
        doc["paths"][path][method]["responses"][code]["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    for code in ["400", "401", "429", "503"] {
        assert_eq!(
            error_ref("/v1/chat/completions", "post", code),
            "#/components/schemas/OpenAiErrorBody",
            "{code}"
        );
    }
    assert_eq!(
        error_ref("/v1/models", "get", "401"),
        "#/components/schemas/OpenAiErrorBody"
    );
    assert_eq!(
        error_ref("/v1/harness/routing", "get", "401"),
        "#/components/schemas/ErrorBody"
    );
    let schema = &doc["components"]["schemas"]["OpenAiError"]["properties"];
    for field in ["message", "type", "param", "code"] {
        assert!(schema[field].is_object(), "OpenAiError.{field}: {schema}");
    }
}
