//! Chat threads over the router: a turn that calls a tool, its SSE stream, a held call answered
//! over HTTP mid-turn, cancelling a turn, search, and the refusals that write nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use metaforge_agent::{Agent, AgentPorts, ModelProfile, ModelTarget, ProviderModels, ToolBoxes, ToolPolicy};
use metaforge_app::chat::{ChatService, ChatSettings};
use metaforge_domain::approvals::ApproverPolicy;
use metaforge_ports::{ApiFamily, Billing, CallerContext, Clock, SessionStore, ToolSource};
use metaforge_test_support::doubles::{
    FakeToolSource, MemoryApprovalLedger, MemorySessionStore, MemoryUsageStore, ScriptStep, ScriptedLlm,
    descriptor,
};
use metaforge_test_support::{ManualClock, SequentialIds};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::common::{app_over, get, harness, post, send, state_from};

struct Chat {
    app: axum::Router,
    llm: Arc<ScriptedLlm>,
    server: Arc<FakeToolSource>,
    sessions: Arc<MemorySessionStore>,
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
}

/// A gateway whose chat turns run on a scripted model over one fake MCP server with `echo` (and
/// `write_part`, held for a person when `held` names it), sharing the gateway's one ledger.
async fn chat(steps: Vec<ScriptStep>, held: &[&str], slow: Duration, settings: ChatSettings) -> Chat {
    chat_over(steps, held, slow, settings, true).await
}

/// [`chat`], with or without a model serving the `chat` role.
async fn chat_over(
    steps: Vec<ScriptStep>,
    held: &[&str],
    slow: Duration,
    settings: ChatSettings,
    serve_chat: bool,
) -> Chat {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::fixed());
    let ledger = Arc::new(MemoryApprovalLedger::new(Arc::clone(&clock)));
    let llm = Arc::new(ScriptedLlm::new(steps));
    let profile = ModelProfile {
        provider: "openai".to_owned(),
        model: "gpt-4o-mini".to_owned(),
        family: ApiFamily::OpenaiCompatible,
        native_tools: true,
        context_window_tokens: 128_000,
        max_tools: Some(128),
    };
    let target = ModelTarget {
        profile,
        adapter: Arc::clone(&llm) as _,
        billing: Billing::Metered,
    };
    let roles = if serve_chat {
        BTreeMap::from([("chat".to_owned(), vec![target])])
    } else {
        BTreeMap::new()
    };
    let server = Arc::new(
        FakeToolSource::new("parts")
            .with_echo(descriptor("echo", schema(), true), slow)
            .with_echo(descriptor("write_part", schema(), false), slow),
    );
    let policy = ToolPolicy {
        requires_approval: held.iter().map(|t| (*t).to_owned()).collect::<BTreeSet<_>>(),
        ..ToolPolicy::default()
    };
    let registry = Arc::new(
        metaforge_app::tools::ToolRegistry::builder()
            .server(Arc::clone(&server) as Arc<dyn ToolSource>, Duration::from_secs(5))
            .policy(policy)
            .build()
            .await
            .unwrap(),
    );
    let local = CallerContext {
        class: metaforge_ports::CallerClass::Local,
        session: None,
        input_channel: metaforge_ports::InputChannel::None,
        identity: None,
    };
    let agent = Agent::new(AgentPorts {
        model: Arc::new(ProviderModels::new(roles)),
        tools: registry.for_turn(&local, None),
        approvals: Some(ledger.clone() as _),
        clock: Arc::clone(&clock),
        ids: Arc::new(SequentialIds::new("hold")),
    });
    let sessions = Arc::new(MemorySessionStore::new());
    let service = ChatService::new(
        sessions.clone(),
        agent,
        registry,
        Arc::clone(&clock),
        Arc::new(SequentialIds::new("chat")),
        settings,
    );
    let state = state_from(
        ledger,
        clock,
        harness(),
        Arc::new(MemoryUsageStore::new()),
        Vec::new(),
        None,
        ApproverPolicy::Any,
        Some(Arc::new(service)),
    );
    Chat {
        app: app_over(state),
        llm,
        server,
        sessions,
    }
}

