//! The web console through the real router: who the visitor is (open loopback: `local`; with
//! keys: signed in through the form), the session cookie's flags, and the guard that refuses a
//! form post without the session's CSRF token or from another origin before any handler runs.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use metaforge_gateway::console::ConsoleSettings;
use metaforge_gateway::{AuthState, parse_api_keys};
use tower::ServiceExt as _;

use crate::common::state;

/// Sends `request` and answers status, headers and the body as text.
pub(crate) async fn fetch(app: &axum::Router, request: Request<Body>) -> (StatusCode, HeaderMap, String) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8_lossy(&bytes).into_owned())
}

/// The session cookie a response sets (`mf_session=…`), without its attributes.
fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("mf_session="))
        .map(|v| v.split(';').next().unwrap().to_owned())
}

/// The CSRF token a page carries.
fn csrf_of(page: &str) -> String {
    let start = page.find("data-csrf=\"").unwrap() + "data-csrf=\"".len();
    page[start..start + 64].to_owned()
}

fn page_get(path: &str, cookie: Option<&str>) -> Request<Body> {
    let mut b = Request::builder()
        .uri(path)
        .header(header::HOST, "127.0.0.1:8787");
    if let Some(cookie) = cookie {
        b = b.header(header::COOKIE, cookie);
    }
    b.body(Body::empty()).unwrap()
}

pub(crate) fn form_post(path: &str, cookie: &str, form: &[(&str, &str)]) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri(path)
        .header(header::HOST, "127.0.0.1:8787")
        .header(header::COOKIE, cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(serde_urlencoded::to_string(form).unwrap()))
        .unwrap()
}

