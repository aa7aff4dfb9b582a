//! `cargo xtask ci` and its tiers.
//!
//! - `ci --quick`: format, layering, doc-check, clippy and nextest on the default members with
//!   their default features; peers optional (a test whose peer is missing prints its skip).
//! - `ci --changed [--base REF]` / `ci -p NAME…`: the quick tier with the tests narrowed to the
//!   crates a change touches (or the named ones) and the crates that depend on them.
//! - `ci` (what `.ci/run` calls): every check, cheapest first, every peer required. The test
//!   peers install in the background while clippy runs. Each feature set is compiled once for
//!   clippy and once for the tests, and the later steps reuse those builds:
//!   - `workspace`: every member with its default features — what a plain build is;
//!   - `store engines`: plus the store's Kafka bus and crash harness (changes only the store
//!     and the crates above it); every test of the workspace runs on this build;
//!   - `all engines`: plus the binary's Kafka and Temporal engines (changes only `bins`); its
//!     Kafka and Temporal suites, the cluster run, the API fuzz run and the README check run on it.
//!
//! Every step has a budget and the watchdog of [`crate::gate`] aborts the gate past it, naming
//! the step; nextest ends any single test past its own limit (`.config/nextest.toml`).

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Result, bail};

use crate::changed::{self, Affected};
use crate::gate::Gate;
use crate::{REQUIRE_PEERS, api_fuzz, cluster, doc_check, layering, listeners, readme_check, setup};

/// The store's engines that a plain workspace build leaves out.
pub(crate) const STORE_ENGINES: &str =
    "metaforge-adapters-store/kafka,metaforge-adapters-store/crash-harness";

/// Every engine: the store's and the binary's (Kafka run events, Temporal runs).
pub(crate) const ALL_ENGINES: &str = "metaforge-adapters-store/kafka,metaforge-adapters-store/crash-harness,metaforge-bins/kafka,metaforge-bins/temporal";

/// Clippy's arguments after the target selection.
const DENY_WARNINGS: [&str; 3] = ["--", "-D", "warnings"];

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Which tier `ci` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tier {
    Full,
    Quick,
    /// The quick tier narrowed: to what changed against `base`, or to the named crates.
    Narrowed {
        base: Option<String>,
        crates: Vec<String>,
    },
}

fn tier(args: &[String]) -> Result<Tier> {
    let mut tier = Tier::Full;
    let mut base = None;
    let mut crates = Vec::new();
    let mut changed = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => tier = Tier::Quick,
            "--changed" => changed = true,
            "--base" => match args.next() {
                Some(reference) => {
                    base = Some(reference.clone());
                    changed = true;
                }
                None => bail!("ci --base needs a git reference (for example `--base origin/main`)"),
            },
            "-p" | "--package" => match args.next() {
                Some(name) => crates.push(name.clone()),
                None => bail!("ci -p needs a crate name (for example `-p metaforge-domain`)"),
            },
            other => bail!(
                "ci: unknown argument `{other}`; the tiers are `ci`, `ci --quick`, `ci --changed [--base REF]`, `ci -p NAME…`"
            ),
        }
    }
    if changed || !crates.is_empty() {
        if tier == Tier::Quick {
            bail!("ci: `--quick` and `--changed`/`-p` are different tiers; give one");
        }
        return Ok(Tier::Narrowed { base, crates });
    }
    Ok(tier)
}

/// `cargo xtask ci [--quick | --changed [--base REF] | -p NAME…]`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    match tier(args)? {
        Tier::Full => full(),
        Tier::Quick => quick(None),
        Tier::Narrowed { base, crates } => {
            let affected = if crates.is_empty() {
                let base = base.unwrap_or_else(changed::default_base);
                let files = changed::changed_files(&base)?;
                eprintln!("xtask: {} file(s) changed against {base}", files.len());
                changed::affected_by_files(&files)?
            } else {
                changed::affected_by_names(&crates)?
            };
            quick(Some(affected))
        }
    }
}

/// The cheap checks every tier starts with: seconds each, so a format or layering break fails
/// before anything compiles.
fn cheap_checks(gate: &Gate) -> Result<()> {
    gate.cargo("fmt --check", secs(180), &["fmt", "--all", "--", "--check"], &[])?;
    gate.step("layering", secs(180), layering::check)?;
    gate.step("doc-check", secs(180), || doc_check::run(false))
}

