//! The sidecar transport over real streamable HTTP (in-process axum server, rmcp clients):
//! how a tool's questions reach a person in each protocol era, caller classes from the
//! connection, and the project's client re-initialising after the sidecar restarts (HTTP 404).

#![expect(
    clippy::unwrap_used,
    reason = "test doubles and helpers outside #[test] fns: a failure must fail the test loudly"
)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metaforge_adapters_mcp::{
    McpToolServer, ProtocolChoice, SERVICE_KEY_HEADER, SESSION_HEADER, ServerConfig, ServerTransport,
    bind_http,
};
use metaforge_ports::{
    CallerClass, CallerContext, HostCallOutcome, InputChannel, InputQuestion, PortError, PortErrorKind,
    ResourceTemplateDescriptor, ResourceText, ToolDescriptor, ToolHints, ToolHost, ToolOutput, ToolSource,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, InputRequest, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RequestContext};
use rmcp::{ClientHandler, ErrorData, RoleClient};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// A host with one tool that needs a person's answer, recording who called and how.
#[derive(Default)]
struct QuestionHost {
    seen: Mutex<Vec<CallerContext>>,
    slow_dropped: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl ToolHost for QuestionHost {
    fn tools(&self, _caller: CallerClass) -> Vec<ToolDescriptor> {
        vec![ToolDescriptor {
            name: "ask.route".into(),
            title: None,
            description: "asks for the manufacturing route".into(),
            input_schema: json!({"type": "object", "properties": {"answers": {"type": "object"}}}),
            hints: ToolHints::default(),
        }]
    }

    async fn call(
        &self,
        caller: &CallerContext,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        if tool == "slow.op" {
            // Records whether the work was dropped (cancelled) before it finished.
            struct Dropped(Arc<AtomicBool>);
            impl Drop for Dropped {
                fn drop(&mut self) {
                    self.0.store(true, AtomicOrdering::SeqCst);
                }
            }
            let _guard = Dropped(Arc::clone(&self.slow_dropped));
            tokio::time::sleep(Duration::from_secs(30)).await;
            std::mem::forget(_guard);
            return Ok(HostCallOutcome::Done(ToolOutput::json(json!({"slow": "done"}))));
        }
        if tool != "ask.route" {
            return Err(PortError::new(PortErrorKind::NotFound, tool));
        }
        self.seen.lock().unwrap().push(caller.clone());
        Ok(match arguments.get("answers") {
            Some(answers) => HostCallOutcome::Done(ToolOutput::json(json!({
                "status": "proposed", "answers": answers, "caller": caller.class.as_str()
            }))),
            None => HostCallOutcome::NeedsInput {
                message: "How will this part be made?".into(),
                questions: vec![InputQuestion {
                    id: "manufacturing_route".into(),
                    prompt: "In house or vendor?".into(),
                    choices: vec!["in_house".into(), "vendor".into()],
                    optional: false,
                }],
                result: ToolOutput::json(json!({
                    "status": "needs_input",
                    "questions": [{"id": "manufacturing_route"}],
                    "caller": caller.class.as_str()
                })),
            },
        })
    }

    fn resource_templates(&self) -> Vec<ResourceTemplateDescriptor> {
        Vec::new()
    }

    async fn read_resource(&self, uri: &str) -> Result<ResourceText, PortError> {
        Err(PortError::new(PortErrorKind::NotFound, uri))
    }
}

async fn sidecar(
    host: Arc<QuestionHost>,
    addr: SocketAddr,
    key: Option<&str>,
) -> (String, CancellationToken) {
    let shutdown = CancellationToken::new();
    let bound = bind_http(host, addr, key.map(str::to_owned), shutdown.clone())
        .await
        .unwrap();
    let url = format!("http://{}/mcp", bound.local_addr);
    tokio::spawn(bound.run());
    (url, shutdown)
}

/// An rmcp client that answers elicitation with `vendor`.
#[derive(Clone)]
struct Answering {
    info: ClientConfig,
    asked: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Answering {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.asked.lock().unwrap().push(message.clone());
        }
        let mut result = ElicitResult::new(ElicitationAction::Accept);
        result.content = Some(json!({"manufacturing_route": "vendor"}));
        Ok(result)
    }
}

fn answering(elicitation: bool) -> Answering {
    let capabilities = if elicitation {
        ClientCapabilities::builder().enable_elicitation().build()
    } else {
        ClientCapabilities::default()
    };
    let mut info = ClientConfig::new(capabilities, Implementation::new("test", "0"));
    info.protocol_version = ProtocolVersion::V_2025_11_25;
    Answering {
        info,
        asked: Arc::default(),
    }
}

fn transport(
    url: &str,
    headers: &[(&str, &str)],
) -> rmcp::transport::StreamableHttpClientTransport<reqwest::Client> {
    let mut custom = std::collections::HashMap::new();
    for (k, v) in headers {
        custom.insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    rmcp::transport::StreamableHttpClientTransport::from_config(
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url)
            .custom_headers(custom),
    )
}

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

