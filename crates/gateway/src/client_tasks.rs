//! Client-task routes (FORGE-581/582): a client-mode run posts each phase as a task the connected
//! MCP client lists, claims and submits. The claimant is the authenticated identity; only it may
//! submit. The gate that follows checks the twin, never the summary. Thin handlers over
//! `metaforge_app::runs::RunService` (the sidecar's `phase.*` tools share it).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::{Extension, Json};
use metaforge_app::runs::ClientTaskSubmission;
use metaforge_app::runs::views::ClientTaskView;
use metaforge_ports::ClientTaskStatus;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::GatewayState;
use super::auth::Identity;
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiQuery};
use super::runs::service;
use metaforge_api::SubmitBody;

/// Which tasks to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only the tasks of this run.
    #[serde(default)]
    run_id: Option<String>,
    /// Only tasks in this status: `open`, `claimed`, `submitted` or `withdrawn`.
    #[serde(default)]
    status: Option<String>,
}

/// Tasks, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ClientTaskList {
    /// The tasks.
    tasks: Vec<ClientTaskView>,
}

/// Lists client tasks (oldest first), optionally of one run and/or status.
#[utoipa::path(get, path = "/v1/client-tasks", tag = "client-tasks", params(ListQuery),
    responses((status = 200, body = ClientTaskList), (status = 400, description = "An unknown status", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn list(
    State(state): State<Arc<GatewayState>>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<ClientTaskList>, ApiError> {
    let status = match query.status.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(ClientTaskStatus::parse(text).ok_or_else(|| {
            ApiError::bad_request(
                "status",
                "status must be one of open, claimed, submitted, withdrawn",
            )
        })?),
    };
    let run_id = query.run_id.filter(|r| !r.trim().is_empty());
    let tasks = service(&state)?.client_tasks(run_id.as_deref(), status).await?;
    Ok(Json(ClientTaskList { tasks }))
}

/// One client task (`run:phase:attempt`) with its brief and any submission.
#[utoipa::path(get, path = "/v1/client-tasks/{id}", tag = "client-tasks",
    params(("id" = String, Path, description = "Task id (run:phase:attempt)")),
    responses((status = 200, body = ClientTaskView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn get(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
) -> Result<Json<ClientTaskView>, ApiError> {
    Ok(Json(service(&state)?.client_task(&id).await?))
}

/// Takes an open task; the claimant is the authenticated identity. A task that is not open is a
/// 409 naming its state (of two racing claims exactly one wins).
#[utoipa::path(post, path = "/v1/client-tasks/{id}/claim", tag = "client-tasks",
    params(("id" = String, Path, description = "Task id (run:phase:attempt)")),
    responses((status = 200, body = ClientTaskView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "The task is not open", body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn claim(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
    Extension(identity): Extension<Identity>,
) -> Result<Json<ClientTaskView>, ApiError> {
    // The REST door has no MCP session: the claim is the key's identity alone.
    let claimant = metaforge_ports::Claimant {
        identity: identity.0,
        session: None,
    };
    Ok(Json(service(&state)?.claim_client_task(&id, &claimant).await?))
}

/// Hands the phase back with its summary; only the claimant may. A task not claimed by the
/// caller is a 409; an empty summary a 422 naming it.
#[utoipa::path(post, path = "/v1/client-tasks/{id}/submit", tag = "client-tasks", request_body = SubmitBody,
    params(("id" = String, Path, description = "Task id (run:phase:attempt)")),
    responses((status = 200, body = ClientTaskView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, description = "Not claimed by the caller", body = ErrorBody),
        (status = 422, description = "An empty summary, or a field over its size limit", body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn submit(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
    Extension(identity): Extension<Identity>,
    ApiJson(body): ApiJson<SubmitBody>,
) -> Result<Json<ClientTaskView>, ApiError> {
    let submission = ClientTaskSubmission {
        summary: body.summary,
        details: body.details,
    };
    Ok(Json(
        service(&state)?
            .submit_client_task(&id, &identity.0, submission)
            .await?,
    ))
}
