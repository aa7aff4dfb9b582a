//! The gateway's one error shape: `{error, message, details?}` with the seed's status codes, and
//! the same error in OpenAI's shape (`{"error": {message, type, param, code}}`) on the
//! OpenAI-compatible routes, so an OpenAI SDK shows the reason.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

pub use metaforge_api::ErrorBody;

/// An error a handler returns; converts into the JSON body with its status.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// The body (boxed: errors travel through every handler's `Result`).
    pub body: Box<ErrorBody>,
    /// Seconds the client should wait, sent as `Retry-After` (429 and 503).
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    /// An error with a status, a code and a message.
    pub fn new(status: StatusCode, error: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            body: Box::new(ErrorBody {
                error: error.to_owned(),
                message: message.into(),
                details: None,
            }),
            retry_after_secs: None,
        }
    }

    /// Attaches structured details.
    #[must_use]
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.body.details = Some(details);
        self
    }

    /// Attaches a Retry-After hint.
    #[must_use]
    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    /// 400: the request is malformed; `field` names what is wrong.
    pub fn bad_request(field: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
            .with_details(serde_json::json!({ "field": field }))
    }

    /// 401: no valid API key.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid API key is required (Authorization: Bearer <key> or X-API-Key)",
        )
    }

    /// 404: the named record does not exist.
    pub fn not_found(what: &str, id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} '{id}' does not exist"),
        )
    }

    /// 409: the record's state forbids the change.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 422: the request is well-formed but breaks a rule.
    pub fn unprocessable(error: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, error, message)
    }

    /// 503: a dependency (engine, model, ledger) is unavailable; nothing was done.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// 500: a bug or an unexpected engine answer; the message is safe to show.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

/// OpenAI's error object: what OpenAI SDKs parse and show (`openai.BadRequestError: …`).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct OpenAiError {
    /// A sentence for people, naming the field or record involved.
    pub message: String,
    /// OpenAI's error class: `invalid_request_error`, `authentication_error`,
    /// `permission_error`, `rate_limit_error` or `api_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// MetaForge's stable code (`invalid_request`, `unauthorized`, `rate_limited`, …).
    pub code: Option<String>,
    /// MetaForge's structured detail (every failed attempt on a 503, …), when there is any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

/// The JSON body of every error on the OpenAI-compatible routes (`/v1/chat/completions`,
/// `/v1/models`).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct OpenAiErrorBody {
    /// The error.
    pub error: OpenAiError,
}

impl ApiError {
    /// This error in OpenAI's shape: the class follows the status (as OpenAI's SDKs map them),
    /// `param` is the field the details name, `code` is MetaForge's stable code.
    pub fn openai_body(&self) -> OpenAiErrorBody {
        let kind = match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "api_error",
        };
        let param = self
            .body
            .details
            .as_ref()
            .and_then(|d| d.get("field"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned);
        let mut message = self.body.message.clone();
        clip(&mut message);
        let mut details = self.body.details.clone();
        if let Some(details) = details.as_mut() {
            clip_value(details);
        }
        OpenAiErrorBody {
            error: OpenAiError {
                message,
                kind: kind.to_owned(),
                param,
                code: Some(self.body.error.clone()),
                details,
            },
        }
    }

    /// The response in OpenAI's shape, with the same status and Retry-After.
    pub fn into_openai_response(self) -> Response {
        let body = self.openai_body();
        with_retry_after((self.status, Json(body)).into_response(), self.retry_after_secs)
    }
}

/// The longest message or detail string an error echoes; anything longer is cut, so a 4xx never
/// sends a huge value back in full.
pub const MAX_ECHOED_CHARS: usize = super::limits::MAX_ECHOED_CHARS;

/// Cuts `text` to [`MAX_ECHOED_CHARS`], saying how much was left out.
fn clip(text: &mut String) {
    if let Some((cut, _)) = text.char_indices().nth(MAX_ECHOED_CHARS) {
        let left_out = text[cut..].chars().count();
        text.truncate(cut);
        text.push_str(&format!("… ({left_out} more characters not shown)"));
    }
}

