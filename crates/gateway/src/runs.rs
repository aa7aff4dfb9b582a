//! Design-flow run routes (issue 16 item 6; FORGE-401/474/485/396/489): start a run, list and read
//! runs, follow one phase by phase (`flow-state`) or as SSE (`events`), answer its open gate,
//! cancel it. Thin handlers over `metaforge_app::runs::RunService`, which the MCP sidecar's run
//! tools share: every rule (what a gate allows, readiness, the approval reason) is the run state
//! machine's, and every refusal maps in one place (`error.rs`). The approver of a gate decision
//! and the canceller of a run are the authenticated identity, never a body field.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::StreamExt;
use metaforge_app::runs::views::{FlowStateView, RunDetail, RunSummary};
use metaforge_app::runs::{RunFilter, RunService, event_id, parse_event_id};
use metaforge_ports::{DecisionSurface, GateDecisionKind, RunStatus};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::GatewayState;
use super::auth::Identity;
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiQuery};
use metaforge_api::{CancelBody, GateDecisionBody, StartRunBody};

/// The run service, or 503 naming why this process has none.
pub(crate) fn service(state: &GatewayState) -> Result<&Arc<RunService>, ApiError> {
    state.runs.as_ref().ok_or_else(|| {
        ApiError::unavailable("design-flow runs are not served by this process (no flow engine is composed)")
    })
}

/// Which runs to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only runs in this status: `queued`, `running`, `awaiting_approval`, `completed`,
    /// `failed` or `canceled`.
    #[serde(default)]
    status: Option<String>,
    /// Only runs of this project.
    #[serde(default)]
    project_id: Option<String>,
}

/// Runs, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RunList {
    /// The runs.
    runs: Vec<RunSummary>,
}

