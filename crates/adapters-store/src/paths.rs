//! Where each ledger file lives: under `METAFORGE_HOME` (default `~/.metaforge/`) with the
//! seed's per-ledger overrides. The environment is read by the binary and passed in as a lookup
//! closure, so this crate never reads it itself.

use std::path::{Path, PathBuf};

/// The mode of every directory MetaForge creates for its ledgers: owner only.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// The mode of every file MetaForge writes (ledgers, their `-wal`/`-shm`, the selection): owner
/// read/write only. Set explicitly, so the process umask never widens it.
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// Creates `dir` and any missing parent owner-only (0700), whatever the umask. An existing
/// directory is left as it is: it may be shared on purpose (`METAFORGE_HOME=/srv/…`), and the
/// files MetaForge writes inside it are 0600 anyway.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(PRIVATE_DIR_MODE)
            .create(dir)?;
        // mkdir's mode is masked by the umask; a umask that strips owner bits cannot win.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE_DIR_MODE))
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}

/// Makes sure `file` exists and is owner read/write only (0600): created that way when missing,
/// tightened when an older version left it wider. Called before SQLite opens a ledger, so the
/// database never exists with the umask's mode, and SQLite gives `-wal`/`-shm` the same mode.
pub fn ensure_private_file(file: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(PRIVATE_FILE_MODE)
            .open(file)?;
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(PRIVATE_FILE_MODE))
    }
    #[cfg(not(unix))]
    {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
            .map(drop)
    }
}

/// Tightens `file` to 0600 when it exists (a ledger's `-wal`/`-shm` after SQLite opened it).
pub fn tighten_if_present(file: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        match std::fs::set_permissions(file, std::fs::Permissions::from_mode(PRIVATE_FILE_MODE)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        Ok(())
    }
}

/// Override for the approval ledger file (FORGE-89).
pub const ENV_TOOL_APPROVALS_LEDGER_PATH: &str = "METAFORGE_TOOL_APPROVALS_LEDGER_PATH";
/// Override for the flow-version store file (FORGE-482).
pub const ENV_FLOW_VERSIONS_PATH: &str = "METAFORGE_FLOW_VERSIONS_PATH";
/// Override for the client-task store file (FORGE-581).
pub const ENV_CLIENT_TASKS_PATH: &str = "METAFORGE_CLIENT_TASKS_PATH";
/// Override for the usage store file (FORGE-476).
pub const ENV_LLM_USAGE_DB_PATH: &str = "METAFORGE_LLM_USAGE_DB_PATH";
/// Set (non-empty, not `0`/`false`) to skip the run, approval and flow-version ledgers.
pub const ENV_RUNS_LEDGER_DISABLE: &str = "METAFORGE_RUNS_LEDGER_DISABLE";
/// The directory holding every ledger.
pub const ENV_METAFORGE_HOME: &str = "METAFORGE_HOME";

/// Default file names under the home directory.
pub const TOOL_APPROVALS_LEDGER_FILE: &str = "tool_approvals_ledger.db";
/// See [`TOOL_APPROVALS_LEDGER_FILE`].
pub const FLOW_VERSIONS_FILE: &str = "flow_versions.db";
/// See [`TOOL_APPROVALS_LEDGER_FILE`].
pub const CLIENT_TASKS_FILE: &str = "client_tasks.db";
/// See [`TOOL_APPROVALS_LEDGER_FILE`].
pub const LLM_USAGE_FILE: &str = "llm_usage.db";
/// See [`TOOL_APPROVALS_LEDGER_FILE`].
pub const RUNS_LEDGER_FILE: &str = "runs_ledger.db";
/// See [`TOOL_APPROVALS_LEDGER_FILE`].
pub const SESSIONS_FILE: &str = "sessions.db";
/// See [`TOOL_APPROVALS_LEDGER_FILE`].
pub const TWIN_FILE: &str = "twin.db";

