//! The layering check: the dependency arrows of `docs/ARCHITECTURE.md`, enforced.
//!
//! The rules:
//! 1. The normal (non-dev) dependency tree of `metaforge-domain` and `metaforge-ports` holds none of
//!    the IO crates in [`FORBIDDEN_IN_PURE`], with default features and with all features.
//! 2. An adapter crate (`metaforge-adapters-*`) depends on no other workspace crate but `metaforge-ports`
//!    and the wire contracts ([`CONTRACT_CRATE`]) — except the engines in [`ADAPTERS_ON_DOMAIN`],
//!    which may also depend on `metaforge-domain`.
//! 3. A service crate ([`SERVICE_CRATES`]) depends on no workspace crate but the domain, the ports
//!    and other service crates, and its normal tree (default features) holds no HTTP framework
//!    ([`FORBIDDEN_IN_SERVICES`]).
//! 4. A door crate ([`DOOR_CRATES`]: the gateway, the sidecar) depends on the services, the domain,
//!    the ports and the wire contracts only: never on an adapter and never on the other door.
//! 5. The wire contracts ([`CONTRACT_CRATE`]) are pure (rule 1) and depend on the domain and the
//!    ports only, so the gateway that serves them and the clients that call it share them
//!    without either one's machinery. Services may depend on them too (their default build holds
//!    no utoipa: the schemas are behind the contracts' `openapi` feature).
//! 6. A public type name (`pub struct`, `pub enum`, `pub trait` in a crate's `src/`) is defined in
//!    one workspace crate only (the test doubles aside), so a shape has one home. The names
//!    defined twice today are listed in [`KNOWN_DUPLICATE_TYPES`]; a new one fails, and so does a
//!    listed one that is no longer defined twice (the list only shrinks).

use std::process::Command;

use anyhow::{Context, Result, bail};
use cargo_metadata::{DependencyKind, MetadataCommand};

/// Crates whose presence in the pure crates' tree means IO leaked into the core.
const FORBIDDEN_IN_PURE: &[&str] = &[
    "tokio",
    "hyper",
    "reqwest",
    "sqlx",
    "rmcp",
    "rdkafka",
    "temporalio",
    "mio",
];

/// Crates that must stay pure.
const PURE_CRATES: &[&str] = &["metaforge-domain", "metaforge-ports", CONTRACT_CRATE];

/// The gateway's public wire contracts (request and response bodies).
const CONTRACT_CRATE: &str = "metaforge-api";

/// Adapters that drive the domain's rules themselves and so may depend on `metaforge-domain`
/// (never on a service, a door or another adapter): the Temporal workflow is a second driver of
/// the run reducer, and calling it is how the two engines cannot drift ("one rule, one place").
const ADAPTERS_ON_DOMAIN: &[&str] = &["metaforge-adapters-temporal"];

/// Leaf libraries with no workspace dependency that adapters may use (the tool-server sandbox).
const LEAF_CRATES: &[&str] = &["metaforge-sandbox"];

/// Public type names defined in two crates that are allowed to stay so for now (empty: every public
/// type name has one home; a name listed here fails once it has one).
const KNOWN_DUPLICATE_TYPES: &[&str] = &[];

/// Crates whose public types may repeat a name (test doubles stand in for the real thing).
const TYPE_NAME_EXEMPT: &[&str] = &["test-support"];

/// Service crates: the use cases over the rules and the ports, composed by the binary.
const SERVICE_CRATES: &[&str] = &["metaforge-agent", "metaforge-app"];

/// Door crates: how people and harnesses reach the services (HTTP, MCP).
const DOOR_CRATES: &[&str] = &["metaforge-gateway", "metaforge-sidecar"];

/// Crates whose presence in a service crate's tree means a door's transport leaked into the
/// use cases (HTTP servers and their layers, the API documentation, the rate limiter) or an
/// adapter's engine did.
const FORBIDDEN_IN_SERVICES: &[&str] = &[
    "axum",
    "hyper",
    "tower-http",
    "utoipa",
    "utoipa-axum",
    "governor",
    "reqwest",
    "sqlx",
    "rmcp",
    "rdkafka",
    "temporalio-sdk",
];

