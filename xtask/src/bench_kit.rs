//! What `cargo xtask bench gateway` and `bench mcp` share: processes stopped by PID, wrk runs
//! pinned to a core, RSS sampling, the light fixed-response upstream, and the table printer.
//!
//! Pinning (issue 13): the systems under test run on core 1 (`taskset -c 1`), the load generator
//! and the upstream on core 0 (`taskset -c 0`), so the servers compare on one core each.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The core the systems under test run on.
pub(crate) const SUT_CORE: &str = "1";
/// The core the load generator and the upstream run on.
pub(crate) const LOAD_CORE: &str = "0";
/// The connection counts every bench runs at.
pub(crate) const CONCURRENCY: [u32; 4] = [1, 8, 64, 256];

/// A child process stopped (by PID) when dropped.
pub(crate) struct Guard(pub(crate) Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `program args…` pinned to `core` with taskset.
pub(crate) fn pinned(core: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new("taskset");
    command.args(["-c", core]).arg(program);
    command
}

/// A loopback port nothing listens on right now.
pub(crate) fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until `port` accepts connections.
pub(crate) fn wait_listening(port: u16, within: Duration, what: &str) -> Result<()> {
    let deadline = Instant::now() + within;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("{what} did not listen on 127.0.0.1:{port} within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Resident set size in kB of `pid` and its children (uvicorn, node), from /proc.
pub(crate) fn rss_kb(pid: u32) -> Option<u64> {
    let own = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())?;
    let children: u64 = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.parse::<u32>().ok())
        .filter_map(rss_kb)
        .sum();
    Some(own + children)
}

/// MiB, or `?`.
pub(crate) fn mib(kb: Option<u64>) -> String {
    kb.map_or_else(|| "?".to_owned(), |kb| format!("{:.1}", kb as f64 / 1024.0))
}

/// One wrk run's figures.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Figures {
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) rps: f64,
    /// RSS of the system under test sampled mid-run, kB.
    pub(crate) rss_load_kb: Option<u64>,
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
    if output.lines().any(|l| l.contains("Non-2xx")) {
        bail!("wrk saw non-2xx answers:\n{output}");
    }
    match (percentile("50%"), percentile("99%"), rps) {
        (Some(p50_ms), Some(p99_ms), Some(rps)) => Ok(Figures {
            p50_ms,
            p99_ms,
            rps,
            rss_load_kb: None,
        }),
        _ => bail!("cannot read wrk's output:\n{output}"),
    }
}

/// A wrk Lua script posting `body` with `headers`.
pub(crate) fn write_script(
    dir: &Path,
    name: &str,
    body: &str,
    headers: &[(&str, String)],
) -> Result<std::path::PathBuf> {
    let mut lua = format!("wrk.method = \"POST\"\nwrk.body = [[{body}]]\n");
    for (k, v) in headers {
        lua.push_str(&format!("wrk.headers[\"{k}\"] = \"{v}\"\n"));
    }
    let path = dir.join(format!("{name}.lua"));
    std::fs::write(&path, lua)?;
    Ok(path)
}

/// A wrk script posting the JSON-RPC request `body` (its `"id":1`) with a fresh id on every
/// request: one MCP session's requests in flight at once must carry distinct ids (a session
/// answers by id), so eight connections replaying `"id":1` would wait on each other's answers.
/// Each wrk thread counts from its own offset.
pub(crate) fn write_rpc_script(
    dir: &Path,
    name: &str,
    body: &str,
    headers: &[(&str, String)],
) -> Result<std::path::PathBuf> {
    let (before, after) = body
        .split_once("\"id\":1")
        .with_context(|| format!("{name}: the request body has no \"id\":1 to number"))?;
    let mut lua = String::from("wrk.method = \"POST\"\n");
    for (k, v) in headers {
        lua.push_str(&format!("wrk.headers[\"{k}\"] = \"{v}\"\n"));
    }
    lua.push_str(&format!(
        "local before = [[{before}\"id\":]]\nlocal after = [[{after}]]\n\
         local threads = 0\n\
         function setup(thread)\n  threads = threads + 1\n  thread:set(\"first\", threads * 1000000000)\nend\n\
         local counter = 0\n\
         function init(args)\n  counter = first or 0\nend\n\
         function request()\n  counter = counter + 1\n  return wrk.format(nil, nil, nil, before .. counter .. after)\nend\n"
    ));
    let path = dir.join(format!("{name}.lua"));
    std::fs::write(&path, lua)?;
    Ok(path)
}

/// wrk on the load core with `connections` kept-alive connections for `seconds`; samples the RSS
/// of `sut` (when given) halfway through.
pub(crate) fn wrk(
    url: &str,
    script: &Path,
    connections: u32,
    seconds: u64,
    sut: Option<u32>,
) -> Result<Figures> {
    let threads = connections.min(2);
    let child = pinned(LOAD_CORE, "wrk")
        .args([
            &format!("-t{threads}"),
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
            "--latency",
            "--timeout",
            "10s",
            "-s",
        ])
        .arg(script)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot run wrk (apt-get install -y wrk)")?;
    std::thread::sleep(Duration::from_millis(seconds * 500));
    let rss = sut.and_then(rss_kb);
    let out = child.wait_with_output()?;
    let mut figures = parse_wrk(&String::from_utf8_lossy(&out.stdout))?;
    figures.rss_load_kb = rss;
    Ok(figures)
}

