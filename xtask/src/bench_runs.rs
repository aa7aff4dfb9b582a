//! `cargo xtask bench runs [N]`: the embedded engine on SQLite (crates/app/benches/runs.rs,
//! release profile) — run starts per second, transitions persisted per second, and the time a
//! 20-phase auto-gated flow takes with an instant phase brain (the engine's overhead per phase),
//! beside the run ledger's own append rate for the same transitions. N run starts (default 200).

use std::process::Command;

use anyhow::{Context, Result, bail};

/// Runs the run-engine benchmark, passing the optional scale through.
pub(crate) fn run(scale: Option<&str>) -> Result<()> {
    let mut args = vec!["bench", "--locked", "-p", "metaforge-app", "--bench", "runs"];
    if let Some(n) = scale {
        if n.parse::<usize>().is_err() {
            bail!("bench runs: N must be a number of run starts, not {n:?}");
        }
        args.extend(["--", n]);
    }
    eprintln!("xtask: $ cargo {}", args.join(" "));
    let status = Command::new("cargo")
        .args(&args)
        .status()
        .context("cannot run cargo bench")?;
    if !status.success() {
        bail!("runs bench failed with {status}");
    }
    Ok(())
}
