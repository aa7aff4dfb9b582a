//! Shared wiring for gateway handler tests: the real router over in-memory ledger doubles.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use metaforge_adapters_llm::{HttpSettings, OpenAiCompatibleProvider};
use metaforge_app::approvals::ApprovalService;
use metaforge_app::flow_generator::PipelineGenerator;
use metaforge_app::flows::FlowService;
use metaforge_app::pipeline::StoreSink as UsageStoreSink;
use metaforge_app::pipeline::{
    Candidate, CredentialRotor, FallbackAlarm, ProviderEntry, ProviderPipeline, RetryPolicy, RoleModelSlots,
};
use metaforge_app::routing::RouteResolver;
use metaforge_domain::approvals::ApproverPolicy;
use metaforge_gateway::providers::ProviderRow;
use metaforge_gateway::{self as gateway, AuthState, GatewayState, parse_api_keys};
use metaforge_ports::usage_store::UsageStore;
use metaforge_ports::{Billing, Clock, IdGen, UsageEvent};
use metaforge_test_support::doubles::{MemoryApprovalLedger, MemoryFlowVersionStore, MemoryUsageStore};
use metaforge_test_support::upstream::{Reply, Scripted};
use metaforge_test_support::{ManualClock, SequentialIds};
use tower::ServiceExt;

/// An in-memory selection (test double).
#[derive(Default)]
pub(crate) struct MemorySelection(std::sync::Mutex<Option<String>>);

#[async_trait::async_trait]
impl metaforge_ports::SelectionStore for MemorySelection {
    async fn get(&self) -> Result<Option<String>, metaforge_ports::PortError> {
        Ok(self.0.lock().unwrap().clone())
    }
    async fn set(&self, route: &str) -> Result<(), metaforge_ports::PortError> {
        *self.0.lock().unwrap() = Some(route.to_owned());
        Ok(())
    }
}

/// Harness configuration: a table routing `gate_check` to haiku, credentials for anthropic only.
pub(crate) fn harness() -> metaforge_app::routing::RouteResolver {
    let table = metaforge_domain::routing::RoutingTable::from_json(
        r#"{"roles": {"gate_check": "anthropic:claude-haiku-4-5-20251001", "summarisation": "openai:gpt-4o-mini"},
            "projects": {"shelf": {"roles": {"chat": "anthropic:claude-opus-4-8"}}}}"#,
    )
    .unwrap();
    metaforge_app::routing::RouteResolver {
        table,
        env_routes: std::collections::BTreeMap::new(),
        credentialed: ["anthropic".to_owned()].into_iter().collect(),
        default_route: Some("anthropic:claude-haiku-4-5-20251001".to_owned()),
        selection: Arc::new(MemorySelection::default()),
    }
}

/// The gateway's state over fresh in-memory ledgers.
pub(crate) fn state() -> Arc<GatewayState> {
    state_with(harness(), Arc::new(MemoryUsageStore::new()), Vec::new(), None)
}

/// The gateway's state over fresh in-memory ledgers with this harness, usage store, providers
/// view and pipeline.
pub(crate) fn state_with(
    harness: RouteResolver,
    usage: Arc<MemoryUsageStore>,
    providers: Vec<ProviderRow>,
    pipeline: Option<Arc<ProviderPipeline>>,
) -> Arc<GatewayState> {
    state_with_policy(harness, usage, providers, pipeline, ApproverPolicy::Any)
}

/// [`state_with`] whose approvals follow `policy` (four eyes with `Separate`).
pub(crate) fn state_with_policy(
    harness: RouteResolver,
    usage: Arc<MemoryUsageStore>,
    providers: Vec<ProviderRow>,
    pipeline: Option<Arc<ProviderPipeline>>,
    policy: ApproverPolicy,
) -> Arc<GatewayState> {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::fixed());
    let ledger = Arc::new(MemoryApprovalLedger::new(Arc::clone(&clock)));
    state_from(ledger, clock, harness, usage, providers, pipeline, policy, None)
}

/// The gateway's state over `ledger` (shared with whatever else the test wires to it, such as
/// the chat service's agent) and `chat`.
#[expect(
    clippy::too_many_arguments,
    reason = "one test builder naming every part it wires"
)]
pub(crate) fn state_from(
    ledger: Arc<MemoryApprovalLedger>,
    clock: Arc<dyn Clock>,
    harness: RouteResolver,
    usage: Arc<MemoryUsageStore>,
    providers: Vec<ProviderRow>,
    pipeline: Option<Arc<ProviderPipeline>>,
    policy: ApproverPolicy,
    chat: Option<Arc<metaforge_app::chat::ChatService>>,
) -> Arc<GatewayState> {
    let ids: Arc<dyn IdGen> = Arc::new(SequentialIds::new("id"));
    let versions = Arc::new(MemoryFlowVersionStore::new());
    let flows = Arc::new(FlowService::new(
        versions.clone(),
        ledger.clone(),
        Arc::clone(&clock),
        Arc::clone(&ids),
    ));
    let harness = Arc::new(harness);
    let generator = Arc::new(PipelineGenerator::new(
        pipeline.clone(),
        Arc::clone(&harness),
        Arc::clone(&flows),
    ));
    Arc::new(GatewayState {
        metrics: None,
        approvals: Arc::new(
            ApprovalService::new(ledger, versions, Arc::clone(&clock), ids).with_approver_policy(policy),
        ),
        flows,
        usage,
        clock,
        harness,
        generator,
        providers,
        chat,
        pipeline,
        mcp_servers: Arc::new(metaforge_app::tools::ServerStatuses::none()),
        twin: None,
        runs: None,
    })
}

