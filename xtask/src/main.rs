//! `cargo xtask`: the project's automation, one entry point for CI and developers.
//!
//! Subcommands:
//! - `ci`       — the one local gate: fmt check, clippy `-D warnings`, layering, nextest, doctests, cargo-deny.
//! - `layering` — fails when the pure crates pull IO crates, or an adapter depends on domain/app/another adapter.
//! - `test`     — nextest over the workspace plus doctests (what CI runs after its services are up).
//! - `alerts`   — `promtool check rules` and `promtool test rules` on `deploy/prometheus/`.
//! - `bench`    — throughput benchmarks (`bench stores`).

mod bench;
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
        Some("bench") => bench::bench(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask <ci|layering|test|alerts|fmt|bench>");
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
