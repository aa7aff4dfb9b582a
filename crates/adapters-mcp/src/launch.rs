//! How a stdio tool server's process starts: with a cleared environment, never the gateway's.
//!
//! Seed `system-architecture.txt` §10 "Tool Isolation": no secrets passed. A server from the
//! servers file gets only what finds programs and formats text (`PATH`, the locale, `TZ`,
//! `TERM`), a `HOME` and `TMPDIR` of its own (a directory per server, which is also its working
//! directory — never the gateway's), and the entry's own `env`, which wins. A secret a server
//! really needs (an API key of its own) is named in its entry; provider keys, cloud
//! credentials, `METAFORGE_*` and `HARNESS_*` never reach it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The inherited variables a tool server may see, by exact name.
const PASSED_THROUGH: &[&str] = &["PATH", "LANG", "LANGUAGE", "TZ", "TERM"];

/// The inherited variables a tool server may see, by prefix (the locale's categories).
const PASSED_THROUGH_PREFIXES: &[&str] = &["LC_"];

/// What every stdio tool server starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioLaunch {
    passed: BTreeMap<String, String>,
    homes: PathBuf,
}

impl StdioLaunch {
    /// From the environment the binary read (`inherited`): only the allowed variables are kept.
    /// Each server's own directory is `<homes>/<server name>`.
    pub fn new(inherited: impl IntoIterator<Item = (String, String)>, homes: PathBuf) -> Self {
        let passed = inherited
            .into_iter()
            .filter(|(name, _)| {
                PASSED_THROUGH.contains(&name.as_str())
                    || PASSED_THROUGH_PREFIXES
                        .iter()
                        .any(|prefix| name.starts_with(prefix))
            })
            .collect();
        Self { passed, homes }
    }

    /// The directory of `server`: its `HOME`, `TMPDIR` and working directory.
    pub fn home_of(&self, server: &str) -> PathBuf {
        self.homes.join(server)
    }

    /// The whole environment of `server`'s process: the allowed inherited variables, its own
    /// `HOME` and `TMPDIR`, then its entry's `env` (which wins over both).
    pub fn environment(&self, server: &str, entry: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let home = self.home_of(server);
        let home = path_text(&home);
        let mut environment = self.passed.clone();
        environment.insert("HOME".to_owned(), home.clone());
        environment.insert("TMPDIR".to_owned(), home);
        environment.extend(entry.iter().map(|(k, v)| (k.clone(), v.clone())));
        environment
    }
}

fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::StdioLaunch;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn only_the_allowlist_passes_and_the_entry_env_wins() {
        let inherited = vars(&[
            ("PATH", "/usr/bin"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
            ("TZ", "UTC"),
            ("HOME", "/root"),
            ("PWD", "/srv/gateway"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("METAFORGE_GATEWAY_API_KEY", "ops:sk"),
            ("METAFORGE_MCP_SERVICE_KEY", "svc"),
            ("HARNESS_OPENAI_BASE_URL", "http://x"),
            ("GITHUB_TOKEN", "ghp"),
        ]);
        let launch = StdioLaunch::new(inherited, PathBuf::from("/home/m/.metaforge/tool-servers"));
        let entry: BTreeMap<String, String> = vars(&[("DEBUG", "1"), ("TZ", "Europe/Paris")])
            .into_iter()
            .collect();
        let environment = launch.environment("everything", &entry);
        let expected: BTreeMap<String, String> = vars(&[
            ("PATH", "/usr/bin"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
            ("TZ", "Europe/Paris"),
            ("HOME", "/home/m/.metaforge/tool-servers/everything"),
            ("TMPDIR", "/home/m/.metaforge/tool-servers/everything"),
            ("DEBUG", "1"),
        ])
        .into_iter()
        .collect();
        assert_eq!(environment, expected);
        assert_eq!(
            launch.home_of("everything"),
            PathBuf::from("/home/m/.metaforge/tool-servers/everything")
        );
    }

    #[test]
    fn a_secret_reaches_a_server_only_when_its_entry_names_it() {
        let launch = StdioLaunch::new(vars(&[("GITHUB_TOKEN", "ghp-gateway")]), PathBuf::from("/t"));
        assert!(
            !launch
                .environment("a", &BTreeMap::new())
                .contains_key("GITHUB_TOKEN")
        );
        let entry: BTreeMap<String, String> = vars(&[("GITHUB_TOKEN", "ghp-own")]).into_iter().collect();
        assert_eq!(launch.environment("a", &entry)["GITHUB_TOKEN"], "ghp-own");
    }
}
