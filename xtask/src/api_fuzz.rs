//! `cargo xtask api-fuzz`: schemathesis against the OpenAPI document of a running gateway.
//!
//! Starts `metaforge gateway` on a free loopback port over a scratch `METAFORGE_HOME`, runs every
//! schemathesis check (on every operation but the two long-lived event streams) except
//! `positive_data_acceptance` (a schema-valid flow that breaks an
//! invariant is rightly a 422 — the invariants are not expressible in JSON Schema), and stops the
//! gateway. Passes only with zero failures: no 5xx, no schema violations, no auth leaks.

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use cargo_metadata::MetadataCommand;

use crate::Binaries;

/// The key the fuzzing gateway accepts.
const KEY: &str = "sk-schemathesis-ci";

/// Builds the binary (unless `binaries` says it is built), starts the gateway, runs
/// schemathesis, stops the gateway.
pub(crate) fn run(max_examples: &str, binaries: Binaries) -> Result<()> {
    if binaries == Binaries::Build {
        crate::run("cargo", &["build", "--locked", "-p", "metaforge-bins"])?;
    }
    let target = MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata failed")?
        .target_directory;
    let binary = target.join("debug").join("metaforge");
    let home = std::env::temp_dir().join(format!("metaforge-api-fuzz-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    // A light fixed-answer OpenAI-compatible upstream serves the chat role, so chat turns and
    // chat completions are fuzzed through the whole path (a gateway without a model answers them
    // 503, which schemathesis rightly counts as a server error).
    let upstream = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    std::thread::spawn(move || crate::bench_kit::serve_upstream(upstream));
    let mut gateway = Command::new(binary.as_std_path())
        .args(["gateway", "--bind", "127.0.0.1:0"])
        .env("METAFORGE_HOME", &home)
        .env("OPENAI_API_KEY", "sk-schemathesis-upstream")
        .env(
            "HARNESS_OPENAI_BASE_URL",
            format!("http://127.0.0.1:{upstream}/v1"),
        )
        .env("METAFORGE_ROUTE_CHAT", "openai:gpt-4o-mini")
        .env("METAFORGE_CREDENTIALS_PATH", home.join("credentials.json"))
        .env("METAFORGE_GATEWAY_API_KEY", format!("fuzz:{KEY}"))
        .env("METAFORGE_GATEWAY_RATE_LIMIT_PER_MINUTE", "0")
        // schemathesis probes auth with wrong keys on purpose: 401 every time, never 429.
        .env("METAFORGE_GATEWAY_AUTH_FAILURES_PER_MINUTE", "0")
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {binary}"))?;
    let banner = match crate::gate::lines_within(
        gateway.stdout.take(),
        1,
        Duration::from_secs(60),
        "the fuzzed gateway's banner",
    ) {
        Ok(lines) => lines.concat(),
        Err(err) => {
            let _ = gateway.kill();
            let _ = gateway.wait();
            return Err(err);
        }
    };
    let addr = banner
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned);
    let result = match addr {
        Some(addr) => crate::run(
            "schemathesis",
            &[
                "run",
                &format!("http://{addr}/openapi.json"),
                "-H",
                &format!("X-API-Key: {KEY}"),
                "--checks",
                "all",
                "--exclude-checks",
                "positive_data_acceptance",
                // The two long-lived event streams (a run's notices, a thread's turns) stay open
                // while their run or thread lives, and schemathesis reads a stream to its end:
                // each call would wait for the run to finish. Their process tests cover them.
                "--exclude-path-regex",
                "/(events|stream)$",
                "--max-examples",
                max_examples,
                "--seed",
                "20261130",
                "--no-color",
            ],
        ),
        None => Err(anyhow::anyhow!("the gateway printed no address: {banner:?}")),
    };
    let _ = gateway.kill();
    let _ = gateway.wait();
    let _ = std::fs::remove_dir_all(&home);
    if let Err(err) = result {
        bail!("api fuzzing failed: {err:#}");
    }
    Ok(())
}
