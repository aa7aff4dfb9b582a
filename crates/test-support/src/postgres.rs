//! A real PostgreSQL server of the test's own: `initdb` on a temporary directory the server owns,
//! `postgres` on a free loopback port (its socket in that directory too), ready once `pg_isready`
//! says so; on drop stopped with `pg_ctl stop -m immediate` (which removes its shared-memory
//! segment), then its process group killed, then the directory removed. PostgreSQL refuses to run as root, so under root (CI) both run
//! as the Debian package's `postgres` user through `runuser`, on a directory handed to that user.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::net::unused_port;
use crate::process::ChildGuard;

/// How long a fresh cluster may take to accept connections on two slow cores.
pub const SERVE_WITHIN: Duration = Duration::from_secs(60);

/// The superuser `initdb` creates (no password: loopback connections are trusted).
pub const SUPERUSER: &str = "metaforge";

/// The account PostgreSQL runs as when the test runs as root (Debian's package creates it).
const SERVICE_ACCOUNT: &str = "postgres";

/// The newest `/usr/lib/postgresql/<major>/bin` holding `initdb`, `postgres`, `pg_isready` and
/// `pg_ctl`.
#[must_use]
pub fn server_bin_dir() -> Option<PathBuf> {
    let mut majors: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            ["initdb", "postgres", "pg_isready", "pg_ctl"]
                .iter()
                .all(|tool| bin.join(tool).exists())
                .then_some((major, bin))
        })
        .collect();
    majors.sort();
    majors.pop().map(|(_, bin)| bin)
}

/// A server that accepts connections.
#[derive(Debug)]
pub struct PostgresServer {
    process: ChildGuard,
    /// `postgres://metaforge@127.0.0.1:<port>/postgres` (`METAFORGE_DATABASE_URL`).
    pub url: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    bin: PathBuf,
    data: PathBuf,
    /// Removed after the server is stopped (fields drop after [`Drop::drop`], in order).
    dir: tempfile::TempDir,
}

/// Why the server did not come up.
#[derive(Debug)]
pub struct NotServing(pub String);

impl std::fmt::Display for NotServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// util-linux's `runuser`, by its path: it lives in `sbin`, which a root `PATH` may lack (a
/// plain `cargo test` from a minimal environment).
fn runuser() -> PathBuf {
    [
        "/usr/sbin/runuser",
        "/sbin/runuser",
        "/usr/bin/runuser",
        "/bin/runuser",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|path| path.exists())
    .unwrap_or_else(|| PathBuf::from("runuser"))
}

/// `program` from `bin`, run as the service account when this process is root.
fn as_server_user(bin: &Path, program: &str) -> Command {
    if running_as_root() {
        let mut command = Command::new(runuser());
        command.args(["-u", SERVICE_ACCOUNT, "--"]).arg(bin.join(program));
        command
    } else {
        Command::new(bin.join(program))
    }
}

impl PostgresServer {
    /// Creates a cluster in a temporary directory of its own with the binaries in `bin`
    /// ([`crate::Peer::Postgres`]'s path) and starts it on a free port.
    ///
    /// # Errors
    /// When the cluster cannot be created, the server cannot start, or it does not accept
    /// connections within [`SERVE_WITHIN`].
    pub fn start(bin: &Path) -> Result<Self, NotServing> {
        let owned_dir = tempfile::tempdir()
            .map_err(|e| NotServing(format!("no temporary directory for the cluster: {e}")))?;
        let dir = owned_dir.path();
        let data = dir.join("pgdata");
        if running_as_root() {
            // The service account must own the cluster and reach it through `dir`.
            let owned = Command::new("chown")
                .arg(format!("{SERVICE_ACCOUNT}:"))
                .arg(dir)
                .status()
                .map_err(|e| NotServing(format!("chown {}: {e}", dir.display())))?;
            if !owned.success() {
                return Err(NotServing(format!(
                    "cannot hand {} to the {SERVICE_ACCOUNT} account",
                    dir.display()
                )));
            }
        }
        let init = as_server_user(bin, "initdb")
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", SUPERUSER, "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .output()
            .map_err(|e| NotServing(format!("initdb could not start: {e}")))?;
        if !init.status.success() {
            return Err(NotServing(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&init.stderr)
            )));
        }
        let port = unused_port();
        let process = ChildGuard::spawn(
            as_server_user(bin, "postgres")
                .arg("-D")
                .arg(&data)
                .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-k"])
                .arg(&data)
                // Enough for two gateways and a worker with a pool per ledger each.
                .args(["-c", "max_connections=200", "-c", "fsync=on"])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .map_err(|e| NotServing(format!("postgres could not start: {e}")))?;
        let server = Self {
            process,
            url: format!("postgres://{SUPERUSER}@127.0.0.1:{port}/postgres"),
            port,
            bin: bin.to_owned(),
            data,
            dir: owned_dir,
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&self) -> Result<(), NotServing> {
        let deadline = Instant::now() + SERVE_WITHIN;
        loop {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &self.port.to_string(),
                    "-U",
                    SUPERUSER,
                    "-q",
                ])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(NotServing(format!(
                    "PostgreSQL on 127.0.0.1:{} did not accept connections within {SERVE_WITHIN:?} \
                     (its cluster: {})",
                    self.port,
                    self.data.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The directory holding the cluster (and the server's socket).
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills the server with SIGKILL (a crash: nothing flushed beyond what was committed; its
    /// shared-memory segment outlives it, as after any crash).
    pub fn kill(&mut self) {
        self.process.kill();
    }
}

impl Drop for PostgresServer {
    /// Stops the server the way an operator would (`pg_ctl stop -m immediate`), so its System V
    /// shared-memory segment is removed; a SIGKILL to the group follows for anything left.
    fn drop(&mut self) {
        let _ = as_server_user(&self.bin, "pg_ctl")
            .arg("stop")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "-t", "10"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        self.process.kill();
    }
}

/// Starts a server for the calling test, or `None` after the skip line when PostgreSQL is not
/// installed (see [`crate::require`]).
#[expect(
    clippy::panic,
    reason = "an installed PostgreSQL that cannot start fails the test, naming why"
)]
#[must_use]
pub fn start_postgres() -> Option<PostgresServer> {
    let bin = crate::require(crate::Peer::Postgres)?;
    Some(PostgresServer::start(&bin).unwrap_or_else(|e| panic!("{e}")))
}
