//! The HTTP side of the field limits: the request-line and header caps the router answers in
//! JSON, and the shared per-field table (`metaforge_app::limits`) mapped to a 422 `too_large`.

use axum::http::StatusCode;
use serde_json::Value;

use super::error::ApiError;

pub use metaforge_app::limits::*;

/// The request target (path and query), in bytes; longer is a JSON 414.
pub const MAX_URI_BYTES: usize = 8_192;
/// All request headers together (name + value + 4 per header), in bytes; larger is a JSON 431.
pub const MAX_HEADER_BYTES: usize = 32_768;

/// The most header lines a request may carry (answered 431 in the JSON shape past it; the HTTP
/// parser's own bodiless 431 only answers four times as many).
pub const MAX_HEADER_COUNT: usize = 100;

/// Checks a request body against the limits of the route it was sent to: the first field over
/// its limit is a 422 `too_large` naming the field, its size and the limit (never its value).
pub(crate) fn check_body(path: &str, body: &Value) -> Result<(), ApiError> {
    metaforge_app::limits::check(path, body).map_err(too_large)
}

/// The 422 `too_large` answer for a field over its limit.
pub(crate) fn too_large(err: FieldTooLarge) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "too_large", err.to_string()).with_details(
        serde_json::json!({"field": err.field, "max": err.max, "actual": err.actual, "unit": err.unit}),
    )
}