#[tokio::test]
async fn a_2025_client_with_elicitation_is_asked_through_elicitation() {
    let host = Arc::new(QuestionHost::default());
    let (url, shutdown) = sidecar(Arc::clone(&host), local(), None).await;
    let handler = answering(true);
    let asked = Arc::clone(&handler.asked);
    let client = handler
        .serve_with_lifecycle(transport(&url, &[]), ClientLifecycleMode::Initialize)
        .await
        .unwrap();
    let result = client
        .call_tool(CallToolRequestParams::new("ask.route"))
        .await
        .unwrap();
    let out = result.structured_content.unwrap();
    assert_eq!(out["status"], "proposed");
    assert_eq!(out["answers"]["manufacturing_route"], "vendor");
    assert_eq!(out["caller"], "remote");
    assert_eq!(asked.lock().unwrap().as_slice(), ["How will this part be made?"]);
    let seen = host.seen.lock().unwrap().clone();
    assert_eq!(seen[0].input_channel, InputChannel::Elicitation);
    client.cancel().await.unwrap();
    shutdown.cancel();
}

#[tokio::test]
async fn a_2026_client_gets_an_input_required_result_and_answers_on_retry() {
    let host = Arc::new(QuestionHost::default());
    let (url, shutdown) = sidecar(Arc::clone(&host), local(), None).await;
    let handler = answering(true);
    let client = handler
        .serve_with_lifecycle(
            transport(&url, &[]),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    let first = client
        .call_tool_once(CallToolRequestParams::new("ask.route"))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(required) = first else {
        panic!("expected InputRequiredResult, got {first:?}");
    };
    let requests = required.input_requests.clone().unwrap();
    let Some(InputRequest::Elicitation(elicit)) = requests.get("answers") else {
        panic!("expected an elicitation input request: {requests:?}");
    };
    let schema = serde_json::to_value(&elicit.params).unwrap();
    assert_eq!(
        schema["requestedSchema"]["properties"]["manufacturing_route"]["enum"],
        json!(["in_house", "vendor"])
    );
    let mut responses = BTreeMap::new();
    responses.insert(
        "answers".to_owned(),
        json!({"action": "accept", "content": {"manufacturing_route": "in_house"}}),
    );
    let mut retry = CallToolRequestParams::new("ask.route").with_input_responses(responses);
    if let Some(state) = required.request_state.clone() {
        retry = retry.with_request_state(state);
    }
    let second = client.call_tool_once(retry).await.unwrap();
    let CallToolResponse::Complete(done) = second else {
        panic!("expected a complete result, got {second:?}");
    };
    assert_eq!(
        done.structured_content.unwrap()["answers"]["manufacturing_route"],
        "in_house"
    );
    let seen = host.seen.lock().unwrap().clone();
    assert_eq!(seen[0].input_channel, InputChannel::InputRequired);
    client.cancel().await.unwrap();
    shutdown.cancel();
}

#[tokio::test]
async fn a_client_without_elicitation_gets_the_questions_as_the_result() {
    let host = Arc::new(QuestionHost::default());
    let (url, shutdown) = sidecar(Arc::clone(&host), local(), None).await;
    for lifecycle in [
        ClientLifecycleMode::Initialize,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    ] {
        let client = answering(false)
            .serve_with_lifecycle(transport(&url, &[]), lifecycle)
            .await
            .unwrap();
        let result = client
            .call_tool(CallToolRequestParams::new("ask.route"))
            .await
            .unwrap();
        let out = result.structured_content.unwrap();
        assert_eq!(out["status"], "needs_input");
        assert_eq!(out["questions"][0]["id"], "manufacturing_route");
        client.cancel().await.unwrap();
    }
    assert!(
        host.seen
            .lock()
            .unwrap()
            .iter()
            .all(|c| c.input_channel == InputChannel::None)
    );
    shutdown.cancel();
}

/// Grants that confirm every claim naming run `run-7` (what the gateway would answer for a
/// running run on an approved version in the caller's project) and nothing else.
struct RunSevenGrants;

#[async_trait::async_trait]
impl metaforge_ports::CallerGrants for RunSevenGrants {
    async fn confirm(&self, claim: &metaforge_ports::ClassClaim) -> bool {
        claim.class == CallerClass::Service && claim.session == "run-7"
    }
}

#[tokio::test]
async fn the_service_key_makes_a_service_caller_only_for_a_confirmed_run_and_a_wrong_key_an_untrusted_one() {
    let host = Arc::new(QuestionHost::default());
    let shutdown = CancellationToken::new();
    let bound = bind_http(
        Arc::clone(&host) as Arc<dyn ToolHost>,
        local(),
        Some("s3cret".to_owned()),
        shutdown.clone(),
    )
    .await
    .unwrap()
    .with_caller_grants(Arc::new(RunSevenGrants));
    let url = format!("http://{}/mcp", bound.local_addr);
    tokio::spawn(bound.run());
    for (headers, expected) in [
        (
            vec![(SERVICE_KEY_HEADER, "s3cret"), (SESSION_HEADER, "run-7")],
            "service",
        ),
        // The right key on a run the gateway does not confirm, or naming no run: fail closed.
        (
            vec![(SERVICE_KEY_HEADER, "s3cret"), (SESSION_HEADER, "run-8")],
            "untrusted",
        ),
        (vec![(SERVICE_KEY_HEADER, "s3cret")], "untrusted"),
        (
            vec![(SERVICE_KEY_HEADER, "guess"), (SESSION_HEADER, "run-7")],
            "untrusted",
        ),
        (vec![], "remote"),
    ] {
        let client = answering(false)
            .serve_with_lifecycle(transport(&url, &headers), ClientLifecycleMode::Initialize)
            .await
            .unwrap();
        let result = client
            .call_tool(CallToolRequestParams::new("ask.route"))
            .await
            .unwrap();
        assert_eq!(
            result.structured_content.unwrap()["caller"],
            expected,
            "{headers:?}"
        );
        client.cancel().await.unwrap();
    }
    shutdown.cancel();
}

#[tokio::test]
async fn without_caller_grants_a_service_key_is_untrusted() {
    let host = Arc::new(QuestionHost::default());
    let (url, shutdown) = sidecar(Arc::clone(&host), local(), Some("s3cret")).await;
    let headers = vec![(SERVICE_KEY_HEADER, "s3cret"), (SESSION_HEADER, "run-7")];
    let client = answering(false)
        .serve_with_lifecycle(transport(&url, &headers), ClientLifecycleMode::Initialize)
        .await
        .unwrap();
    let result = client
        .call_tool(CallToolRequestParams::new("ask.route"))
        .await
        .unwrap();
    assert_eq!(result.structured_content.unwrap()["caller"], "untrusted");
    client.cancel().await.unwrap();
    shutdown.cancel();
}

#[tokio::test]
async fn the_client_re_initialises_after_the_sidecar_restarts_and_answers_404() {
    // The sidecar is restarted on the same address, so the test keeps a port number, not a listener.
    let port = metaforge_test_support::net::unused_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (url, first) = sidecar(Arc::new(QuestionHost::default()), addr, None).await;
    let mut config = ServerConfig::new(
        "metaforge",
        ServerTransport::Http {
            url,
            headers: Default::default(),
        },
    );
    config.protocol = ProtocolChoice::Initialize;
    config.call_timeout = Duration::from_secs(10);
    let client = McpToolServer::new(config, crate::launch());
    let before = client.call_tool("ask.route", Map::new()).await.unwrap();
    assert_eq!(before.structured.unwrap()["status"], "needs_input");
    first.cancel();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_url, second) = sidecar(Arc::new(QuestionHost::default()), addr, None).await;
    let after = client.call_tool("ask.route", Map::new()).await.unwrap();
    assert_eq!(after.structured.unwrap()["status"], "needs_input");
    let stats = client.stats();
    println!("after sidecar restart: {stats:?}");
    assert!(stats.reinitialisations >= 1, "{stats:?}");
    client.close().await;
    second.cancel();
}

