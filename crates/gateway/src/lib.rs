//! The gateway: MetaForge's HTTP front door, thin handlers over the app's services.
//!
//! Every response that is not a success carries [`error::ErrorBody`]; every request gets a request
//! id (`x-request-id`, generated when absent, echoed back) and a tracing span; bodies are size
//! limited; keys and rate limits are enforced by [`auth`]. The OpenAPI document is generated from
//! the handlers' own types, so it cannot drift from what the handlers accept.

// A door names every variant of our own enums (issue 11, W4).
#![deny(clippy::wildcard_enum_match_arm)]

mod approvals;
pub mod auth;
pub mod chat;
mod chat_request;
mod client_tasks;
pub mod console;
pub mod error;
pub mod extract;
mod flows;
pub mod harness;
mod health;
pub mod limits;
pub mod listen;
mod models;
pub mod providers;
mod runs;
mod threads;
mod trace_context;
mod twin;
mod usage;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderName;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use metaforge_domain::usage::UsageTotals;
use metaforge_ports::usage_store::UsageStore;
use metaforge_ports::{Clock, PortError};

use metaforge_app::approvals::ApprovalService;
use metaforge_app::flow_generator::ProposalGenerator;
use metaforge_app::flows::FlowService;
use metaforge_app::pipeline::ProviderPipeline;
use metaforge_app::routing::RouteResolver;

pub use auth::{
    ApiKey, AuthConfigError, AuthState, Identity, TransportClass, check_bind_policy, parse_api_keys,
};
pub use error::{ApiError, ErrorBody, OpenAiError, OpenAiErrorBody};

/// The OpenAI-compatible routes: their errors are in OpenAI's shape (`{"error": {message, type,
/// param, code}}`) so OpenAI SDKs show the reason; every other route keeps [`ErrorBody`].
pub const OPENAI_COMPATIBLE_PATHS: &[&str] = &["/v1/chat/completions", "/v1/models"];

/// Default request-body limit: generous for flow documents, small enough to refuse abuse.
pub const DEFAULT_BODY_LIMIT_BYTES: usize = 2 * 1024 * 1024;

/// What the handlers share.
pub struct GatewayState {
    /// Renders `/metrics` (build info, process series, every recorded series); `None` when no
    /// recorder was installed (tests).
    pub metrics: Option<Arc<metaforge_app::exposition::Exposition>>,
    /// The one approval ledger's use cases.
    pub approvals: Arc<ApprovalService>,
    /// Design-flow proposals and versions.
    pub flows: Arc<FlowService>,
    /// Recorded model-call usage.
    pub usage: Arc<dyn UsageStore>,
    /// The time source for windows.
    pub clock: Arc<dyn Clock>,
    /// Routing table, credentials and the durable selection.
    pub harness: Arc<RouteResolver>,
    /// The server's flow generator (the propose route without operations).
    pub generator: Arc<dyn ProposalGenerator>,
    /// Every provider's configuration, computed by the binary at start (the providers view).
    pub providers: Vec<providers::ProviderRow>,
    /// Chat threads (the agent loop over the session ledger); `None` when this process serves
    /// none (the thread routes then answer 503 naming why).
    pub chat: Option<Arc<metaforge_app::chat::ChatService>>,
    /// The provider pipeline behind `/v1/chat/completions`; `None` when no provider is
    /// configured (chat completions then answer 503 naming why).
    pub pipeline: Option<Arc<ProviderPipeline>>,
    /// The MCP tool servers' live states, written by the tool registry and reported by
    /// `/health` (`ServerStatuses::none()` when no servers file is configured).
    pub mcp_servers: Arc<metaforge_app::tools::ServerStatuses>,
    /// The digital twin the `/v1/twin` read routes serve (the same service the sidecar's
    /// `twin.*` tools write through); `None` when this process composes none (the routes then
    /// answer 503 naming why).
    pub twin: Option<Arc<metaforge_app::twin::TwinService>>,
    /// Design-flow runs and client tasks (`app::runs::RunService` over the flow engine); `None`
    /// when this process serves none (the run and client-task routes then answer 503 naming why,
    /// and `/health` reports `design_flow_worker` absent).
    pub runs: Option<Arc<metaforge_app::runs::RunService>>,
}

