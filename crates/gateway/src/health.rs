//! Liveness, health and metrics endpoints.
//!
//! `/health` is public (no key) and reports each dependency separately, so "could not read" is
//! never mistaken for "nothing there": an unreadable usage store reads `available: false` with a
//! reason, not an empty total. Without a key it says only `ok`/`degraded` per component; the
//! detail (reasons, version, `llm_usage_24h` costs by model, role and phase) needs a key (an open
//! loopback gateway's `local` caller sees it, as it sees every route). The MCP tool servers
//! the agent loop reaches are one component, `mcp_servers`: degraded when any is unavailable,
//! each server's state and reason in the keyed detail. `design_flow_worker` says whether the flow
//! engine drives runs (`ok`, `absent`, `unknown`; it degrades the report when this process serves
//! runs and they cannot run). `model_routing` is the routing view's verdict (`ok`/`degraded` with
//! its problems, computed once by `harness::routing_view`); it is reported beside the others but
//! does not flip the overall status, because a deployment without model keys (client
//! intelligence) is a supported configuration, not an outage.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use metaforge_app::tools::ServerStatus;
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

/// One configured MCP tool server (keyed detail only).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct McpServerHealth {
    /// `ok`, `unavailable` (could not start or list, or its last call found it gone) or
    /// `disabled` (configured with `"disabled": true`).
    status: String,
    /// Why it is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// How many tools it offers (after its include/exclude globs), when ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<usize>,
    /// A stdio server's sandbox: `on`, or `off` when its entry says `"sandbox": "off"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<String>,
    /// Its tools counted by the class the gate gives them (`read_only`, `additive`,
    /// `producing`, `destructive`: the server's hints, or its entry's `classify`, never laxer),
    /// when listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    classes: Option<BTreeMap<String, usize>>,
}

/// The MCP tool servers of the servers file (`METAFORGE_MCP_SERVERS_PATH`).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct McpServersHealth {
    /// `ok`, or `degraded` when any configured server is unavailable (none configured is ok).
    status: String,
    /// Each configured server by name (with a key only).
    #[serde(skip_serializing_if = "Option::is_none")]
    servers: Option<BTreeMap<String, McpServerHealth>>,
}

/// The design-flow engine's worker (FORGE-401).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WorkerHealthReport {
    /// `ok` (runs are driven), `absent` (nothing drives them: the engine has not started, was
    /// stopped, is not built here, or this process serves no runs) or `unknown` (it could not be
    /// asked).
    status: String,
    /// The engine: `embedded`, `temporal` (with a key only).
    #[serde(skip_serializing_if = "Option::is_none")]
    engine: Option<String>,
    /// Why it is not ok (with a key only).
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// The per-role model routes (FORGE-477), as `GET /v1/harness/routing` computes them.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RoutingHealth {
    /// `ok`, or `degraded` when any role's route would be refused at call time.
    status: String,
    /// Every problem, one line each (with a key only).
    #[serde(skip_serializing_if = "Option::is_none")]
    problems: Option<Vec<String>>,
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
    /// The MCP tool servers (each server's state with a key only).
    mcp_servers: McpServersHealth,
    /// Whether the design-flow engine drives runs (the engine and reason with a key only).
    design_flow_worker: WorkerHealthReport,
    /// The model routes' verdict (the problems with a key only); informational.
    model_routing: RoutingHealth,
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
    let servers_ok = !state.mcp_servers.any_unavailable();
    let mcp_status = if servers_ok { "ok" } else { "degraded" }.to_owned();
    let (worker, worker_ok) = match state.runs.as_ref() {
        Some(runs) => {
            let health = runs.worker_health().await;
            let ok = health.as_str() == "ok";
            let report = WorkerHealthReport {
                status: health.as_str().to_owned(),
                engine: Some(runs.engine_kind().as_str().to_owned()),
                reason: health.reason().map(str::to_owned),
            };
            (report, ok)
        }
        None => (
            WorkerHealthReport {
                status: "absent".to_owned(),
                engine: None,
                reason: Some(
                    "this process serves no design-flow runs (no flow engine is composed)".to_owned(),
                ),
            },
            true,
        ),
    };
    let routing = match super::harness::routing_view(&state, None).await {
        Ok(view) => RoutingHealth {
            status: view.status,
            problems: Some(view.problems),
        },
        Err(e) => RoutingHealth {
            status: "degraded".to_owned(),
            problems: Some(vec![format!("the routes cannot be resolved: {}", e.body.message)]),
        },
    };
    let ok = ledgers.status == "ok" && llm_usage_24h.available && servers_ok && worker_ok;
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
            mcp_servers: McpServersHealth {
                status: mcp_status,
                servers: None,
            },
            design_flow_worker: WorkerHealthReport {
                status: worker.status,
                engine: None,
                reason: None,
            },
            model_routing: RoutingHealth {
                status: routing.status,
                problems: None,
            },
            llm_usage_24h: None,
        });
    }
    let sandboxes = state.mcp_servers.sandboxes();
    let mut classes = state.mcp_servers.classes();
    let servers = state
        .mcp_servers
        .snapshot()
        .into_iter()
        .map(|(name, status)| {
            let (reason, tools) = match &status {
                ServerStatus::Ok { tools } => (None, Some(*tools)),
                ServerStatus::Unavailable { reason } => (Some(reason.clone()), None),
                ServerStatus::Disabled => (None, None),
            };
            let server = McpServerHealth {
                status: status.as_str().to_owned(),
                reason,
                tools,
                sandbox: sandboxes.get(&name).map(|s| (*s).to_owned()),
                classes: tools.and(classes.remove(&name)).map(|counts| {
                    counts
                        .into_iter()
                        .map(|(class, n)| (class.to_owned(), n))
                        .collect()
                }),
            };
            (name, server)
        })
        .collect();
    Json(HealthReport {
        status,
        version: Some(env!("CARGO_PKG_VERSION").to_owned()),
        ledgers,
        usage,
        mcp_servers: McpServersHealth {
            status: mcp_status,
            servers: Some(servers),
        },
        design_flow_worker: worker,
        model_routing: routing,
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