#[tokio::test]
async fn a_caller_that_gives_up_cancels_the_call_on_the_server() {
    let host = Arc::new(QuestionHost::default());
    let (url, shutdown) = sidecar(Arc::clone(&host), local(), None).await;
    let mut config = ServerConfig::new(
        "metaforge",
        ServerTransport::Http {
            url,
            headers: Default::default(),
        },
    );
    config.protocol = ProtocolChoice::Initialize;
    let client = McpToolServer::new(config, crate::launch());
    client.connect().await.unwrap();
    // The caller stops waiting after 300 ms: the client must send notifications/cancelled.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        client.call_tool("slow.op", Map::new()),
    )
    .await;
    assert!(gave_up.is_err(), "the slow call cannot have finished");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !host.slow_dropped.load(AtomicOrdering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the server kept working on a call its caller gave up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client.close().await;
    shutdown.cancel();
}

#[tokio::test]
async fn ending_a_session_with_delete_answers_204_and_the_session_is_gone() {
    let (url, shutdown) = sidecar(Arc::new(QuestionHost::default()), local(), None).await;
    let client = reqwest::Client::new();
    let init = client
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(init.status(), 200);
    let session = init.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let ended = client
        .delete(&url)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(
        ended.status(),
        204,
        "clients accept 200 or 204 for a terminated session, not 202"
    );
    assert!(ended.bytes().await.unwrap().is_empty());
    let after = client
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 404, "the ended session is gone");
    shutdown.cancel();
}