impl GatewayState {
    /// Totals over the trailing `hours`, with the domain's rules (unknown stays null).
    pub async fn usage_totals(&self, hours: u32) -> Result<UsageTotals, PortError> {
        let since = self.clock.now() - chrono::Duration::hours(i64::from(hours));
        let events = self.usage.events_since(since).await?;
        Ok(UsageTotals::from_events(&events))
    }
}

/// The OpenAPI document's fixed parts; paths are added by the router as handlers register.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "MetaForge gateway", description = "Design flows and their runs, approvals, client tasks, chat threads, providers, usage, the digital twin."),
    components(schemas(ErrorBody, OpenAiErrorBody)),
    modifiers(&SecurityAddon)
)]
struct ApiDoc;

struct SecurityAddon;

impl utoipa::Modify for SecurityAddon {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-API-Key"))),
        );
    }
}

/// Documents the envelope errors every route can answer (429; 401 when secured; 400 and 413 with
/// a body) on every operation, once the router has registered them.
fn document_envelope(openapi: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{RefOr, ResponseBuilder, content::ContentBuilder};
    // Every route can answer these envelope errors; document them once, on every operation.
    let error = |schema: &str| {
        ContentBuilder::new()
            .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(schema))))
            .build()
    };
    for (path, item) in &mut openapi.paths.paths {
        let schema = if OPENAI_COMPATIBLE_PATHS.contains(&path.as_str()) {
            "OpenAiErrorBody"
        } else {
            "ErrorBody"
        };
        let operations = [
            item.get.as_mut(),
            item.post.as_mut(),
            item.put.as_mut(),
            item.delete.as_mut(),
            item.patch.as_mut(),
        ];
        for operation in operations.into_iter().flatten() {
            let secured = operation.security.as_ref().is_some_and(|s| !s.is_empty());
            let mut envelope = vec![("429", "Rate limit exceeded; see Retry-After")];
            if secured {
                envelope.push(("401", "No valid API key"));
            }
            if operation.request_body.is_some() {
                envelope.push(("413", "Request body too large"));
                envelope.push(("400", "Malformed body, naming the field"));
                envelope.push((
                    "422",
                    "A field or flow over its size limit (too_large), or a rule refused it",
                ));
            }
            for (code, description) in envelope {
                operation
                    .responses
                    .responses
                    .entry(code.to_owned())
                    .or_insert_with(|| {
                        RefOr::T(
                            ResponseBuilder::new()
                                .description(description)
                                .content("application/json", error(schema))
                                .build(),
                        )
                    });
            }
        }
    }
}

/// Builds the router and its OpenAPI document, with the web console on loopback settings.
pub fn build(state: Arc<GatewayState>, auth: Arc<AuthState>, body_limit: usize) -> Router {
    build_with_console(state, auth, body_limit, console::ConsoleSettings::default())
}

