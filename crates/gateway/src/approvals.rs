//! Approval routes: the chat tool-approval routes the sidecar and harness use, and the unified
//! approvals API the dashboard uses. Both read and write the one ledger; the approver of every
//! decision is the authenticated identity of the request.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use metaforge_ports::ApprovalRecord;
use metaforge_ports::approval_ledger::{ResolveOutcome, WaiterResolution};
use serde::Deserialize;
use utoipa::IntoParams;

use super::GatewayState;
use super::auth::{Identity, TransportClass};
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiQuery};
use metaforge_api::{
    ApprovalList, DecisionKind, DecisionRequest, ListStatus, ParkBody, Resolution, ResolveRequest,
    ResolveResponse,
};
use metaforge_app::approvals::ParkRequest;
use metaforge_ports::{DEFAULT_PENDING_PAGE, MAX_PENDING_PAGE, PendingCursor};

/// Which holds to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// `pending` (default) or `all`.
    #[serde(default)]
    #[param(inline)]
    status: Option<ListStatus>,
    /// Pending: holds per page, 1 to 500 (default 100).
    #[serde(default)]
    limit: Option<usize>,
    /// Pending: the `next_cursor` of the previous page.
    #[serde(default)]
    after: Option<String>,
}

async fn list(state: &GatewayState, query: &ListQuery) -> Result<Json<ApprovalList>, ApiError> {
    if query.status == Some(ListStatus::All) {
        return Ok(Json(ApprovalList {
            approvals: state.approvals.list(true).await?,
            total: None,
            next_cursor: None,
        }));
    }
    let limit = match query.limit {
        None => DEFAULT_PENDING_PAGE,
        Some(n @ 1..=MAX_PENDING_PAGE) => n,
        Some(n) => {
            return Err(ApiError::bad_request(
                "limit",
                format!("limit {n}: send 1 to {MAX_PENDING_PAGE} holds per page"),
            ));
        }
    };
    let after = match query.after.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
        None => None,
        Some(token) => Some(PendingCursor::parse(token).ok_or_else(|| {
            ApiError::bad_request(
                "after",
                "after: send the next_cursor of the previous page unchanged",
            )
        })?),
    };
    let page = state.approvals.pending_page(after.as_ref(), limit).await?;
    Ok(Json(ApprovalList {
        approvals: page.holds,
        total: Some(page.total),
        next_cursor: page.next.map(|c| c.encode()),
    }))
}

async fn decide(
    state: &GatewayState,
    id: &str,
    identity: &Identity,
    request: DecisionRequest,
) -> Result<Json<ApprovalRecord>, ApiError> {
    let approve = matches!(request.decision, DecisionKind::Approve);
    let record = state
        .approvals
        .decide(id, approve, &identity.0, request.note)
        .await?;
    Ok(Json(record))
}

