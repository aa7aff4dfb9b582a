//! A real `temporal server start-dev` for the Temporal process tests and the engines bench: free
//! loopback ports, its history in a SQLite file of the caller's directory, ready once the
//! cluster answers `operator cluster health` with SERVING, killed with its process group on drop.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::net::unused_port;
use crate::process::ChildGuard;

/// How long the dev server may take to serve (two slow cores, a cold SQLite file).
pub const SERVE_WITHIN: Duration = Duration::from_secs(90);

/// A dev server that serves.
#[derive(Debug)]
pub struct TemporalDevServer {
    _process: ChildGuard,
    /// Its frontend, `127.0.0.1:<port>` (`TEMPORAL_HOST`).
    pub host: String,
}

/// Why the dev server did not come up.
#[derive(Debug)]
pub struct NotServing(pub String);

impl std::fmt::Display for NotServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TemporalDevServer {
    /// Starts the CLI at `cli` (`Peer::Temporal`'s path) over `dir/temporal.db` and waits until it
    /// serves.
    ///
    /// # Errors
    /// When it cannot be started or does not serve within [`SERVE_WITHIN`].
    pub fn start(cli: &Path, dir: &Path) -> Result<Self, NotServing> {
        let port = unused_port();
        let process = ChildGuard::spawn(
            Command::new(cli)
                .args(["server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port"])
                .arg(port.to_string())
                .args(["--http-port", &unused_port().to_string()])
                .args(["--metrics-port", &unused_port().to_string()])
                .arg("--db-filename")
                .arg(dir.join("temporal.db"))
                .args(["--log-level", "error"])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .map_err(|e| NotServing(format!("{} could not start: {e}", cli.display())))?;
        let host = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + SERVE_WITHIN;
        loop {
            let health = Command::new(cli)
                .args(["operator", "cluster", "health", "--address", &host])
                .output()
                .map_err(|e| NotServing(format!("{} operator cluster health: {e}", cli.display())))?;
            if String::from_utf8_lossy(&health.stdout).contains("SERVING") {
                return Ok(Self {
                    _process: process,
                    host,
                });
            }
            if Instant::now() >= deadline {
                return Err(NotServing(format!(
                    "the Temporal dev server on {host} did not serve within {SERVE_WITHIN:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}
