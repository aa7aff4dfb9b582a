//! Design-flow routes: the served catalogue and validation of an edit without saving it.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use metaforge_domain::flow::{self, CatalogueEntry, Flow, FlowContext, ValidationReport};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::GatewayState;
use super::error::ErrorBody;
use super::extract::ApiJson;

/// The catalogue: every launchable flow as the gateway will run it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CatalogueResponse {
    /// Every built-in flow, startable or not (an unstartable flow is listed, never hidden).
    flows: Vec<CatalogueEntry>,
    /// The flow a run gets when it names none.
    default_flow: String,
}

/// Lists every flow with phases, gates, deliverables, disciplines, version and startability.
#[utoipa::path(get, path = "/v1/design-flows", tag = "design-flows",
    responses(
        (status = 200, description = "The flow catalogue", body = CatalogueResponse),
        (status = 401, description = "No valid API key", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn catalogue(State(_state): State<Arc<GatewayState>>) -> Json<CatalogueResponse> {
    Json(CatalogueResponse {
        flows: flow::catalogue(),
        default_flow: flow::DEFAULT_TEMPLATE_ID.to_owned(),
    })
}

/// An edit to check: the flow and, optionally, the project context it will run under.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ValidateRequest {
    /// The edited flow.
    flow: Flow,
    /// The project context; with it, unknown loads forbid replacing simulation by a test plan.
    #[serde(default)]
    context: Option<FlowContext>,
}

/// Checks an edit against every invariant without saving it; all violations at once.
#[utoipa::path(post, path = "/v1/design-flows/validate", tag = "design-flows",
    request_body = ValidateRequest,
    responses(
        (status = 200, description = "Validation result (valid or not)", body = ValidationReport),
        (status = 400, description = "Malformed body, naming the field", body = ErrorBody),
        (status = 401, description = "No valid API key", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn validate(
    State(_state): State<Arc<GatewayState>>,
    ApiJson(request): ApiJson<ValidateRequest>,
) -> Json<ValidationReport> {
    Json(flow::validation_report(&request.flow, request.context.as_ref()))
}
