//! What `model` may name on the OpenAI-compatible routes, and `GET /v1/models` listing it.
//!
//! A chat completion's `model` is, in this order: an explicit `provider:model` (family-checked);
//! a routing role (`chat`, `phase_brain`, …); or a model name as OpenAI SDK users send it —
//! `vendor/model` when `vendor` is a provider configured here (`openai/gpt-4o-mini`), else the bare
//! name served by its vendor's first-party provider when that one is configured (`gpt-4o-mini` →
//! `openai`), else by the provider of a configured route that names exactly that model. Anything
//! else — `gpt-9-ultra`, or `gpt-4o-mini` with no OpenAI key — is a 400 naming the accepted
//! forms: a bare name is never handed to a local runtime that would answer any name under the
//! name requested. `GET /v1/models` lists exactly what resolves, by resolving it with the same
//! function.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use metaforge_domain::providers::{
    first_party_provider, model_family_mismatch, parse_route, resolve_provider,
};
use metaforge_domain::routing::{ROLES, RouteCall, resolve_route};
use serde::Serialize;
use utoipa::ToSchema;

use super::GatewayState;
use super::error::{ApiError, OpenAiErrorBody};
use metaforge_app::pipeline::Candidate;
use metaforge_app::routing::RouteResolver;

/// What a request's `model` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ModelTarget {
    /// A routing role, resolved by the routing rules when called.
    Role(String),
    /// One provider and model.
    Explicit(Candidate),
}

/// `model` resolved against this configuration and the usable stored selection.
pub(crate) fn resolve_model(
    harness: &RouteResolver,
    selection: Option<&str>,
    model: &str,
) -> Result<ModelTarget, ApiError> {
    let model = model.trim();
    if model.contains(':') {
        let parsed = parse_route(model)
            .map_err(|e| ApiError::bad_request("model", format!("model '{model}': {e}")))?;
        let info = resolve_provider(&parsed.provider)
            .map_err(|e| ApiError::bad_request("model", format!("model '{model}': {e}")))?;
        if let Some(reason) = model_family_mismatch(info, &parsed.model) {
            return Err(ApiError::bad_request(
                "model",
                format!("model '{model}': {reason}"),
            ));
        }
        return Ok(ModelTarget::Explicit(Candidate {
            provider: info.id.to_owned(),
            model: parsed.model,
        }));
    }
    if ROLES.contains(&model) || harness.table.roles.contains_key(model) {
        return Ok(ModelTarget::Role(model.to_owned()));
    }
    let credentialed = |id: &str| harness.credentialed.contains(id);
    let family_checked = |provider: &str, name: &str| -> Result<ModelTarget, ApiError> {
        let info = resolve_provider(provider)
            .map_err(|e| ApiError::bad_request("model", format!("model '{model}': {e}")))?;
        if let Some(reason) = model_family_mismatch(info, name) {
            return Err(ApiError::bad_request(
                "model",
                format!("model '{model}': {reason}"),
            ));
        }
        Ok(ModelTarget::Explicit(Candidate {
            provider: info.id.to_owned(),
            model: name.to_owned(),
        }))
    };
    if let Some((prefix, name)) = model.split_once('/')
        && !name.trim().is_empty()
        && let Ok(info) = resolve_provider(prefix)
        && credentialed(info.id)
    {
        return family_checked(info.id, name.trim());
    }
    let vendor = first_party_provider(model);
    if !model.is_empty() {
        if let Some(info) = vendor
            && credentialed(info.id)
            && !model.contains('/')
        {
            return family_checked(info.id, model);
        }
        // A name a configured route names on purpose is served by that route's provider (and
        // the answer names that model); any other bare name is never handed to a runtime that
        // would answer it under the requested name (issue 38 item 15).
        if let Some(route) = routed_models(harness, selection)
            .into_iter()
            .find(|route| route.model == model)
        {
            return family_checked(&route.provider, model);
        }
    }
    let mut configured: Vec<&str> = harness.credentialed.iter().map(String::as_str).collect();
    if configured.is_empty() {
        configured.push("none");
    }
    let why = vendor.map_or_else(String::new, |v| {
        format!(
            " (its provider '{}' is not configured and no gateway route takes it)",
            v.id
        )
    });
    Err(ApiError::bad_request(
        "model",
        format!(
            "model '{model}' is not served here{why}: send a routing role ({}), a provider:model route \
             (e.g. openai:gpt-4o-mini), or a model name a configured provider serves (e.g. \
             gpt-4o-mini or openai/gpt-4o-mini); configured providers: {}; GET /v1/models lists them",
            ROLES.join(", "),
            configured.join(", ")
        ),
    ))
}

