//! One engineering program run: a fresh scratch directory holding its input files, the program
//! started in its own sandbox there (nested inside the tool server's sandbox when it has one),
//! its output and result files read back, the directory removed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use metaforge_ports::SandboxReport;
use metaforge_sandbox::{
    ProcMount, ResourceLimits, SandboxOptions, SandboxPlan, SandboxPrograms, key_stores,
};
use tokio::io::AsyncReadExt;

/// The most output (stdout and stderr together) kept from one run.
pub const MAX_OUTPUT_BYTES: usize = 4 * 1024 * 1024;

/// How a program runs: where it is, its limits, how long it may take.
#[derive(Debug)]
pub struct Runner {
    programs: Option<SandboxPrograms>,
    /// Set once a fresh `/proc` could not be mounted: this process runs in a sandbox itself.
    nested: std::sync::atomic::AtomicBool,
    program: PathBuf,
    limits: ResourceLimits,
    wall: Duration,
    hidden: Vec<PathBuf>,
}

/// What one run produced.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// stdout then stderr, cut at [`MAX_OUTPUT_BYTES`].
    pub output: String,
    /// The exit code (`None` when a signal ended it).
    pub status: Option<i32>,
    /// The files asked for, by name (`dir/file` for a directory's), as the run left them (absent
    /// when it wrote none).
    pub files: BTreeMap<String, String>,
    /// How long it took.
    pub elapsed: Duration,
}

/// Why a run did not produce output.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The program ran past its wall-time limit and was killed.
    #[error("the run took longer than its limit of {0:?} and was stopped")]
    TimedOut(Duration),
    /// The sandbox or the program could not be started.
    #[error("could not start the run: {0}")]
    Start(String),
    /// A program that was to keep running (a session's) ended; what it last printed.
    #[error("the program ended unexpectedly")]
    Ended(String),
}

impl Runner {
    /// Runs `program` sandboxed with `limits` and at most `wall` of wall time. `sandboxed`
    /// false runs it as a plain child (a server whose entry turned its sandbox off).
    ///
    /// # Errors
    /// When the sandbox's programs cannot be found on `path`.
    pub fn new(
        program: PathBuf,
        limits: ResourceLimits,
        wall: Duration,
        sandboxed: bool,
        path: Option<&str>,
        user_homes: &[PathBuf],
    ) -> Result<Self, metaforge_sandbox::SandboxUnavailable> {
        let programs = if sandboxed {
            Some(SandboxPrograms::find(path)?)
        } else {
            None
        };
        Ok(Self {
            programs,
            nested: std::sync::atomic::AtomicBool::new(false),
            program,
            limits,
            wall,
            hidden: key_stores(user_homes),
        })
    }

    /// The program's path.
    pub fn program(&self) -> &std::path::Path {
        &self.program
    }

    /// The sandbox every run has, as a result reports it.
    pub fn sandbox_report(&self) -> SandboxReport {
        SandboxReport {
            sandboxed: self.programs.is_some(),
            cpu_seconds: self.limits.cpu_seconds,
            memory_mb: self.limits.memory_mb,
            file_size_mb: self.limits.file_size_mb,
            wall_seconds: self.wall.as_secs(),
        }
    }

    /// The limits every run has.
    pub fn limits(&self) -> ResourceLimits {
        self.limits
    }

    /// Runs the program with `args` in a fresh scratch directory holding `inputs`, then reads
    /// back the files named in `outputs` (a name ending in `/`: every file in that directory).
    ///
    /// # Errors
    /// [`RunError::TimedOut`] past the wall-time limit; [`RunError::Start`] when the scratch
    /// directory or the process cannot be made.
    pub async fn run(
        &self,
        inputs: &[(&str, &str)],
        args: &[String],
        outputs: &[&str],
    ) -> Result<RunOutput, RunError> {
        let scratch = self.scratch(inputs)?;
        let started = Instant::now();
        let first = self.proc_mount();
        let mut result = self.run_in(scratch.path(), args, first).await?;
        if first == ProcMount::Fresh && self.programs.is_some() && result.output.contains("Can't mount proc")
        {
            self.mark_nested();
            result = self.run_in(scratch.path(), args, ProcMount::Outer).await?;
        }
        let mut files = BTreeMap::new();
        for name in outputs {
            match name.strip_suffix('/') {
                // A directory: every text file the run left directly in it, as `dir/file`.
                Some(dir) => {
                    let Ok(entries) = std::fs::read_dir(scratch.path().join(dir)) else {
                        continue;
                    };
                    for entry in entries.flatten() {
                        let file = entry.file_name().to_string_lossy().into_owned();
                        if let Ok(text) = std::fs::read_to_string(entry.path()) {
                            files.insert(format!("{dir}/{file}"), text);
                        }
                    }
                }
                None => {
                    if let Ok(text) = std::fs::read_to_string(scratch.path().join(name)) {
                        files.insert((*name).to_owned(), text);
                    }
                }
            }
        }
        Ok(RunOutput {
            output: result.output,
            status: result.status,
            files,
            elapsed: started.elapsed(),
        })
    }