/// The gateway's state with a real pipeline over OpenAI-compatible upstreams: `providers` are
/// (id, base URL), `role`'s chain is `chain` (`provider:model`, primary first). Usage lands in the
/// returned store.
pub(crate) fn state_over_upstreams(
    providers: &[(&str, &str)],
    role: &str,
    chain: &[&str],
    policy: RetryPolicy,
    harness: RouteResolver,
) -> (Arc<GatewayState>, Arc<MemoryUsageStore>) {
    let usage = Arc::new(MemoryUsageStore::new());
    let entries = providers
        .iter()
        .map(|(id, url)| ProviderEntry {
            id: (*id).to_owned(),
            adapter: Arc::new(OpenAiCompatibleProvider::new(*url, HttpSettings::default(), false).unwrap()),
            billing: Billing::Metered,
        })
        .collect();
    let chain = chain
        .iter()
        .map(|route| {
            let (provider, model) = route.split_once(':').unwrap();
            Candidate {
                provider: provider.to_owned(),
                model: model.to_owned(),
            }
        })
        .collect();
    let slots = RoleModelSlots::new(BTreeMap::from([(role.to_owned(), chain)])).unwrap();
    let pipeline = ProviderPipeline::new(
        entries,
        slots,
        policy,
        CredentialRotor::new(None),
        Arc::new(FallbackAlarm::new()),
        Arc::new(UsageStoreSink::new(usage.clone(), Arc::new(ManualClock::fixed()))),
    )
    .unwrap();
    let rows = providers
        .iter()
        .map(|(id, url)| ProviderRow {
            id: (*id).to_owned(),
            family: "openai_compatible".into(),
            configured: true,
            configured_reason: "credential from environment".into(),
            base_url: (*url).to_owned(),
            base_url_source: "explicit (env override)".into(),
        })
        .collect();
    let state = state_with(harness, usage.clone(), rows, Some(Arc::new(pipeline)));
    (state, usage)
}

/// The shared scripted upstream (`test_support::upstream`) answering each request with what
/// `respond` makes of its JSON body; returns its OpenAI-compatible base URL (`http://…/v1`) and the
/// upstream, which keeps every request it received.
pub(crate) async fn serve_upstream(
    respond: impl Fn(&serde_json::Value) -> Reply + Send + Sync + 'static,
) -> (String, Scripted) {
    let upstream = Scripted::respond(move |request| respond(&request.body)).await;
    (format!("{}/v1", upstream.url()), upstream)
}

/// True when no usage event was recorded.
pub(crate) async fn nothing_recorded(usage: &MemoryUsageStore) -> bool {
    usage
        .events_since(chrono::DateTime::<chrono::Utc>::MIN_UTC)
        .await
        .unwrap()
        .is_empty()
}

/// Usage recording runs on the runtime; wait (bounded) until `n` events are stored.
pub(crate) async fn recorded(usage: &MemoryUsageStore, n: usize) -> Vec<UsageEvent> {
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

/// The router over a given state, open loopback mode.
pub(crate) fn app_over(state: Arc<GatewayState>) -> axum::Router {
    gateway::build(state, Arc::new(AuthState::new(Vec::new(), None)), 1 << 20)
}

/// The router with these keys (`""` = open loopback mode) and an optional per-minute limit.
pub(crate) fn app_with(keys: &str, per_minute: Option<u32>) -> axum::Router {
    let auth = AuthState::new(
        parse_api_keys(keys).unwrap(),
        per_minute.and_then(NonZeroU32::new),
    );
    gateway::build(state(), Arc::new(auth), 1 << 20)
}

/// Sends a request and returns status, headers and the JSON body (Null when not JSON).
pub(crate) async fn send(
    app: &axum::Router,
    req: Request<Body>,
) -> (StatusCode, HeaderMap, serde_json::Value) {
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

/// A GET with an optional key.
pub(crate) fn get(path: &str, key: Option<&str>) -> Request<Body> {
    let mut b = Request::builder().uri(path);
    if let Some(key) = key {
        b = b.header("x-api-key", key);
    }
    b.body(Body::empty()).unwrap()
}

/// A JSON POST with an optional key.
pub(crate) fn post(path: &str, body: &serde_json::Value, key: Option<&str>) -> Request<Body> {
    let mut b = Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json");
    if let Some(key) = key {
        b = b.header("x-api-key", key);
    }
    b.body(Body::from(body.to_string())).unwrap()
}
