//! A JSON body extractor whose rejections are the gateway's JSON errors, naming the field.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// Like `axum::Json`, but a bad body becomes a 400 `{error, message, details: {field}}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned + Serialize,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let path = req.uri().path().to_owned();
        // Parse to a JSON value first: serde would otherwise read a struct from an array.
        let axum::Json(value) = axum::Json::<serde_json::Value>::from_request(req, state)
            .await
            .map_err(|rejection| rejection_to_error(&rejection))?;
        if !value.is_object() {
            return Err(ApiError::bad_request("body", "the body must be a JSON object"));
        }
        // Stored sizes are capped per field before anything is parsed or written.
        super::limits::check_body(&path, &value)?;
        let parsed: T = serde_path_to_error::deserialize(value.clone()).map_err(|err| {
            let path = err.path().to_string();
            let field = if path.is_empty() || path == "." {
                "body".to_owned()
            } else {
                path
            };
            ApiError::bad_request(&field, format!("invalid field '{field}': {}", err.inner()))
        })?;
        // serde reads a struct from an array too; an object field sent as an array is refused.
        if let Ok(echo) = serde_json::to_value(&parsed)
            && let Some(field) = struct_from_array(&value, &echo, String::new())
        {
            return Err(ApiError::bad_request(
                &field,
                format!("invalid field '{field}': expected an object"),
            ));
        }
        Ok(Self(parsed))
    }
}

/// The first path where the input held an array but the parsed value is an object.
fn struct_from_array(input: &serde_json::Value, parsed: &serde_json::Value, path: String) -> Option<String> {
    use serde_json::Value;
    match (input, parsed) {
        (Value::Array(_), Value::Object(_)) => Some(if path.is_empty() { "body".to_owned() } else { path }),
        (Value::Object(inp), Value::Object(out)) => out.iter().find_map(|(key, out_value)| {
            let child = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            inp.get(key)
                .and_then(|in_value| struct_from_array(in_value, out_value, child))
        }),
        (Value::Array(inp), Value::Array(out)) => inp
            .iter()
            .zip(out)
            .enumerate()
            .find_map(|(i, (a, b))| struct_from_array(a, b, format!("{path}[{i}]"))),
        _ => None,
    }
}

/// Maps axum's rejection (syntax, content type, size) to a 400 JSON error.
#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "axum's JsonRejection is #[non_exhaustive]: every other rejection keeps axum's own status"
)]
fn rejection_to_error(rejection: &JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::JsonSyntaxError(_) | JsonRejection::JsonDataError(_) => ApiError::bad_request(
            "body",
            format!("the body is not valid JSON: {}", rejection.body_text()),
        ),
        JsonRejection::MissingJsonContentType(_) => {
            ApiError::bad_request("content-type", "expected Content-Type: application/json")
        }
        _ => ApiError::new(rejection.status(), "invalid_request", rejection.body_text())
            .with_details(serde_json::json!({ "field": "body" })),
    }
}

/// Like `axum::extract::Query`, but a bad query is a 400 JSON error naming the parameter.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Self(value)),
            Err(rejection) => Err(query_error(&rejection)),
        }
    }
}

/// serde_urlencoded names the field in its message ("unknown variant `x`", "window_hours: …");
/// the parameter is recovered from the message when it is there.
fn query_error(rejection: &QueryRejection) -> ApiError {
    let text = rejection.body_text();
    let detail = text
        .split_once("query string: ")
        .map_or(text.as_str(), |(_, rest)| rest)
        .to_owned();
    let field = detail
        .split_once(':')
        .map(|(f, _)| f.trim())
        .filter(|f| !f.is_empty() && !f.contains(' '))
        .unwrap_or("query")
        .to_owned();
    ApiError::bad_request(&field, format!("invalid query parameter: {detail}"))
}
