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
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## The web console (issue 18) — `crates/gateway/src/console`
//!
//! - **Why server-rendered.** The console is pages a person reads and forms a person posts, over the
//!   services the API already calls; the expected shape (one process, offline, no Node) is met most
//!   simply by rendering HTML in the handler. Templates are `maud` macros: checked at compile time,
//!   escaped by default, nothing to ship beside the binary. One script of our own
//!   (`crates/gateway/src/console/assets/console.js`, embedded with the stylesheet by
//!   `include_str!`) adds only what HTML cannot do: the queue re-reads `/approvals/queue` every 2 s
//!   (a new hold shows up; skipped while the person types), a run page follows
//!   `/runs/{id}/live` (the run's notices as SSE) and redraws `/runs/{id}/graph`, and a chat
//!   message is posted with `x-console-stream` so the turn's own events come back on the post's
//!   answer (no race with a separate subscription) and held calls are answered inline. Every page
//!   reads and decides without it (the browser test runs one person with JavaScript off).
//! - **Composition.** `gateway::build_with_console` merges `console::router` (its own guard) with the
//!   API router (its key check, JSON errors, OpenAI error shapes), then wraps both in the shared
//!   layers (body limit, request id, tracing). Console answers are gzip-compressed
//!   (`CompressionLayer`, never SSE). `ConsoleSettings::secure_cookies` is set by the binary when
//!   the gateway binds off loopback.
//! - **Access** (`console::session`). A session is a random 256-bit token in an `HttpOnly`,
//!   `SameSite=Strict` cookie (`Secure` off loopback) mapped in memory to an identity and its own
//!   CSRF token. Open loopback gateway: every visitor is `local` (a session is made on the first
//!   page, so posts are CSRF-checked there too). With keys: a session starts anonymous, sign-in
//!   exchanges a key (`AuthState::sign_in`, the API's per-address wrong-key throttle) for a new
//!   token as the key's identity; sign-out forgets it. The `guard` middleware refuses, before any
//!   handler, a post whose `csrf` field is not the session's (403), one from another origin
//!   (`Origin` or `Sec-Fetch-Site: cross-site`, 403), and sends an anonymous page request to
//!   `/sign-in?next=…` (a local path only). Sessions live in memory: a restart signs people out
//!   and loses nothing else (at most 10 000; expired, then anonymous ones go first).
//! - **Pages.** `approvals` (one queue: tool calls with arguments, caller and deadline; proposals
//!   and edits with the prose diff, relaxations marked by `flow::is_relaxation`, the rationale per
//!   operation and who proposed; gates with the run's check summary and deliverables found and
//!   missing, answered through the run; the recent decisions with who and when; a 409 re-reads the
//!   hold and says "Already decided by …"), `runs` (list; a run's flow-state graph — a node per
//!   phase in execution order, status as class and word, the gate card on its node with one button
//!   per decision the gate allows; `live: false` as a banner with every status unknown; the
//!   activity lane names what the run ledger does not record), `flows` (catalogue, a template or
//!   version as phases and gates, validation of a pasted YAML/JSON edit listing every violation or
//!   the line and column that does not parse, the propose form), `chat`, `usage` (by role, model
//!   and run; unknown stays unknown), `tools` (each MCP server's status, sandbox and tools by the
//!   class the gate gives them).
//! - **Invariant:** the console calls the same services with the signed-in identity as approver and
//!   re-implements no rule: gate decisions go through `RunService::answer_gate`, approvals through
//!   `ApprovalService::decide`, per-run usage through `UsageTotals::from_events`.
//! - **Tests:** `crates/gateway/tests/it/console.rs` (cookies, sign-in, CSRF and origin refusals,
//!   the API's own key check) and the run page in `crates/gateway/tests/it/runs.rs` (the gate card;
//!   the outage banner); `crates/bins/tests/it/console_browser.rs` runs
//!   `crates/bins/tests/browser/console.cjs` — Playwright driving headless Chromium against
//!   `metaforge up`, axe-core on every page, screenshots kept under `CARGO_TARGET_TMPDIR`.
//!   `cargo xtask bench console` measures the 500-hold approvals page.

mod approvals;
mod assets;
mod chat;
mod flows;
mod page;
mod runs;
pub(crate) mod session;
mod tools;
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
        .route("/tools", get(tools::page))
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
