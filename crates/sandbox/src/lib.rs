//! The sandbox every stdio tool server runs in (seed `system-architecture.txt` §5.6 and §10 "Tool
//! Isolation": filesystem read-only by default, no external network, CPU and memory limits, no
//! secrets passed).
//!
//! A sandboxed server is started as `prlimit … -- bwrap … -- <command> <args>`:
//! - **namespaces** (`bwrap --unshare-all`): its own user, pid, ipc, uts, cgroup and network
//!   namespace — the network has only a private loopback, so nothing on this host's loopback or
//!   beyond is reachable — and `--die-with-parent`, `--new-session`;
//! - **filesystem**: the whole root bound read-only (a tool installed anywhere still runs), with
//!   the places secrets live hidden under empty tmpfs mounts (MetaForge's home with its ledgers
//!   and credentials, `/run`'s sockets, and each user's key stores: `.ssh`, `.aws`, `.gnupg`,
//!   `.config/gcloud`, … — see [`HIDDEN_IN_HOMES`]); a private `/tmp`, `/proc` and `/dev`; the
//!   server's own scratch directory writable (its `HOME`, `TMPDIR` and working directory); the
//!   entry's workspace bound read-only, or writable when the entry says `"workspace_access":
//!   "rw"`;
//! - **environment**: cleared by the caller; only what it passes (for a tool server, the
//!   locale, `PATH`, the entry's `env` and the names in its `sandbox.env`);
//! - **limits** (`prlimit`): CPU seconds, address space, file size, open files and processes.
//!
//! A server whose entry says `"sandbox": "off"` runs without any of this; that is logged at WARN
//! on every start and shown in `/health`. When `bwrap` or `prlimit` is missing the server is
//! unavailable with that reason — it never runs unsandboxed silently.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where secrets live under a home directory, hidden in every sandbox when present.
pub const HIDDEN_IN_HOMES: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".config/gcloud",
    ".config/gh",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".metaforge",
    ".codex",
];

/// Directories hidden in every sandbox: sockets of system services.
const HIDDEN_SYSTEM: &[&str] = &["/run"];

/// How one stdio server is isolated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sandbox {
    /// In a sandbox (the default).
    On(SandboxOptions),
    /// `"sandbox": "off"`, written explicitly: runs as a plain child process.
    Off,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::On(SandboxOptions::default())
    }
}

impl Sandbox {
    /// `on` or `off`, as `/health` shows it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::On(_) => "on",
            Self::Off => "off",
        }
    }
}

/// A sandboxed server's settings (`"sandbox": {…}` in its entry).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxOptions {
    /// Names of this process's variables the server may also see (`sandbox.env`).
    pub env: Vec<String>,
    /// More paths hidden from the server (`sandbox.hide`).
    pub hide: Vec<PathBuf>,
    /// The directory the server works on (`workspace`), if any.
    pub workspace: Option<Workspace>,
    /// Its resource limits.
    pub limits: ResourceLimits,
}

/// The directory a server works on and whether it may write there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// An absolute path.
    pub path: PathBuf,
    /// `"workspace_access": "rw"`; read-only otherwise.
    pub writable: bool,
}

/// A sandboxed process's resource limits (`RLIMIT_*`, set by `prlimit`). The CPU limit counts a
/// process's whole life: a long-lived server past it is killed, marked unavailable, and started
/// afresh on its next use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceLimits {
    /// CPU seconds (`cpu_seconds`, default 3600).
    pub cpu_seconds: u64,
    /// Address space in MiB (`memory_mb`, default 8192: runtimes such as V8 reserve far more
    /// address space than they use).
    pub memory_mb: u64,
    /// Largest file it may write, in MiB (`file_size_mb`, default 1024).
    pub file_size_mb: u64,
    /// Open files (`open_files`, default 1024).
    pub open_files: u64,
    /// Processes and threads (`processes`, default 256).
    pub processes: u64,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        Self {
            cpu_seconds: 3600,
            memory_mb: 8192,
            file_size_mb: 1024,
            open_files: 1024,
            processes: 256,
        }
    }
}

/// The programs a sandbox is built from, found once on this process's `PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPrograms {
    bwrap: PathBuf,
    prlimit: PathBuf,
}