/// Seconds per wrk run (`METAFORGE_BENCH_SECONDS`, default 3).
pub(crate) fn bench_seconds() -> u64 {
    std::env::var("METAFORGE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

/// The release `metaforge` binary, built if needed; `METAFORGE_BENCH_BINARY` names another one
/// (e.g. a build of the base commit, for a before/after table).
pub(crate) fn release_binary() -> Result<std::path::PathBuf> {
    if let Ok(path) = std::env::var("METAFORGE_BENCH_BINARY") {
        return Ok(path.into());
    }
    crate::run("cargo", &["build", "--release", "-p", "metaforge-bins"])?;
    let target = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata failed")?
        .target_directory;
    Ok(target.join("release").join("metaforge").into_std_path_buf())
}

/// The fixed chat completion the light upstream answers.
const COMPLETION: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;

/// `cargo xtask bench upstream PORT`: the light OpenAI-compatible upstream written for the
/// benches (aimock's own ~3 ms p99 hides sub-millisecond overhead). Every request on a kept-alive
/// connection gets the same completion; one thread per connection; runs until killed.
pub(crate) fn serve_upstream(port: u16) -> Result<()> {
    let listener =
        TcpListener::bind(("127.0.0.1", port)).with_context(|| format!("bind 127.0.0.1:{port}"))?;
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{COMPLETION}",
        COMPLETION.len()
    );
    for stream in listener.incoming().flatten() {
        let reply = reply.clone();
        std::thread::spawn(move || answer_connection(stream, reply.as_bytes()));
    }
    Ok(())
}

fn answer_connection(stream: TcpStream, reply: &[u8]) {
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::with_capacity(16 * 1024, stream);
    let mut line = String::new();
    loop {
        let mut length = 0_usize;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() || reader.get_mut().write_all(reply).is_err() {
            return;
        }
    }
}

/// Starts the light upstream (this xtask binary, `bench upstream PORT`) on the load core.
pub(crate) fn start_light_upstream() -> Result<(Guard, u16)> {
    let port = free_port()?;
    let exe = std::env::current_exe().context("the xtask binary")?;
    let child = pinned(LOAD_CORE, exe)
        .args(["bench", "upstream", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start the light upstream")?;
    let guard = Guard(child);
    wait_listening(port, Duration::from_secs(10), "light upstream")?;
    Ok((guard, port))
}

/// Warms `name` up, then measures it at each of [`CONCURRENCY`] into `rows`. One failed cell (a
/// peer timing out at c=256) is said and skipped, so it does not lose the others.
pub(crate) fn measure_cells(
    rows: &mut Vec<Row>,
    name: &str,
    url: &str,
    script: &Path,
    seconds: u64,
    sut: Option<u32>,
) -> Result<()> {
    wrk(url, script, 2, 1, None).with_context(|| format!("warm-up of {name}"))?;
    for c in CONCURRENCY {
        match wrk(url, script, c, seconds, sut) {
            Ok(figures) => rows.push(Row {
                target: name.to_owned(),
                connections: c,
                figures,
            }),
            Err(err) => println!("{name} at c={c}: not measured: {err:#}"),
        }
    }
    Ok(())
}

/// One row of a results table.
pub(crate) struct Row {
    pub(crate) target: String,
    pub(crate) connections: u32,
    pub(crate) figures: Figures,
}

/// Prints `rows` with the added latency over `baseline` (same connection count) and the ratios
/// against `peer` (same connection count).
pub(crate) fn print_table(
    title: &str,
    rows: &[Row],
    baseline: Option<&str>,
    ours: &str,
    peer: &str,
    idle: &[(String, Option<u64>)],
) {
    println!();
    println!("{title}");
    println!(
        "{:<34} {:>4} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "target", "c", "req/s", "p50 ms", "p99 ms", "+p50 ms", "+p99 ms", "RSS MiB"
    );
    for row in rows {
        let base = baseline.and_then(|b| {
            rows.iter()
                .find(|r| r.target == b && r.connections == row.connections)
        });
        let (added50, added99) = match base {
            Some(b) if b.target != row.target => (
                format!("{:+.3}", row.figures.p50_ms - b.figures.p50_ms),
                format!("{:+.3}", row.figures.p99_ms - b.figures.p99_ms),
            ),
            _ => ("—".to_owned(), "—".to_owned()),
        };
        println!(
            "{:<34} {:>4} {:>10.0} {:>9.3} {:>9.3} {:>9} {:>9} {:>9}",
            row.target,
            row.connections,
            row.figures.rps,
            row.figures.p50_ms,
            row.figures.p99_ms,
            added50,
            added99,
            mib(row.figures.rss_load_kb)
        );
    }
    for c in CONCURRENCY {
        let find = |name: &str| rows.iter().find(|r| r.target == name && r.connections == c);
        if let (Some(a), Some(b)) = (find(ours), find(peer)) {
            println!(
                "c={c:<4} {ours} / {peer}: req/s x{:.1}, p50 x{:.2}, p99 x{:.2}, RSS under load x{:.2}",
                a.figures.rps / b.figures.rps,
                a.figures.p50_ms / b.figures.p50_ms,
                a.figures.p99_ms / b.figures.p99_ms,
                match (a.figures.rss_load_kb, b.figures.rss_load_kb) {
                    (Some(x), Some(y)) if y > 0 => x as f64 / y as f64,
                    _ => f64::NAN,
                }
            );
        }
    }
    let idle: Vec<String> = idle
        .iter()
        .map(|(n, kb)| format!("{n} {} MiB", mib(*kb)))
        .collect();
    println!("idle RSS: {}", idle.join(", "));
    println!("(2 shared cores, other agents running: figures are noisy)");
}
