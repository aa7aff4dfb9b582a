//! `cargo xtask bench console [N]`: the approvals page with N pending holds (default 500) from a
//! release `metaforge gateway` over SQLite on a scratch home (issue 18: under 50 ms server-side,
//! under 200 KB on the wire).
//!
//! The holds are parked through `POST /v1/chat/tool_approvals` (each a twin write of a few
//! hundred bytes of arguments, as a chat turn parks them). Then `GET /approvals` is asked 200
//! times one after another by curl, as a browser asks it (`Accept-Encoding: gzip`, the session
//! cookie of the first answer): the time to the first byte (the server's work: reading the
//! ledger and rendering the page), the whole exchange, and the bytes transferred, compressed and
//! not. Prints p50, p99 and max, and PASS or FAIL against the targets.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::bench_kit::{Guard, SUT_CORE, pinned, release_binary, wait_listening};

/// How many times the page is asked for.
const ASKS: usize = 200;
/// The issue's targets.
const TARGET_MS: f64 = 50.0;
const TARGET_BYTES: f64 = 200.0 * 1024.0;

fn post_json(port: u16, path: &str, body: &str) -> Result<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no status line")
}

/// One curl exchange: (time to first byte ms, total ms, bytes downloaded).
fn ask(url: &str, cookie_jar: &std::path::Path, compressed: bool) -> Result<(f64, f64, f64)> {
    let mut command = Command::new("curl");
    command.args([
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{time_starttransfer} %{time_total} %{size_download}",
    ]);
    command.arg("-b").arg(cookie_jar).arg("-c").arg(cookie_jar);
    if compressed {
        command.args(["-H", "Accept-Encoding: gzip"]);
    }
    let out = command.arg(url).output().context("cannot run curl")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let fields: Vec<f64> = text.split_whitespace().filter_map(|f| f.parse().ok()).collect();
    match fields.as_slice() {
        [code, ttfb, total, size] if (*code - 200.0).abs() < f64::EPSILON => {
            Ok((ttfb * 1000.0, total * 1000.0, *size))
        }
        _ => bail!("GET {url} answered {text:?}"),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(index).copied().unwrap_or(f64::NAN)
}

/// Runs the bench: `args` are what follows `bench console`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let items: usize = match args.first() {
        None => 500,
        Some(n) => n
            .parse()
            .with_context(|| format!("bench console: N must be a count, not {n:?}"))?,
    };
    let binary = release_binary()?;
    let scratch = std::env::temp_dir().join(format!("metaforge-bench-console-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let mut child = pinned(SUT_CORE, &binary)
        .args(["gateway", "--bind", "127.0.0.1:0"])
        .env("METAFORGE_HOME", scratch.join("home"))
        .env("METAFORGE_GATEWAY_RATE_LIMIT_PER_MINUTE", "0")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start metaforge gateway")?;
    let stdout = child.stdout.take().context("gateway stdout")?;
    let guard = Guard(child);
    let mut banner = String::new();
    BufReader::new(stdout).read_line(&mut banner)?;
    let port: u16 = banner
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("no address in the gateway's banner {banner:?}"))?;
    wait_listening(port, Duration::from_secs(20), "gateway")?;
    eprintln!("xtask: parking {items} holds");
    for i in 0..items {
        let body = format!(
            r#"{{"tool":"twin.commit_work_product","arguments":{{"artifact":"drawing","title":"Bracket {i}","content":"Bracket {i}, 3 mm PETG, two M4 holes, load-tested to 20 kg static before release."}},"timeout_seconds":3600}}"#
        );
        let status = post_json(port, "/v1/chat/tool_approvals", &body)?;
        if status != 201 {
            bail!("parking hold {i} answered {status}");
        }
    }
    let url = format!("http://127.0.0.1:{port}/approvals");
    let jar = scratch.join("cookies");
    let (_, _, raw_bytes) = ask(&url, &jar, false)?;
    let mut ttfb = Vec::with_capacity(ASKS);
    let mut total = Vec::with_capacity(ASKS);
    let mut wire = 0.0;
    for _ in 0..ASKS {
        let (first, all, bytes) = ask(&url, &jar, true)?;
        ttfb.push(first);
        total.push(all);
        wire = bytes;
    }
    drop(guard);
    let _ = std::fs::remove_dir_all(&scratch);
    ttfb.sort_by(f64::total_cmp);
    total.sort_by(f64::total_cmp);
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!(
        "\napprovals page, {items} pending holds, {ASKS} asks (release gateway on SQLite, curl on loopback)"
    );
    println!("| figure | p50 | p99 | max | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| time to first byte (server: ledger read + render) | {:.2} ms | {:.2} ms | {:.2} ms | < {TARGET_MS} ms: {} |",
        percentile(&ttfb, 0.5),
        percentile(&ttfb, 0.99),
        ttfb.last().copied().unwrap_or(f64::NAN),
        verdict(percentile(&ttfb, 0.5) < TARGET_MS)
    );
    println!(
        "| whole exchange | {:.2} ms | {:.2} ms | {:.2} ms | |",
        percentile(&total, 0.5),
        percentile(&total, 0.99),
        total.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "transferred: {:.1} KB gzip ({:.1} KB uncompressed); target < 200 KB: {}",
        wire / 1024.0,
        raw_bytes / 1024.0,
        verdict(wire < TARGET_BYTES)
    );
    Ok(())
}
