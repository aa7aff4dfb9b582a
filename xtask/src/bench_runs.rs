//! `cargo xtask bench runs [N]`: the embedded engine on SQLite (crates/app/benches/runs.rs,
//! release profile) — run starts per second, transitions persisted per second, and the time a
//! 20-phase auto-gated flow takes with an instant phase brain (the engine's overhead per phase),
//! beside the run ledger's own append rate for the same transitions. N run starts (default 200).
//!
//! `cargo xtask bench runs --engine temporal [N]`: both engines on that flow in one run
//! (crates/bins/benches/engines.rs, feature `temporal`) — the embedded engine, then a real
//! `temporal server start-dev` with a worker polling — one run at a time (p50 per run and per
//! phase) and N at once (default 20): starts per second, runs and phases per second, and the
//! Temporal/embedded ratios.

use anyhow::{Context, Result, bail};

/// Runs the run-engine benchmark: `args` are what follows `bench runs`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let mut engine = "embedded";
    let mut scale = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--engine" => match rest.next().map(String::as_str) {
                Some(name @ ("embedded" | "temporal")) => engine = name,
                other => bail!("bench runs: --engine takes embedded or temporal, not {other:?}"),
            },
            n if n.parse::<usize>().is_ok() => scale = Some(n.to_owned()),
            other => bail!(
                "bench runs: unknown argument {other:?} (usage: bench runs [--engine embedded|temporal] [N])"
            ),
        }
    }
    let mut cargo: Vec<String> = match engine {
        "temporal" => [
            "bench",
            "--locked",
            "-p",
            "metaforge-bins",
            "--features",
            "temporal",
            "--bench",
            "engines",
        ]
        .map(str::to_owned)
        .to_vec(),
        _ => ["bench", "--locked", "-p", "metaforge-app", "--bench", "runs"]
            .map(str::to_owned)
            .to_vec(),
    };
    if let Some(n) = scale {
        cargo.extend(["--".to_owned(), n]);
    }
    eprintln!("xtask: $ cargo {}", cargo.join(" "));
    let status = crate::cargo_command()
        .args(&cargo)
        .status()
        .context("cannot run cargo bench")?;
    if !status.success() {
        bail!("runs bench failed with {status}");
    }
    Ok(())
}
