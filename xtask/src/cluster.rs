//! `cargo xtask cluster [N] [--kill-every SECONDS] [--runs R] [--racers K]` (issue 20): the
//! scripted cluster run of `crates/bins/tests/cluster.rs` — PostgreSQL, Temporal, the tansu
//! broker, FalkorDB, two gateways, one sidecar and one worker on loopback; the README
//! walk-through through both gateways alternately; N proposals (default 1,000) each raced by K
//! decisions (default 20) across the two while gateway B is SIGKILLed every 30 s and the worker
//! once mid-phase; then the audit and its table. Every peer is required (a missing one fails),
//! and everything is torn down at the end.

use anyhow::Result;

use std::time::Duration;

use crate::gate::Gate;
use crate::{REQUIRE_PEERS, setup};

/// The cargo arguments that build and run the cluster script, `script` passed on to it: the
/// workspace with every engine, the build `cargo xtask ci` tests the engines on, so the gate
/// compiles nothing for it.
pub(crate) fn cargo_args(script: &[String]) -> Vec<&str> {
    let mut args = vec![
        "test",
        "--workspace",
        "--locked",
        "--features",
        crate::ci::ALL_ENGINES,
        "--test",
        "cluster",
        "--",
    ];
    args.extend(script.iter().map(String::as_str));
    args
}

/// `cargo xtask cluster …`: installs what is missing, then runs the script with `script` as a
/// gated step (an hour at most: a script stuck after a failure is ended with every server it
/// started, and the step named).
pub(crate) fn run(script: &[String]) -> Result<()> {
    setup::ensure()?;
    let gate = Gate::start("cluster", Duration::from_secs(60 * 60));
    let result = gate.cargo(
        "cluster run",
        Duration::from_secs(60 * 60),
        &cargo_args(script),
        &[(REQUIRE_PEERS, "1")],
    );
    gate.finish(result)
}
