//! Which workspace crates a change touches, and which crates depend on them: the narrowing of
//! `cargo xtask ci --changed` (from `git diff` against a base) and `ci -p NAME`.
//!
//! A changed file belongs to the crate whose directory holds it (the deepest one); a change to
//! a file no crate holds but that every build reads (`Cargo.toml`, `Cargo.lock`,
//! `rust-toolchain.toml`, `.cargo/`, `clippy.toml`, `.config/`) or that many crates' tests read
//! (`fixtures/`) touches every crate. Other files outside the crates (docs, deploy) touch none; the cheap checks still run. A change
//! only to a crate's `tests/`, `benches/` or `examples/` touches that crate alone: no other crate
//! compiles them.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use anyhow::{Context, Result, bail};
use cargo_metadata::{Metadata, MetadataCommand};

/// Files outside every crate that still change every build, or that tests of many crates read
/// (the rule tables and flow templates under `fixtures/`).
const BUILD_WIDE: &[&str] = &[
    "fixtures/",
    "Cargo.toml",
    "Cargo.lock",
    "rust-toolchain.toml",
    "clippy.toml",
    "rustfmt.toml",
    ".cargo/",
    ".config/",
];

/// A crate's directories that only the crate's own test, bench and example targets compile.
const OWN_TARGETS: &[&str] = &["tests/", "benches/", "examples/"];

/// What a narrowed gate tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Affected {
    /// Every crate (a build-wide file changed).
    All,
    /// These crates (package names), the changed ones and their dependents in the workspace.
    Some(BTreeSet<String>),
}

