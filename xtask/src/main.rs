//! `cargo xtask`: the project's automation, one entry point for CI and developers.
//!
//! Subcommands:
//! - `ci`       — the full gate CI runs, cheapest step first, each timed and budgeted (see `ci.rs`);
//!   `ci --quick` the everyday tier, `ci --changed` / `ci -p CRATE` the quick tier narrowed.
//! - `setup`    — installs what the tests need when it is missing (venv + npm prefix under
//!   `METAFORGE_TOOLS_DIR`, cargo-nextest, cargo-deny, promtool).
//! - `doc-check` — fails when `docs/ARCHITECTURE.md` names a path or identifier that does not exist.
//! - `readme-check` — runs the README's walk-through as written against a real `metaforge up`.
//! - `layering` — fails when the pure crates pull IO crates, or an adapter depends on domain/app/another adapter.
//! - `test`     — nextest over the workspace plus doctests (what CI runs after its services are up).
//! - `alerts`   — `promtool check rules` and `promtool test rules` on `deploy/prometheus/`.
//! - `bench`    — throughput benchmarks (`bench stores`, `bench pipeline`, `bench gateway`, `bench mcp`, `bench agent`, `bench sandbox`,
//!   `bench runs`, `bench console`: the approvals page with 500 holds).
//! - `api-fuzz` — schemathesis against a running gateway's `/openapi.json` (zero failures to pass).
//! - `e2e --real-model` — opt-in real inference against llama-cpp-python serving SmolLM2.
//! - `cluster [N]` — the scripted cluster run: PostgreSQL, Temporal, tansu, FalkorDB, two
//!   gateways, a sidecar and a worker; the walk-through, N raced proposals under SIGKILLs, the
//!   audit (`ci` runs it with 300 proposals and a kill every 10 s).
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## `xtask`
//!
//! `cargo xtask ci` and its tiers (`xtask/src/ci.rs`; CONTRIBUTING.md says which to use when):
//! `--quick` (fmt, layering, doc-check, clippy and nextest on the default members, peers optional),
//! `--changed`/`-p` (the quick tier's tests narrowed to the touched crates and their dependents,
//! `xtask/src/changed.rs`), and the full gate `.ci/run` calls (cheapest first; peers installed in a
//! background thread while clippy runs; three feature sets — `workspace`, `STORE_ENGINES`,
//! `ALL_ENGINES` — each compiled once for clippy and once for tests, and the cluster run, api-fuzz
//! and readme-check reuse those builds). Every step runs under `xtask/src/gate.rs`: timed, budgeted,
//! a watchdog that names the running step every 60 s and kills what the gate started past a budget,
//! and a timing table at the end; `.config/nextest.toml` ends any test past five minutes. The
//! listener check counts only the gate's processes (its descendants, or those carrying
//! `METAFORGE_GATE_PID`), and a gate's end kills any of them still running. Every cargo that xtask
//! starts goes without the variables `cargo run` set for xtask (`without_cargo_run_vars`): ring's
//! build script tracks `CARGO_MANIFEST_DIR`, so they made each checkout rebuild ring and all above it. Also `cargo xtask layering`, `alerts`, `api-fuzz`; `cargo xtask bench stores`, `cargo xtask bench pipeline`, `cargo xtask bench gateway` (the
//! light fixed-response upstream `bench upstream` and aimock, each direct vs release gateway vs
//! LiteLLM proxy), `cargo xtask bench mcp` (sidecar `flow.list` vs the Python MCP SDK serving the
//! same text, both protocol eras; every request carries a fresh JSON-RPC id, `write_rpc_script`,
//! since one session's concurrent calls must) — shared kit `xtask/src/bench_kit.rs`: servers on core 1, wrk and
//! upstreams on core 0 (`taskset`), c = 1/8/64/256, `METAFORGE_BENCH_SECONDS` (3) per cell,
//! `METAFORGE_BENCH_BINARY` to bench another build; req/s, p50/p99, added latency over direct, RSS
//! idle and under load, ratios to the peer — `cargo xtask bench runs [N]` (`crates/app/benches/runs.rs`:
//! the embedded engine in one process on file-backed SQLite — run starts/s, transitions persisted/s,
//! a 20-phase auto-gated flow with an instant brain, the ledger's own append rate for the same
//! transitions), `cargo xtask e2e --real-model` (LLM) and `cargo xtask cluster [N]`
//! (`xtask/src/cluster.rs`: builds the workspace with `ALL_ENGINES` and runs
//! `crates/bins/tests/cluster.rs` with every peer required; `ci` runs it with 300 proposals and a
//! kill every 10 s).

#![expect(
    clippy::disallowed_methods,
    reason = "xtask is the developers' tool, not the product: it reads its own environment"
)]

