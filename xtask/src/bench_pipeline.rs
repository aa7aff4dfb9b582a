//! `cargo xtask bench pipeline`: starts aimock on a free loopback port, runs the pipeline
//! benchmark (crates/app/benches/pipeline.rs, release profile) against it, stops aimock by PID.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Runs the pipeline benchmark against a freshly started aimock.
pub(crate) fn run() -> Result<()> {
    let node_dir = std::env::var("METAFORGE_NODE_DIR").unwrap_or_else(|_| "/var/tmp/metaforge-node".into());
    let cli = PathBuf::from(&node_dir).join("node_modules/@copilotkit/aimock/dist/cli.js");
    if !cli.exists() {
        bail!(
            "aimock is not installed at {}: run `npm i --prefix {node_dir} @copilotkit/aimock @stdy/cli`",
            cli.display()
        );
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let fixtures = root.join("crates/adapters-llm/tests/fixtures/aimock.json");
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut child = Command::new("node")
        .arg(&cli)
        .args(["-p", &port.to_string(), "-h", "127.0.0.1", "-f"])
        .arg(&fixtures)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start aimock with node")?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("aimock did not listen on 127.0.0.1:{port} within 20s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = crate::cargo_command()
        .args(["bench", "-p", "metaforge-app", "--bench", "pipeline"])
        .env("METAFORGE_BENCH_AIMOCK_URL", format!("http://127.0.0.1:{port}"))
        .status();
    let _ = child.kill();
    let _ = child.wait();
    let status = status.context("cannot run cargo bench")?;
    if !status.success() {
        bail!("pipeline bench failed with {status}");
    }
    Ok(())
}
