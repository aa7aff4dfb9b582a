//! The web console (issue 18): the pages a person uses to answer holds, watch runs, read and
//! propose flows, chat and read usage — served by the gateway at `/`, in the same process, over
//! the same services the JSON API calls.
//!
//! Every page is rendered on the server ([`maud`]: compile-time checked, escaped by default, no
//! template files to ship) and works without JavaScript: reading is plain HTML, deciding is a
//! plain form post answered by a redirect. One small script of our own (`console.js`, embedded)
//! adds the live parts: the approvals queue refreshes itself, a run page follows the run's SSE
//! stream, a chat turn streams as it happens. No Node at build or run time; no asset leaves the
//! binary.
//!
//! Access ([`session`]): on an open loopback gateway (no keys) the person is `local`; with keys a
//! sign-in form exchanges a key for a session cookie. Every form post carries the session's CSRF
//! token, checked before any handler runs.

mod approvals;
mod assets;
mod chat;
mod flows;
mod page;
mod runs;
pub(crate) mod session;
mod usage;

use std::sync::Arc;

use axum::Router;
use axum::response::Redirect;
use axum::routing::{get, post};

use super::GatewayState;
use super::auth::AuthState;

/// How the console is served.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConsoleSettings {
    /// Mark the session cookie `Secure` (the gateway is reached off loopback, behind TLS).
    pub secure_cookies: bool,
}

/// What the console's handlers share: the gateway's services, the key table, the sessions.
pub(crate) struct ConsoleState {
    pub(crate) gateway: Arc<GatewayState>,
    pub(crate) auth: Arc<AuthState>,
    pub(crate) sessions: session::Sessions,
    pub(crate) settings: ConsoleSettings,
}

/// The console's routes, each behind the session guard (sign-in, CSRF, security headers).
pub(crate) fn router(gateway: Arc<GatewayState>, auth: Arc<AuthState>, settings: ConsoleSettings) -> Router {
    let state = Arc::new(ConsoleState {
        gateway,
        auth,
        sessions: session::Sessions::default(),
        settings,
    });
    Router::new()
        .route("/", get(|| async { Redirect::to("/approvals") }))
        .route("/sign-in", get(session::sign_in_page).post(session::sign_in))
        .route("/sign-out", post(session::sign_out))
        .route("/approvals", get(approvals::page))
        .route("/approvals/queue", get(approvals::queue_fragment))
        .route("/approvals/{id}", post(approvals::decide))
        .route("/runs", get(runs::list))
        .route("/runs/{id}", get(runs::page))
        .route("/runs/{id}/graph", get(runs::graph_fragment))
        .route("/runs/{id}/live", get(runs::live))
        .route("/runs/{id}/gate", post(runs::answer))
        .route("/runs/{id}/cancel", post(runs::cancel))
        .route("/flows", get(flows::catalogue))
        .route("/flows/templates/{id}", get(flows::template))
        .route("/flows/versions/{id}", get(flows::version))
        .route("/flows/validate", get(flows::validate_page).post(flows::validate))
        .route("/flows/propose", get(flows::propose_page).post(flows::propose))
        .route("/chat", get(chat::threads).post(chat::create))
        .route("/chat/{id}", get(chat::thread))
        .route("/chat/{id}/messages", post(chat::post))
        .route("/usage", get(usage::page))
        .route(assets::CSS_PATH, get(assets::css))
        .route(assets::JS_PATH, get(assets::js))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            session::guard,
        ))
        .with_state(state)
}

/// The approvals page for `items` pending holds, rendered as the server would send it: the
/// console's page-weight bench measures this (the same code the route runs, no HTTP around it).
pub fn render_approvals_for_bench(items: &[metaforge_ports::ApprovalRecord]) -> String {
    approvals::render_for_bench(items)
}
