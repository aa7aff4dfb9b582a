//! Who is at the console, and the guard every console request passes.
//!
//! A session is an opaque 256-bit random token in an `HttpOnly`, `SameSite=Strict` cookie
//! (`Secure` off loopback), mapped in memory to the identity it signed in as and to its own CSRF
//! token. On an open loopback gateway (no keys) every visitor gets a session as `local`, so form
//! posts are CSRF-checked there too: a page on another site cannot make a browser on this machine
//! approve anything. With keys, a session starts anonymous (it can only sign in) and becomes a
//! person's when a key is exchanged for it; signing in replaces the token (no fixation), signing
//! out forgets it. Sessions live in memory: a restart signs people out and loses nothing else.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use metaforge_ports::CallerClass;
use rand::RngCore as _;
use serde::Deserialize;
use subtle::ConstantTimeEq as _;

use super::ConsoleState;
use super::page;
use crate::auth::{SignInRefused, request_client};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "mf_session";
/// The form field every post carries the session's CSRF token in.
pub(crate) const CSRF_FIELD: &str = "csrf";
/// The identity of a person at an open loopback gateway (as the API names it).
const LOCAL: &str = "local";
/// How long a session lasts from its start.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// At most this many sessions are kept; past it expired, then anonymous ones are dropped first.
const MAX_SESSIONS: usize = 10_000;
/// The largest form body the guard reads (a pasted flow edit fits; the API's limit is 2 MiB).
const MAX_FORM_BYTES: usize = 2 * 1024 * 1024;

/// The person behind a console request, inserted by [`guard`] for the handlers.
#[derive(Debug, Clone)]
pub(crate) struct ConsoleUser {
    /// The session token (the cookie's value).
    token: String,
    /// Who signed in (`local` on an open gateway); `None` before sign-in.
    pub(crate) identity: Option<String>,
    /// The token every form of this session carries.
    pub(crate) csrf: String,
    /// The caller class decisions and chat turns record: `local` open, `remote` with keys.
    pub(crate) class: CallerClass,
    /// The client's address (sign-in throttling).
    client: IpAddr,
}

impl ConsoleUser {
    /// The person the guard found for this request (an anonymous one if it ran without it,
    /// which only a misrouted request could).
    pub(crate) fn of(parts: &axum::http::request::Parts) -> Self {
        parts.extensions.get::<Self>().cloned().unwrap_or_else(|| Self {
            token: String::new(),
            identity: None,
            csrf: String::new(),
            class: CallerClass::Remote,
            client: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        })
    }

    /// A signed-in person with a fixed token, for rendering a page outside a request (benches).
    pub(crate) fn for_bench() -> Self {
        Self {
            token: String::new(),
            identity: Some("bench".to_owned()),
            csrf: "0".repeat(64),
            class: CallerClass::Local,
            client: IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        }
    }

    /// The identity decisions are recorded under; only handlers behind the signed-in check call
    /// it, so an anonymous session never decides anything.
    pub(crate) fn who(&self) -> &str {
        self.identity.as_deref().unwrap_or("anonymous")
    }
}

struct Entry {
    identity: Option<String>,
    csrf: String,
    expires: Instant,
}

/// The session table.
#[derive(Default)]
pub(crate) struct Sessions {
    table: Mutex<HashMap<String, Entry>>,
}

fn random_token() -> String {
    let mut bytes = [0_u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

impl Sessions {
    fn open(&self, identity: Option<String>) -> (String, String) {
        let token = random_token();
        let csrf = random_token();
        let now = Instant::now();
        let mut table = self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if table.len() >= MAX_SESSIONS {
            table.retain(|_, e| e.expires > now);
        }
        if table.len() >= MAX_SESSIONS {
            table.retain(|_, e| e.identity.is_some());
        }
        if table.len() >= MAX_SESSIONS {
            tracing::warn!(
                event = "console_sessions_reset",
                kept = table.len(),
                "the console's session table is full: everyone signs in again"
            );
            table.clear();
        }
        table.insert(
            token.clone(),
            Entry {
                identity,
                csrf: csrf.clone(),
                expires: now + SESSION_TTL,
            },
        );
        (token, csrf)
    }

    fn get(&self, token: &str) -> Option<(Option<String>, String)> {
        let mut table = self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = table.get(token)?;
        if entry.expires <= Instant::now() {
            table.remove(token);
            return None;
        }
        Some((entry.identity.clone(), entry.csrf.clone()))
    }

    fn close(&self, token: &str) {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(token);
    }
}

fn session_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_owned())
}

