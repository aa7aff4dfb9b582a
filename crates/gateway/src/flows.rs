//! Design-flow routes: the served catalogue, validation of an edit without saving it, saved
//! versions, and proposals held for a person.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::{Extension, Json};
use metaforge_domain::flow::{
    self, AskedQuestion, CatalogueEntry, Flow, FlowContext, TailorResult, TailorStatus, ValidationReport,
    questions_to_ask,
};
use metaforge_ports::FlowVersionRecord;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::GatewayState;
use super::auth::Identity;
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiQuery};
use metaforge_api::{ProposeRequest, ProposeResponse};
use metaforge_app::flow_generator::{GenerateError, GenerateRequest, Generated, GeneratorError};
use metaforge_app::flow_validation::{ValidationError, validate_flow};
use metaforge_app::flows::{FlowServiceError, ProposalOutcome, ProposedBy};
use metaforge_app::pipeline::PipelineError;

/// The catalogue: every launchable flow as the gateway will run it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CatalogueResponse {
    /// Every built-in flow, startable or not (an unstartable flow is listed, never hidden).
    flows: Vec<CatalogueEntry>,
    /// The flow a run gets when it names none.
    default_flow: String,
}

/// Lists every flow with phases, gates, deliverables, disciplines, version and startability.
#[utoipa::path(get, path = "/v1/design-flows", tag = "design-flows",
    responses(
        (status = 200, description = "The flow catalogue", body = CatalogueResponse),
        (status = 401, description = "No valid API key", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn catalogue(State(_state): State<Arc<GatewayState>>) -> Json<CatalogueResponse> {
    Json(CatalogueResponse {
        flows: flow::catalogue(),
        default_flow: flow::DEFAULT_TEMPLATE_ID.to_owned(),
    })
}

/// An edit to check: the flow and, optionally, the project context it will run under.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ValidateRequest {
    /// The edited flow.
    flow: Flow,
    /// The project context; with it, unknown loads forbid replacing simulation by a test plan.
    #[serde(default)]
    context: Option<FlowContext>,
}

/// Checks an edit against every invariant without saving it; all violations at once.
#[utoipa::path(post, path = "/v1/design-flows/validate", tag = "design-flows",
    request_body = ValidateRequest,
    responses(
        (status = 200, description = "Validation result (valid or not)", body = ValidationReport),
        (status = 400, description = "Malformed body, naming the field", body = ErrorBody),
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 422, description = "Over a size limit (MAX_PHASES, MAX_DEPENDENCIES, MAX_DELIVERABLES), naming it", body = ErrorBody),
        (status = 503, description = "Validation did not finish within its deadline", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn validate(
    State(_state): State<Arc<GatewayState>>,
    ApiJson(request): ApiJson<ValidateRequest>,
) -> Result<Json<ValidationReport>, ApiError> {
    // Size limits first, then the invariants on the blocking pool under a deadline: a large
    // flow never holds an async worker that /health and every other request need.
    validate_flow(request.flow, request.context)
        .await
        .map(Json)
        .map_err(validation_error)
}

/// A refused validation: over a limit is 422 naming it (the flow refusal's code and details), a
/// missed deadline 503.
fn validation_error(err: ValidationError) -> ApiError {
    match err {
        ValidationError::TooLarge(limit) => flow_error(FlowServiceError::TooLarge(limit)),
        ValidationError::DeadlineExceeded(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "validation_timeout",
            err.to_string(),
        ),
        ValidationError::Failed(message) => ApiError::internal(message),
    }
}

/// An edit to save as a new held version.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SaveVersionRequest {
    /// The edited flow; its `id` names the template it edits.
    flow: Flow,
    /// The project context it is checked under.
    #[serde(default)]
    context: Option<FlowContext>,
}

/// A saved version and the hold deciding it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SavedVersion {
    /// The stored version (status proposed).
    version: FlowVersionRecord,
    /// The held approval deciding it.
    approval_id: String,
    /// Prose diff against the template; relaxations in capitals.
    diff: Vec<String>,
}

/// A stored version, with its frozen flow parsed back.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct VersionView {
    /// The record.
    version: FlowVersionRecord,
    /// The frozen flow.
    flow: Flow,
}

