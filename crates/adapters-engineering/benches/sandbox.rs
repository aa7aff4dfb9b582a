//! `cargo xtask bench sandbox`: what the per-call sandbox costs an engineering tool call. The
//! same ngspice operating point (a 10k/10k divider) is run N times through the tool server's
//! runner in its sandbox (`prlimit` + `bwrap`: namespaces, read-only root, hidden key stores,
//! scratch directory) and N times as a plain child of the same runner, interleaved, in one
//! process; the plain run is the ceiling (nothing can call ngspice for less). Prints the median
//! and 95th percentile of each, the median overhead and the ratio.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use metaforge_adapters_engineering::runner::Runner;
use metaforge_sandbox::ResourceLimits;

const DECK: &str =
    "divider\nV1 in 0 DC 5\nR1 in out 10k\nR2 out 0 10k\n.control\nop\nprint all\n.endc\n.end\n";

fn runner(sandboxed: bool) -> Runner {
    Runner::new(
        PathBuf::from("/usr/bin/ngspice"),
        ResourceLimits::default(),
        Duration::from_secs(60),
        sandboxed,
        Some("/usr/bin:/bin"),
        &[PathBuf::from("/root")],
    )
    .unwrap_or_else(|e| {
        eprintln!("bench sandbox: {e}");
        std::process::exit(2);
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn main() {
    if !std::path::Path::new("/usr/bin/ngspice").exists() {
        eprintln!("bench sandbox: needs ngspice (apt-get install ngspice) and bubblewrap");
        std::process::exit(2);
    }
    #[expect(
        clippy::disallowed_methods,
        reason = "a bench binary reads its own knob; it has no Settings"
    )]
    let calls: usize = std::env::var("METAFORGE_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| {
            eprintln!("bench sandbox: {e}");
            std::process::exit(1);
        });
    let sandboxed = runner(true);
    let plain = runner(false);
    let args = ["-b".to_owned(), "circuit.cir".to_owned()];
    let mut times = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    runtime.block_on(async {
        // One warm-up each: the page cache, not the sandbox, pays for the first start.
        for runner in [&sandboxed, &plain] {
            let _ = runner.run(&[("circuit.cir", DECK)], &args, &[]).await;
        }
        for _ in 0..calls {
            for (runner, into) in [(&sandboxed, &mut times.0), (&plain, &mut times.1)] {
                let started = Instant::now();
                let out = runner.run(&[("circuit.cir", DECK)], &args, &[]).await;
                let elapsed = started.elapsed();
                match out {
                    Ok(out) if out.output.contains("out = 2.500000e+00") => into.push(elapsed),
                    Ok(out) => {
                        eprintln!("bench sandbox: a run gave no operating point:\n{}", out.output);
                        std::process::exit(1);
                    }
                    Err(e) => {
                        eprintln!("bench sandbox: {e}");
                        std::process::exit(1);
                    }
                }
            }
        }
    });
    times.0.sort();
    times.1.sort();
    let (s50, p50) = (percentile(&times.0, 0.5), percentile(&times.1, 0.5));
    let (s95, p95) = (percentile(&times.0, 0.95), percentile(&times.1, 0.95));
    println!("| ngspice op, {calls} calls each | median | p95 |");
    println!("|---|---|---|");
    println!(
        "| sandboxed (prlimit + bwrap) | {:.2} ms | {:.2} ms |",
        ms(s50),
        ms(s95)
    );
    println!(
        "| plain child (ceiling) | {:.2} ms | {:.2} ms |",
        ms(p50),
        ms(p95)
    );
    println!(
        "| sandbox overhead | {:.2} ms | ratio {:.2}× |",
        ms(s50) - ms(p50),
        ms(s50) / ms(p50)
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
