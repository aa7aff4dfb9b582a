//! Child processes that die with their test. A peer started through a launcher (`node steady.js`
//! execs a native binary, `npx` forks node, a Python client starts `metaforge mcp serve`) leaves
//! grandchildren behind when only the direct child is killed. [`ChildGuard`] starts the child as the
//! leader of its own process group and, when dropped, sends SIGKILL to the whole group and reaps the
//! child, so a failing assertion never leaves a listener behind.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A spawned child in its own process group, killed with its whole group on drop.
#[derive(Debug)]
pub struct ChildGuard {
    child: Child,
    killed: bool,
}

impl ChildGuard {
    /// Spawns `command` as the leader of a new process group.
    ///
    /// # Errors
    /// When the program cannot be started.
    pub fn spawn(command: &mut Command) -> io::Result<Self> {
        let child = command.process_group(0).spawn()?;
        Ok(Self { child, killed: false })
    }

    /// The child's pid (also its process group id).
    #[must_use]
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The child itself, to take its stdout or poll it.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Kills the whole process group (SIGKILL) and reaps the child; idempotent.
    pub fn kill(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        kill_group(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `command` to completion in its own process group, collecting its output, then kills
/// whatever it left running in that group (e.g. a server a client started over stdio).
///
/// # Errors
/// When the program cannot be started or its output cannot be read.
pub fn output(command: &mut Command) -> io::Result<Output> {
    let child = command
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let pgid = child.id();
    let result = child.wait_with_output();
    kill_group(pgid);
    result
}

/// SIGKILL to the process group `pgid`; a group already gone is not an error.
fn kill_group(pgid: u32) {
    if let Ok(raw) = i32::try_from(pgid) {
        let _ = killpg(Pid::from_raw(raw), Signal::SIGKILL);
    }
}