/// Why a sandbox cannot be built on this machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxUnavailable {
    /// A program the sandbox needs is not on `PATH`.
    #[error(
        "the tool-server sandbox needs `{program}` ({package}), which is not on PATH: install it, or set \"sandbox\": \"off\" in this server's entry to run it unsandboxed"
    )]
    Missing {
        /// The program's name.
        program: &'static str,
        /// The Debian package that has it.
        package: &'static str,
    },
}

impl SandboxPrograms {
    /// `bwrap` and `prlimit` from the directories of `path` (a `PATH` value).
    pub fn find(path: Option<&str>) -> Result<Self, SandboxUnavailable> {
        Ok(Self {
            bwrap: find_program(path, "bwrap").ok_or(SandboxUnavailable::Missing {
                program: "bwrap",
                package: "bubblewrap",
            })?,
            prlimit: find_program(path, "prlimit").ok_or(SandboxUnavailable::Missing {
                program: "prlimit",
                package: "util-linux",
            })?,
        })
    }
}

fn find_program(path: Option<&str>, name: &str) -> Option<PathBuf> {
    std::env::split_paths(path.unwrap_or("/usr/bin:/bin"))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Everything one sandboxed start needs besides the server's own command.
#[derive(Debug, Clone)]
pub struct SandboxPlan<'a> {
    /// The programs.
    pub programs: &'a SandboxPrograms,
    /// The server's settings.
    pub options: &'a SandboxOptions,
    /// Its scratch directory (writable; `HOME`, `TMPDIR`, working directory).
    pub scratch: &'a Path,
    /// What else to hide: MetaForge's home, the users' homes' key stores.
    pub hidden: &'a [PathBuf],
    /// How `/proc` is mounted.
    pub proc_mount: ProcMount,
}

/// How a sandbox's `/proc` is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcMount {
    /// A fresh `/proc` of the sandbox's own pid namespace (the default).
    Fresh,
    /// This process's `/proc`, read-only: the only one a sandbox nested in another sandbox can
    /// mount (a program a sandboxed tool server runs); it shows the outer sandbox's processes
    /// only.
    Outer,
}

impl SandboxPlan<'_> {
    /// The program to start and its arguments: `prlimit <limits> -- bwrap <isolation> --
    /// <command> <args>`. The environment is the caller's to set (`bwrap --clearenv` is not
    /// used: the child is started with a cleared environment already).
    pub fn command_line(&self, command: &str, args: &[String]) -> (PathBuf, Vec<OsString>) {
        let limits = self.options.limits;
        let mib = 1024 * 1024;
        let mut argv: Vec<OsString> = vec![
            format!("--cpu={}", limits.cpu_seconds).into(),
            format!("--as={}", limits.memory_mb.saturating_mul(mib)).into(),
            format!("--fsize={}", limits.file_size_mb.saturating_mul(mib)).into(),
            format!("--nofile={}", limits.open_files).into(),
            format!("--nproc={}", limits.processes).into(),
            "--".into(),
            self.programs.bwrap.clone().into(),
        ];
        let mut bwrap = |words: &[&str]| argv.extend(words.iter().map(OsString::from));
        bwrap(&[
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--ro-bind",
            "/",
            "/",
        ]);
        for hidden in self.hidden_paths() {
            if hidden.is_dir() {
                argv.extend(["--tmpfs".into(), hidden.into_os_string()]);
            } else {
                argv.extend(["--ro-bind".into(), "/dev/null".into(), hidden.into_os_string()]);
            }
        }
        let proc_mount: &[&str] = match self.proc_mount {
            ProcMount::Fresh => &["--proc", "/proc"],
            ProcMount::Outer => &["--ro-bind", "/proc", "/proc"],
        };
        argv.extend(proc_mount.iter().map(OsString::from));
        argv.extend(["--dev", "/dev", "--tmpfs", "/tmp"].iter().map(OsString::from));
        argv.extend([
            "--bind".into(),
            self.scratch.as_os_str().to_owned(),
            self.scratch.as_os_str().to_owned(),
        ]);
        if let Some(workspace) = &self.options.workspace {
            let bind = if workspace.writable { "--bind" } else { "--ro-bind" };
            argv.extend([
                bind.into(),
                workspace.path.as_os_str().to_owned(),
                workspace.path.as_os_str().to_owned(),
            ]);
        }
        argv.extend([
            "--chdir".into(),
            self.scratch.as_os_str().to_owned(),
            "--".into(),
            command.into(),
        ]);
        argv.extend(args.iter().map(OsString::from));
        (self.programs.prlimit.clone(), argv)
    }

    /// The paths hidden in this sandbox that exist here (a mount needs its target), none of them
    /// an ancestor of the scratch directory or the workspace (those are bound after, inside the
    /// empty mount).
    fn hidden_paths(&self) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = HIDDEN_SYSTEM.iter().map(PathBuf::from).collect();
        paths.extend(self.hidden.iter().cloned());
        paths.extend(self.options.hide.iter().cloned());
        paths.sort();
        paths.dedup();
        paths
            .into_iter()
            .filter(|p| p.symlink_metadata().is_ok_and(|m| !m.file_type().is_symlink()))
            .collect()
    }
}

