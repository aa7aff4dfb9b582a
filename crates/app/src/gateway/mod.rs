//! The gateway: MetaForge's HTTP front door, thin handlers over the domain and the ports.
//!
//! Every response that is not a success carries [`error::ErrorBody`]; every request gets a request
//! id (`x-request-id`, generated when absent, echoed back) and a tracing span; bodies are size
//! limited; keys and rate limits are enforced by [`auth`]. The OpenAPI document is generated from
//! the handlers' own types, so it cannot drift from what the handlers accept.

mod approvals;
pub mod auth;
pub mod chat;
mod chat_request;
pub mod error;
pub mod extract;
mod flows;
pub mod harness;
mod health;
pub mod providers;
mod usage;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderName;
use metrics_exporter_prometheus::PrometheusHandle;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use metaforge_domain::usage::UsageTotals;
use metaforge_ports::usage_store::UsageStore;
use metaforge_ports::{Clock, PortError};

use crate::approvals::ApprovalService;
use crate::flows::FlowService;
use crate::pipeline::ProviderPipeline;

pub use auth::{ApiKey, AuthConfigError, AuthState, Identity, check_bind_policy, parse_api_keys};
pub use error::{ApiError, ErrorBody};
pub use flows::GatewayProposalGenerator;

/// Default request-body limit: generous for flow documents, small enough to refuse abuse.
pub const DEFAULT_BODY_LIMIT_BYTES: usize = 2 * 1024 * 1024;

/// What the handlers share.
pub struct GatewayState {
    /// Renders `/metrics`; `None` when no recorder was installed (tests).
    pub metrics: Option<PrometheusHandle>,
    /// The one approval ledger's use cases.
    pub approvals: Arc<ApprovalService>,
    /// Design-flow proposals and versions.
    pub flows: Arc<FlowService>,
    /// Recorded model-call usage.
    pub usage: Arc<dyn UsageStore>,
    /// The time source for windows.
    pub clock: Arc<dyn Clock>,
    /// Routing table, credentials and the durable selection.
    pub harness: harness::HarnessConfig,
    /// Every provider's configuration, computed by the binary at start (the providers view).
    pub providers: Vec<providers::ProviderRow>,
    /// The provider pipeline behind `/v1/chat/completions`; `None` when no provider is
    /// configured (chat completions then answer 503 naming why).
    pub pipeline: Option<Arc<ProviderPipeline>>,
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
    info(title = "MetaForge gateway", description = "Design flows, approvals, providers, usage."),
    components(schemas(ErrorBody)),
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
    let error = || {
        ContentBuilder::new()
            .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                "ErrorBody",
            ))))
            .build()
    };
    for item in openapi.paths.paths.values_mut() {
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
                                .content("application/json", error())
                                .build(),
                        )
                    });
            }
        }
    }
}

/// Builds the router and its OpenAPI document.
pub fn build(state: Arc<GatewayState>, auth: Arc<AuthState>, body_limit: usize) -> Router {
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
    router
        .route("/openapi.json", openapi_route)
        .layer(axum::middleware::from_fn_with_state(auth, auth::authenticate))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &axum::http::Request<_>| {
                let id = request
                    .headers()
                    .get("x-request-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-")
                    .to_owned();
                tracing::info_span!("http", method = %request.method(), path = %request.uri().path(), request_id = %id)
            }),
        )
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
}

/// How long a graceful shutdown waits for in-flight requests before the process exits anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