/// The quick tier, or (with `affected`) its narrowing.
fn quick(affected: Option<Affected>) -> Result<()> {
    let title = if affected.is_some() {
        "ci --changed"
    } else {
        "ci --quick"
    };
    let gate = Gate::start(title, secs(60 * 60));
    let result = quick_steps(&gate, affected);
    gate.finish(result)
}

fn quick_steps(gate: &Gate, affected: Option<Affected>) -> Result<()> {
    setup::adopt_installed();
    cheap_checks(gate)?;
    let members = default_members()?;
    // The crates to test: all default members, or the affected ones split into default members
    // (tested on the default members' build, so its cache is shared) and the others (xtask,
    // the Temporal adapter), each tested on its own.
    let (on_members, others): (Option<BTreeSet<String>>, BTreeSet<String>) = match affected {
        None | Some(Affected::All) => (None, BTreeSet::new()),
        Some(Affected::Some(crates)) => {
            let (inside, outside) = crates.into_iter().partition(|c| members.contains(c));
            (Some(inside), outside)
        }
    };
    let before = listeners::snapshot();
    let tested = (|| -> Result<()> {
        match &on_members {
            Some(crates) if crates.is_empty() => {
                gate.skip("clippy (default members)", "no default member changed");
                gate.skip("nextest (default members)", "no default member changed");
            }
            _ => {
                let mut clippy = vec!["clippy", "--all-targets", "--locked"];
                clippy.extend(DENY_WARNINGS);
                gate.cargo("clippy (default members)", secs(1800), &clippy, &[])?;
                let filter = on_members.as_ref().map(changed::nextest_filter);
                let mut nextest = vec!["nextest", "run", "--locked", "--no-fail-fast"];
                if let Some(filter) = &filter {
                    nextest.extend(["-E", filter.as_str()]);
                }
                gate.cargo("nextest (default members)", secs(2400), &nextest, &[])?;
            }
        }
        for krate in &others {
            let mut clippy = vec!["clippy", "-p", krate.as_str(), "--all-targets", "--locked"];
            clippy.extend(DENY_WARNINGS);
            gate.cargo(&format!("clippy ({krate})"), secs(1800), &clippy, &[])?;
            gate.cargo(
                &format!("nextest ({krate})"),
                secs(1800),
                &[
                    "nextest",
                    "run",
                    "--locked",
                    "--no-fail-fast",
                    "-p",
                    krate.as_str(),
                ],
                &[],
            )?;
        }
        Ok(())
    })();
    let left = gate.step("no listener left", secs(60), || {
        listeners::check_none_left(&before)
    });
    tested?;
    left
}

/// The default members' package names.
fn default_members() -> Result<BTreeSet<String>> {
    let metadata = cargo_metadata::MetadataCommand::new().no_deps().exec()?;
    let defaults: BTreeSet<&cargo_metadata::PackageId> = metadata.workspace_default_members.iter().collect();
    Ok(metadata
        .packages
        .iter()
        .filter(|p| defaults.contains(&p.id))
        .map(|p| p.name.to_string())
        .collect())
}

/// The full gate: what `.ci/run` calls.
fn full() -> Result<()> {
    let gate = Gate::start("ci", secs(80 * 60));
    let result = full_steps(&gate);
    gate.finish(result)
}

fn full_steps(gate: &Gate) -> Result<()> {
    // The peers install (apt, pip, npm: the network, not the cores) while the checks and clippy
    // run; the first step that needs them waits for it.
    let setup = std::thread::spawn(|| {
        let started = std::time::Instant::now();
        setup::ensure().map(|()| started.elapsed())
    });
    cheap_checks(gate)?;
    clippy(gate, "clippy (workspace)", None)?;
    clippy(gate, "clippy (store engines)", Some(STORE_ENGINES))?;
    clippy(gate, "clippy (all engines)", Some(ALL_ENGINES))?;
    gate.step("wait for the test peers' setup", secs(1200), || {
        match setup.join() {
            Ok(Ok(took)) => {
                eprintln!(
                    "xtask: the test peers' setup took {}s in the background",
                    took.as_secs()
                );
                Ok(())
            }
            Ok(Err(err)) => Err(err.context("setting up the test peers")),
            Err(_) => bail!("the setup thread panicked"),
        }
    })?;
    gate.step("alerts (promtool)", secs(120), alerts)?;
    // Every peer is installed here, so a test that would skip for a missing peer fails instead;
    // and no server a test started may outlive the run.
    let peers = [(REQUIRE_PEERS, "1")];
    let before = listeners::snapshot();
    let tested = (|| -> Result<()> {
        for (name, budget, args) in TEST_STEPS {
            gate.cargo(name, secs(budget), args, &peers)?;
        }
        // The cluster run, smaller than `cargo xtask cluster`'s default so the gate stays
        // short: 300 raced proposals with gateway B SIGKILLed every 10 s.
        let script = ["300", "--kill-every", "10"].map(str::to_owned);
        gate.cargo(
            "cluster run (300 proposals)",
            secs(1200),
            &cluster::cargo_args(&script),
            &peers,
        )
    })();
    let left = gate.step("no listener left", secs(60), || {
        listeners::check_none_left(&before)
    });
    tested?;
    left?;
    // The all-engines build above left the binary (and the store build the scripted model).
    let built = crate::Binaries::Built;
    gate.step("api fuzz (schemathesis)", secs(900), || {
        api_fuzz::run("50", built)
    })?;
    gate.step("readme check", secs(900), || readme_check::run(built))?;
    // Advisories need the advisory database from the network, which these machines cannot reach;
    // licences, bans and sources are checked offline.
    gate.cargo(
        "cargo-deny (licences, bans, sources)",
        secs(600),
        &["deny", "--locked", "check", "licenses", "bans", "sources"],
        &[],
    )
}