/// The key stores under `homes` (each user's home) that exist, to hide from every sandbox.
pub fn key_stores(homes: &[PathBuf]) -> Vec<PathBuf> {
    homes
        .iter()
        .flat_map(|home| HIDDEN_IN_HOMES.iter().map(move |rel| home.join(rel)))
        .filter(|p| p.symlink_metadata().is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_line(options: &SandboxOptions, hidden: &[PathBuf]) -> Vec<String> {
        let programs = SandboxPrograms {
            bwrap: PathBuf::from("/usr/bin/bwrap"),
            prlimit: PathBuf::from("/usr/bin/prlimit"),
        };
        let scratch = PathBuf::from("/srv/scratch/server");
        let plan = SandboxPlan {
            programs: &programs,
            options,
            scratch: &scratch,
            hidden,
            proc_mount: ProcMount::Fresh,
        };
        let (program, args) = plan.command_line("python3", &["server.py".to_owned()]);
        assert_eq!(program, PathBuf::from("/usr/bin/prlimit"));
        args.into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_sandbox_unshares_everything_binds_root_read_only_and_limits_the_process() {
        let line = plan_line(&SandboxOptions::default(), &[]);
        let joined = line.join(" ");
        assert!(joined.starts_with("--cpu=3600 --as=8589934592 --fsize=1073741824 --nofile=1024 --nproc=256 -- /usr/bin/bwrap --unshare-all --die-with-parent --new-session --ro-bind / /"), "{joined}");
        assert!(joined.contains("--tmpfs /tmp"), "{joined}");
        assert!(
            joined.contains("--bind /srv/scratch/server /srv/scratch/server"),
            "{joined}"
        );
        assert!(
            joined.ends_with("--chdir /srv/scratch/server -- python3 server.py"),
            "{joined}"
        );
    }

    #[test]
    fn the_workspace_is_read_only_unless_the_entry_says_rw() {
        for (writable, bind) in [(false, "--ro-bind"), (true, "--bind")] {
            let options = SandboxOptions {
                workspace: Some(Workspace {
                    path: PathBuf::from("/srv/project"),
                    writable,
                }),
                ..SandboxOptions::default()
            };
            let joined = plan_line(&options, &[]).join(" ");
            assert!(
                joined.contains(&format!("{bind} /srv/project /srv/project")),
                "{joined}"
            );
        }
    }

    #[test]
    fn hidden_directories_become_empty_and_hidden_files_read_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join(".aws");
        std::fs::create_dir(&store).unwrap();
        let netrc = dir.path().join(".netrc");
        std::fs::write(&netrc, "machine x password y").unwrap();
        let missing = dir.path().join(".ssh");
        let hidden = key_stores(&[dir.path().to_path_buf()]);
        assert_eq!(
            hidden,
            vec![store.clone(), netrc.clone()],
            "only what exists is hidden"
        );
        let joined = plan_line(&SandboxOptions::default(), &[hidden, vec![missing]].concat()).join(" ");
        assert!(
            joined.contains(&format!("--tmpfs {}", store.display())),
            "{joined}"
        );
        assert!(
            joined.contains(&format!("--ro-bind /dev/null {}", netrc.display())),
            "{joined}"
        );
        assert!(
            !joined.contains(".ssh"),
            "a missing path is not mounted: {joined}"
        );
    }

    #[test]
    fn a_missing_program_names_the_package_and_the_way_out() {
        let err = SandboxPrograms::find(Some("/nonexistent")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("bwrap") && text.contains("bubblewrap") && text.contains("\"sandbox\": \"off\""),
            "{text}"
        );
    }
}
