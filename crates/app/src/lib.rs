//! MetaForge use cases, composed over `Arc<dyn Port>`.
//!
//! The app layer is where the pure rules of `metaforge-domain` meet the ports: the provider
//! pipeline and its usage writer, the routing resolver, the design-flow service and generator,
//! the approvals service, the field limits every door applies, and the tool registry. It names no
//! concrete adapter and no HTTP framework: `metaforge-gateway` and `metaforge-sidecar` are its
//! doors, `metaforge-bins` wires the adapters in.
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## `crates/app` — `metaforge-app`
//!
//! Use cases composed over `Arc<dyn Port>`. Never names a concrete adapter.
//! - `flows::FlowService` — a caller proposal, a generated proposal or an edit becomes one stored
//!   version plus one held approval (gateway and sidecar share it, so a plugin's proposal is the
//!   dashboard's record). Caller proposals store origin `caller` + `proposed_by`; generated ones
//!   origin `server` + `generated_by {provider, model, fellBackFrom}` in the approval's payload.
//! - `flow_generator::ask_generator` — the one `flow_generator` model call through the pipeline
//!   (usage attributed to that role and the caller, temperature 0, 1024-token cap);
//!   `flow_generator::generate_proposal` is the whole generator path over it (the gateway's
//!   `POST /v1/design-flows/propose` without template/operations, and `flow.propose` through the
//!   `ProposalGenerator` trait). No model, no route, every
//!   candidate failing, or an answer with no proposal → 503 and nothing stored (no untailored
//!   fallback); with required questions open it only asks the model for product-specific ones and,
//!   when that fails, still answers `needs_input` with a note.
//! - `turn_model::PipelineTurnModel` — the agent loop's `TurnModel` over `ProviderPipeline` +
//!   `RouteResolver`: a call takes the role's route as resolved now (`role_call`) with the role's
//!   chain behind it, or an explicit provider (`provider:model`, or a bare id served with the model
//!   the role's chain gives it; family-checked before anything is sent); it runs inside the
//!   pipeline's usage scope built from the call's (run, phase, role, caller), and the answer
//!   carries the record the sink got (`ProviderPipeline::complete_accounted`). `providers(role)` =
//!   the routed primary, then the chain (`ProviderPipeline::chain`). No pipeline / no route / an
//!   unwired or mismatched provider → `ModelError::NotConfigured` naming what to set
//!   (`no_pipeline_reason`, `METAFORGE_ROUTE_<ROLE>`, the provider's key); every candidate failing →
//!   `ModelError::Failed` listing each attempt. Tests: `crates/app/tests/it/agent_turns.rs` — every
//!   family's real adapter on a scripted upstream (parallel batch in call order, forced ReAct,
//!   dedup, schema refusal before any hold, 503 fallback with attributed usage) and P→G→E.
//! - `runs` — the embedded flow engine, the phase brains and the run use cases (`RunService`, section
//!   above).
//! - `approvals::ApprovalService` — park/decide/resolve over the one ledger (a gate hold's generic
//!   decision is refused: it is answered through its run); a decided
//!   `design_flow_*` approval carries its decision to the version; `restore()` at start orphans the
//!   open holds of gone processes and repairs a decision that did not reach its version;
//!   `orphan_gone()` is the running sweep.
//! - `processes` — process names, `Presence` (the presence lease, who is gone) and `LeaseTimings`,
//!   shared with the engine leadership in `runs::leadership`.
//! - `gateway` — axum routes (thin handlers), `ApiJson`/`ApiQuery` extractors (400 naming the field;
//!   objects only), `auth` (keys `identity:key`, every presented credential must be valid, per-key
//!   governor limit), `document_envelope` (429/401/400/413 on every operation), OpenAPI 3.1 from the
//!   handlers' types (domain/ports types derive `ToSchema` behind their `openapi` feature).
//!   `gateway::models` — what `model` may name on `/v1/chat/completions` (role, `provider:model`,
//!   or an OpenAI SDK model name: `gpt-4o-mini` / `openai/gpt-4o-mini` → the vendor's configured
//!   provider, else a configured route that names exactly that model; never handed to a runtime
//!   that would answer any name under the name asked; else 400 naming the forms) and `GET /v1/models` (OpenAI list shape, exactly what resolves).
//!   `gateway::runs` — `POST /v1/runs` (201 `RunDetail`), `GET /v1/runs` (`?status=&project_id=`),
//!   `GET /v1/runs/{id}`, `GET /v1/runs/{id}/flow-state`, `POST /v1/runs/{id}/approval`
//!   (`{decision, reason?, phase?, gate_phase?}`, no approver field: the key's identity decides),
//!   `POST /v1/runs/{id}/cancel` (`{reason?}`), `GET /v1/runs/{id}/events` (SSE: `id: seq.index`,
//!   `event:` the notice kind, `data:` the `RunNotice`; from the run's start, or right after a
//!   `Last-Event-ID`; ends with the run); `gateway::client_tasks` — `GET /v1/client-tasks`
//!   (`?run_id=&status=`), `GET /v1/client-tasks/{id}`, `POST …/claim` (the claimant is the key's
//!   identity), `POST …/submit` (`{summary, details?}`, only the claimant). All over
//!   `GatewayState::runs` (503 naming why when `None`); errors via `From<RunServiceError> for
//!   ApiError`; body limits for reasons, phases and summaries in `app::limits`.
//! - `exposition::Exposition` — `/metrics` for the gateway, `up` and the standalone sidecar:
//!   `metaforge_build_info{version} 1`, the `metrics-process` series (refreshed per scrape), the
//!   recorder's series, then the fractional counters (`metaforge_llm_cost_usd_total`).
//!
//! **Gateway invariants:** the approver of a decision is the authenticated identity, never a body
//! field (a body naming an approver is a 400); `/health` is the only unauthenticated route; binding
//! off loopback without a key refuses to start; every error is `{error, message, details?}`, except
//! on the OpenAI-compatible routes (`/v1/chat/completions`, `/v1/models`), where the same error is in
//! OpenAI's shape `{"error": {message, type, param, code}}` so SDKs show the reason;
//! schemathesis (`cargo xtask api-fuzz`) finds no 5xx, no schema violation and no auth bypass.
//!
//! **Hardening (issue 12):**
//! - `METAFORGE_HOME` and every ledger directory are created 0700, every ledger file (and its
//!   `-wal`/`-shm`) and the selection file 0600 whatever the umask (`adapters-store::paths::
//!   {create_private_dir, ensure_private_file}`, applied in `sqlite::open_pool` before SQLite opens).
//! - A client address presenting wrong keys `METAFORGE_GATEWAY_AUTH_FAILURES_PER_MINUTE` times
//!   (default 20, 0 = off) has its further wrong keys answered 429 `auth_throttled` (with
//!   Retry-After) for the rest of the minute; a valid key is always admitted, so one bad client
//!   behind a shared proxy or on loopback locks nobody out (issue 38 item 6). One count per address
//!   (`gateway::auth::FailureThrottle`, the port `ports::auth_failures::AuthFailures`) is shared by
//!   the API, the console's sign-in and the MCP sidecar (429 with JSON-RPC code -32002), so switching
//!   doors does not double the guesses. Counted in `metaforge_gateway_auth_failures_total{outcome=
//!   unauthorized|throttled}`, logged once per block as `gateway_auth_throttled` (peer address from
//!   `ConnectInfo`). A request with no key is not an attempt. **The risk this leaves, stated:** since
//!   a valid key is answered from a blocked address, the throttle bounds noise and failed-attempt
//!   load, not online guessing of a weak key; keys are the defence (at least 8 characters are
//!   required; use random ones, e.g. `openssl rand -hex 24`, which no online guessing reaches). `Authorization` schemes are case-insensitive. Caller classes
//!   (`local`, `remote`, `untrusted`, `service`, `client_task`, `anonymous`) cannot be key identities.
//! - The caller class of a hold parked over HTTP is the transport's (`local` open loopback, `remote`
//!   with a key; a relay's `untrusted` is honoured because it only lowers trust), never the body's.
//! - `/health` without a key: `status` and `{status}` per component (`ledgers`, `usage`,
//!   `mcp_servers`, `design_flow_worker`, `model_routing`) only; with a key (or `local`): reasons,
//!   each MCP server's state, the flow engine, the routing problems, `version`, `llm_usage_24h`.
//!   `design_flow_worker` is `RunService::worker_health` (`ok`, `absent`, `unknown`; absent when
//!   no run service is composed) and degrades the report when runs are served but cannot run;
//!   `model_routing` is `harness::routing_view`'s verdict (the same computation as
//!   `GET /v1/harness/routing`) and is informational — a keyless deployment (client intelligence)
//!   is a supported configuration, so it never flips the overall status.
//! - Stored field sizes are capped in one table, `app::limits` (the gateway answers 422 `too_large` naming the
//!   field, size and limit, checked in `ApiJson` before parsing); every error message/detail string
//!   is cut at `MAX_ECHOED_CHARS`. Unmatched routes, 405, axum's text rejections, and 414/431 past
//!   `limits::{MAX_URI_BYTES, MAX_HEADER_BYTES}` are rewritten/answered in the JSON shape
//!   (`error::{json_errors, request_size_limits}`, also over 100 header lines; `bins::listen` puts
//!   `request_size_limits` in front of every listener, the MCP sidecar's included, and hyper's line
//!   cap at 400); only hyper's own parser limits (URI ≥ 64 KiB, > 400 header lines, a header block
//!   past ~400 KiB) still answer with an empty body. The MCP sidecar's transport refusals (406, 400
//!   without a session, 404 for an unknown session or path, 405) get JSON-RPC bodies
//!   (`adapters-mcp::serve::errors_as_json_rpc`).
//! - The pending approval queue is read a page at a time (`ApprovalLedger::pending_page`, keyset
//!   cursor on `(created_at, id)`, `PendingPage::from_rows` the one page-cutting rule): `GET
//!   /v1/approvals` takes `limit` (1–500, default 100) and `after`, answers `total` and
//!   `next_cursor`; the console's live queue is the oldest page and the whole count.
//! - Approval rules in `domain::approvals`: `check_waiter_may_resolve` (a waiter's resolve closes
//!   only a `tool_call` hold; proposals/edits → 409 `person_decision_required`) and, with
//!   `METAFORGE_APPROVALS_SEPARATE_APPROVER=on` (needs keys; a bad value refuses start),
//!   `check_approver` (the identity recorded as the hold's caller cannot decide it → 403
//!   `separate_approver_required`). `ApprovalService` applies both; the domain error travels as the
//!   `PortError`'s source and `ApiError::from` maps it.
//! - MCP sidecar: a JSON POST's JSON-RPC envelope is checked before rmcp (`serve::check_envelope`:
//!   -32700 parse, -32600 batch/`jsonrpc`≠"2.0"/bad id or method, -32602 bad `tools/call` params);
//!   with `METAFORGE_GATEWAY_API_KEY` set (standalone or `up`) every request needs one of those keys
//!   or the service key (401 otherwise); a client key is stripped before classification (`remote`).

pub mod approvals;
pub mod chat;
pub mod exposition;
pub mod flow_generator;
pub mod flow_validation;
pub mod flows;
pub mod limits;
pub mod pipeline;
pub mod processes;
pub mod routing;
pub mod runs;
pub mod skills;
pub mod tools;
pub mod turn_model;
pub mod twin;
pub mod unreachable_holds;
pub mod usage_metrics;
