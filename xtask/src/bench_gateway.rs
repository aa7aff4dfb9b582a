//! `cargo xtask bench gateway`: the gateway's overhead against the upstream it fronts, and against
//! LiteLLM's proxy fronting the same upstream.
//!
//! Release build; aimock on a free loopback port; `metaforge gateway` (release) and the LiteLLM
//! proxy both routed to that aimock; the same wrk load (POST chat completion, 2 connections,
//! bounded duration) against all three in interleaved rounds. Prints p50/p99 latency, requests/s,
//! the ratios, and the idle RSS of both proxies. Every process started here is stopped by PID.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cargo_metadata::MetadataCommand;

/// The LiteLLM master key (not the default one).
const LITELLM_KEY: &str = "sk-metaforge-bench-7f3a";

/// A child process stopped (by PID) when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_listening(port: u16, within: Duration, what: &str) -> Result<()> {
    let deadline = Instant::now() + within;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("{what} did not listen on 127.0.0.1:{port} within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Resident set size in kB, from /proc/PID/status.
fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// One wrk run's figures.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    p50_ms: f64,
    p99_ms: f64,
    rps: f64,
}

fn to_ms(value: &str) -> Option<f64> {
    let (number, factor) = if let Some(n) = value.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = value.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = value.strip_suffix('s') {
        (n, 1000.0)
    } else {
        (value, 1.0)
    };
    number.parse::<f64>().ok().map(|n| n * factor)
}

fn parse_wrk(output: &str) -> Result<Figures> {
    let percentile = |p: &str| {
        output
            .lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(p))
            .and_then(|rest| to_ms(rest.trim()))
    };
    let rps = output
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok());
    let non_2xx = output.lines().any(|l| l.contains("Non-2xx"));
    if non_2xx {
        bail!("wrk saw non-2xx answers:\n{output}");
    }
    match (percentile("50%"), percentile("99%"), rps) {
        (Some(p50_ms), Some(p99_ms), Some(rps)) => Ok(Figures { p50_ms, p99_ms, rps }),
        _ => bail!("cannot read wrk's output:\n{output}"),
    }
}

fn write_script(dir: &Path, name: &str, model: &str, bearer: &str) -> Result<PathBuf> {
    let body =
        serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let lua = format!(
        "wrk.method = \"POST\"\nwrk.body = [[{body}]]\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.headers[\"Authorization\"] = \"Bearer {bearer}\"\n"
    );
    let path = dir.join(format!("{name}.lua"));
    std::fs::write(&path, lua)?;
    Ok(path)
}

fn wrk(url: &str, script: &Path, seconds: u64) -> Result<Figures> {
    let out = Command::new("wrk")
        .args(["-t1", "-c2", &format!("-d{seconds}s"), "--latency", "-s"])
        .arg(script)
        .arg(url)
        .output()
        .context("cannot run wrk (apt-get install -y wrk)")?;
    parse_wrk(&String::from_utf8_lossy(&out.stdout))
}