fn session_cookie(token: &str, secure: bool, max_age: Duration) -> Option<HeaderValue> {
    let seconds = i64::try_from(max_age.as_secs()).unwrap_or(i64::MAX);
    let cookie = cookie::Cookie::build((COOKIE, token.to_owned()))
        .path("/")
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .secure(secure)
        .max_age(cookie::time::Duration::seconds(seconds))
        .build();
    HeaderValue::from_str(&cookie.to_string()).ok()
}

/// The headers every console answer carries: a strict CSP (our own script and style only, no
/// framing, forms post only here), no sniffing, no referrer off-site, no caching of pages.
fn harden(mut response: Response, cacheable: bool) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !cacheable {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// True when the request comes from a page of another origin: the browser says so
/// (`Sec-Fetch-Site: cross-site`), or its `Origin` names another host than the one it asked.
fn cross_origin(headers: &HeaderMap) -> bool {
    if headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("cross-site"))
    {
        return true;
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or(origin);
    origin == "null" || !origin_host.eq_ignore_ascii_case(host)
}

/// The CSRF token a form body carries, if any.
fn posted_csrf(body: &[u8]) -> Option<String> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body).ok()?;
    pairs.into_iter().find(|(k, _)| k == CSRF_FIELD).map(|(_, v)| v)
}

/// Middleware on every console route: finds (or starts) the session, sends an unsigned-in
/// person to the sign-in form, refuses a cross-origin post or one without the session's CSRF
/// token before any handler reads it, and hardens every answer.
pub(crate) async fn guard(
    State(console): State<Arc<ConsoleState>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_owned();
    if path.starts_with(super::assets::PREFIX) {
        return harden(next.run(request).await, true);
    }
    let open = !console.auth.keys_required();
    let client = request_client(&request);
    let found = session_token(request.headers()).and_then(|token| {
        console
            .sessions
            .get(&token)
            .map(|(identity, csrf)| (token, identity, csrf))
    });
    let (token, identity, csrf, fresh) = match found {
        Some((token, identity, csrf)) => (token, identity, csrf, false),
        None => {
            let identity = open.then(|| LOCAL.to_owned());
            let (token, csrf) = console.sessions.open(identity.clone());
            (token, identity, csrf, true)
        }
    };
    let user = ConsoleUser {
        token: token.clone(),
        identity,
        csrf,
        class: if open {
            CallerClass::Local
        } else {
            CallerClass::Remote
        },
        client,
    };
    let set_cookie = fresh
        .then(|| session_cookie(&token, console.settings.secure_cookies, SESSION_TTL))
        .flatten();
    let finish = |mut response: Response| {
        if let Some(cookie) = &set_cookie {
            response.headers_mut().append(header::SET_COOKIE, cookie.clone());
        }
        harden(response, false)
    };
    let reading = request.method() == Method::GET || request.method() == Method::HEAD;
    if user.identity.is_none() && path != "/sign-in" {
        if reading {
            let target = request
                .uri()
                .path_and_query()
                .map_or_else(|| path.clone(), |p| p.as_str().to_owned());
            let query = serde_urlencoded::to_string([("next", target)]).unwrap_or_default();
            return finish(Redirect::to(&format!("/sign-in?{query}")).into_response());
        }
        return finish(page::problem(
            &user,
            StatusCode::UNAUTHORIZED,
            "Sign in first",
            "This gateway needs a key: sign in, then send the form again.",
        ));
    }
    let request = if reading {
        request
    } else {
        if cross_origin(request.headers()) {
            tracing::warn!(event = "console_cross_origin_post_refused", path = %path, "a form post from another origin");
            return finish(page::problem(
                &user,
                StatusCode::FORBIDDEN,
                "Refused",
                "This form was sent from another site; nothing was changed.",
            ));
        }
        let (parts, body) = request.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM_BYTES).await else {
            return finish(page::problem(
                &user,
                StatusCode::PAYLOAD_TOO_LARGE,
                "Too large",
                &format!("A console form is at most {MAX_FORM_BYTES} bytes; nothing was changed."),
            ));
        };
        let valid =
            posted_csrf(&bytes).is_some_and(|sent| bool::from(sent.as_bytes().ct_eq(user.csrf.as_bytes())));
        if !valid {
            tracing::warn!(event = "console_csrf_refused", path = %path, "a form post without this session's CSRF token");
            return finish(page::problem(
                &user,
                StatusCode::FORBIDDEN,
                "Refused: stale or forged form",
                "The form did not carry this session's token (field csrf). Nothing was changed; \
                 reload the page and send it again.",
            ));
        }
        Request::from_parts(parts, axum::body::Body::from(bytes))
    };
    let mut request = request;
    request.extensions_mut().insert(user);
    finish(next.run(request).await)
}