/// Runs the layering rules and reports every breach before failing.
pub(crate) fn check() -> Result<()> {
    let mut breaches = Vec::new();
    for krate in PURE_CRATES {
        for features in [&[][..], &["--all-features"][..]] {
            for name in normal_tree(krate, features)? {
                if FORBIDDEN_IN_PURE
                    .iter()
                    .any(|f| name == *f || name.starts_with(&format!("{f}-")))
                {
                    let how = if features.is_empty() {
                        "default features"
                    } else {
                        "all features"
                    };
                    breaches.push(format!("{krate} ({how}) depends on `{name}`, an IO crate"));
                }
            }
        }
    }
    for krate in SERVICE_CRATES {
        for name in normal_tree(krate, &[])? {
            if FORBIDDEN_IN_SERVICES.contains(&name.as_str()) {
                breaches.push(format!(
                    "{krate} depends on `{name}`: a service crate holds no HTTP framework or engine (that is a door's or an adapter's)"
                ));
            }
        }
    }
    breaches.extend(adapter_breaches()?);
    breaches.extend(type_name_breaches(std::path::Path::new("crates"))?);
    breaches.sort();
    breaches.dedup();
    if breaches.is_empty() {
        eprintln!(
            "xtask: layering ok ({} pure crates; adapters on ports and the wire contracts only; {} service crates on domain, ports, the wire contracts and services, no HTTP framework; {} door crates on services, never an adapter or each other; the wire contracts on domain and ports only; one home per public type name, {} known duplicates left)",
            PURE_CRATES.len(),
            SERVICE_CRATES.len(),
            DOOR_CRATES.len(),
            KNOWN_DUPLICATE_TYPES.len()
        );
        return Ok(());
    }
    for breach in &breaches {
        eprintln!("layering: {breach}");
    }
    bail!("{} layering breach(es)", breaches.len())
}