async fn new_thread(app: &axum::Router) -> String {
    let (status, _, body) = send(app, post("/v1/chat/threads", &json!({"title": "shelf"}), None)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// Reads an SSE body to its end: (event name, data JSON) pairs.
async fn sse(app: &axum::Router, request: Request<Body>) -> Vec<(String, Value)> {
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    parse_sse(&String::from_utf8_lossy(&bytes))
}

fn parse_sse(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|frame| {
            let name = frame.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = frame.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((name.to_owned(), serde_json::from_str(data).unwrap_or(Value::Null)))
        })
        .collect()
}

fn streaming_post(path: &str, body: &Value) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(Body::from(body.to_string()))
        .unwrap()
}

#[tokio::test]
async fn a_turn_calls_a_tool_stores_the_call_and_the_reply_and_is_searchable() {
    let chat = chat(
        vec![
            ScriptStep::calls(&[("c1", "mcp_parts_echo", json!({"text": "bracket"}))]),
            ScriptStep::text("The parts server echoed bracket."),
        ],
        &[],
        Duration::ZERO,
        ChatSettings::default(),
    )
    .await;
    let thread = new_thread(&chat.app).await;
    let (status, _, turn) = send(
        &chat.app,
        post(
            &format!("/v1/chat/threads/{thread}/messages"),
            &json!({"content": "echo bracket"}),
            None,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{turn}");
    assert_eq!(turn["message"]["role"], "assistant");
    assert_eq!(turn["message"]["content"], "The parts server echoed bracket.");
    assert_eq!(turn["calls"][0]["tool"], "parts.echo");
    assert_eq!(turn["calls"][0]["is_error"], false);
    assert!(turn["error"].is_null());
    assert_eq!(chat.server.calls_of("echo"), 1);

    let (_, _, detail) = send(&chat.app, get(&format!("/v1/chat/threads/{thread}"), None)).await;
    let roles: Vec<&str> = detail["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "tool", "assistant"]);
    assert_eq!(detail["turn_running"], false);

    let (status, _, hits) = send(
        &chat.app,
        get("/v1/chat/sessions/search?q=echoed%20BRACKET", None),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(hits["hits"][0]["session_id"], thread.as_str());
    assert_eq!(hits["hits"][0]["content"], "The parts server echoed bracket.");
    let (_, _, list) = send(&chat.app, get("/v1/chat/threads", None)).await;
    assert_eq!(list["threads"][0]["id"], thread.as_str());
}

#[tokio::test]
async fn the_posted_turn_streams_its_events_and_agent_done_comes_after_the_reply_is_stored() {
    let chat = chat(
        vec![
            ScriptStep::calls(&[("c1", "mcp_parts_echo", json!({"text": "hinge"}))]),
            ScriptStep::text("Echoed hinge."),
        ],
        &[],
        Duration::ZERO,
        ChatSettings::default(),
    )
    .await;
    let thread = new_thread(&chat.app).await;
    let events = sse(
        &chat.app,
        streaming_post(
            &format!("/v1/chat/threads/{thread}/messages"),
            &json!({"content": "echo hinge"}),
        ),
    )
    .await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["tool.call", "tool.result", "message.delta", "agent.done"]);
    assert_eq!(events[0].1["tool"], "parts.echo");
    assert_eq!(events[0].1["thread_id"], thread.as_str());
    assert_eq!(events[2].1["text"], "Echoed hinge.");
    assert!(events[3].1["usage"].is_object());
    let stored = chat.sessions.messages(&thread).await.unwrap();
    assert_eq!(
        stored.last().unwrap().content,
        "Echoed hinge.",
        "stored before agent.done"
    );
}

#[tokio::test]
async fn a_held_call_is_announced_on_the_thread_stream_and_the_turn_continues_after_the_http_decision() {
    let chat = chat(
        vec![
            ScriptStep::calls(&[("c1", "mcp_parts_write_part", json!({"text": "bracket v2"}))]),
            ScriptStep::text("Wrote bracket v2 after your approval."),
        ],
        &["parts.write_part"],
        Duration::ZERO,
        ChatSettings::default(),
    )
    .await;
    let thread = new_thread(&chat.app).await;
    // A second client follows the thread while the first posts.
    let follower = chat
        .app
        .clone()
        .oneshot(get(&format!("/v1/chat/threads/{thread}/stream"), None))
        .await
        .unwrap();
    assert_eq!(follower.status(), StatusCode::OK);
    let mut follower = follower.into_body().into_data_stream();
    let poster = {
        let app = chat.app.clone();
        let thread = thread.clone();
        tokio::spawn(async move {
            send(
                &app,
                post(
                    &format!("/v1/chat/threads/{thread}/messages"),
                    &json!({"content": "write bracket v2"}),
                    None,
                ),
            )
            .await
        })
    };
    let mut seen = String::new();
    let approval_id = loop {
        use futures::StreamExt;
        let chunk = tokio::time::timeout(Duration::from_secs(10), follower.next())
            .await
            .expect("the follower hears the hold")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if let Some((_, data)) = parse_sse(&seen)
            .into_iter()
            .find(|(name, _)| name == "tool.approval_requested")
        {
            break data["approval_id"].as_str().unwrap().to_owned();
        }
    };
    assert_eq!(
        chat.server.calls_of("write_part"),
        0,
        "nothing runs before the person answers"
    );
    let (status, _, pending) = send(&chat.app, get("/v1/approvals", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        pending["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == approval_id.as_str() && a["status"] == "awaiting_approval"),
        "{pending}"
    );
    let (status, _, decided) = send(
        &chat.app,
        post(
            &format!("/v1/approvals/{approval_id}/decision"),
            &json!({"decision": "approve"}),
            None,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(decided["approver"], "local");
    let (status, _, turn) = tokio::time::timeout(Duration::from_secs(10), poster)
        .await
        .expect("the turn ends")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        turn["message"]["content"],
        "Wrote bracket v2 after your approval."
    );
    assert_eq!(turn["calls"][0]["approval_id"], approval_id.as_str());
    assert_eq!(chat.server.calls_of("write_part"), 1);
}

#[tokio::test]
async fn cancelling_a_running_turn_ends_it_with_notify_error_canceled_and_a_second_cancel_is_409() {
    let chat = chat(
        vec![
            ScriptStep::calls(&[("c1", "mcp_parts_echo", json!({"text": "slow"}))]),
            ScriptStep::text("never reached"),
        ],
        &[],
        Duration::from_secs(30),
        ChatSettings::default(),
    )
    .await;
    let thread = new_thread(&chat.app).await;
    let streamed = {
        let app = chat.app.clone();
        let thread = thread.clone();
        tokio::spawn(async move {
            sse(
                &app,
                streaming_post(
                    &format!("/v1/chat/threads/{thread}/messages"),
                    &json!({"content": "echo slowly"}),
                ),
            )
            .await
        })
    };
    // Wait for the tool call to be in flight.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while chat.server.calls_of("echo") == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tool call never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, _, canceled) = send(
        &chat.app,
        post(&format!("/v1/chat/threads/{thread}/cancel"), &json!({}), None),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{canceled}");
    let events = tokio::time::timeout(Duration::from_secs(10), streamed)
        .await
        .expect("the turn stops promptly")
        .unwrap();
    let error = events
        .iter()
        .find(|(n, _)| n == "notify_error")
        .expect("notify_error");
    assert_eq!(error.1["code"], "canceled");
    assert_eq!(events.last().unwrap().0, "agent.done");
    assert!(
        chat.server.finished().is_empty(),
        "the tool call in flight was dropped"
    );
    let (status, _, body) = send(
        &chat.app,
        post(&format!("/v1/chat/threads/{thread}/cancel"), &json!({}), None),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"], "no_turn_running");
}

#[tokio::test]
async fn a_thread_limit_ends_the_turn_with_notify_error_naming_it() {
    let chat = chat(
        vec![
            ScriptStep::calls(&[("c1", "mcp_parts_echo", json!({"text": "a"}))]),
            ScriptStep::calls(&[("c2", "mcp_parts_echo", json!({"text": "b"}))]),
        ],
        &[],
        Duration::ZERO,
        ChatSettings::default(),
    )
    .await;
    let (status, _, thread) = send(
        &chat.app,
        post("/v1/chat/threads", &json!({"max_iterations": 1}), None),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(thread["limits"]["max_iterations"], 1);
    let id = thread["id"].as_str().unwrap();
    let events = sse(
        &chat.app,
        streaming_post(
            &format!("/v1/chat/threads/{id}/messages"),
            &json!({"content": "go"}),
        ),
    )
    .await;
    let error = events
        .iter()
        .find(|(n, _)| n == "notify_error")
        .expect("notify_error");
    assert_eq!(error.1["code"], "iteration_cap");
    assert!(error.1["message"].as_str().unwrap().contains("max_iterations"));
    assert_eq!(events.last().unwrap().0, "agent.done");
    assert_eq!(chat.llm.remaining(), 1, "no model call past the cap");
}

#[tokio::test]
async fn bad_posts_are_refused_naming_the_field_and_store_nothing() {
    let chat = chat(Vec::new(), &[], Duration::ZERO, ChatSettings::default()).await;
    let thread = new_thread(&chat.app).await;
    let path = format!("/v1/chat/threads/{thread}/messages");
    let (status, _, body) = send(&chat.app, post(&path, &json!({"content": "   "}), None)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"]["field"], "content");
    let (status, _, body) = send(&chat.app, post(&path, &json!({"text": "hi"}), None)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _, body) = send(
        &chat.app,
        post(&path, &json!({"content": "x".repeat(32_001)}), None),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["details"]["field"], "content");
    assert!(chat.sessions.messages(&thread).await.unwrap().is_empty());

    let (status, _, body) = send(
        &chat.app,
        post("/v1/chat/threads/nope/messages", &json!({"content": "hi"}), None),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _, body) = send(
        &chat.app,
        post("/v1/chat/threads", &json!({"parent_session_id": "ghost"}), None),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"]["field"], "parent_session_id");
    let (status, _, body) = send(
        &chat.app,
        post("/v1/chat/threads", &json!({"max_iterations": 0}), None),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"]["field"], "max_iterations");
    let (status, _, body) = send(&chat.app, get("/v1/chat/sessions/search?q=%22%2A%28", None)).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "query syntax alone is no word: {body}"
    );
    assert_eq!(body["details"]["field"], "q");
}

#[tokio::test]
async fn a_fork_keeps_its_parent_and_a_gateway_without_chat_answers_503() {
    let chat = chat(Vec::new(), &[], Duration::ZERO, ChatSettings::default()).await;
    let parent = new_thread(&chat.app).await;
    let (status, _, fork) = send(
        &chat.app,
        post("/v1/chat/threads", &json!({"parent_session_id": parent}), None),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(fork["parent_session_id"], parent.as_str());

    let bare = app_over(crate::common::state());
    let (status, _, body) = send(&bare, get("/v1/chat/threads", None)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body["message"].as_str().unwrap().contains("chat threads"));
}

#[tokio::test]
async fn a_post_no_model_can_serve_is_503_and_stores_nothing() {
    let chat = chat_over(Vec::new(), &[], Duration::ZERO, ChatSettings::default(), false).await;
    let thread = new_thread(&chat.app).await;
    let (status, _, body) = send(
        &chat.app,
        post(
            &format!("/v1/chat/threads/{thread}/messages"),
            &json!({"content": "hello"}),
            None,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("no model serves chat turns")
    );
    assert!(chat.sessions.messages(&thread).await.unwrap().is_empty());
}
