//! `cargo xtask`: the project's automation, one entry point for CI and developers.
//!
//! Subcommands:
//! - `ci`       — the one local gate: fmt check, clippy `-D warnings`, layering, nextest, doctests, cargo-deny.
//! - `layering` — fails when the pure crates pull IO crates, or an adapter depends on domain/app/another adapter.
//! - `test`     — nextest over the workspace plus doctests (what CI runs after its services are up).
//! - `alerts`   — `promtool check rules` and `promtool test rules` on `deploy/prometheus/`.
//! - `bench`    — throughput benchmarks (`bench stores`, `bench pipeline`, `bench gateway`, `bench mcp`).
//! - `api-fuzz` — schemathesis against a running gateway's `/openapi.json` (zero failures to pass).
//! - `e2e --real-model` — opt-in real inference against llama-cpp-python serving SmolLM2.

mod api_fuzz;
mod bench;
mod bench_gateway;
mod bench_kit;
mod bench_mcp;
mod bench_pipeline;
mod e2e;
mod layering;

use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("layering") => layering::check(),
        Some("test") => test(),
        Some("fmt") => run("cargo", &["fmt", "--all"]),
        Some("alerts") => alerts(),
        Some("api-fuzz") => api_fuzz::run(args.get(1).map_or("50", String::as_str)),
        Some("e2e") => e2e::run(&args[1..]),
        Some("bench") if args.get(1).map(String::as_str) == Some("pipeline") => bench_pipeline::run(),
        Some("bench") if args.get(1).map(String::as_str) == Some("gateway") => bench_gateway::run(),
        Some("bench") if args.get(1).map(String::as_str) == Some("mcp") => bench_mcp::run(),
        Some("bench") if args.get(1).map(String::as_str) == Some("upstream") => {
            let port = args.get(2).and_then(|p| p.parse().ok()).unwrap_or(0);
            bench_kit::serve_upstream(port)
        }
        Some("bench") => bench::bench(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <ci|layering|test|alerts|api-fuzz|fmt|bench <stores|pipeline|gateway|mcp|upstream PORT>|e2e --real-model>"
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
    eprintln!("xtask: $ {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .status()
        .with_context(|| format!("could not start `{program}`"))?;
    if !status.success() {
        bail!("`{program} {}` failed with {status}", args.join(" "));
    }
    Ok(())
}

fn ci() -> Result<()> {
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
    layering::check()?;
    alerts()?;
    test()?;
    api_fuzz::run("50")?;
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

fn test() -> Result<()> {
    run(
        "cargo",
        &["nextest", "run", "--workspace", "--locked", "--no-fail-fast"],
    )?;
    // The store engines behind features: the FalkorDB twin and Kafka bus contract suites start
    // their real servers themselves; the crash loop and the two-process race need the helper bin.
    run(
        "cargo",
        &[
            "nextest",
            "run",
            "--locked",
            "--no-fail-fast",
            "-p",
            "metaforge-adapters-store",
            "--features",
            "falkordb,kafka,crash-harness",
        ],
    )?;
    run("cargo", &["test", "--workspace", "--locked", "--doc"])?;
    Ok(())
}
