//! `cargo xtask bench sandbox`: what the per-call sandbox costs an engineering tool call
//! (crates/adapters-engineering/benches/sandbox.rs, release profile): the same ngspice run in its
//! sandbox and as a plain child, interleaved in one run.

use anyhow::{Context, Result, bail};

/// Runs the sandbox benchmark with the programs the setup installs.
pub(crate) fn run() -> Result<()> {
    crate::setup::ensure()?;
    let status = crate::cargo_command()
        .args([
            "bench",
            "-p",
            "metaforge-adapters-engineering",
            "--bench",
            "sandbox",
        ])
        .status()
        .context("cannot run cargo bench")?;
    if !status.success() {
        bail!("sandbox bench failed with {status}");
    }
    Ok(())
}