/// Clippy `-D warnings` over the whole workspace, every target, with `features` added.
fn clippy(gate: &Gate, name: &str, features: Option<&str>) -> Result<()> {
    let mut args = vec!["clippy", "--workspace", "--all-targets", "--locked"];
    if let Some(features) = features {
        args.extend(["--features", features]);
    }
    args.extend(DENY_WARNINGS);
    gate.cargo(name, secs(1800), &args, &[])
}

/// Checks the Prometheus alert rules and runs their unit tests with promtool.
pub(crate) fn alerts() -> Result<()> {
    crate::run("promtool", &["check", "rules", "deploy/prometheus/alerts.yaml"])?;
    crate::run(
        "promtool",
        &["test", "rules", "deploy/prometheus/alerts_test.yaml"],
    )
}

/// The full gate's test steps, each a name, a budget in seconds and cargo's arguments: every
/// test on the store engines' build, the Kafka and Temporal suites on the all-engines build, and
/// the doctests.
const TEST_STEPS: [(&str, u64, &[&str]); 3] = [
    (
        "nextest (store engines, every test)",
        2400,
        &[
            "nextest",
            "run",
            "--workspace",
            "--locked",
            "--no-fail-fast",
            "--features",
            STORE_ENGINES,
        ],
    ),
    (
        "nextest (all engines: Kafka, Temporal)",
        1200,
        &[
            "nextest",
            "run",
            "--workspace",
            "--locked",
            "--no-fail-fast",
            "--features",
            ALL_ENGINES,
            "--test",
            "run_events_kafka",
            "--test",
            "runs_temporal",
        ],
    ),
    (
        "doctests (store engines)",
        900,
        &[
            "test",
            "--workspace",
            "--locked",
            "--doc",
            "--features",
            STORE_ENGINES,
        ],
    ),
];

/// `cargo xtask test`: the full gate's test steps without the rest.
pub(crate) fn test() -> Result<()> {
    for (_, _, args) in TEST_STEPS {
        crate::run("cargo", args)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Tier, tier};

    fn parse(args: &[&str]) -> Result<Tier, String> {
        tier(&args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>()).map_err(|e| e.to_string())
    }

    #[test]
    fn each_tier_has_one_spelling_and_a_wrong_one_names_the_tiers() {
        assert_eq!(parse(&[]), Ok(Tier::Full));
        assert_eq!(parse(&["--quick"]), Ok(Tier::Quick));
        assert_eq!(
            parse(&["--changed"]),
            Ok(Tier::Narrowed {
                base: None,
                crates: vec![]
            })
        );
        assert_eq!(
            parse(&["--changed", "--base", "HEAD~3"]),
            Ok(Tier::Narrowed {
                base: Some("HEAD~3".to_owned()),
                crates: vec![]
            })
        );
        assert_eq!(
            parse(&["-p", "metaforge-domain"]),
            Ok(Tier::Narrowed {
                base: None,
                crates: vec!["metaforge-domain".to_owned()]
            })
        );
        assert!(parse(&["--fast"]).unwrap_err().contains("ci --quick"));
        assert!(parse(&["-p"]).unwrap_err().contains("crate name"));
        assert!(
            parse(&["--quick", "--changed"])
                .unwrap_err()
                .contains("different tiers")
        );
    }
}
