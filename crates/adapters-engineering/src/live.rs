//! A program that stays running in its own sandbox and scratch directory, spoken to one line at
//! a time over its stdin and stdout: a modelling session whose state lives in the program (a
//! FreeCAD document) between calls. Everything the program prints that is not an answer is kept
//! (its last lines) for the error a crash is reported with.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metaforge_sandbox::ProcMount;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::runner::{RunError, Runner};

/// How many lines of the program's own printing are kept for a crash report.
const KEPT_LINES: usize = 40;

/// The last lines a program printed, on stdout (beside its answers) and stderr.
type Printed = Arc<Mutex<VecDeque<String>>>;

fn keep(printed: &Printed, line: String) {
    if let Ok(mut lines) = printed.lock() {
        if lines.len() == KEPT_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }
}

/// A running program and its scratch directory (removed when the program is dropped).
pub struct LiveProgram {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    printed: Printed,
    scratch: tempfile::TempDir,
}

impl LiveProgram {
    /// The scratch directory the program works in (its own files, and files put there for it).
    pub fn scratch(&self) -> &Path {
        self.scratch.path()
    }

    /// Sends `line`, then reads until a line carries `marker`: the text after it. The program
    /// is stopped when it does not answer within `wait` (its state can no longer be trusted).
    ///
    /// # Errors
    /// [`RunError::TimedOut`] past `wait`; [`RunError::Ended`] when the program exits or its pipe
    /// breaks.
    pub async fn ask(&mut self, line: &str, marker: &str, wait: Duration) -> Result<String, RunError> {
        let send = async {
            self.stdin.write_all(line.as_bytes()).await?;
            self.stdin.write_all(b"\n").await?;
            self.stdin.flush().await
        };
        if send.await.is_err() {
            return Err(self.ended().await);
        }
        self.answer(marker, wait).await
    }

    /// Reads until a line carries `marker`.
    async fn answer(&mut self, marker: &str, wait: Duration) -> Result<String, RunError> {
        let read = async {
            loop {
                match self.stdout.next_line().await {
                    Ok(Some(line)) => match line.find(marker) {
                        Some(at) => return Some(line[at + marker.len()..].to_owned()),
                        None => keep(&self.printed, line),
                    },
                    Ok(None) | Err(_) => return None,
                }
            }
        };
        match tokio::time::timeout(wait, read).await {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Err(self.ended().await),
            Err(_) => {
                let _killed = self.child.kill().await;
                Err(RunError::TimedOut(wait))
            }
        }
    }

    /// The program is gone: what it last printed.
    async fn ended(&mut self) -> RunError {
        let _killed = self.child.kill().await;
        // Let the stderr reader take the last lines.
        tokio::time::sleep(Duration::from_millis(50)).await;
        RunError::Ended(self.printed_tail())
    }

    fn printed_tail(&self) -> String {
        self.printed
            .lock()
            .map(|lines| lines.iter().cloned().collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    }

    /// Stops the program and removes its scratch directory.
    pub async fn stop(mut self) {
        let _killed = self.child.kill().await;
    }
}

impl Runner {
    /// Starts the program with `args` in a fresh scratch directory holding `inputs`, in its own
    /// sandbox, and waits up to `wait` for its first line carrying `marker` (its greeting): the
    /// program, and the greeting's text.
    ///
    /// # Errors
    /// [`RunError::Start`] when it cannot be started, [`RunError::Ended`] when it exits before
    /// greeting, [`RunError::TimedOut`] when it does not greet in time.
    pub async fn start(
        &self,
        inputs: &[(&str, &str)],
        args: &[String],
        marker: &str,
        wait: Duration,
    ) -> Result<(LiveProgram, String), RunError> {
        let first = self.proc_mount();
        match self.start_with(inputs, args, marker, wait, first).await {
            Err(RunError::Ended(printed))
                if first == ProcMount::Fresh && printed.contains("Can't mount proc") =>
            {
                self.mark_nested();
                self.start_with(inputs, args, marker, wait, ProcMount::Outer)
                    .await
            }
            other => other,
        }
    }

    async fn start_with(
        &self,
        inputs: &[(&str, &str)],
        args: &[String],
        marker: &str,
        wait: Duration,
        proc_mount: ProcMount,
    ) -> Result<(LiveProgram, String), RunError> {
        let scratch = self.scratch(inputs)?;
        let mut command = self.command(scratch.path(), args, proc_mount);
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|e| RunError::Start(format!("{}: {e}", self.program().display())))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(RunError::Start(
                "the program's pipes could not be opened".to_owned(),
            ));
        };
        let printed: Printed = Arc::default();
        let errors = Arc::clone(&printed);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                keep(&errors, line);
            }
        });
        let mut program = LiveProgram {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
            printed,
            scratch,
        };
        let greeting = program.answer(marker, wait).await?;
        Ok((program, greeting))
    }
}
