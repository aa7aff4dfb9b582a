//! The `metaforge` binary: one thin entry point for every MetaForge role and CLI command.
//!
//! Parsing and dispatch only; each command lives in its own module under `cmd`.
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## `crates/bins` — `metaforge-bins`
//!
//! The `metaforge` binary. The only place that reads the environment and picks adapters.
//! `src/settings.rs` is the configuration (`Settings`, parsed once in `cmd::run`; `metaforge config
//! check` runs the same parse and prints what it selects, secrets counted, never shown).
//! Every ledger is opened through `src/ledger_engine.rs` (`LedgerEngine::{Files, Postgres}` from
//! `METAFORGE_DATABASE_URL`, in `Settings::ledgers`), so no command picks an engine of its own.
//! The approval ledger and the flow-version store are opened in one place, `src/ledgers.rs`
//! (`open_ledgers`: private directories for the files, both stores, every stored version read back
//! against its hash at start-up), by the gateway (`gateway`, `up`) and by a local `mcp serve` alike.
//! Process tests (the modules of `tests/it/main.rs`: `gateway_process`, `sidecar_remote`,
//! `mcp_held_writes`, `runs_mcp_client`, …) share
//! `tests/common/mod.rs`: spawn the binary (`start_gateway`, `start_sidecar`, `server_command`), wait
//! for a listener, kill the process group on drop (`Process` = `test_support::ChildGuard`), `http`
//! with the operator key, `mcp_client`. Every test crate shares `metaforge-test-support`'s harness:
//! `net` (bound listeners; `unused_port` only for a child that binds its own), `peers::require` (skip
//! with a printed reason, or fail under `METAFORGE_REQUIRE_PEERS=1`), `process::ChildGuard`,
//! `upstream::Scripted` and `cases` (the `fixtures/rules` tables).
//! Design-flow runs through the binary (issue 16) share `tests/run_support/mod.rs` (the
//! `phase_model` told `PHASE_SYSTEM_PROMPT`, `gateway_env`, a gateway with its log, HTTP exchanges that
//! report a dead gateway, `open_gate`, `merged_into_main`): `tests/it/runs_process.rs` (a `design_v1` run
//! to completion on the `scripted_phase_model` example, retry, rework, expiry, refused starts that
//! record nothing, `live: false` under `METAFORGE_FLOW_ENGINE=temporal`), `tests/it/run_crash_loop.rs`
//! (≥ 50 SIGKILLs, then the ledgers and the twin checked from their files; figures printed) and
//! `tests/run_events_kafka.rs` (feature `kafka`, tansu). `examples/scripted_phase_model.rs` serves
//! the phase model on a port (`--port N`) for a walk-through without a provider.
//!
//! **One HTTP listener** (`metaforge_gateway::listen`, issues 12.4/13; its limits read by
//! `src/http_limits.rs`) serves the gateway and the HTTP sidecar
//! (`metaforge gateway`, `up`, `mcp serve --http`): hyper-util's auto builder, `TCP_NODELAY` on
//! every accepted socket, headers within `METAFORGE_HTTP_HEADER_TIMEOUT_SECS` (10), no gap in a body
//! longer than `METAFORGE_HTTP_BODY_TIMEOUT_SECS` (30), the whole body within
//! `METAFORGE_HTTP_REQUEST_TIMEOUT_SECS` (60) of its headers (else `408 request_timeout` and the
//! connection is closed), at most `METAFORGE_HTTP_MAX_CONNECTIONS` (1024) connections (the next waits
//! in the accept queue). Handler time is not capped there (a held write waits for a person).
//! Pinned by `tests/it/slow_clients.rs`. The sidecar answers a call that sends nothing before its
//! result as one `application/json` body: 2026-07-28 through rmcp's `json_response`, a 2025-11-25
//! session through `adapters-mcp::json_reply` (the SSE stream's first message is the result within
//! 100 ms → that message as JSON; a request or notification first — elicitation, progress — or a
//! slower result such as a held write → the SSE stream as it was). `tests/it/sidecar_json_responses.rs`
//! pins both and `TCP_NODELAY` (a streamed chat answer on a kept-alive connection; ~40 ms without).
//! Hot-path rules of the sidecar (issue 13, found by profiles): `SidecarHost` compiles each tool's
//! input schema and reads its gate spec once when the tool is added (`tool_gating::ArgumentSchema`,
//! `decide_with_schema`), so a call walks its arguments and never compiles a schema; a call's output
//! is moved into the MCP result, not copied; `json_reply` searches each byte of the stream once
//! (memchr) and tells a response by its first members (`{"jsonrpc":"2.0","id":…,"result"`), parsing
//! the whole message only when the start is not that shape; `flow.list` serializes its fixed answer
//! once.

mod banner;
mod cmd;
mod compose;
mod http_limits;
mod ledger_engine;
mod ledgers;
mod local_processes;
mod providers_config;
mod runs_config;
#[cfg(feature = "temporal")]
mod runs_temporal;
mod settings;
mod skills;
mod system;
mod telemetry;
mod tool_servers;
mod twin_engine;

use clap::Parser;

/// mimalloc, not glibc malloc: a tool call or a proxied completion allocates and frees many
/// buffers of a few kilobytes, and glibc's consolidation of them was a tenth of the sidecar's
/// profile (issue 13).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cmd::run(cmd::Cli::parse())
}
