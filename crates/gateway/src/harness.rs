//! Harness routes: the effective per-role routes and the durable provider selection.
//!
//! Every route shown is resolved by the domain's routing rules exactly as a call would resolve it,
//! so the view and the behaviour cannot disagree; a route that would be refused at call time is
//! listed as a problem, never hidden.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use metaforge_app::routing::check_selection;
use metaforge_domain::routing::{RouteCall, RouteSource, resolve_route};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::GatewayState;
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiQuery};

/// Which project's routes to show.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct RoutingQuery {
    /// Show the routes as a call scoped to this project resolves them.
    #[serde(default)]
    project_id: Option<String>,
}

/// One role's effective route.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RoleRoute {
    /// The role.
    role: String,
    /// `provider:model`, when it resolves.
    route: Option<String>,
    /// Which layer supplied it (project, table, selection, default).
    source: Option<RouteSource>,
    /// Whether the provider has credentials here.
    configured: bool,
    /// Why it does not resolve, when it does not.
    problem: Option<String>,
}

/// The routing view.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RoutingView {
    /// `ok`, or `degraded` when any role has a problem.
    pub(crate) status: String,
    /// Every role, in the table's and the seed's order.
    roles: Vec<RoleRoute>,
    /// Every problem, one line each.
    pub(crate) problems: Vec<String>,
}

/// The durable selection.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Selection {
    /// `provider:model`; null when none is stored.
    selection: Option<String>,
}

/// Every role's effective route under the routing rules, with problems listed.
#[utoipa::path(get, path = "/v1/harness/routing", tag = "harness", params(RoutingQuery),
    responses((status = 200, body = RoutingView), (status = 401, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn routing(
    State(state): State<Arc<GatewayState>>,
    ApiQuery(query): ApiQuery<RoutingQuery>,
) -> Result<Json<RoutingView>, ApiError> {
    Ok(Json(routing_view(&state, query.project_id).await?))
}

/// The routing view as a call scoped to `project_id` resolves it: the one computation behind
/// `GET /v1/harness/routing` and `/health`'s `model_routing`.
pub(crate) async fn routing_view(
    state: &GatewayState,
    project_id: Option<String>,
) -> Result<RoutingView, ApiError> {
    let harness = &state.harness;
    let (selection, ignored) = harness.usable_selection().await?;
    let inputs = harness.inputs(selection.as_deref());
    let role_names = harness.role_names();
    let mut problems: Vec<String> = ignored.into_iter().collect();
    let mut roles = Vec::new();
    for role in role_names {
        let call = RouteCall {
            role: role.clone(),
            project_id: project_id.clone(),
            ..RouteCall::default()
        };
        match resolve_route(&inputs, &call) {
            Ok(resolved) => roles.push(RoleRoute {
                configured: harness.credentialed.contains(&resolved.provider),
                route: Some(format!("{}:{}", resolved.provider, resolved.model)),
                source: Some(resolved.source),
                problem: None,
                role,
            }),
            Err(err) => {
                problems.push(err.to_string());
                roles.push(RoleRoute {
                    role,
                    route: None,
                    source: None,
                    configured: false,
                    problem: Some(err.to_string()),
                });
            }
        }
    }
    let status = if problems.is_empty() { "ok" } else { "degraded" };
    Ok(RoutingView {
        status: status.to_owned(),
        roles,
        problems,
    })
}

/// The durable provider selection used by roles without a route.
#[utoipa::path(get, path = "/v1/harness/selection", tag = "harness",
    responses((status = 200, body = Selection), (status = 401, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn get_selection(
    State(state): State<Arc<GatewayState>>,
) -> Result<Json<Selection>, ApiError> {
    let (selection, _) = state.harness.usable_selection().await?;
    Ok(Json(Selection { selection }))
}

/// Stores the selection durably; a provider/model family mismatch is a 400 naming the model.
#[utoipa::path(put, path = "/v1/harness/selection", tag = "harness", request_body = Selection,
    responses((status = 200, body = Selection), (status = 400, description = "Malformed, unknown provider or family mismatch", body = ErrorBody),
        (status = 401, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn put_selection(
    State(state): State<Arc<GatewayState>>,
    ApiJson(request): ApiJson<Selection>,
) -> Result<Json<Selection>, ApiError> {
    let Some(route) = request
        .selection
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty())
    else {
        return Err(ApiError::bad_request(
            "selection",
            "selection must be a provider:model route",
        ));
    };
    check_selection(&route).map_err(|reason| ApiError::bad_request("selection", reason))?;
    state.harness.selection.set(&route).await?;
    tracing::info!(event = "harness_selection_set", selection = %route);
    Ok(Json(Selection {
        selection: Some(route),
    }))
}