/// Builds the router: the JSON API and its OpenAPI document, and the web console at `/` (its
/// own session guard; the API's key check and JSON errors stay on the API's routes).
pub fn build_with_console(
    state: Arc<GatewayState>,
    auth: Arc<AuthState>,
    body_limit: usize,
    console_settings: console::ConsoleSettings,
) -> Router {
    let (router, mut api) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health::health))
        .routes(routes!(health::metrics))
        .routes(routes!(flows::catalogue))
        .routes(routes!(flows::validate))
        .routes(routes!(flows::save_version, flows::list_versions))
        .routes(routes!(flows::get_version))
        .routes(routes!(flows::propose))
        .routes(routes!(
            approvals::list_tool_approvals,
            approvals::park_tool_approval
        ))
        .routes(routes!(
            approvals::get_tool_approval,
            approvals::decide_tool_approval
        ))
        .routes(routes!(approvals::resolve_tool_approval))
        .routes(routes!(approvals::list_approvals))
        .routes(routes!(approvals::get_approval))
        .routes(routes!(approvals::decide_approval))
        .routes(routes!(usage::summary))
        .routes(routes!(harness::routing))
        .routes(routes!(harness::get_selection, harness::put_selection))
        .routes(routes!(providers::list))
        .routes(routes!(chat::completions))
        .routes(routes!(threads::create_thread, threads::list_threads))
        .routes(routes!(threads::get_thread))
        .routes(routes!(threads::post_message))
        .routes(routes!(threads::stream))
        .routes(routes!(threads::cancel))
        .routes(routes!(threads::search))
        .routes(routes!(models::list))
        .routes(routes!(twin::branches))
        .routes(routes!(twin::nodes))
        .routes(routes!(twin::node))
        .routes(routes!(twin::edges))
        .routes(routes!(twin::diff))
        .routes(routes!(twin::log))
        .routes(routes!(runs::start, runs::list))
        .routes(routes!(runs::get))
        .routes(routes!(runs::flow_state))
        .routes(routes!(runs::answer_gate))
        .routes(routes!(runs::cancel))
        .routes(routes!(runs::events))
        .routes(routes!(client_tasks::list))
        .routes(routes!(client_tasks::get))
        .routes(routes!(client_tasks::claim))
        .routes(routes!(client_tasks::submit))
        .with_state(Arc::clone(&state))
        .split_for_parts();
    api.info.version = env!("CARGO_PKG_VERSION").to_owned();
    document_envelope(&mut api);
    let api = Arc::new(api);
    let openapi_route = axum::routing::get(move || {
        let api = Arc::clone(&api);
        async move { axum::Json(api.as_ref().clone()) }
    });
    let request_id = HeaderName::from_static("x-request-id");
    let api = router
        .route("/openapi.json", openapi_route)
        .fallback(no_route)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&auth),
            auth::authenticate,
        ))
        .layer(axum::middleware::from_fn(error::json_errors))
        .layer(axum::middleware::from_fn(openai_errors));
    console::router(state, auth, console_settings)
        .layer(tower_http::compression::CompressionLayer::new())
        .merge(api)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn(error::request_size_limits))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &axum::http::Request<_>| {
                let id = request
                    .headers()
                    .get("x-request-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-")
                    .to_owned();
                // OpenTelemetry names a server span by its method when no route template is
                // known yet (routing happens inside this layer); the path is an attribute.
                let span = tracing::info_span!("http", otel.name = %request.method(), otel.kind = "server", method = %request.method(), path = %request.uri().path(), request_id = %id);
                trace_context::join_callers_trace(&span, request.headers());
                span
            })
            .on_failure(log_server_error),
        )
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
}

/// 5xx answers in the log: a 503 is an expected answer (no provider configured, a peer down) and
/// says so at WARN; any other 5xx is a fault and logs at ERROR.
fn log_server_error(
    class: tower_http::classify::ServerErrorsFailureClass,
    latency: Duration,
    _span: &tracing::Span,
) {
    use tower_http::classify::ServerErrorsFailureClass as Class;
    let millis = latency.as_millis();
    match class {
        Class::StatusCode(status) if status == axum::http::StatusCode::SERVICE_UNAVAILABLE => {
            tracing::warn!(
                event = "http_unavailable",
                status = status.as_u16(),
                latency_ms = millis,
                "answered 503"
            );
        }
        Class::StatusCode(status) => {
            tracing::error!(
                event = "http_server_error",
                status = status.as_u16(),
                latency_ms = millis,
                "server error"
            );
        }
        Class::Error(error) => {
            tracing::error!(event = "http_server_error", error = %error, latency_ms = millis, "request failed");
        }
    }
}

/// On the OpenAI-compatible routes, answers every [`ApiError`] — the handler's, the body
/// extractor's, the key check's and the rate limiter's — in OpenAI's shape, same status and headers.
async fn openai_errors(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let openai = OPENAI_COMPATIBLE_PATHS.contains(&request.uri().path());
    let response = next.run(request).await;
    if !openai {
        return response;
    }
    let Some(error) = response.extensions().get::<ApiError>().cloned() else {
        return response;
    };
    let (parts, _) = response.into_parts();
    let mut rewritten = error.into_openai_response();
    for (name, value) in &parts.headers {
        if name != axum::http::header::CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            rewritten.headers_mut().insert(name.clone(), value.clone());
        }
    }
    rewritten
}

/// 404 for a path no route serves, in the JSON error shape (after authentication, so an
/// unauthenticated client learns nothing about which paths exist).
async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        "not_found",
        format!("no route serves {method} {}", uri.path()),
    )
}
/// How long a graceful shutdown waits for in-flight requests before the process exits anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
