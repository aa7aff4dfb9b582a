//! The page shell every console page shares (navigation, who is signed in, sign-out) and the
//! small pieces pages repeat: times, status badges, JSON, the CSRF field, problem pages.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};
use metaforge_ports::Timestamp;

use super::assets;
use super::session::{CSRF_FIELD, ConsoleUser};
use crate::error::ApiError;

/// Which section of the navigation is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Approvals,
    Runs,
    Flows,
    Chat,
    Usage,
    Tools,
    /// A page outside the sections (sign-in, problems).
    None,
}

const SECTIONS: [(Nav, &str, &str); 6] = [
    (Nav::Approvals, "/approvals", "Approvals"),
    (Nav::Runs, "/runs", "Runs"),
    (Nav::Flows, "/flows", "Flows"),
    (Nav::Chat, "/chat", "Chat"),
    (Nav::Usage, "/usage", "Usage"),
    (Nav::Tools, "/tools", "Tools"),
];

/// A whole page: the shell around `body`, titled `title`.
pub(crate) fn shell(user: &ConsoleUser, active: Nav, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · MetaForge" }
                link rel="stylesheet" href=(assets::CSS_PATH);
                script src=(assets::JS_PATH) defer {}
            }
            body data-csrf=(user.csrf) {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    span.brand { "MetaForge" }
                    nav aria-label="Sections" {
                        ul {
                            @for (nav, href, label) in SECTIONS {
                                li {
                                    @if nav == active {
                                        a href=(href) aria-current="page" { (label) }
                                    } @else {
                                        a href=(href) { (label) }
                                    }
                                }
                            }
                        }
                    }
                    div.who {
                        @match &user.identity {
                            Some(identity) => {
                                span { "Signed in as " strong #identity { (identity) } }
                                @if identity != "local" {
                                    form method="post" action="/sign-out" {
                                        (csrf_field(user))
                                        button.link type="submit" { "Sign out" }
                                    }
                                }
                            }
                            None => { a href="/sign-in" { "Sign in" } }
                        }
                    }
                }
                main #main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The hidden field carrying the session's CSRF token; every form has one.
pub(crate) fn csrf_field(user: &ConsoleUser) -> Markup {
    html! { input type="hidden" name=(CSRF_FIELD) value=(user.csrf); }
}

/// An HTML answer with `status`.
pub(crate) fn html(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup.into_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

/// A page fragment (the live parts swap these in).
pub(crate) fn fragment(markup: Markup) -> Response {
    html(StatusCode::OK, markup)
}

/// A problem page: what went wrong, said as a sentence, with a way back.
pub(crate) fn problem(user: &ConsoleUser, status: StatusCode, title: &str, message: &str) -> Response {
    html(
        status,
        shell(
            user,
            Nav::None,
            title,
            html! {
                p.notice.error role="alert" { (message) }
                p { a href="/approvals" { "Approvals" } " · " a href="/runs" { "Runs" } }
            },
        ),
    )
}

/// A refusal from a service, as a problem page with the API's status and code.
pub(crate) fn api_problem(user: &ConsoleUser, error: &ApiError) -> Response {
    let title = match error.status {
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::CONFLICT => "Already decided",
        StatusCode::SERVICE_UNAVAILABLE => "Unavailable",
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => "Refused",
        StatusCode::FORBIDDEN => "Not allowed",
        _ => "Something went wrong",
    };
    problem(
        user,
        error.status,
        title,
        &format!("{} ({})", error.body.message, error.body.error),
    )
}

/// A time as people read it, machine-readable beside.
pub(crate) fn when(at: &Timestamp) -> Markup {
    html! { time datetime=(at.to_rfc3339()) { (at.format("%Y-%m-%d %H:%M:%S UTC")) } }
}

/// A status as a labelled badge (its colour comes from the class; the word is always there).
pub(crate) fn badge(status: &str) -> Markup {
    html! { span class={ "badge s-" (status) } { (status.replace('_', " ")) } }
}

/// A JSON value as an indented block.
pub(crate) fn json_block(value: &serde_json::Value) -> Markup {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    html! { pre.json { (text) } }
}

/// A count that may be unknown: the number, or the word.
pub(crate) fn maybe<T: std::fmt::Display>(value: Option<T>) -> Markup {
    match value {
        Some(v) => html! { (v) },
        None => html! { span.unknown { "unknown" } },
    }
}