/// Saves an edit as a new version held for a person; invalid or unchanged edits store nothing.
#[utoipa::path(post, path = "/v1/design-flows/versions", tag = "design-flows",
    request_body = SaveVersionRequest,
    responses(
        (status = 201, description = "Saved and held", body = SavedVersion),
        (status = 400, description = "Malformed body, naming the field", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 422, description = "Breaks invariants (every violation in details), identical to its template, or over a size limit", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn save_version(
    State(state): State<Arc<GatewayState>>,
    Extension(identity): Extension<Identity>,
    ApiJson(request): ApiJson<SaveVersionRequest>,
) -> Result<(StatusCode, Json<SavedVersion>), ApiError> {
    let (version, approval, diff) = state
        .flows
        .save_edit(
            &request.flow,
            request.context.as_ref(),
            metaforge_app::flows::Requester {
                caller: &identity.0,
                identity: Some(&identity.0),
            },
        )
        .await
        .map_err(flow_error)?;
    Ok((
        StatusCode::CREATED,
        Json(SavedVersion {
            version,
            approval_id: approval.id,
            diff,
        }),
    ))
}

/// Which versions to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct VersionsQuery {
    /// Only versions of this template.
    #[serde(default)]
    template_id: Option<String>,
}

/// Stored versions, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct VersionList {
    /// Every verified version (corrupt rows are never listed).
    versions: Vec<FlowVersionRecord>,
}

