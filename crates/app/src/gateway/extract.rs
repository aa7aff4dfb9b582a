//! A JSON body extractor whose rejections are the gateway's JSON errors, naming the field.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// Like `axum::Json`, but a bad body becomes a 400 `{error, message, details: {field}}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(rejection_to_error(&rejection)),
        }
    }
}

/// Maps axum's rejection to a 400 naming the offending field where serde reported one.
fn rejection_to_error(rejection: &JsonRejection) -> ApiError {
    let text = rejection.body_text();
    match rejection {
        JsonRejection::JsonDataError(_) => {
            // axum reports "Failed to deserialize the JSON body into the target type: <path>: <why>".
            let detail = text
                .split_once("target type: ")
                .map_or(text.as_str(), |(_, rest)| rest);
            let (field, why) = match detail.split_once(": ") {
                Some((path, why)) if !path.contains(' ') => (path.to_owned(), why.to_owned()),
                _ => ("body".to_owned(), detail.to_owned()),
            };
            ApiError::bad_request(&field, format!("invalid field '{field}': {why}"))
        }
        JsonRejection::JsonSyntaxError(_) => {
            ApiError::bad_request("body", format!("the body is not valid JSON: {text}"))
        }
        JsonRejection::MissingJsonContentType(_) => {
            ApiError::bad_request("content-type", "expected Content-Type: application/json")
        }
        _ => ApiError::bad_request("body", text),
    }
}