/// Where a form may send the browser afterwards: a path on this site, never another host.
pub(crate) fn local_target(wanted: Option<&str>, fallback: &str) -> String {
    match wanted.map(str::trim) {
        Some(path) if is_local_path(path) => path.to_owned(),
        _ => fallback.to_owned(),
    }
}

/// A same-origin absolute path: one leading `/`, and no backslash or control character in it or
/// in its percent-decoded form. Browsers drop TAB, CR and LF anywhere in a URL and read `\` as
/// `/`, so `/\t/evil.example` or `/\\evil.example` would leave the site; a control character
/// cannot be sent in `Location` at all.
fn is_local_path(path: &str) -> bool {
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    [path, decoded.as_ref()].into_iter().all(|form| {
        let mut chars = form.chars();
        chars.next() == Some('/')
            && !matches!(chars.next(), Some('/'))
            && !form.chars().any(|c| c.is_control() || c == '\\')
    })
}

/// `?next=` of the sign-in page.
#[derive(Debug, Deserialize)]
pub(crate) struct NextQuery {
    #[serde(default)]
    next: Option<String>,
}

/// The sign-in form (on an open gateway it says there is nothing to sign in to).
pub(crate) async fn sign_in_page(
    State(console): State<Arc<ConsoleState>>,
    axum::Extension(user): axum::Extension<ConsoleUser>,
    Query(query): Query<NextQuery>,
) -> Response {
    sign_in_form(&console, &user, query.next.as_deref(), None, StatusCode::OK)
}

fn sign_in_form(
    console: &ConsoleState,
    user: &ConsoleUser,
    next: Option<&str>,
    refusal: Option<&str>,
    status: StatusCode,
) -> Response {
    let next = local_target(next, "/approvals");
    let body = if console.auth.keys_required() {
        html! {
            @if let Some(identity) = &user.identity {
                p { "You are signed in as " strong { (identity) } "." }
            }
            @if let Some(refusal) = refusal {
                p.notice.error role="alert" { (refusal) }
            }
            form.card method="post" action="/sign-in" {
                (page::csrf_field(user))
                input type="hidden" name="next" value=(next);
                label for="key" { "API key" }
                input #key type="password" name="key" autocomplete="current-password" required;
                p.hint { "One of the keys in METAFORGE_GATEWAY_API_KEY; decisions you make are recorded under its identity." }
                button type="submit" { "Sign in" }
            }
        }
    } else {
        html! {
            p { "This gateway has no keys configured and listens on loopback only: everyone at this machine is "
                strong { "local" } ", and there is nothing to sign in to." }
            p { a href=(next) { "Continue" } }
        }
    };
    page::html(status, page::shell(user, page::Nav::None, "Sign in", body))
}

/// The sign-in form's fields.
#[derive(Debug, Deserialize)]
pub(crate) struct SignInForm {
    #[serde(default)]
    key: String,
    #[serde(default)]
    next: Option<String>,
}

