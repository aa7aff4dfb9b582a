//! The gateway's one error shape: `{error, message, details?}` with the seed's status codes, and
//! the same error in OpenAI's shape (`{"error": {message, type, param, code}}`) on the
//! OpenAI-compatible routes, so an OpenAI SDK shows the reason.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The JSON body of every error the gateway returns, so clients branch on `error` and show `message`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A stable machine-readable code (e.g. `unauthorized`, `invalid_request`, `conflict`).
    pub error: String,
    /// A sentence for people, naming the field or record involved.
    pub message: String,
    /// Structured detail: violations, the offending field, the current state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

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
        OpenAiErrorBody {
            error: OpenAiError {
                message: self.body.message.clone(),
                kind: kind.to_owned(),
                param,
                code: Some(self.body.error.clone()),
                details: self.body.details.clone(),
            },
        }
    }

    /// The response in OpenAI's shape, with the same status and Retry-After.
    pub fn into_openai_response(self) -> Response {
        let body = self.openai_body();
        with_retry_after((self.status, Json(body)).into_response(), self.retry_after_secs)
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
        let marker = self.clone();
        let mut response = with_retry_after(
            (self.status, Json(*self.body)).into_response(),
            self.retry_after_secs,
        );
        response.extensions_mut().insert(marker);
        response
    }
}

impl From<metaforge_ports::PortError> for ApiError {
    fn from(err: metaforge_ports::PortError) -> Self {
        use metaforge_ports::PortErrorKind as K;
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
