//! Harness routes: the effective per-role routes and the durable provider selection.
//!
//! Every route shown is resolved by the domain's routing rules exactly as a call would resolve it,
//! so the view and the behaviour cannot disagree; a route that would be refused at call time is
//! listed as a problem, never hidden.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use metaforge_domain::providers::{model_family_mismatch, parse_route, resolve_provider};
use metaforge_domain::routing::{ROLES, RouteCall, RouteSource, RoutingInputs, RoutingTable, resolve_route};
use metaforge_ports::SelectionStore;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::GatewayState;
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiQuery};

/// What the harness routes are computed from; built once by the binary from its configuration.
pub struct HarnessConfig {
    /// The routing table (`METAFORGE_MODEL_ROUTES_PATH`, or the shipped empty one).
    pub table: RoutingTable,
    /// The `METAFORGE_ROUTE_*` environment overrides.
    pub env_routes: BTreeMap<String, String>,
    /// Providers with credentials on this deployment.
    pub credentialed: BTreeSet<String>,
    /// The deployment default `provider:model`, if any.
    pub default_route: Option<String>,
    /// The durable selection.
    pub selection: Arc<dyn SelectionStore>,
}

impl HarnessConfig {
    /// The routing rules' inputs over this configuration and a selection read from the store.
    pub fn inputs<'a>(&'a self, selection: Option<&'a str>) -> RoutingInputs<'a> {
        RoutingInputs {
            table: &self.table,
            env: &self.env_routes,
            credentialed: Some(&self.credentialed),
            selection,
            default: self.default_route.as_deref(),
        }
    }

    /// Every role worth resolving: the seed's roles, then the table's own, each once.
    pub fn role_names(&self) -> Vec<String> {
        let mut names: Vec<String> = ROLES.iter().map(|r| (*r).to_owned()).collect();
        for role in self.table.roles.keys() {
            if !names.contains(role) {
                names.push(role.clone());
            }
        }
        names
    }
}

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
    status: String,
    /// Every role, in the table's and the seed's order.
    roles: Vec<RoleRoute>,
    /// Every problem, one line each.
    problems: Vec<String>,
}

/// The durable selection.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Selection {
    /// `provider:model`; null when none is stored.
    selection: Option<String>,
}

/// The stored selection, unless it fails the family check (then it is ignored, with the reason).
pub(crate) async fn usable_selection(
    store: &dyn SelectionStore,
) -> Result<(Option<String>, Option<String>), ApiError> {
    let Some(route) = store.get().await? else {
        return Ok((None, None));
    };
    match check_selection(&route) {
        Ok(()) => Ok((Some(route), None)),
        Err(reason) => Ok((
            None,
            Some(format!("stored selection '{route}' is ignored: {reason}")),
        )),
    }
}

/// A call for `role` as it resolves now under the routing rules (so a selection stored a second
/// ago is honoured): the resolved route goes first, the role's fallback chain stays behind it.
/// No route is 503 naming the role and why.
pub(crate) async fn role_call(
    harness: &HarnessConfig,
    role: &str,
    session_id: String,
) -> Result<crate::pipeline::CallSpec, ApiError> {
    let (selection, _) = usable_selection(harness.selection.as_ref()).await?;
    let inputs = harness.inputs(selection.as_deref());
    let call = RouteCall {
        role: role.to_owned(),
        ..RouteCall::default()
    };
    let resolved = resolve_route(&inputs, &call)
        .map_err(|e| ApiError::unavailable(format!("no route for role '{role}': {e}")))?;
    Ok(crate::pipeline::CallSpec {
        role: role.to_owned(),
        explicit: Some(crate::pipeline::Candidate {
            provider: resolved.provider,
            model: resolved.model,
        }),
        session_id,
    })
}

fn check_selection(route: &str) -> Result<(), String> {
    let parsed = parse_route(route).map_err(|e| e.to_string())?;
    let provider = resolve_provider(&parsed.provider).map_err(|e| e.to_string())?;
    match model_family_mismatch(provider, &parsed.model) {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

/// Every role's effective route under the routing rules, with problems listed.
#[utoipa::path(get, path = "/v1/harness/routing", tag = "harness", params(RoutingQuery),
    responses((status = 200, body = RoutingView), (status = 401, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn routing(
    State(state): State<Arc<GatewayState>>,
    ApiQuery(query): ApiQuery<RoutingQuery>,
) -> Result<Json<RoutingView>, ApiError> {
    let harness = &state.harness;
    let (selection, ignored) = usable_selection(harness.selection.as_ref()).await?;
    let inputs = harness.inputs(selection.as_deref());
    let role_names = harness.role_names();
    let mut problems: Vec<String> = ignored.into_iter().collect();
    let mut roles = Vec::new();
    for role in role_names {
        let call = RouteCall {
            role: role.clone(),
            project_id: query.project_id.clone(),
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
    Ok(Json(RoutingView {
        status: status.to_owned(),
        roles,
        problems,
    }))
}

/// The durable provider selection used by roles without a route.
#[utoipa::path(get, path = "/v1/harness/selection", tag = "harness",
    responses((status = 200, body = Selection), (status = 401, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn get_selection(
    State(state): State<Arc<GatewayState>>,
) -> Result<Json<Selection>, ApiError> {
    let (selection, _) = usable_selection(state.harness.selection.as_ref()).await?;
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
