//! The rule case tables in `fixtures/rules/<name>.json`, read into the test's own typed case.

use std::path::PathBuf;

use serde::de::DeserializeOwned;

/// The repository's `fixtures/rules` directory (every crate sits at `crates/<name>`).
#[must_use]
pub fn rules_dir() -> PathBuf {
    crate::peers::manifest_dir().join("../../fixtures/rules")
}

/// The `cases` array of `fixtures/rules/<name>.json`, each case deserialized as `C`.
#[must_use]
pub fn cases<C: DeserializeOwned>(name: &str) -> Vec<C> {
    section(name, "cases")
}

/// The array under `key` in `fixtures/rules/<name>.json` (a table with several sections), each
/// entry deserialized as `C`. A missing or malformed table fails the test, naming the file and the
/// position.
#[expect(
    clippy::panic,
    reason = "a missing or malformed fixture fails the test, naming it"
)]
#[must_use]
pub fn section<C: DeserializeOwned>(name: &str, key: &str) -> Vec<C> {
    let path = rules_dir().join(format!("{name}.json"));
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut doc: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    let entries = doc
        .get_mut(key)
        .map(serde_json::Value::take)
        .unwrap_or_else(|| panic!("{} has no `{key}`", path.display()));
    serde_path_to_error::deserialize(entries).unwrap_or_else(|e| panic!("{} `{key}`: {e}", path.display()))
}