    /// A fresh scratch directory holding `inputs`.
    pub(crate) fn scratch(&self, inputs: &[(&str, &str)]) -> Result<tempfile::TempDir, RunError> {
        let scratch = tempfile::Builder::new()
            .prefix("metaforge-run-")
            .tempdir()
            .map_err(|e| RunError::Start(format!("scratch directory: {e}")))?;
        for (name, text) in inputs {
            std::fs::write(scratch.path().join(name), text)
                .map_err(|e| RunError::Start(format!("writing {name}: {e}")))?;
        }
        Ok(scratch)
    }

    /// How a run mounts `/proc`: fresh, until a run found it cannot.
    pub(crate) fn proc_mount(&self) -> ProcMount {
        if self.nested.load(std::sync::atomic::Ordering::Relaxed) {
            ProcMount::Outer
        } else {
            ProcMount::Fresh
        }
    }

    /// Inside a tool server's own sandbox a fresh /proc cannot be mounted: the nested sandbox
    /// shows the outer one's instead, from now on.
    pub(crate) fn mark_nested(&self) {
        self.nested.store(true, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(
            event = "engineering_sandbox_nested",
            "running programs in sandboxes nested in this server's own"
        );
    }

    /// The program with `args` in `scratch`, in its sandbox unless the server's entry turned it
    /// off, with a clean environment; the caller sets its pipes.
    pub(crate) fn command(
        &self,
        scratch: &std::path::Path,
        args: &[String],
        proc_mount: ProcMount,
    ) -> tokio::process::Command {
        let program = self.program.display().to_string();
        let mut command = match &self.programs {
            Some(programs) => {
                let options = SandboxOptions {
                    limits: self.limits,
                    ..SandboxOptions::default()
                };
                let plan = SandboxPlan {
                    programs,
                    options: &options,
                    scratch,
                    hidden: &self.hidden,
                    proc_mount,
                };
                let (prlimit, argv) = plan.command_line(&program, args);
                let mut command = tokio::process::Command::new(prlimit);
                command.args(argv);
                command
            }
            None => {
                let mut command = tokio::process::Command::new(&program);
                command.args(args);
                command
            }
        };
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", scratch)
            .env("LANG", "C.UTF-8")
            .current_dir(scratch)
            .kill_on_drop(true);
        command
    }

    async fn run_in(
        &self,
        scratch: &std::path::Path,
        args: &[String],
        proc_mount: ProcMount,
    ) -> Result<Finished, RunError> {
        let program = self.program.display().to_string();
        let mut command = self.command(scratch, args, proc_mount);
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|e| RunError::Start(format!("{program}: {e}")))?;
        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let collect = async {
            let read_out = async {
                let mut out = Vec::new();
                if let Some(s) = stdout.as_mut() {
                    let _ = s.take(MAX_OUTPUT_BYTES as u64).read_to_end(&mut out).await;
                }
                out
            };
            let read_err = async {
                let mut err = Vec::new();
                if let Some(s) = stderr.as_mut() {
                    let _ = s.take(MAX_OUTPUT_BYTES as u64).read_to_end(&mut err).await;
                }
                err
            };
            let (out, err) = tokio::join!(read_out, read_err);
            let status = child.wait().await;
            (out, err, status)
        };
        let (out, err, status) = tokio::time::timeout(self.wall, collect)
            .await
            .map_err(|_| RunError::TimedOut(self.wall))?;
        let mut output = String::from_utf8_lossy(&out).into_owned();
        output.push_str(&String::from_utf8_lossy(&err));
        if output.len() > MAX_OUTPUT_BYTES {
            let cut = (0..=MAX_OUTPUT_BYTES)
                .rev()
                .find(|&i| output.is_char_boundary(i))
                .unwrap_or(0);
            output.truncate(cut);
        }
        Ok(Finished {
            output,
            status: status.ok().and_then(|s| s.code()),
        })
    }
}

struct Finished {
    output: String,
    status: Option<i32>,
}