/// Package names in the normal dependency tree of `krate`.
fn normal_tree(krate: &str, extra: &[&str]) -> Result<Vec<String>> {
    let mut args = vec![
        "tree", "-p", krate, "-e", "normal", "--prefix", "none", "--format", "{p}",
    ];
    args.extend_from_slice(extra);
    let out = Command::new("cargo")
        .args(&args)
        .output()
        .context("could not run cargo tree")?;
    if !out.status.success() {
        bail!(
            "cargo tree -p {krate} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect())
}

/// Adapters that depend on a workspace crate other than the ports, service crates that depend
/// on one other than the domain, the ports and the services, and door crates that depend on an
/// adapter or on each other.
fn adapter_breaches() -> Result<Vec<String>> {
    let metadata = MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata failed")?;
    let mut breaches = Vec::new();
    for package in metadata.workspace_packages() {
        for dep in &package.dependencies {
            if !dep.name.starts_with("metaforge-") || dep.kind != DependencyKind::Normal {
                continue;
            }
            if let Some(why) = arrow_breach(&package.name, &dep.name) {
                breaches.push(format!("{} depends on `{}`: {why}", package.name, dep.name));
            }
        }
    }
    Ok(breaches)
}

/// Why workspace crate `from` may not depend on workspace crate `to`; `None` when the arrow is
/// allowed (or `from` is in no layer these rules govern).
fn arrow_breach(from: &str, to: &str) -> Option<&'static str> {
    let below_doors =
        ["metaforge-domain", "metaforge-ports", CONTRACT_CRATE].contains(&to) || SERVICE_CRATES.contains(&to);
    if from.starts_with("metaforge-adapters-") {
        let allowed = to == "metaforge-ports"
            || to == CONTRACT_CRATE
            || LEAF_CRATES.contains(&to)
            || (to == "metaforge-domain" && ADAPTERS_ON_DOMAIN.contains(&from));
        (!allowed).then_some("adapters may depend on metaforge-ports and metaforge-api only")
    } else if SERVICE_CRATES.contains(&from) {
        (!below_doors).then_some(
            "a service crate may depend on metaforge-domain, metaforge-ports, metaforge-api and other service crates only",
        )
    } else if DOOR_CRATES.contains(&from) {
        match (below_doors, DOOR_CRATES.contains(&to)) {
            (true, _) => None,
            (false, true) => Some("the gateway and the sidecar never depend on each other"),
            (false, false) => Some(
                "a door crate may depend on the services, metaforge-domain, metaforge-ports and metaforge-api only",
            ),
        }
    } else if from == CONTRACT_CRATE {
        (!["metaforge-domain", "metaforge-ports"].contains(&to))
            .then_some("the wire contracts may depend on metaforge-domain and metaforge-ports only")
    } else {
        None
    }
}

/// Rule 6: public type names defined in more than one crate under `crates_dir`, against
/// [`KNOWN_DUPLICATE_TYPES`].
fn type_name_breaches(crates_dir: &std::path::Path) -> Result<Vec<String>> {
    let mut homes: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(crates_dir).context("cannot list crates/")? {
        let krate = entry.context("cannot list crates/")?.path();
        let name = krate
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if TYPE_NAME_EXEMPT.contains(&name.as_str()) {
            continue;
        }
        for file in rust_files(&krate.join("src"))? {
            let text =
                std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
            for type_name in public_type_names(&text) {
                homes.entry(type_name).or_default().insert(name.clone());
            }
        }
    }
    Ok(duplicate_breaches(&homes, KNOWN_DUPLICATE_TYPES))
}

/// The breaches of rule 6 given each public type name's crates.
fn duplicate_breaches(
    homes: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    known_duplicates: &[&str],
) -> Vec<String> {
    let mut breaches = Vec::new();
    for (type_name, crates) in homes {
        let known = known_duplicates.contains(&type_name.as_str());
        if crates.len() > 1 && !known {
            breaches.push(format!(
                "`{type_name}` is defined in {}: a public type has one home (use the one, or name the other for what it is)",
                crates.iter().cloned().collect::<Vec<_>>().join(" and ")
            ));
        }
    }
    for known in known_duplicates {
        if homes.get(*known).is_none_or(|crates| crates.len() < 2) {
            breaches.push(format!(
                "`{known}` has one home now: remove it from KNOWN_DUPLICATE_TYPES in xtask/src/layering.rs"
            ));
        }
    }
    breaches
}

/// The names after `pub struct`, `pub enum` and `pub trait` at the start of a line.
fn public_type_names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim_start();
            ["pub struct ", "pub enum ", "pub trait "]
                .iter()
                .find_map(|kw| rest.strip_prefix(kw))
        })
        .filter_map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// Every `.rs` file under `dir` except unit-test modules (`tests.rs`, `tests/`).
fn rust_files(dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(out);
    };
    for entry in entries {
        let path = entry
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "tests" {
                out.extend(rust_files(&path)?);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod type_name_tests {
    use super::*;

    fn homes(
        pairs: &[(&str, &[&str])],
    ) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
        pairs
            .iter()
            .map(|(name, crates)| {
                (
                    (*name).to_owned(),
                    crates.iter().map(|c| (*c).to_owned()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_new_public_type_name_in_two_crates_is_a_breach_and_a_settled_known_one_too() {
        let known = ["ToolSpec"];
        let mut pairs: Vec<(&str, &[&str])> = vec![("ToolSpec", &["domain", "ports"][..])];
        assert!(duplicate_breaches(&homes(&pairs), &known).is_empty());
        pairs.push(("ApprovalView", &["api", "gateway"][..]));
        pairs[0].1 = &["domain"][..];
        let breaches = duplicate_breaches(&homes(&pairs), &known);
        assert_eq!(breaches.len(), 2, "{breaches:?}");
        assert!(
            breaches
                .iter()
                .any(|b| b.contains("`ApprovalView` is defined in api and gateway"))
        );
        assert!(breaches.iter().any(|b| b.contains("`ToolSpec` has one home now")));
        assert!(
            duplicate_breaches(&homes(&[("Once", &["app"][..])]), KNOWN_DUPLICATE_TYPES).is_empty(),
            "a name with one home is fine"
        );
    }

    #[test]
    fn public_type_names_are_read_from_the_start_of_a_line() {
        let text = "pub struct A {\n    pub enum_field: u8,\n}\n  pub enum B<T> {}\npub(crate) struct C;\npub trait D: Send {}\n// pub struct E";
        assert_eq!(public_type_names(text), ["A", "B", "D"]);
    }
}