/// Clips every string in a details value (keys are ours and short).
fn clip_value(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(s) => clip(s),
        serde_json::Value::Array(items) => items.iter_mut().for_each(clip_value),
        serde_json::Value::Object(map) => map.values_mut().for_each(clip_value),
        serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {}
    }
}

fn with_retry_after(mut response: Response, retry_after_secs: Option<u64>) -> Response {
    if let Some(secs) = retry_after_secs
        && let Ok(value) = HeaderValue::from_str(&secs.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

impl IntoResponse for ApiError {
    /// The JSON body with its status; the error itself rides along as a response extension, so
    /// the OpenAI-compatible routes can answer it in OpenAI's shape (see `gateway::openai_errors`).
    fn into_response(self) -> Response {
        let mut body = (*self.body).clone();
        clip(&mut body.message);
        if let Some(details) = body.details.as_mut() {
            clip_value(details);
        }
        let marker = self.clone();
        let mut response = with_retry_after((self.status, Json(body)).into_response(), self.retry_after_secs);
        response.extensions_mut().insert(marker);
        response
    }
}

impl From<metaforge_ports::PortError> for ApiError {
    fn from(err: metaforge_ports::PortError) -> Self {
        use metaforge_domain::approvals::ApprovalError;
        use metaforge_ports::PortErrorKind as K;
        // A run's gate hold decided generically: point at the run's own approval route.
        if let Some(refused) = err
            .source
            .as_deref()
            .and_then(|s| s.downcast_ref::<metaforge_ports::GateDecisionRefused>())
        {
            return Self::new(StatusCode::CONFLICT, refused.code(), err.message.clone()).with_details(
                serde_json::json!({
                    "approval_id": refused.approval_id,
                    "run_id": refused.run_id,
                    "phase": refused.phase,
                    "route": format!("/v1/runs/{}/approval", refused.run_id),
                }),
            );
        }
        // The run state machine's refusal, wherever it surfaces: its own code and class.
        if let Some(refusal) = err
            .source
            .as_deref()
            .and_then(|s| s.downcast_ref::<metaforge_domain::run::RunRefusal>())
        {
            return metaforge_app::runs::RunServiceError::Refused {
                run_id: None,
                refusal: refusal.clone(),
                gate: None,
            }
            .into();
        }
        // A domain approval rule travels as the source: answer its own status and code.
        match err
            .source
            .as_deref()
            .and_then(|s| s.downcast_ref::<ApprovalError>())
        {
            Some(ApprovalError::SameApprover { approver, kind }) => {
                return Self::new(StatusCode::FORBIDDEN, "separate_approver_required", err.message)
                    .with_details(serde_json::json!({ "approver": approver, "kind": kind }));
            }
            Some(ApprovalError::PersonDecisionRequired { kind }) => {
                return Self::new(StatusCode::CONFLICT, "person_decision_required", err.message)
                    .with_details(serde_json::json!({ "kind": kind }));
            }
            Some(ApprovalError::NotTheWaiter { caller, requested_by }) => {
                return Self::new(StatusCode::FORBIDDEN, "not_the_waiter", err.message)
                    .with_details(serde_json::json!({ "caller": caller, "requested_by": requested_by }));
            }
            Some(ApprovalError::MissingApprover) | None => {}
        }
        match err.kind {
            K::NotFound => Self::new(StatusCode::NOT_FOUND, "not_found", err.message),
            K::Conflict => Self::conflict(err.message),
            K::Invalid => Self::unprocessable("invalid", err.message),
            K::Unavailable => Self::unavailable(err.message),
            K::Corrupt => Self::new(StatusCode::CONFLICT, "corrupt", err.message),
            K::Internal => {
                tracing::error!(event = "gateway_port_error", error = %err, "ledger error");
                Self::internal(err.message)
            }
        }
    }
}

impl From<metaforge_app::runs::RunServiceError> for ApiError {
    /// The run service's one code table: its code, its class as a status (`Invalid` 422,
    /// `Conflict`/`Corrupt` 409) and its details (the field, the decisions the open gate allows, the
    /// findings, the violations); a port failure maps like any other.
    fn from(err: metaforge_app::runs::RunServiceError) -> Self {
        use metaforge_app::runs::RunServiceError;
        use metaforge_ports::PortErrorKind as K;
        if let RunServiceError::Port(e) = err {
            return e.into();
        }
        // Every other variant has a code (`RunServiceError::code`); "refused" only guards a
        // future variant without one.
        let code = err.code().unwrap_or("refused");
        let status = match err.kind() {
            K::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
            K::Conflict | K::Corrupt => StatusCode::CONFLICT,
            K::NotFound => StatusCode::NOT_FOUND,
            K::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            K::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let error = Self::new(status, code, err.to_string());
        match err.details() {
            Some(details) => error.with_details(details),
            None => error,
        }
    }
}

impl From<metaforge_app::routing::RouteFailure> for ApiError {
    fn from(err: metaforge_app::routing::RouteFailure) -> Self {
        use metaforge_app::routing::RouteFailure;
        match err {
            RouteFailure::NoRoute { .. } => Self::unavailable(err.to_string()),
            RouteFailure::Store(err) => err.into(),
        }
    }
}

/// The stable code of an error status the gateway did not build itself (routing, hyper-level
/// limits, axum's extractor rejections).
fn code_for(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "invalid_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "request_timeout",
        409 => "conflict",
        413 => "payload_too_large",
        414 => "uri_too_long",
        415 => "unsupported_media_type",
        422 => "unprocessable",
        429 => "rate_limited",
        431 => "header_fields_too_large",
        503 => "unavailable",
        504 => "timeout",
        s if s >= 500 => "internal",
        _ => "error",
    }
}

/// Middleware: every error response leaves in the JSON error shape. A 4xx/5xx that is not JSON
/// (an unmatched method's empty 405, axum's `text/plain` path and body rejections such as an id
/// that is not UTF-8) is rewritten to `{error, message}` with its status and headers (`Allow`,
/// `Retry-After`) kept; its text, when it had one, becomes the message.
pub async fn json_errors(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).trim().to_owned();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("request refused").to_owned()
    } else {
        text
    };
    let mut error = ApiError::new(status, code_for(status), message);
    if status == StatusCode::BAD_REQUEST && error.body.message.contains("URL") {
        error = error.with_details(serde_json::json!({ "field": "path" }));
    }
    let rebuilt = error.into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    let (rebuilt_parts, body) = rebuilt.into_parts();
    for (name, value) in &rebuilt_parts.headers {
        parts.headers.insert(name.clone(), value.clone());
    }
    Response::from_parts(parts, body)
}