/// The `provider:model` every role with a route resolves to now, each once, in role order.
fn routed_models(harness: &RouteResolver, selection: Option<&str>) -> Vec<Candidate> {
    let inputs = harness.inputs(selection);
    let mut routes: Vec<Candidate> = Vec::new();
    for role in harness.role_names() {
        let call = RouteCall {
            role,
            ..RouteCall::default()
        };
        if let Ok(route) = resolve_route(&inputs, &call) {
            let candidate = Candidate {
                provider: route.provider,
                model: route.model,
            };
            if !routes.contains(&candidate) {
                routes.push(candidate);
            }
        }
    }
    routes
}

/// One thing `model` may name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct ModelEntry {
    /// What to send as `model`: a routing role, a `provider:model` route or a model name.
    id: String,
    /// Always `model`.
    object: &'static str,
    /// The provider that serves it; `metaforge` for a routing role.
    owned_by: String,
}

/// OpenAI's model list.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ModelList {
    /// Always `list`.
    object: &'static str,
    /// Routing roles that resolve, then each resolved route as `provider:model`, then its bare
    /// model name when that name resolves to the same route.
    data: Vec<ModelEntry>,
}

fn entry(id: String, owned_by: &str) -> ModelEntry {
    ModelEntry {
        id,
        object: "model",
        owned_by: owned_by.to_owned(),
    }
}

/// Everything `model` can name here: every role with a route, each route, and each route's
/// model name where it resolves back to that route.
pub(crate) fn model_list(harness: &RouteResolver, selection: Option<&str>) -> Vec<ModelEntry> {
    let inputs = harness.inputs(selection);
    let roles: Vec<ModelEntry> = harness
        .role_names()
        .into_iter()
        .filter(|role| {
            let call = RouteCall {
                role: role.clone(),
                ..RouteCall::default()
            };
            resolve_route(&inputs, &call).is_ok()
        })
        .map(|role| entry(role, "metaforge"))
        .collect();
    let routes = routed_models(harness, selection);
    let mut data = roles;
    for route in &routes {
        data.push(entry(
            format!("{}:{}", route.provider, route.model),
            &route.provider,
        ));
    }
    for route in &routes {
        let resolves_back = matches!(
            resolve_model(harness, selection, &route.model),
            Ok(ModelTarget::Explicit(ref c)) if c == route
        );
        if resolves_back && !data.iter().any(|e| e.id == route.model) {
            data.push(entry(route.model.clone(), &route.provider));
        }
    }
    data
}

/// What a chat completion's `model` can name on this gateway, in OpenAI's list shape.
#[utoipa::path(get, path = "/v1/models", tag = "chat",
    responses((status = 200, description = "Routing roles, `provider:model` routes and model names that resolve here", body = ModelList),
        (status = 401, body = OpenAiErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn list(State(state): State<Arc<GatewayState>>) -> Result<Json<ModelList>, ApiError> {
    let (selection, _) = state.harness.usable_selection().await?;
    Ok(Json(ModelList {
        object: "list",
        data: model_list(&state.harness, selection.as_deref()),
    }))
}