/// The resolved location of every ledger. `None` means the ledger is disabled
/// (`METAFORGE_RUNS_LEDGER_DISABLE`); the caller then decides, loudly, what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorePaths {
    /// The home directory.
    pub home: PathBuf,
    /// Approvals (disabled with the run ledger).
    pub tool_approvals: Option<PathBuf>,
    /// Flow versions (disabled with the run ledger).
    pub flow_versions: Option<PathBuf>,
    /// Runs (disabled by `METAFORGE_RUNS_LEDGER_DISABLE`).
    pub runs: Option<PathBuf>,
    /// Client tasks.
    pub client_tasks: PathBuf,
    /// Usage events.
    pub llm_usage: PathBuf,
    /// Chat sessions.
    pub sessions: PathBuf,
    /// The embedded twin.
    pub twin: PathBuf,
}

/// Why the paths could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum StorePathsError {
    /// Neither `METAFORGE_HOME` nor a home directory is known.
    #[error("METAFORGE_HOME is not set and no home directory is known (set METAFORGE_HOME)")]
    NoHome,
    /// A variable is set but empty.
    #[error("{0} is set but empty")]
    Empty(&'static str),
}

impl StorePaths {
    /// Resolves every path from an environment lookup and the user's home directory.
    pub fn resolve(
        env: impl Fn(&str) -> Option<String>,
        user_home: Option<PathBuf>,
    ) -> Result<Self, StorePathsError> {
        let var = |name: &'static str| -> Result<Option<String>, StorePathsError> {
            match env(name) {
                Some(v) if v.trim().is_empty() => Err(StorePathsError::Empty(name)),
                other => Ok(other),
            }
        };
        let home = match var(ENV_METAFORGE_HOME)? {
            Some(h) => PathBuf::from(h),
            None => user_home.ok_or(StorePathsError::NoHome)?.join(".metaforge"),
        };
        let file = |name: &'static str, default: &str| -> Result<PathBuf, StorePathsError> {
            Ok(var(name)?.map_or_else(|| home.join(default), PathBuf::from))
        };
        let disabled = env(ENV_RUNS_LEDGER_DISABLE)
            .map(|v| {
                let v = v.trim().to_ascii_lowercase();
                !(v.is_empty() || v == "0" || v == "false" || v == "no" || v == "off")
            })
            .unwrap_or(false);
        let unless_disabled = |p: PathBuf| if disabled { None } else { Some(p) };
        Ok(Self {
            tool_approvals: unless_disabled(file(
                ENV_TOOL_APPROVALS_LEDGER_PATH,
                TOOL_APPROVALS_LEDGER_FILE,
            )?),
            flow_versions: unless_disabled(file(ENV_FLOW_VERSIONS_PATH, FLOW_VERSIONS_FILE)?),
            runs: unless_disabled(home.join(RUNS_LEDGER_FILE)),
            client_tasks: file(ENV_CLIENT_TASKS_PATH, CLIENT_TASKS_FILE)?,
            llm_usage: file(ENV_LLM_USAGE_DB_PATH, LLM_USAGE_FILE)?,
            sessions: home.join(SESSIONS_FILE),
            twin: home.join(TWIN_FILE),
            home,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::PathBuf;

    use super::*;

    fn resolve(vars: &[(&str, &str)]) -> Result<StorePaths, StorePathsError> {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        StorePaths::resolve(|k| env.get(k).cloned(), Some(PathBuf::from("/home/ana")))
    }

    #[test]
    fn defaults_live_under_home_dot_metaforge_with_the_seed_file_names() {
        let p = resolve(&[]).expect("resolve");
        let home = PathBuf::from("/home/ana/.metaforge");
        assert_eq!(p.home, home);
        assert_eq!(p.tool_approvals, Some(home.join("tool_approvals_ledger.db")));
        assert_eq!(p.flow_versions, Some(home.join("flow_versions.db")));
        assert_eq!(p.runs, Some(home.join("runs_ledger.db")));
        assert_eq!(p.client_tasks, home.join("client_tasks.db"));
        assert_eq!(p.llm_usage, home.join("llm_usage.db"));
        assert_eq!(p.sessions, home.join("sessions.db"));
        assert_eq!(p.twin, home.join("twin.db"));
    }

    #[test]
    fn each_seed_override_moves_only_its_own_ledger() {
        type Field = fn(&StorePaths) -> Option<PathBuf>;
        let cases: &[(&str, Field)] = &[
            (ENV_TOOL_APPROVALS_LEDGER_PATH, |p| p.tool_approvals.clone()),
            (ENV_FLOW_VERSIONS_PATH, |p| p.flow_versions.clone()),
            (ENV_CLIENT_TASKS_PATH, |p| Some(p.client_tasks.clone())),
            (ENV_LLM_USAGE_DB_PATH, |p| Some(p.llm_usage.clone())),
        ];
        let defaults = resolve(&[]).expect("defaults");
        for (var, field) in cases {
            let p = resolve(&[(var, "/data/x.db")]).expect("resolve");
            assert_eq!(field(&p), Some(PathBuf::from("/data/x.db")), "{var}");
            for (other, other_field) in cases {
                if other != var {
                    assert_eq!(other_field(&p), other_field(&defaults), "{var} moved {other}");
                }
            }
        }
    }

    #[test]
    fn metaforge_home_moves_every_default() {
        let p = resolve(&[(ENV_METAFORGE_HOME, "/srv/mf")]).expect("resolve");
        assert_eq!(p.llm_usage, PathBuf::from("/srv/mf/llm_usage.db"));
        assert_eq!(
            p.tool_approvals,
            Some(PathBuf::from("/srv/mf/tool_approvals_ledger.db"))
        );
    }

    #[test]
    fn runs_ledger_disable_skips_runs_approvals_and_versions_only() {
        for (value, disabled) in [
            ("1", true),
            ("true", true),
            ("yes", true),
            ("0", false),
            ("false", false),
            ("off", false),
        ] {
            let p = resolve(&[(ENV_RUNS_LEDGER_DISABLE, value)]).expect("resolve");
            assert_eq!(p.runs.is_none(), disabled, "{value}");
            assert_eq!(p.tool_approvals.is_none(), disabled, "{value}");
            assert_eq!(p.flow_versions.is_none(), disabled, "{value}");
            assert_eq!(p.llm_usage, PathBuf::from("/home/ana/.metaforge/llm_usage.db"));
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_created_directory_is_0700_and_a_file_is_made_or_tightened_to_0600() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let scratch = tempfile::tempdir().unwrap();
        let home = scratch.path().join("a/b");
        create_private_dir(&home).unwrap();
        assert_eq!(mode(&home), 0o700);
        assert_eq!(mode(&scratch.path().join("a")), 0o700);
        let fresh = home.join("x.db");
        ensure_private_file(&fresh).unwrap();
        assert_eq!(mode(&fresh), 0o600);
        let old = home.join("old.db");
        std::fs::write(&old, b"kept").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
        ensure_private_file(&old).unwrap();
        assert_eq!(mode(&old), 0o600);
        assert_eq!(std::fs::read(&old).unwrap(), b"kept", "contents untouched");
        tighten_if_present(&home.join("absent-wal")).unwrap();
    }

    #[test]
    fn an_empty_override_is_an_error_naming_the_variable_and_no_home_is_an_error() {
        let err = resolve(&[(ENV_FLOW_VERSIONS_PATH, " ")]).expect_err("empty");
        assert!(err.to_string().contains(ENV_FLOW_VERSIONS_PATH));
        let none = StorePaths::resolve(|_| None, None).expect_err("no home");
        assert!(matches!(none, StorePathsError::NoHome));
    }
}