/// Middleware: a request line or header block past the gateway's limits is answered here in the
/// JSON shape (414, 431). Requests past hyper's own, larger parser limits (a URI of 64 KiB or
/// more, more than 100 headers, a header block past its ~400 KiB read buffer) are refused by
/// hyper before any router runs, with an empty body; `axum::serve` exposes no hook to shape them.
pub async fn request_size_limits(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    use super::limits::{MAX_HEADER_BYTES, MAX_HEADER_COUNT, MAX_URI_BYTES};
    let uri_len = request.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if uri_len > MAX_URI_BYTES {
        return ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!("the request target is {uri_len} bytes; the limit is {MAX_URI_BYTES}"),
        )
        .with_details(serde_json::json!({ "field": "uri", "size": uri_len, "limit": MAX_URI_BYTES }))
        .into_response();
    }
    let header_bytes: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.as_bytes().len() + 4)
        .sum();
    if header_bytes > MAX_HEADER_BYTES {
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "header_fields_too_large",
            format!("the request headers are {header_bytes} bytes; the limit is {MAX_HEADER_BYTES}"),
        )
        .with_details(
            serde_json::json!({ "field": "headers", "size": header_bytes, "limit": MAX_HEADER_BYTES }),
        )
        .into_response();
    }
    let lines = request.headers().len();
    if lines > MAX_HEADER_COUNT {
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "header_fields_too_large",
            format!("the request has {lines} header lines; the limit is {MAX_HEADER_COUNT}"),
        )
        .with_details(serde_json::json!({ "field": "headers", "count": lines, "limit": MAX_HEADER_COUNT }))
        .into_response();
    }
    next.run(request).await
}
