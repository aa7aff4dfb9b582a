//! `GET /v1/harness/providers`: every provider the registry knows, whether it is usable here and
//! where its base URL comes from, plus the pipeline's fallback alarm (FORGE-468: falling back is
//! never silent, so the last fallback and the process-lifetime count are on the providers view).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::GatewayState;
use super::error::{ApiError, ErrorBody};

/// One provider's configuration, computed by the binary at start (only it reads the environment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ProviderRow {
    /// Registry id.
    pub id: String,
    /// API family (`openai`, `anthropic`, …).
    pub family: String,
    /// Whether calls can be made (credential or keyless local runtime).
    pub configured: bool,
    /// Why it is (or is not) configured.
    pub configured_reason: String,
    /// Base URL calls go to; empty when it does not resolve.
    pub base_url: String,
    /// Where the base URL comes from (`fixed`, `env`, `explicit (env override)`, `missing: …`).
    pub base_url_source: String,
}

/// The last fallback, as the alarm recorded it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LastFallback {
    /// Routing role.
    role: String,
    /// Configured primary `provider:model`.
    primary: String,
    /// `provider:model` that served instead.
    fallback: String,
    /// Why (rate limit, error, dropped …).
    reason: String,
    /// The primary's error.
    primary_error: String,
}

/// The providers view.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ProvidersView {
    /// Every provider, in registry order.
    providers: Vec<ProviderRow>,
    /// Whether a provider pipeline is running in this gateway (chat completions need one).
    pipeline: bool,
    /// The most recent fallback; null when none happened (or no pipeline runs).
    last_fallback: Option<LastFallback>,
    /// Fallbacks since the process started; null when no pipeline runs (unknown is not 0).
    fallback_count: Option<u64>,
}

/// Every provider with its configuration and the fallback alarm.
#[utoipa::path(get, path = "/v1/harness/providers", tag = "harness",
    responses((status = 200, body = ProvidersView), (status = 401, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn list(State(state): State<Arc<GatewayState>>) -> Result<Json<ProvidersView>, ApiError> {
    let alarm = state.pipeline.as_ref().map(|p| Arc::clone(p.alarm()));
    let last_fallback = alarm
        .as_ref()
        .and_then(|a| a.last_fallback())
        .map(|f| LastFallback {
            role: f.role,
            primary: format!("{}:{}", f.primary, f.primary_model),
            fallback: format!("{}:{}", f.fallback, f.fallback_model),
            reason: serde_json::to_value(f.reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("{:?}", f.reason)),
            primary_error: f.primary_error,
        });
    Ok(Json(ProvidersView {
        providers: state.providers.clone(),
        pipeline: state.pipeline.is_some(),
        last_fallback,
        fallback_count: alarm.map(|a| a.fallback_count()),
    }))
}