/// Starts a design-flow run. 409 for a version that is not approved, is corrupt or cannot be
/// reproduced, and for a template that breaks its invariants; 422 naming the field for a bad
/// `intelligence`, an unknown template or version; 503 when the flow engine cannot run anything
/// now. A refused start records no run and no hold.
#[utoipa::path(post, path = "/v1/runs", tag = "runs", request_body = StartRunBody,
    responses((status = 201, description = "The run, started", body = RunDetail),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 409, description = "The version is not approved, corrupt or unrunnable, or the template is unstartable", body = ErrorBody),
        (status = 422, description = "A field is not acceptable (invalid_field naming it, unknown_template, unknown_flow_version)", body = ErrorBody),
        (status = 503, description = "No flow engine can run it now (named)", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn start(
    State(state): State<Arc<GatewayState>>,
    ApiJson(body): ApiJson<StartRunBody>,
) -> Result<(StatusCode, Json<RunDetail>), ApiError> {
    let run = service(&state)?.start(body).await?;
    Ok((StatusCode::CREATED, Json(run)))
}

/// Lists runs (oldest first), optionally of one status and/or project.
#[utoipa::path(get, path = "/v1/runs", tag = "runs", params(ListQuery),
    responses((status = 200, body = RunList), (status = 400, description = "An unknown status", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn list(
    State(state): State<Arc<GatewayState>>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<RunList>, ApiError> {
    let status = match query.status.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(RunStatus::parse(text).ok_or_else(|| {
            ApiError::bad_request(
                "status",
                "status must be one of queued, running, awaiting_approval, completed, failed, canceled",
            )
        })?),
    };
    let runs = service(&state)?
        .list(RunFilter {
            status,
            project_id: query.project_id.filter(|p| !p.trim().is_empty()),
        })
        .await?;
    Ok(Json(RunList { runs }))
}

/// One run: engine, template, version id, version and content hash as top-level fields, status
/// and approval reason, status history, and the model usage recorded for it by phase, role and
/// model (unknown counts and costs null, never 0).
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "Run id")),
    responses((status = 200, body = RunDetail), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn get(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
) -> Result<Json<RunDetail>, ApiError> {
    Ok(Json(service(&state)?.get(&id).await?))
}

/// The run phase by phase, asked of its engine now: the frozen version's phases with their
/// statuses, the open gate with its allowed decisions and findings, `live`. When the engine
/// cannot be asked (`live: false`, with the reason) the phases still list and every status reads
/// `unknown`, never `pending`.
#[utoipa::path(get, path = "/v1/runs/{id}/flow-state", tag = "runs",
    params(("id" = String, Path, description = "Run id")),
    responses((status = 200, body = FlowStateView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn flow_state(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
) -> Result<Json<FlowStateView>, ApiError> {
    Ok(Json(service(&state)?.flow_state(&id).await?))
}

/// Answers the run's open gate; the approver is the authenticated identity. A decision the gate
/// does not allow, or one for a gate that is not open, is a 409 naming the decisions it allows;
/// a retry or rework without a reason, or a rework naming no earlier phase, is a 422 naming the
/// field. Returns the run's flow state right after the decision.
#[utoipa::path(post, path = "/v1/runs/{id}/approval", tag = "runs", request_body = GateDecisionBody,
    params(("id" = String, Path, description = "Run id")),
    responses((status = 200, description = "The flow state after the decision", body = FlowStateView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Not allowed by the gate, no gate open, or the run ended (allowed decisions in details)", body = ErrorBody),
        (status = 422, description = "A field the decision needs is missing or wrong (named)", body = ErrorBody),
        (status = 503, description = "The flow engine cannot answer now", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn answer_gate(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
    Extension(identity): Extension<Identity>,
    ApiJson(body): ApiJson<GateDecisionBody>,
) -> Result<Json<FlowStateView>, ApiError> {
    let decision = GateDecisionKind::from(body.decision);
    let surface = body.surface.map(DecisionSurface::from).unwrap_or_default();
    let view = service(&state)?.answer_gate(&id, body, &identity.0).await?;
    tracing::info!(event = "run_gate_answered", run_id = %id, decision = decision.as_str(), approver = %identity.0, surface = surface.as_str(), "a person answered a run's gate");
    Ok(Json(view))
}

/// Cancels the run (the phase in flight stops, its client task is withdrawn, an open gate is
/// closed). A run that ended is a 409: it never reopens.
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", tag = "runs", request_body = CancelBody,
    params(("id" = String, Path, description = "Run id")),
    responses((status = 200, description = "The flow state after the cancel", body = FlowStateView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "The run already ended", body = ErrorBody),
        (status = 503, description = "The flow engine cannot answer now", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn cancel(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
    Extension(identity): Extension<Identity>,
    ApiJson(body): ApiJson<CancelBody>,
) -> Result<Json<FlowStateView>, ApiError> {
    let view = service(&state)?.cancel(&id, &identity.0, body.reason).await?;
    tracing::info!(event = "run_canceled_by_person", run_id = %id, by = %identity.0, "a person canceled a run");
    Ok(Json(view))
}

/// The header an SSE client sends when it reconnects: the id of the last event it has.
const LAST_EVENT_ID: &str = "last-event-id";

/// The run's events as SSE, from its start (or right after `Last-Event-ID`, `seq.index`): every
/// run, phase and gate transition (`run.started`, `run.phase_started`, `run.gate_opened`, …), each
/// once and in order, with `id: seq.index`; the stream ends when the run ends.
#[utoipa::path(get, path = "/v1/runs/{id}/events", tag = "runs",
    params(("id" = String, Path, description = "Run id"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id (seq.index)")),
    responses((status = 200, description = "text/event-stream of the run's notices (id: seq.index; event: the notice kind; data: the notice as JSON)"),
        (status = 400, description = "Last-Event-ID is not seq.index", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn events(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let bad = || {
        ApiError::bad_request(
            LAST_EVENT_ID,
            "Last-Event-ID must be an event id of this stream: seq.index (e.g. 3.1)",
        )
    };
    let after = match headers.get(LAST_EVENT_ID) {
        None => None,
        Some(value) => {
            let text = value.to_str().map_err(|_| bad())?.trim();
            if text.is_empty() {
                None
            } else {
                Some(parse_event_id(text).ok_or_else(bad)?)
            }
        }
    };
    let notices = service(&state)?.events(&id, after).await?;
    let events = notices.map(|notice| {
        let data = serde_json::to_string(&notice).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        Ok::<Event, Infallible>(
            Event::default()
                .id(event_id(&notice))
                .event(notice.kind.as_str())
                .data(data),
        )
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}