/// The files changed against `base` (committed since it, staged, unstaged and untracked).
pub(crate) fn changed_files(base: &str) -> Result<Vec<String>> {
    let mut files = BTreeSet::new();
    for args in [
        &["diff", "--name-only", base][..],
        &["ls-files", "--others", "--exclude-standard"][..],
    ] {
        let output = Command::new("git")
            .args(args)
            .output()
            .with_context(|| format!("could not run git {}", args.join(" ")))?;
        if !output.status.success() {
            bail!(
                "`git {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        files.extend(String::from_utf8_lossy(&output.stdout).lines().map(str::to_owned));
    }
    Ok(files.into_iter().collect())
}

/// The base a `--changed` gate compares with: the one given, else `origin/main` when it
/// exists, else `HEAD` (what is not committed yet).
pub(crate) fn default_base() -> String {
    let has_origin = Command::new("git")
        .args(["rev-parse", "--verify", "--quiet", "origin/main"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_origin {
        "origin/main".to_owned()
    } else {
        "HEAD".to_owned()
    }
}

/// The workspace's crates: name → directory relative to the root, and name → the workspace
/// crates it depends on (normal, dev and build dependencies alike).
struct Graph {
    dirs: BTreeMap<String, String>,
    depends_on: BTreeMap<String, BTreeSet<String>>,
}

fn graph(metadata: &Metadata) -> Graph {
    let root = metadata.workspace_root.as_str();
    let members: BTreeSet<&str> = metadata
        .workspace_packages()
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    let mut dirs = BTreeMap::new();
    let mut depends_on = BTreeMap::new();
    for package in metadata.workspace_packages() {
        let dir = package
            .manifest_path
            .parent()
            .map(|d| {
                d.as_str()
                    .strip_prefix(root)
                    .unwrap_or(d.as_str())
                    .trim_start_matches('/')
                    .to_owned()
            })
            .unwrap_or_default();
        dirs.insert(package.name.to_string(), dir);
        let deps: BTreeSet<String> = package
            .dependencies
            .iter()
            .filter(|d| members.contains(d.name.as_str()))
            .map(|d| d.name.clone())
            .collect();
        depends_on.insert(package.name.to_string(), deps);
    }
    Graph { dirs, depends_on }
}

/// The crates `files` touch, with every workspace crate that depends on them.
pub(crate) fn affected_by_files(files: &[String]) -> Result<Affected> {
    let metadata = MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata failed")?;
    Ok(affected(&graph(&metadata), files, &BTreeSet::new()))
}

/// The named crates with every workspace crate that depends on them; an unknown name fails.
pub(crate) fn affected_by_names(names: &[String]) -> Result<Affected> {
    let metadata = MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata failed")?;
    let graph = graph(&metadata);
    let unknown: Vec<&String> = names.iter().filter(|n| !graph.dirs.contains_key(*n)).collect();
    if !unknown.is_empty() {
        bail!(
            "no workspace crate named {unknown:?}; the crates are {:?}",
            graph.dirs.keys().collect::<Vec<_>>()
        );
    }
    Ok(affected(&graph, &[], &names.iter().cloned().collect()))
}

fn affected(graph: &Graph, files: &[String], named: &BTreeSet<String>) -> Affected {
    // The crates whose library changed (their dependents are touched too), and the crates of
    // which only tests, benches or examples changed (nothing else compiles them).
    let mut touched = named.clone();
    let mut only_own_targets = BTreeSet::new();
    for file in files {
        if BUILD_WIDE
            .iter()
            .any(|wide| file == wide || (wide.ends_with('/') && file.starts_with(wide)))
        {
            return Affected::All;
        }
        let owner = graph
            .dirs
            .iter()
            .filter(|(_, dir)| !dir.is_empty() && (file.starts_with(&format!("{dir}/")) || file == *dir))
            .max_by_key(|(_, dir)| dir.len());
        if let Some((name, dir)) = owner {
            let inside = file
                .strip_prefix(dir.as_str())
                .unwrap_or(file)
                .trim_start_matches('/');
            if OWN_TARGETS.iter().any(|own| inside.starts_with(own)) {
                only_own_targets.insert(name.clone());
            } else {
                touched.insert(name.clone());
            }
        }
    }
    // Close over the dependents: a crate that depends on a touched crate is touched.
    loop {
        let more: BTreeSet<String> = graph
            .depends_on
            .iter()
            .filter(|(name, deps)| !touched.contains(*name) && deps.iter().any(|d| touched.contains(d)))
            .map(|(name, _)| name.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        touched.extend(more);
    }
    touched.extend(only_own_targets);
    Affected::Some(touched)
}

/// A nextest filter expression selecting the tests of `crates`.
pub(crate) fn nextest_filter(crates: &BTreeSet<String>) -> String {
    crates
        .iter()
        .map(|name| format!("package({name})"))
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::{Affected, Graph, affected, nextest_filter};

    fn graph() -> Graph {
        let dirs = [
            ("metaforge-ports", "crates/ports"),
            ("metaforge-domain", "crates/domain"),
            ("metaforge-app", "crates/app"),
            ("metaforge-bins", "crates/bins"),
            ("xtask", "xtask"),
        ]
        .into_iter()
        .map(|(n, d)| (n.to_owned(), d.to_owned()))
        .collect();
        let edges: &[(&str, &[&str])] = &[
            ("metaforge-ports", &[]),
            ("metaforge-domain", &["metaforge-ports"]),
            ("metaforge-app", &["metaforge-domain", "metaforge-ports"]),
            ("metaforge-bins", &["metaforge-app"]),
            ("xtask", &[]),
        ];
        let depends_on: BTreeMap<String, BTreeSet<String>> = edges
            .iter()
            .map(|(n, deps)| ((*n).to_owned(), deps.iter().map(|d| (*d).to_owned()).collect()))
            .collect();
        Graph { dirs, depends_on }
    }

    fn some(names: &[&str]) -> Affected {
        Affected::Some(names.iter().map(|n| (*n).to_owned()).collect())
    }

    #[test]
    fn a_change_touches_its_crate_and_every_dependent_and_build_wide_files_touch_all() {
        let table: &[(&[&str], Affected)] = &[
            (
                &["crates/domain/src/rules.rs"],
                some(&["metaforge-domain", "metaforge-app", "metaforge-bins"]),
            ),
            (&["crates/bins/tests/it/main.rs"], some(&["metaforge-bins"])),
            (&["crates/domain/tests/it/rules.rs"], some(&["metaforge-domain"])),
            (
                &["crates/domain/benches/b.rs", "crates/ports/examples/e.rs"],
                some(&["metaforge-domain", "metaforge-ports"]),
            ),
            (
                &["crates/domain/Cargo.toml"],
                some(&["metaforge-domain", "metaforge-app", "metaforge-bins"]),
            ),
            (&["xtask/src/gate.rs"], some(&["xtask"])),
            (&["docs/ARCHITECTURE.md", "README.md"], some(&[])),
            (
                &["crates/ports/src/lib.rs"],
                some(&[
                    "metaforge-ports",
                    "metaforge-domain",
                    "metaforge-app",
                    "metaforge-bins",
                ]),
            ),
            (&["Cargo.lock"], Affected::All),
            (&[".config/nextest.toml"], Affected::All),
            (&["fixtures/rules/mcp_servers_file.json"], Affected::All),
            (&["crates/domainx/src/lib.rs"], some(&[])),
        ];
        for (files, expected) in table {
            let files: Vec<String> = files.iter().map(|f| (*f).to_owned()).collect();
            assert_eq!(
                &affected(&graph(), &files, &BTreeSet::new()),
                expected,
                "{files:?}"
            );
        }
    }

    #[test]
    fn the_filter_names_each_crate_as_a_package() {
        let crates: BTreeSet<String> = ["a", "b"].iter().map(|n| (*n).to_owned()).collect();
        assert_eq!(nextest_filter(&crates), "package(a) | package(b)");
    }
}