/// Lists stored flow versions with their approval state.
#[utoipa::path(get, path = "/v1/design-flows/versions", tag = "design-flows", params(VersionsQuery),
    responses((status = 200, body = VersionList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn list_versions(
    State(state): State<Arc<GatewayState>>,
    ApiQuery(query): ApiQuery<VersionsQuery>,
) -> Result<Json<VersionList>, ApiError> {
    Ok(Json(VersionList {
        versions: state.flows.versions(query.template_id.as_deref()).await?,
    }))
}

/// Fetches a stored version (hash-verified; a corrupt row is never served).
#[utoipa::path(get, path = "/v1/design-flows/versions/{id}", tag = "design-flows",
    params(("id" = String, Path, description = "Flow version id")),
    responses((status = 200, body = VersionView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Corrupt: the stored content no longer matches its hash", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn get_version(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
) -> Result<Json<VersionView>, ApiError> {
    let version = state.flows.version(&id).await?;
    let flow = flow::verify_version(&version)
        .map_err(|err| ApiError::new(StatusCode::CONFLICT, "corrupt", err.to_string()))?;
    Ok(Json(VersionView { version, flow }))
}

/// Tailors a template to a project and holds the result for a person.
///
/// With `template` or `operations` the caller's operations are applied strictly and no model is
/// called. Without them the server's generator runs through the provider pipeline (role
/// `flow_generator`) and its answer is applied leniently; when no model is reachable the answer
/// is 503 and nothing is proposed (there is no untailored fallback).
#[utoipa::path(post, path = "/v1/design-flows/propose", tag = "design-flows",
    request_body = ProposeRequest,
    responses(
        (status = 200, description = "needs_input: the questions to ask first; nothing stored", body = ProposeResponse),
        (status = 201, description = "proposed: version stored and held for approval", body = ProposeResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 422, description = "Unknown template/operation/phase, missing rationale, invariant violations, or more than MAX_OPERATIONS operations", body = ErrorBody),
        (status = 503, description = "No model reachable for the generator path, or its answer held no proposal; nothing stored", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn propose(
    State(state): State<Arc<GatewayState>>,
    Extension(identity): Extension<Identity>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<ProposeRequest>,
) -> Result<(StatusCode, Json<ProposeResponse>), ApiError> {
    let context = FlowContext {
        manufacturing_context: request.manufacturing_context.clone(),
        target_maturity: request.target_maturity,
        loads_and_use: request.loads_and_use.clone(),
        budget: request.budget.clone(),
    };
    if request.template.is_none() && request.operations.is_none() {
        let session = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("flow-generator")
            .to_owned();
        return generate(&state, &identity.0, &request, &context, session).await;
    }
    let template = request.template.as_deref().unwrap_or(flow::DEFAULT_TEMPLATE_ID);
    let operations = request.operations.clone().unwrap_or_default();
    let proposed_by = request.caller.as_ref().map(|c| ProposedBy {
        client: c.client.clone(),
        model: c.model.clone(),
    });
    let outcome = state
        .flows
        .propose_from_caller(
            template,
            &operations,
            Some(&context),
            proposed_by,
            request.intent.as_deref(),
            metaforge_app::flows::Requester {
                caller: &identity.0,
                identity: Some(&identity.0),
            },
        )
        .await
        .map_err(flow_error)?;
    if outcome.result.status == TailorStatus::NeedsInput {
        let questions = questions_to_ask(&outcome.result.questions, &[]);
        return Ok((
            StatusCode::OK,
            Json(needs_input(outcome.result, questions, Vec::new())),
        ));
    }
    Ok((
        StatusCode::CREATED,
        Json(proposed(outcome, &request, &context, Vec::new(), Vec::new())),
    ))
}

/// The generator path: the intent is required; everything else is
/// [`generate_proposal`](metaforge_app::flow_generator::generate_proposal).
async fn generate(
    state: &GatewayState,
    caller: &str,
    request: &ProposeRequest,
    context: &FlowContext,
    session: String,
) -> Result<(StatusCode, Json<ProposeResponse>), ApiError> {
    let intent = request
        .intent
        .as_deref()
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(
                "intent",
                "intent is required when the server's generator tailors the flow (send template and operations to tailor without it)",
            )
        })?;
    let generate = GenerateRequest {
        intent: intent.to_owned(),
        context: context.clone(),
        requirements: request.requirements.clone(),
        caller: caller.to_owned(),
        requested_by: Some(caller.to_owned()),
        session,
    };
    match state.generator.generate(generate).await.map_err(generate_error)? {
        Generated::NeedsInput {
            result,
            questions,
            notes,
        } => Ok((StatusCode::OK, Json(needs_input(*result, questions, notes)))),
        Generated::Proposed {
            outcome,
            notes,
            open_questions,
        } => Ok((
            StatusCode::CREATED,
            Json(proposed(*outcome, request, context, notes, open_questions)),
        )),
    }
}

/// The 201 body: every provenance field, the assumptions a reviewer needs, the open questions.
fn proposed(
    outcome: ProposalOutcome,
    request: &ProposeRequest,
    context: &FlowContext,
    notes: Vec<String>,
    open_questions: Vec<String>,
) -> ProposeResponse {
    let requirements_pending = request.requirements.is_none();
    let mut assumptions = vec![format!("basis: {}", context.basis())];
    if requirements_pending {
        assumptions.push(
            "requirements pending: no requirements were sent; the requirements phase records them".to_owned(),
        );
    }
    if context.loads_unknown() {
        assumptions.push("loads unknown: physical verification is kept".to_owned());
    }
    assumptions.extend(notes);
    ProposeResponse {
        status: "proposed".to_owned(),
        approval_id: outcome.approval_id,
        version_id: outcome.version.as_ref().map(|v| v.id.clone()),
        legacy_version_id: outcome.version.map(|v| v.id),
        questions: Vec::new(),
        proposal: outcome.result,
        proposed_by: outcome.proposed_by,
        generated_by: outcome.generated_by,
        requirements_pending,
        assumptions,
        open_questions,
    }
}

fn needs_input(result: TailorResult, questions: Vec<AskedQuestion>, notes: Vec<String>) -> ProposeResponse {
    ProposeResponse {
        status: "needs_input".to_owned(),
        approval_id: None,
        version_id: None,
        legacy_version_id: None,
        questions,
        proposal: result,
        proposed_by: None,
        generated_by: None,
        requirements_pending: true,
        assumptions: notes,
        open_questions: Vec::new(),
    }
}

/// Every generator failure is 503 and proposes nothing: unreachable (attempts in `details`) or
/// an answer that held no proposal (an excerpt in `details`); a refused tailoring is 422.
fn generate_error(err: GenerateError) -> ApiError {
    match err {
        GenerateError::Unavailable(reason) => ApiError::unavailable(format!(
            "no model is reachable for the flow generator: {reason}; no proposal was made (send template and operations to tailor without a model)"
        )),
        GenerateError::Generator(GeneratorError::Unreachable(PipelineError::AllProvidersFailed {
            role,
            attempts,
            ..
        })) => ApiError::unavailable(format!(
            "no model is reachable for the flow generator (role '{role}'); no proposal was made"
        ))
        .with_details(serde_json::json!({"role": role, "attempts": super::chat::attempts_json(&attempts)})),
        GenerateError::Generator(GeneratorError::Unreachable(other)) => ApiError::unavailable(format!(
            "no model is reachable for the flow generator: {other}; no proposal was made"
        )),
        GenerateError::Generator(GeneratorError::UnusableAnswer {
            error,
            provider,
            model,
            excerpt,
        }) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "generator_answer_unusable",
            format!("{error}; no proposal was made"),
        )
        .with_details(serde_json::json!({"provider": provider, "model": model, "excerpt": excerpt})),
        GenerateError::Flow(err) => flow_error(err),
    }
}

/// A refused flow request: 422 with the one code table's code, message and details
/// ([`FlowServiceError::code`], shared with the MCP sidecar); a ledger failure as any port error.
pub(crate) fn flow_error(err: FlowServiceError) -> ApiError {
    match err.into_refusal() {
        Ok(refusal) => {
            let error = ApiError::unprocessable(refusal.code, refusal.message);
            match refusal.details {
                Some(details) => error.with_details(details),
                None => error,
            }
        }
        Err(port) => port.into(),
    }
}
