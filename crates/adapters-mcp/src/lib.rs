//! MCP transports for MetaForge, built on rmcp.
//!
//! Two directions, one crate: the MCP *client* ([`McpToolServer`], a [`metaforge_ports::ToolSource`]
//! per configured server, stdio or streamable HTTP) that the central tool registry reaches tool
//! servers through, and the *server* half of the `metaforge mcp serve` sidecar
//! ([`SidecarServer`], [`serve_stdio`], [`bind_http`]) that hands every call to a
//! [`metaforge_ports::ToolHost`]. Protocol details (eras, elicitation, sessions) stay here;
//! adapters depend on `metaforge-ports` only.
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## MCP both ways (issue 6) — `adapters-mcp`, `app::tools`, `crates/sidecar`, `bins mcp serve`
//!
//! - **Port** `metaforge_ports::tools`: `ToolSource` (one MCP tool server: `list_tools`, `call_tool`),
//!   `ToolHost` (what the sidecar serves: `tools(caller)`, `call`, resources), `ToolDescriptor`,
//!   `ToolOutput` (content blocks verbatim + `is_error`), `CallerClass`, `CallerContext`,
//!   `InputChannel`, `HostCallOutcome::{Done, NeedsInput}`.
//! - **Client** `adapters-mcp::client::McpToolServer` (rmcp 3.11): stdio child or streamable HTTP.
//!   Servers file `adapters-mcp::config` in the shape Claude Desktop and Claude Code use:
//!   `{"mcpServers": {"<name>": {command, args, env} | {url, headers}}}` with an optional `type`
//!   (`stdio` | `http` | `streamable-http`; `sse` refused naming the way out) and MetaForge's extras
//!   `include`/`exclude` (tool-name globs, exclude wins), `connect_timeout_secs`, `call_timeout_secs`,
//!   `protocol` (`2025-11-25` | `2026-07-28` | `auto`), `disabled`, `domains` (the disciplines that
//!   see the server) and `core` (always visible); the older `{"servers": [{name, …}]}` list still
//!   parses. Read by hand over serde_json so every refusal names `mcpServers.<name>.<field>`
//!   (`servers[i].<field>`), an unknown or misspelt field included; JSON syntax and a name defined
//!   twice are `file:line:col`; a bad file is refused whole. Case table
//!   `fixtures/rules/mcp_servers_file.json` (`crates/adapters-mcp/tests/it/servers_file.rs`).
//!   `tools/list_changed` (or, on 2026-07-28, the
//!   `subscriptions/listen` stream) marks the cached list stale and re-lists; the call timeout is an
//!   idle timeout reset by progress; a dropped call sends `notifications/cancelled`; a lost HTTP
//!   session (404, or the id-less 400 "No valid session ID" some servers send — `http_client.rs`)
//!   is re-initialised once and the call retried (`mcp_session_reinitialised`); a dead connection is
//!   reopened once and the call retried (a stdio child is restarted; an HTTP server that is gone
//!   answers `Unavailable`).
//! - **Sidecar transport** `adapters-mcp::{server, serve}`: rmcp `ServerHandler` over
//!   `Arc<dyn ToolHost>`; stdio → `local`; HTTP (axum, `/mcp`, loopback only) → `remote`, `service`
//!   with `METAFORGE_MCP_SERVICE_KEY` (header `x-metaforge-service-key` or bearer), `untrusted` for
//!   a wrong key. `NeedsInput` → `elicitation/create` for a 2025-11-25 client that declared
//!   elicitation, an `InputRequiredResult` for a 2026-07-28 client that declared it, else the
//!   questions as the tool result; answers come back under `arguments.answers`.
//! - **Registry** `app::tools::ToolRegistry` (the one registry; `ToolRegistry::builder()` →
//!   `natives(Arc<dyn ToolHost>)`, `server(Arc<dyn ToolSource>, list_within)`, `disabled_server`,
//!   `scope(DomainScope)`, `policy(agent::ToolPolicy)`, `build().await` lists every server
//!   concurrently). It implements `agent::ToolBoxes`: `for_turn(caller, domains)` is a view
//!   (`agent::ToolBox`) with the host's natives for the caller's class (called through
//!   `ToolHost::call`; a `NeedsInput` answer goes back as the result), the native `search_tools`
//!   (when any server is configured), and the MCP tools of every listed server admitted by the
//!   `DomainScope` — with `domains` given, only core servers (`CORE_SERVERS`, `"core": true`) and
//!   the named disciplines' servers (`"domains": [...]`); `None` or an empty list = all. `search_tools` searches the
//!   full catalogue by keyword, registers a match the turn could not see and pins every match
//!   ("already available" for known ones) for the caller's session (`CallerContext::session`, at
//!   most `MAX_REMEMBERED_SESSIONS`; without one, for the turn), so `ToolBox::pinned` protects it
//!   from the loop's tool cap on the next step (FORGE-94). Tools are declared through
//!   `agent::AgentTool::new` (gate spec from hints + `ToolPolicy`) and named once over the full
//!   catalogue by `domain::tool_naming` (a collision suffix lands on the same tool whatever the
//!   scope). No call rule lives here: cap, validation, gating, holds, dedup and envelopes are the
//!   agent loop's (`crates/agent/src/{turn,exec}.rs`). `ServerStatuses` (`ok {tools}` |
//!   `unavailable {reason}` | `disabled`) is shared with `/health`: a failed listing, or a call that
//!   returns `PortErrorKind::Unavailable` (server gone), flips a server to unavailable with an ERROR
//!   `mcp_server_unavailable` on the change; a call that reaches it again flips it back
//!   (`mcp_server_available`); `refresh()` re-lists (new lists, servers that never listed) but never
//!   clears an unavailable a call found, since clients answer a re-list from cache.
//! - **Start-up** `bins/src/tool_servers.rs`: `compose_tools(home, servers_path, skills_dirs, natives, inherited)` reads
//!   `METAFORGE_MCP_SERVERS_PATH`, else `$METAFORGE_HOME/mcp_servers.json` (absent at the default
//!   place = no servers, logged `mcp_servers_file_absent`; absent at a set path or a bad file =
//!   start refused, exit 2, naming the variable / path / field), builds one `McpToolServer` per
//!   enabled server (a stdio one started as `StdioLaunch` says: a cleared environment plus `PATH`,
//!   the locale, `HOME`/`TMPDIR`/working directory `$METAFORGE_HOME/tool-servers/<name>` and its
//!   entry's `env` — `crates/adapters-mcp/src/launch.rs`), lists them concurrently (each within twice its connect timeout), logs
//!   `mcp_servers_composed`, refreshes every `REFRESH_EVERY` (60 s) and at once when any client
//!   opens a session or fetches a changed list (`McpToolServer::with_change_signal`, one `Notify`
//!   for all: a server whose slow first start outlasted its handshake is `ok` as soon as it
//!   answers), and returns `ComposedTools
//!   { registry, statuses, servers_file }`. `sidecar_natives` is the host the loop's natives come
//!   from (the same `SidecarHost` as `metaforge up`'s sidecar). `cmd::serve::compose` keeps it in
//!   `Composition::tools` and hands `statuses` to `GatewayState::mcp_servers`; `/health` shows the
//!   component `mcp_servers` (`{status}` without a key; each server's state, reason and tool count
//!   with one; degraded when any is unavailable). Tests there run the registry over server-everything
//!   (stdio and streamable HTTP), the sidecar over HTTP, a broken and a disabled server, a scripted
//!   model calling `echo` through `Agent::run_turn`, and a server killed mid-turn;
//!   `bins/tests/it/tool_servers_process.rs` runs the same through the `metaforge gateway` process.
//! - **Sidecar use cases** `crates/sidecar`: `SidecarHost` (`ToolHost`): `flow.list`, `flow.validate`
//!   (reads); `flow.propose` — **one** tool, `tools::propose::FlowPropose`, over the
//!   `FlowBindings` port (in process `bindings::InProcessFlowBindings` over `FlowService`, or the
//!   gateway's `RemoteFlowBindings` in remote mode; the two modes share every line of the tool):
//!   strict caller-proposed tailoring (`needs_input` with the domain's questions — answers come back
//!   as `answers`, folded in by `FlowContext::answer` — or one stored version (origin caller) plus
//!   one `design_flow_proposal` hold in the approval ledger; returns proposal, diff and approval id
//!   without waiting; not offered to service/client_task callers); with neither `template_id` nor
//!   `operations` it is the server generator's path — an `intent` is required, the bindings answer
//!   it (`InProcessFlowBindings::with_generator(ProposalGenerator)`: in `metaforge up` the same
//!   `app::flow_generator::PipelineGenerator` as the gateway; in remote mode the gateway's route),
//!   answers to the model's `model_N` questions are appended to the intent, and bindings without a
//!   generator answer `generator_unavailable` and store nothing. A held proposal has one shape
//!   (`envelope::held_proposal_output`) and a refusal one shape (`envelope::refusal`, the code
//!   table above) whichever bindings answered. The modules: `args` (argument types, schemas,
//!   `ArgError`), `envelope` (every answer shape; `at_boundary` turns an `ArgError` into the
//!   envelope once), `bindings` (`FlowStores`, `InProcessFlowBindings`), `tools/*` (one module per
//!   tool); no module of the sidecar imports a sibling tool's;
//!   `flow.version`, `approvals.list` (reads); resource `metaforge://flow/version/{id}` (markdown);
//!   the `twin.*` family when a twin is composed (`with_twin`, see the twin section below).
//!   A tool's `SidecarTool::preflight` runs after the schema check and before any gate or hold
//!   (FORGE-222): a write whose arguments it cannot use is answered there and never parked.
//!   Every other tool is gated by the domain's `tool_gating::decide` (caller class from the
//!   connection): run, refuse (envelope), or hold — `held::HeldWrites::hold_and_wait` parks a
//!   `tool_call` hold (deadline = timeout + 30 s grace), polls, runs on approval, resolves it
//!   `timed_out` when its window closes (a conflicting last-moment decision is read back and
//!   honoured), and `canceled` if the call is dropped (the transport drops the host future on
//!   `notifications/cancelled`). Without a ledger a hold is refused, never run. Proposals go through
//!   the gateway's `flows::FlowService::propose_from_caller` and holds through
//!   `approvals::ApprovalService`, so a plugin's proposal is the dashboard's record; a person's
//!   decision (`ApprovalService::decide`) carries on to the version. Composition over the
//!   SQLite ledgers under `METAFORGE_HOME` in `bins/src/cmd/mcp.rs` (one ledger shared with the
//!   gateway; the sidecar never runs `restore`).
//! - `app::unreachable_holds::UnreachableApproverLedger` wraps the ledger of a standalone sidecar
//!   with no gateway URL: holds are still parked, and each is logged `approval_hold_unreachable`
//!   (error) and counted in `metaforge_unreachable_approval_hold_total{kind}`, served on the
//!   sidecar's own `GET /metrics` (`HttpSidecar::with_metrics`); the gateway and `up` never wrap.
//! - **Invariants:** the caller class comes from the connection, never from arguments; the sidecar
//!   offers no tool that decides an approval or takes an approver; stdout on stdio is protocol only
//!   (logs go to stderr); fixture tools for the conformance suite live only in the test-only example
//!   `bins/examples/mcp_conformance_fixture.rs`.

// Every variant of our own enums is named: a new protocol era, tool class or outcome must not
// compile into a silent default (issue 11, W4).
#![deny(clippy::wildcard_enum_match_arm)]

mod client;
pub mod config;
mod convert;
mod glob;
mod http_client;
mod json_reply;
mod launch;
mod serve;
mod server;
mod skills;
mod stderr_log;
mod trace_meta;

pub use client::{ClientStats, MAX_RESTART_DELAY, McpToolServer, restart_delay};
pub use config::{
    ConfigError, DeclaredToolClass, ProtocolChoice, ServerConfig, ServerTransport, load_servers_file,
    parse_servers,
};
pub use launch::{LaunchError, StdioLaunch};
/// The sandbox stdio servers run in (the `metaforge-sandbox` crate).
pub use metaforge_sandbox as sandbox;
pub use serve::{
    ClientKey, HttpSidecar, MCP_PATH, METRICS_PATH, MetricsRender, ServeError, bind_http, serve_stdio,
};
pub use server::{
    ANSWERS_ARGUMENT, AuthenticatedIdentity, Connection, GrantsCell, PROJECT_HEADER, SERVICE_KEY_HEADER,
    SESSION_HEADER, SidecarServer, classify_http,
};
