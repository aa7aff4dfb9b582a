//! Domain scoping (seed: "Domain scoping and dynamic discovery"): a turn that knows its
//! disciplines (a design-flow phase's `disciplines`) sees the always-visible core servers plus
//! the named disciplines' servers; a turn with no scoping signal (`domains = None`) sees every
//! server. What scoping hides stays reachable through `search_tools`.

use std::collections::{BTreeMap, BTreeSet};

/// Servers every turn sees, whatever its disciplines (the seed's core adapters, and the
/// distributor adapters).
pub const CORE_SERVERS: &[&str] = &[
    "twin",
    "project",
    "session",
    "knowledge",
    "memory",
    "constraint",
    "web",
    "component",
    "digikey",
    "mouser",
    "octopart",
];

/// Which servers and tools belong to which discipline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomainScope {
    /// Always-visible servers.
    pub core_servers: BTreeSet<String>,
    /// Discipline → registry ids or `server.*` patterns it needs (the skills' `tools_required`).
    pub disciplines: BTreeMap<String, Vec<String>>,
}

impl DomainScope {
    /// The seed's core servers and the given discipline map.
    pub fn with_disciplines(disciplines: BTreeMap<String, Vec<String>>) -> Self {
        Self {
            core_servers: CORE_SERVERS.iter().map(|s| (*s).to_owned()).collect(),
            disciplines,
        }
    }

    /// The seed's core servers and no discipline yet (servers join with [`Self::add_server`]).
    pub fn seed() -> Self {
        Self::with_disciplines(BTreeMap::new())
    }

    /// Declares one configured server: `core` overrides whether it is always visible
    /// (`None` keeps the core list's say), and each of `domains` sees all of its tools.
    pub fn add_server(&mut self, server: &str, core: Option<bool>, domains: &[String]) {
        match core {
            Some(true) => {
                self.core_servers.insert(server.to_owned());
            }
            Some(false) => {
                self.core_servers.remove(server);
            }
            None => {}
        }
        for domain in domains {
            let patterns = self.disciplines.entry(domain.clone()).or_default();
            let pattern = format!("{server}.*");
            if !patterns.contains(&pattern) {
                patterns.push(pattern);
            }
        }
    }

    /// Whether tool `id` of `server` is visible to a turn scoped to `domains` (`None` = unscoped:
    /// everything; an unknown discipline adds nothing, so the core servers remain).
    pub fn admits(&self, server: &str, id: &str, domains: Option<&[String]>) -> bool {
        let Some(domains) = domains else {
            return true;
        };
        if self.core_servers.contains(server) {
            return true;
        }
        domains
            .iter()
            .filter_map(|d| self.disciplines.get(d))
            .flatten()
            .any(|pattern| match pattern.strip_suffix(".*") {
                Some(prefix) => prefix == server,
                None => pattern == id,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_declared_for_a_discipline_is_seen_by_that_discipline_only() {
        let mut scope = DomainScope::seed();
        scope.add_server("freecad", None, &["mechanical".to_owned()]);
        scope.add_server("notes", Some(true), &[]);
        scope.add_server("twin", Some(false), &[]);
        let mech = ["mechanical".to_owned()];
        let elec = ["electronics".to_owned()];
        assert!(scope.admits("freecad", "freecad.pad", Some(&mech)));
        assert!(!scope.admits("freecad", "freecad.pad", Some(&elec)));
        assert!(scope.admits("notes", "notes.read", Some(&elec)), "core: true");
        assert!(!scope.admits("twin", "twin.query", Some(&elec)), "core: false");
        assert!(scope.admits("twin", "twin.query", None), "unscoped sees all");
    }
}