mod api_fuzz;
mod bench;
mod bench_agent;
mod bench_console;
mod bench_gateway;
mod bench_kit;
mod bench_mcp;
mod bench_pipeline;
mod bench_runs;
mod bench_sandbox;
mod changed;
mod ci;
mod cluster;
mod doc_check;
mod e2e;
mod gate;
mod layering;
mod listeners;
mod readme_check;
mod setup;

use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci::run(&args[1..]),
        Some("setup") => setup::ensure(),
        Some("doc-check") => doc_check::run(args.get(1).is_some_and(|a| a == "--write")),
        Some("readme-check") => readme_check::run(Binaries::Build),
        Some("layering") => layering::check(),
        Some("test") => setup::ensure().and_then(|()| ci::test()),
        Some("fmt") => run("cargo", &["fmt", "--all"]),
        Some("alerts") => ci::alerts(),
        Some("api-fuzz") => api_fuzz::run(args.get(1).map_or("50", String::as_str), Binaries::Build),
        Some("e2e") => e2e::run(&args[1..]),
        Some("cluster") => cluster::run(&args[1..]),
        Some("bench") if args.get(1).map(String::as_str) == Some("pipeline") => bench_pipeline::run(),
        Some("bench") if args.get(1).map(String::as_str) == Some("gateway") => bench_gateway::run(),
        Some("bench") if args.get(1).map(String::as_str) == Some("mcp") => bench_mcp::run(),
        Some("bench") if args.get(1).map(String::as_str) == Some("agent") => bench_agent::run(),
        Some("bench") if args.get(1).map(String::as_str) == Some("sandbox") => bench_sandbox::run(),
        Some("bench") if args.get(1).map(String::as_str) == Some("runs") => bench_runs::run(&args[2..]),
        Some("bench") if args.get(1).map(String::as_str) == Some("console") => bench_console::run(&args[2..]),
        Some("bench") if args.get(1).map(String::as_str) == Some("upstream") => {
            let port = args.get(2).and_then(|p| p.parse().ok()).unwrap_or(0);
            bench_kit::serve_upstream(port)
        }
        Some("bench") => bench::bench(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <ci [--quick | --changed [--base REF] | -p CRATE…]|setup|layering|doc-check|readme-check|test|alerts|api-fuzz|fmt|bench <stores|pipeline|gateway|mcp|agent|runs [--engine embedded|temporal] [N]|console [N]|upstream PORT>|e2e --real-model|cluster [N] [--kill-every S] [--runs R] [--racers K]>"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a command, streaming its output, and fails naming the command when it fails.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<()> {
    run_env(program, args, &[])
}

/// [`run`] with these variables added to the command's environment.
pub(crate) fn run_env(program: &str, args: &[&str], envs: &[(&str, &str)]) -> Result<()> {
    let shown: String = envs.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    eprintln!("xtask: $ {shown}{program} {}", args.join(" "));
    let mut command = Command::new(program);
    without_cargo_run_vars(&mut command);
    let status = command
        .args(args)
        .envs(setup::tool_env().iter().map(|(k, v)| (k, v)))
        .env(gate::GATE_MARK, std::process::id().to_string())
        .envs(envs.iter().copied())
        .status()
        .with_context(|| format!("could not start `{program}`"))?;
    if !status.success() {
        bail!("`{program} {}` failed with {status}", args.join(" "));
    }
    Ok(())
}

/// A `cargo` command without the variables `cargo run` set for xtask ([`without_cargo_run_vars`]).
pub(crate) fn cargo_command() -> Command {
    let mut command = Command::new("cargo");
    without_cargo_run_vars(&mut command);
    command
}

/// Removes from `command`'s environment what `cargo run` set for xtask itself (its manifest
/// directory, its package's name and version). Build scripts track some of them (ring's
/// `rerun-if-env-changed=CARGO_MANIFEST_DIR`), so a cargo started with them would rebuild ring and
/// everything above it whenever another checkout's xtask ran last — and never share its build
/// with a plain `cargo build`.
pub(crate) fn without_cargo_run_vars(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let Some(text) = name.to_str() else {
            continue;
        };
        let set_by_cargo_run = text.starts_with("CARGO_PKG_")
            || text.starts_with("CARGO_MANIFEST_")
            || matches!(
                text,
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
            );
        if set_by_cargo_run {
            command.env_remove(&name);
        }
    }
}

/// The variable that makes a test fail, instead of skip, when its peer is missing
/// (`metaforge_test_support::peers::require`).
const REQUIRE_PEERS: &str = "METAFORGE_REQUIRE_PEERS";

/// Where a step finds the `metaforge` binary and the scripted phase model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Binaries {
    /// Builds them first (`cargo build -p metaforge-bins`), for the step run on its own.
    Build,
    /// The gate's test builds already left them in the target directory's `debug/`.
    Built,
}
