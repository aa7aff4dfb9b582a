//! `cargo xtask bench agent`: the agent loop's overhead per turn (crates/app/benches/agent.rs,
//! release profile) over a scripted upstream and server-everything, beside the same model and
//! tool calls made directly, in one run.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

/// Runs the agent benchmark with server-everything from the test tools.
pub(crate) fn run() -> Result<()> {
    crate::setup::ensure()?;
    let node_dir = crate::setup::tool_env()
        .iter()
        .find(|(k, _)| k == "METAFORGE_NODE_DIR")
        .map_or_else(
            || PathBuf::from("/var/tmp/metaforge-tools/node"),
            |(_, v)| PathBuf::from(v),
        );
    let everything = node_dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !everything.exists() {
        bail!(
            "server-everything is not installed at {}: run `cargo xtask setup`",
            everything.display()
        );
    }
    let status = crate::cargo_command()
        .args(["bench", "-p", "metaforge-app", "--bench", "agent"])
        .env("METAFORGE_BENCH_SERVER_EVERYTHING", &everything)
        .status()
        .context("cannot run cargo bench")?;
    if !status.success() {
        bail!("agent bench failed with {status}");
    }
    Ok(())
}