/// Exchanges a key for a session: a new token as the key's identity (the old one is forgotten).
pub(crate) async fn sign_in(
    State(console): State<Arc<ConsoleState>>,
    axum::Extension(user): axum::Extension<ConsoleUser>,
    Form(form): Form<SignInForm>,
) -> Response {
    if !console.auth.keys_required() {
        return Redirect::to(&local_target(form.next.as_deref(), "/approvals")).into_response();
    }
    match console.auth.sign_in(user.client, &form.key) {
        Ok(identity) => {
            console.sessions.close(&user.token);
            tracing::info!(event = "console_signed_in", identity = %identity, "a person signed in to the console");
            let (token, _) = console.sessions.open(Some(identity));
            let mut response =
                Redirect::to(&local_target(form.next.as_deref(), "/approvals")).into_response();
            if let Some(cookie) = session_cookie(&token, console.settings.secure_cookies, SESSION_TTL) {
                response.headers_mut().append(header::SET_COOKIE, cookie);
            }
            response
        }
        Err(refused @ SignInRefused::WrongKey) => sign_in_form(
            &console,
            &user,
            form.next.as_deref(),
            Some(&refused.to_string()),
            StatusCode::UNAUTHORIZED,
        ),
        Err(refused @ SignInRefused::Throttled { retry_after_secs }) => {
            let mut response = sign_in_form(
                &console,
                &user,
                form.next.as_deref(),
                Some(&refused.to_string()),
                StatusCode::TOO_MANY_REQUESTS,
            );
            if let Ok(value) = HeaderValue::from_str(&retry_after_secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
    }
}

/// Forgets the session and clears its cookie.
pub(crate) async fn sign_out(
    State(console): State<Arc<ConsoleState>>,
    axum::Extension(user): axum::Extension<ConsoleUser>,
) -> Response {
    console.sessions.close(&user.token);
    tracing::info!(event = "console_signed_out", identity = %user.who(), "a person signed out of the console");
    let target = if console.auth.keys_required() {
        "/sign-in"
    } else {
        "/approvals"
    };
    let mut response = Redirect::to(target).into_response();
    if let Some(cookie) = session_cookie("", console.settings.secure_cookies, Duration::ZERO) {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_path_on_this_site_is_a_target() {
        assert_eq!(local_target(Some("/runs/1"), "/x"), "/runs/1");
        for bad in [
            "//evil.example/",
            "https://evil.example/",
            "/\\evil",
            "runs",
            "/a\r\nSet-Cookie: x",
            "/\t/evil.example",
            "/%09/evil.example",
            "/%2F/evil.example",
            "/%5Cevil.example",
            "/runs/\u{7f}",
            "/runs%0d%0aSet-Cookie:%20x",
            "",
            "/\\",
        ] {
            assert_eq!(local_target(Some(bad), "/x"), "/x", "{bad:?}");
        }
        assert_eq!(local_target(None, "/x"), "/x");
        assert_eq!(
            local_target(Some("/runs?tab=gates&q=a%20b"), "/x"),
            "/runs?tab=gates&q=a%20b"
        );
        assert_eq!(local_target(Some("/"), "/x"), "/");
    }

    #[test]
    fn a_post_from_another_origin_is_recognised() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(
            !cross_origin(&headers),
            "no Origin: a same-site form of an old browser"
        );
        headers.insert(header::ORIGIN, HeaderValue::from_static("http://127.0.0.1:8080"));
        assert!(!cross_origin(&headers));
        headers.insert(header::ORIGIN, HeaderValue::from_static("http://evil.example"));
        assert!(cross_origin(&headers));
        headers.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(cross_origin(&headers));
        headers.remove(header::ORIGIN);
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(cross_origin(&headers));
    }

    #[test]
    fn a_session_is_found_until_it_is_closed_and_tokens_differ() {
        let sessions = Sessions::default();
        let (a, csrf_a) = sessions.open(Some("alice".into()));
        let (b, csrf_b) = sessions.open(None);
        assert_ne!(a, b);
        assert_ne!(csrf_a, csrf_b);
        assert_eq!(a.len(), 64);
        assert_eq!(sessions.get(&a), Some((Some("alice".into()), csrf_a)));
        sessions.close(&a);
        assert_eq!(sessions.get(&a), None);
        assert_eq!(sessions.get(&b).map(|s| s.0), Some(None));
    }

    #[test]
    fn the_csrf_field_is_read_from_a_form_body() {
        assert_eq!(
            posted_csrf(b"decision=approve&csrf=abc%20d").as_deref(),
            Some("abc d")
        );
        assert_eq!(posted_csrf(b"decision=approve"), None);
    }
}
