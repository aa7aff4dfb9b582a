//! How a stdio tool server's process starts: with a cleared environment, never the gateway's.
//!
//! Seed `system-architecture.txt` §10 "Tool Isolation": no secrets passed. A server from the
//! servers file gets only what finds programs and formats text (`PATH`, the locale, `TZ`,
//! `TERM`), a `HOME` and `TMPDIR` of its own (a directory per server, which is also its working
//! directory — never the gateway's), and the entry's own `env`, which wins. A secret a server
//! really needs (an API key of its own) is named in its entry; provider keys, cloud
//! credentials, `METAFORGE_*` and `HARNESS_*` never reach it. It runs in its sandbox
//! ([`crate::sandbox`]) unless its entry says `"sandbox": "off"`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use metaforge_sandbox::{ProcMount, Sandbox, SandboxPlan, SandboxPrograms, SandboxUnavailable, key_stores};

/// The inherited variables a tool server may see, by exact name.
const PASSED_THROUGH: &[&str] = &["PATH", "LANG", "LANGUAGE", "TZ", "TERM"];

/// The inherited variables a tool server may see, by prefix (the locale's categories).
const PASSED_THROUGH_PREFIXES: &[&str] = &["LC_"];

/// What every stdio tool server starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioLaunch {
    passed: BTreeMap<String, String>,
    /// Everything this process inherited, read only for the names an entry's `sandbox.env`
    /// lists.
    inherited: BTreeMap<String, String>,
    homes: PathBuf,
    /// `bwrap` and `prlimit`, or why a sandbox cannot be built here.
    programs: Result<SandboxPrograms, SandboxUnavailable>,
    /// What every sandbox hides: MetaForge's home and the users' key stores.
    hidden: Vec<PathBuf>,
}

impl StdioLaunch {
    /// From the environment the binary read (`inherited`): only the allowed variables are kept.
    /// Each server's own directory is `<homes>/<server name>`; the sandbox's programs are found
    /// on the inherited `PATH`, and `homes`' parent (MetaForge's home) is hidden from every
    /// sandbox, as are the key stores of `HOME`, `/root` and every home under `/home`.
    pub fn new(inherited: impl IntoIterator<Item = (String, String)>, homes: PathBuf) -> Self {
        let inherited: BTreeMap<String, String> = inherited.into_iter().collect();
        let passed = inherited
            .iter()
            .filter(|(name, _)| {
                PASSED_THROUGH.contains(&name.as_str())
                    || PASSED_THROUGH_PREFIXES
                        .iter()
                        .any(|prefix| name.starts_with(prefix))
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let programs = SandboxPrograms::find(inherited.get("PATH").map(String::as_str));
        let mut user_homes = vec![PathBuf::from("/root")];
        user_homes.extend(inherited.get("HOME").map(PathBuf::from));
        if let Ok(entries) = std::fs::read_dir("/home") {
            user_homes.extend(entries.filter_map(Result::ok).map(|e| e.path()));
        }
        let mut hidden = key_stores(&user_homes);
        hidden.extend(
            homes
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map(Path::to_path_buf),
        );
        Self {
            passed,
            inherited,
            homes,
            programs,
            hidden,
        }
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

    /// The process that starts `server`: `command args` in its sandbox (or, with `"sandbox":
    /// "off"`, as a plain child), with a cleared environment holding only
    /// [`environment`](Self::environment) and the inherited variables its `sandbox.env` names,
    /// working in its own directory.
    ///
    /// # Errors
    /// When `command` is not found (on the server's own `PATH` for a bare name), or when the
    /// sandbox cannot be built here (`bwrap` or `prlimit` missing): the server is then
    /// unavailable, never started unsandboxed.
    pub fn command(
        &self,
        server: &str,
        command: &str,
        args: &[String],
        entry_env: &BTreeMap<String, String>,
        sandbox: &Sandbox,
    ) -> Result<tokio::process::Command, LaunchError> {
        let home = self.home_of(server);
        let mut environment = self.environment(server, entry_env);
        if let (Sandbox::On(_), Err(missing)) = (sandbox, &self.programs) {
            return Err(LaunchError::Sandbox(missing.clone()));
        }
        // Found before the sandbox starts, so a missing program is named as such rather than
        // seen as a server that closed during its handshake.
        if !program_exists(command, environment.get("PATH").map(String::as_str)) {
            return Err(LaunchError::NotFound {
                command: command.to_owned(),
            });
        }
        let mut process = match sandbox {
            Sandbox::Off => {
                let mut process = tokio::process::Command::new(command);
                process.args(args);
                process
            }
            Sandbox::On(options) => {
                let programs = self
                    .programs
                    .as_ref()
                    .map_err(|e| LaunchError::Sandbox(e.clone()))?;
                for name in &options.env {
                    if let Some(value) = self.inherited.get(name) {
                        environment.entry(name.clone()).or_insert_with(|| value.clone());
                    }
                }
                let plan = SandboxPlan {
                    programs,
                    options,
                    scratch: &home,
                    hidden: &self.hidden,
                    proc_mount: ProcMount::Fresh,
                };
                let (program, argv) = plan.command_line(command, args);
                let mut process = tokio::process::Command::new(program);
                process.args(argv);
                process
            }
        };
        process.env_clear().envs(environment).current_dir(&home);
        Ok(process)
    }
}

/// Why a stdio server could not be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// Its program does not exist (or, for a bare name, is not on its `PATH`).
    #[error("{command}: no such program (a bare name is looked up on the server's PATH)")]
    NotFound {
        /// The entry's `command`.
        command: String,
    },
    /// The sandbox cannot be built on this machine.
    #[error(transparent)]
    Sandbox(#[from] SandboxUnavailable),
}

/// Whether `command` names a program: a path that exists, or a bare name found on `path`.
fn program_exists(command: &str, path: Option<&str>) -> bool {
    if command.contains('/') {
        return Path::new(command).is_file();
    }
    path.is_some_and(|path| std::env::split_paths(path).any(|dir| dir.join(command).is_file()))
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