/// Signs in with `key` through the form; answers the session cookie and its CSRF token.
pub(crate) async fn sign_in(app: &axum::Router, key: &str) -> (String, String) {
    let (status, headers, page) = fetch(app, page_get("/sign-in", None)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let anonymous = session_cookie(&headers).unwrap();
    let csrf = csrf_of(&page);
    let (status, headers, page) = fetch(
        app,
        form_post(
            "/sign-in",
            &anonymous,
            &[("csrf", &csrf), ("key", key), ("next", "/approvals")],
        ),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{page}");
    let cookie = session_cookie(&headers).unwrap();
    assert_ne!(cookie, anonymous, "signing in replaces the session token");
    let (_, _, page) = fetch(app, page_get("/approvals", Some(&cookie))).await;
    (cookie, csrf_of(&page))
}

fn app(keys: &str, settings: ConsoleSettings) -> axum::Router {
    let auth = AuthState::new(parse_api_keys(keys).unwrap(), None);
    metaforge_gateway::build_with_console(state(), Arc::new(auth), 1 << 20, settings)
}

#[tokio::test]
async fn on_an_open_loopback_gateway_the_visitor_is_local_with_a_strict_http_only_session() {
    let app = app("", ConsoleSettings::default());
    let (status, headers, page) = fetch(&app, page_get("/approvals", None)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("<strong id=\"identity\">local</strong>"), "{page}");
    let cookie = headers.get(header::SET_COOKIE).unwrap().to_str().unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(
        !cookie.contains("Secure"),
        "loopback cookies are not Secure: {cookie}"
    );
    let csp = headers
        .get(header::CONTENT_SECURITY_POLICY)
        .unwrap()
        .to_str()
        .unwrap();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert_eq!(headers.get(header::CACHE_CONTROL).unwrap(), "no-store");
}

#[tokio::test]
async fn off_loopback_the_session_cookie_is_secure() {
    let app = app("ops:sk-ops-000001", ConsoleSettings { secure_cookies: true });
    let (_, headers, _) = fetch(&app, page_get("/sign-in", None)).await;
    let cookie = headers.get(header::SET_COOKIE).unwrap().to_str().unwrap();
    assert!(cookie.contains("; Secure"), "{cookie}");
}

#[tokio::test]
async fn with_keys_a_page_asks_for_sign_in_and_a_key_exchanged_on_the_form_names_the_person() {
    let app = app("ops:sk-ops-000001", ConsoleSettings::default());
    let (status, headers, _) = fetch(&app, page_get("/runs?x=1", None)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(
        headers.get(header::LOCATION).unwrap(),
        "/sign-in?next=%2Fruns%3Fx%3D1"
    );
    // A wrong key is refused on the form and the session stays anonymous.
    let (_, headers, page) = fetch(&app, page_get("/sign-in", None)).await;
    let anonymous = session_cookie(&headers).unwrap();
    let csrf = csrf_of(&page);
    let (status, _, page) = fetch(
        &app,
        form_post(
            "/sign-in",
            &anonymous,
            &[("csrf", &csrf), ("key", "sk-wrong-0000")],
        ),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(
        page.contains("not one of this gateway&#39;s keys")
            || page.contains("not one of this gateway's keys"),
        "{page}"
    );
    let (status, _, _) = fetch(&app, page_get("/approvals", Some(&anonymous))).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "still not signed in");
    let (cookie, _) = sign_in(&app, "sk-ops-000001").await;
    let (status, _, page) = fetch(&app, page_get("/approvals", Some(&cookie))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("<strong id=\"identity\">ops</strong>"), "{page}");
    // After signing out the token is forgotten.
    let csrf = csrf_of(&page);
    let (status, _, _) = fetch(&app, form_post("/sign-out", &cookie, &[("csrf", &csrf)])).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (status, _, _) = fetch(&app, page_get("/approvals", Some(&cookie))).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "signed out");
}

#[tokio::test]
async fn sign_in_sends_the_browser_only_to_a_path_on_this_site_whatever_next_holds() {
    let app = app("ops:sk-ops-000001", ConsoleSettings::default());
    for next in [
        "/\t/evil.example",
        "/%09/evil.example",
        "//evil.example",
        "/\\evil.example",
        "https://evil.example/",
        "/runs\u{1}",
        "/runs\r\nSet-Cookie: x=1",
    ] {
        // The sign-in page renders (never a 500) and its Continue target is the default page.
        let query = serde_urlencoded::to_string([("next", next)]).unwrap();
        let (status, headers, page) = fetch(&app, page_get(&format!("/sign-in?{query}"), None)).await;
        assert_eq!(status, StatusCode::OK, "{next:?}: {page}");
        assert!(!page.contains("evil.example"), "{next:?} echoed: {page}");
        let anonymous = session_cookie(&headers).unwrap();
        let csrf = csrf_of(&page);
        let (status, headers, page) = fetch(
            &app,
            form_post(
                "/sign-in",
                &anonymous,
                &[("csrf", &csrf), ("key", "sk-ops-000001"), ("next", next)],
            ),
        )
        .await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{next:?}: {page}");
        assert_eq!(headers.get(header::LOCATION).unwrap(), "/approvals", "{next:?}");
    }
}

#[tokio::test]
async fn a_form_post_without_the_session_token_or_from_another_origin_is_refused_before_any_handler() {
    let app = app("ops:sk-ops-000001", ConsoleSettings::default());
    let (cookie, csrf) = sign_in(&app, "sk-ops-000001").await;
    // Missing, and another session's token.
    for form in [
        vec![("decision", "approve")],
        vec![("decision", "approve"), ("csrf", &"0".repeat(64))],
    ] {
        let (status, _, page) = fetch(&app, form_post("/approvals/any", &cookie, &form)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
        assert!(page.contains("field csrf"), "{page}");
    }
    // The right token from another site's page.
    let mut request = form_post(
        "/approvals/any",
        &cookie,
        &[("decision", "approve"), ("csrf", &csrf)],
    );
    request
        .headers_mut()
        .insert(header::ORIGIN, "http://evil.example".parse().unwrap());
    let (status, _, page) = fetch(&app, request).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(page.contains("another site"), "{page}");
    // With the token the handler runs (and says the hold does not exist).
    let (status, _, page) = fetch(
        &app,
        form_post(
            "/approvals/any",
            &cookie,
            &[("decision", "approve"), ("csrf", &csrf)],
        ),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{page}");
}

#[tokio::test]
async fn the_json_api_keeps_its_own_key_check_beside_the_console() {
    let app = app("ops:sk-ops-000001", ConsoleSettings::default());
    let (cookie, _) = sign_in(&app, "sk-ops-000001").await;
    // A console session is not an API credential.
    let (status, _, body) = fetch(&app, page_get("/v1/approvals", Some(&cookie))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("\"error\""), "{body}");
}

#[tokio::test]
async fn a_gateway_without_runs_or_chat_says_so_on_those_pages() {
    let app = app("", ConsoleSettings::default());
    let (status, _, page) = fetch(&app, page_get("/runs", None)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{page}");
    assert!(page.contains("role=\"alert\""), "{page}");
    let (status, _, page) = fetch(&app, page_get("/chat", None)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{page}");
    assert!(
        page.contains("Chat unavailable") && page.contains("METAFORGE_ROUTE_CHAT"),
        "{page}"
    );
}

/// Issue 38 item 10: the live queue is one page (the oldest 100) with the queue's total, however
/// many holds wait; the page weight no longer grows with the queue.
#[tokio::test]
async fn the_console_queue_shows_the_oldest_page_and_the_whole_count() {
    let app = app("", ConsoleSettings::default());
    for n in 0..105 {
        let request = Request::builder()
            .method("POST")
            .uri("/v1/chat/tool_approvals")
            .header(header::HOST, "127.0.0.1:8787")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(
                serde_json::json!({"tool": "twin.write", "arguments": {"n": n}}).to_string(),
            ))
            .unwrap();
        let (status, _, body) = fetch(&app, request).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (status, _, queue) = fetch(&app, page_get("/approvals/queue", None)).await;
    assert_eq!(status, StatusCode::OK, "{queue}");
    assert!(
        queue.contains("105 waiting; the oldest 100 are shown."),
        "{}",
        &queue[..queue.len().min(600)]
    );
    assert_eq!(
        queue.matches("<li class=\"item\"").count(),
        100,
        "{}",
        &queue[..queue.len().min(1500)]
    );
    assert!(
        queue.contains("&quot;n&quot;: 0") || queue.contains("\"n\": 0"),
        "the oldest first"
    );
    assert!(
        !queue.contains("&quot;n&quot;: 104") && !queue.contains("\"n\": 104"),
        "the newest waits"
    );
}

/// Issue 41: the tool servers as the gateway sees them, with each server's tools by the class the
/// gate gives them.
#[tokio::test]
async fn the_tools_page_lists_each_server_with_its_status_sandbox_and_tool_classes() {
    use metaforge_app::tools::{ServerStatus, ServerStatuses};
    let statuses = Arc::new(ServerStatuses::none());
    statuses.set("spicebridge", ServerStatus::Ok { tools: 28 });
    statuses.set_sandbox("spicebridge", "on");
    statuses.set_classes(
        "spicebridge",
        [
            ("read_only", 12),
            ("additive", 9),
            ("producing", 6),
            ("destructive", 1),
        ]
        .into(),
    );
    statuses.set(
        "kicad",
        ServerStatus::Unavailable {
            reason: "handshake failed".to_owned(),
        },
    );
    let mut gateway = Arc::try_unwrap(state())
        .ok()
        .expect("a fresh state has one owner");
    gateway.mcp_servers = Arc::clone(&statuses);
    let auth = AuthState::new(parse_api_keys("").unwrap(), None);
    let app = metaforge_gateway::build_with_console(
        Arc::new(gateway),
        Arc::new(auth),
        1 << 20,
        ConsoleSettings::default(),
    );
    let (status, _, page) = fetch(&app, page_get("/tools", None)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let row = |name: &str| {
        let start = page.find(&format!("<th scope=\"row\">{name}</th>")).unwrap();
        page[start..start + page[start..].find("</tr>").unwrap()].to_owned()
    };
    let spicebridge = row("spicebridge");
    assert!(
        spicebridge.contains("<td>28</td><td>on</td><td>12</td><td>9</td><td>6</td><td>1</td>"),
        "{spicebridge}"
    );
    let kicad = row("kicad");
    assert!(
        kicad.contains("unavailable") && kicad.contains("handshake failed"),
        "{kicad}"
    );
    assert!(
        page.contains("href=\"/tools\""),
        "the section is in the navigation"
    );
}
