//! The gateway's one error shape: `{error, message, details?}` with the seed's status codes.

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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(*self.body)).into_response();
        if let Some(secs) = self.retry_after_secs
            && let Ok(value) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
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
