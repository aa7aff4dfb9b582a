//! Liveness, health and metrics endpoints.
//!
//! `/health` is public (no key) and reports each dependency separately, so "could not read" is
//! never mistaken for "nothing there": an unreadable usage store reads `available: false` with a
//! reason, not an empty total. Without a key it says only `ok`/`degraded` per component; the
//! detail (reasons, version, `llm_usage_24h` costs by model, role and phase) needs a key (an open
//! loopback gateway's `local` caller sees it, as it sees every route).

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use metaforge_domain::usage::UsageTotals;
use serde::Serialize;
use utoipa::ToSchema;

use super::GatewayState;
use super::auth::Identity;

/// One dependency's state.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CheckResult {
    /// `ok` or `degraded`.
    status: String,
    /// Why it is degraded.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// The trailing-24h usage, or why it could not be read.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UsageHealth {
    /// False when the usage store could not be read.
    available: bool,
    /// Why it is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The totals, when available.
    #[serde(skip_serializing_if = "Option::is_none")]
    totals: Option<UsageTotals>,
}

/// The health report: overall status plus one entry per dependency.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HealthReport {
    /// `ok` when every check is ok, `degraded` otherwise.
    status: String,
    /// The gateway's version (with a key only).
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    /// The approval ledger and the flow-version store (the reason with a key only).
    ledgers: CheckResult,
    /// Whether the usage store could be read (the reason with a key only).
    usage: CheckResult,
    /// Model usage over the last 24 hours (with a key only).
    #[serde(skip_serializing_if = "Option::is_none")]
    llm_usage_24h: Option<UsageHealth>,
}

fn check(result: Result<(), String>) -> CheckResult {
    match result {
        Ok(()) => CheckResult {
            status: "ok".to_owned(),
            reason: None,
        },
        Err(reason) => CheckResult {
            status: "degraded".to_owned(),
            reason: Some(reason),
        },
    }
}

/// Whether the gateway and its dependencies are usable.
#[utoipa::path(get, path = "/health", tag = "health",
    responses((status = 200, description = "Health report: ok/degraded per component; reasons, version and llm_usage_24h only with a key", body = HealthReport)))]
pub(crate) async fn health(
    State(state): State<Arc<GatewayState>>,
    Extension(identity): Extension<Identity>,
) -> Json<HealthReport> {
    let approvals = state
        .approvals
        .list(false)
        .await
        .map(|_| ())
        .map_err(|e| format!("approval ledger: {e}"));
    let versions = state
        .flows
        .versions(None)
        .await
        .map(|_| ())
        .map_err(|e| format!("flow versions: {e}"));
    let ledgers = check(approvals.and(versions));
    let llm_usage_24h = match state.usage_totals(24).await {
        Ok(totals) => UsageHealth {
            available: true,
            reason: None,
            totals: Some(totals),
        },
        Err(e) => UsageHealth {
            available: false,
            reason: Some(e.to_string()),
            totals: None,
        },
    };
    let ok = ledgers.status == "ok" && llm_usage_24h.available;
    let usage = check(if llm_usage_24h.available {
        Ok(())
    } else {
        Err(llm_usage_24h.reason.clone().unwrap_or_default())
    });
    let status = if ok { "ok" } else { "degraded" }.to_owned();
    if identity.is_anonymous() {
        let public = |c: CheckResult| CheckResult {
            status: c.status,
            reason: None,
        };
        return Json(HealthReport {
            status,
            version: None,
            ledgers: public(ledgers),
            usage: public(usage),
            llm_usage_24h: None,
        });
    }
    Json(HealthReport {
        status,
        version: Some(env!("CARGO_PKG_VERSION").to_owned()),
        ledgers,
        usage,
        llm_usage_24h: Some(llm_usage_24h),
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