fn start_aimock(root: &Path) -> Result<(Guard, u16)> {
    let node_dir = std::env::var("METAFORGE_NODE_DIR").unwrap_or_else(|_| "/var/tmp/metaforge-node".into());
    let cli = PathBuf::from(&node_dir).join("node_modules/@copilotkit/aimock/dist/cli.js");
    if !cli.exists() {
        bail!(
            "aimock is not installed at {}: run `npm i --prefix {node_dir} @copilotkit/aimock`",
            cli.display()
        );
    }
    let port = free_port()?;
    let child = Command::new("node")
        .arg(&cli)
        .args(["-p", &port.to_string(), "-h", "127.0.0.1", "-f"])
        .arg(root.join("crates/adapters-llm/tests/fixtures/aimock.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start aimock with node")?;
    let guard = Guard(child);
    wait_listening(port, Duration::from_secs(20), "aimock")?;
    Ok((guard, port))
}

fn start_gateway(binary: &Path, scratch: &Path, aimock: u16) -> Result<(Guard, String)> {
    let mut child = Command::new(binary)
        .args(["gateway", "--bind", "127.0.0.1:0"])
        .env("METAFORGE_HOME", scratch.join("home"))
        .env("METAFORGE_CREDENTIALS_PATH", scratch.join("credentials.json"))
        .env("HARNESS_OPENAI_BASE_URL", format!("http://127.0.0.1:{aimock}/v1"))
        .env("OPENAI_API_KEY", "sk-bench-aimock")
        .env("METAFORGE_ROUTE_CHAT", "openai:gpt-4o-mini")
        .env("METAFORGE_GATEWAY_RATE_LIMIT_PER_MINUTE", "0")
        .env("METAFORGE_LOG", "warn")
        .env("RUST_LOG", "warn")
        .env_remove("METAFORGE_GATEWAY_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start the release gateway")?;
    let stdout = child.stdout.take().context("gateway stdout")?;
    let guard = Guard(child);
    let mut banner = String::new();
    BufReader::new(stdout).read_line(&mut banner)?;
    let addr = banner
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .with_context(|| format!("the gateway banner names no address: {banner:?}"))?
        .to_owned();
    Ok((guard, addr))
}

/// Installs (if needed) and starts the LiteLLM proxy; the error says exactly what failed.
fn start_litellm(scratch: &Path, aimock: u16) -> Result<(Guard, u16)> {
    let have = Command::new("litellm")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        let status = Command::new("pip")
            .args(["install", "-q", "litellm[proxy]"])
            .status()
            .context("cannot run pip")?;
        if !status.success() {
            bail!("pip install 'litellm[proxy]' failed with {status}");
        }
    }
    let config = scratch.join("litellm.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: chat\n    litellm_params:\n      model: openai/gpt-4o-mini\n      api_base: http://127.0.0.1:{aimock}/v1\n      api_key: sk-bench-aimock\ngeneral_settings:\n  master_key: {LITELLM_KEY}\n"
        ),
    )?;
    let port = free_port()?;
    let log = std::fs::File::create(scratch.join("litellm.log"))?;
    let child = Command::new("litellm")
        .arg("--config")
        .arg(&config)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--num_workers",
            "1",
        ])
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("cannot start litellm")?;
    let guard = Guard(child);
    if let Err(err) = wait_listening(port, Duration::from_secs(120), "litellm") {
        let log = std::fs::read_to_string(scratch.join("litellm.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        bail!(
            "{err}; last log lines:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok((guard, port))
}

/// Runs the benchmark and prints the table.
pub(crate) fn run() -> Result<()> {
    let seconds: u64 = std::env::var("METAFORGE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let rounds: u32 = 2;
    crate::run("cargo", &["build", "--release", "-p", "metaforge-bins"])?;
    let target = MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata failed")?
        .target_directory;
    let binary = target.join("release").join("metaforge");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let scratch = std::env::temp_dir().join(format!("metaforge-bench-gateway-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;

    let (_aimock, aimock_port) = start_aimock(&root)?;
    let (gateway, gateway_addr) = start_gateway(binary.as_std_path(), &scratch, aimock_port)?;
    std::thread::sleep(Duration::from_secs(1));
    let gateway_rss = rss_kb(gateway.0.id());
    let litellm = match start_litellm(&scratch, aimock_port) {
        Ok(started) => Some(started),
        Err(err) => {
            println!("LiteLLM not benchmarked: {err:#}");
            None
        }
    };
    let litellm_rss = litellm.as_ref().and_then(|(g, _)| {
        std::thread::sleep(Duration::from_secs(2));
        rss_kb(g.0.id())
    });

    let mut targets: Vec<(&str, String, PathBuf)> = vec![
        (
            "aimock direct",
            format!("http://127.0.0.1:{aimock_port}/v1/chat/completions"),
            write_script(&scratch, "direct", "gpt-4o-mini", "sk-bench-aimock")?,
        ),
        (
            "metaforge gateway",
            format!("http://{gateway_addr}/v1/chat/completions"),
            write_script(&scratch, "gateway", "chat", "none")?,
        ),
    ];
    if let Some((_, port)) = &litellm {
        targets.push((
            "litellm proxy",
            format!("http://127.0.0.1:{port}/v1/chat/completions"),
            write_script(&scratch, "litellm", "chat", LITELLM_KEY)?,
        ));
    }
    // Warm-up, then interleaved rounds so drift on a shared machine hits every target alike.
    for (name, url, script) in &targets {
        wrk(url, script, 2).with_context(|| format!("warm-up of {name}"))?;
    }
    let mut sums = vec![Figures::default(); targets.len()];
    for _ in 0..rounds {
        for (i, (name, url, script)) in targets.iter().enumerate() {
            let f = wrk(url, script, seconds).with_context(|| format!("load on {name}"))?;
            sums[i].p50_ms += f.p50_ms / f64::from(rounds);
            sums[i].p99_ms += f.p99_ms / f64::from(rounds);
            sums[i].rps += f.rps / f64::from(rounds);
        }
    }
    println!();
    println!("wrk -t1 -c2, {rounds} interleaved rounds of {seconds}s each (mean of rounds)");
    println!(
        "{:<18} {:>10} {:>10} {:>11}",
        "target", "p50 ms", "p99 ms", "req/s"
    );
    for ((name, _, _), f) in targets.iter().zip(&sums) {
        println!("{name:<18} {:>10.3} {:>10.3} {:>11.1}", f.p50_ms, f.p99_ms, f.rps);
    }
    let ratio = |a: &Figures, b: &Figures| {
        format!(
            "p50 x{:.2}  p99 x{:.2}  req/s x{:.2}",
            a.p50_ms / b.p50_ms,
            a.p99_ms / b.p99_ms,
            a.rps / b.rps
        )
    };
    println!("gateway / direct:   {}", ratio(&sums[1], &sums[0]));
    if let Some(l) = sums.get(2) {
        println!("litellm / direct:   {}", ratio(l, &sums[0]));
        println!("gateway / litellm:  {}", ratio(&sums[1], l));
    }
    let show = |kb: Option<u64>| {
        kb.map_or_else(
            || "unknown".to_owned(),
            |kb| format!("{:.1} MiB", kb as f64 / 1024.0),
        )
    };
    println!(
        "idle RSS: metaforge gateway {}  litellm {}",
        show(gateway_rss),
        show(litellm_rss)
    );
    drop(litellm);
    drop(gateway);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
