//! The console's two assets, embedded in the binary (no Node, no network, no files beside it):
//! its stylesheet and its one script. Both are ours and small; pages work without the script.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// Where the assets are served; the session guard lets these through without a session.
pub(crate) const PREFIX: &str = "/console/assets/";
/// The stylesheet's path.
pub(crate) const CSS_PATH: &str = "/console/assets/console.css";
/// The script's path.
pub(crate) const JS_PATH: &str = "/console/assets/console.js";

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}

/// `GET /console/assets/console.css`.
pub(crate) async fn css() -> Response {
    asset(CSS, "text/css; charset=utf-8")
}

/// `GET /console/assets/console.js`.
pub(crate) async fn js() -> Response {
    asset(JS, "text/javascript; charset=utf-8")
}