/// Lists tool-call holds (pending by default).
#[utoipa::path(get, path = "/v1/chat/tool_approvals", tag = "approvals", params(ListQuery),
    responses((status = 200, body = ApprovalList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn list_tool_approvals(
    State(state): State<Arc<GatewayState>>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<ApprovalList>, ApiError> {
    list(&state, &query).await
}

/// The class a parked hold records: the transport's, or `untrusted` when the relay says so.
fn recorded_class(transport: TransportClass, claimed: Option<&str>) -> &'static str {
    let untrusted = metaforge_ports::CallerClass::Untrusted.as_str();
    match claimed.map(str::trim) {
        Some(claim) if claim == untrusted => untrusted,
        Some(claim) if claim != transport.0.as_str() => {
            tracing::warn!(
                event = "tool_approval_caller_claim_ignored",
                claimed = %claim.chars().take(64).collect::<String>(),
                recorded = transport.0.as_str(),
                "a parked hold's caller class comes from the transport, not the body"
            );
            transport.0.as_str()
        }
        _ => transport.0.as_str(),
    }
}

/// Parks a held tool call in the one ledger (the sidecar's remote mode uses this).
#[utoipa::path(post, path = "/v1/chat/tool_approvals", tag = "approvals", request_body = ParkBody,
    responses((status = 201, body = ApprovalRecord), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 422, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn park_tool_approval(
    State(state): State<Arc<GatewayState>>,
    Extension(transport): Extension<TransportClass>,
    Extension(identity): Extension<Identity>,
    ApiJson(body): ApiJson<ParkBody>,
) -> Result<(StatusCode, Json<ApprovalRecord>), ApiError> {
    let request = ParkRequest {
        caller: recorded_class(transport, body.caller.as_deref()).to_owned(),
        requested_by: Some(identity.0),
        tool: body.tool,
        arguments: body.arguments,
        timeout_seconds: body.timeout_seconds,
    };
    let record = state.approvals.park(request).await?;
    Ok((StatusCode::CREATED, Json(record)))
}

/// One hold (expired first if its deadline passed).
#[utoipa::path(get, path = "/v1/chat/tool_approvals/{id}", tag = "approvals",
    params(("id" = String, Path, description = "Approval id")),
    responses((status = 200, body = ApprovalRecord), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn get_tool_approval(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
) -> Result<Json<ApprovalRecord>, ApiError> {
    Ok(Json(state.approvals.get(&id).await?))
}

/// A person decides a hold; approving a flow proposal approves its version.
#[utoipa::path(post, path = "/v1/chat/tool_approvals/{id}", tag = "approvals", request_body = DecisionRequest,
    params(("id" = String, Path, description = "Approval id")),
    responses((status = 200, body = ApprovalRecord), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, description = "Four eyes: the requester cannot decide (separate_approver_required)", body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, description = "Already decided or closed", body = ErrorBody),
        (status = 422, description = "A field over its size limit", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn decide_tool_approval(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
    Extension(identity): Extension<Identity>,
    ApiJson(request): ApiJson<DecisionRequest>,
) -> Result<Json<ApprovalRecord>, ApiError> {
    decide(&state, &id, &identity, request).await
}

/// The waiter closes a hold it stopped waiting for: idempotent; 409 naming the state if decided.
#[utoipa::path(post, path = "/v1/chat/tool_approvals/{id}/resolve", tag = "approvals", request_body = ResolveRequest,
    params(("id" = String, Path, description = "Approval id")),
    responses((status = 200, body = ResolveResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, description = "The caller did not park this hold (not_the_waiter)", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "A person already decided, or the hold is a proposal or edit (person_decision_required)", body = ErrorBody),
        (status = 422, description = "A field over its size limit", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn resolve_tool_approval(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
    Extension(identity): Extension<Identity>,
    ApiJson(request): ApiJson<ResolveRequest>,
) -> Result<Json<ResolveResponse>, ApiError> {
    let resolution = match request.resolution {
        Resolution::TimedOut => WaiterResolution::TimedOut,
        Resolution::Canceled => WaiterResolution::Canceled,
    };
    // Only the key that parked the hold waits on it (issue 38 item 7).
    let outcome = state
        .approvals
        .resolve(&id, Some(&identity.0), resolution, request.reason)
        .await?;
    let label = match &outcome {
        ResolveOutcome::Resolved { .. } => "resolved",
        ResolveOutcome::AlreadyClosed { .. } => "already_closed",
    };
    Ok(Json(ResolveResponse {
        outcome: label.to_owned(),
        approval: outcome.record().clone(),
    }))
}

/// Every kind of approval in one list (pending by default).
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals", params(ListQuery),
    responses((status = 200, body = ApprovalList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn list_approvals(
    State(state): State<Arc<GatewayState>>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<ApprovalList>, ApiError> {
    list(&state, &query).await
}

/// One approval of any kind.
#[utoipa::path(get, path = "/v1/approvals/{id}", tag = "approvals",
    params(("id" = String, Path, description = "Approval id")),
    responses((status = 200, body = ApprovalRecord), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn get_approval(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
) -> Result<Json<ApprovalRecord>, ApiError> {
    Ok(Json(state.approvals.get(&id).await?))
}

/// Decides an approval of any kind; the approver is the authenticated identity. A run's gate
/// (kind `gate`) is answered through its run instead: 409 `gate_decided_through_run` naming the
/// run, the phase and `POST /v1/runs/{run_id}/approval`.
#[utoipa::path(post, path = "/v1/approvals/{id}/decision", tag = "approvals", request_body = DecisionRequest,
    params(("id" = String, Path, description = "Approval id")),
    responses((status = 200, body = ApprovalRecord), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, description = "Four eyes: the requester cannot decide (separate_approver_required)", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "Already decided or closed, or a run's gate (gate_decided_through_run: answer it at /v1/runs/{run_id}/approval)", body = ErrorBody),
        (status = 422, description = "A field over its size limit", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn decide_approval(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
    Extension(identity): Extension<Identity>,
    ApiJson(request): ApiJson<DecisionRequest>,
) -> Result<Json<ApprovalRecord>, ApiError> {
    decide(&state, &id, &identity, request).await
}
