//! The usage writer's durability promise (issue 13), through the real binary against a fast
//! fixed-response upstream: chat calls are acknowledged while the gateway is killed with SIGKILL
//! again and again; after each kill the usage ledger is counted. At most the events of the last
//! commit window may be missing (bounded by one batch), never more; a graceful stop (SIGTERM) loses
//! nothing. The figures are printed (`--nocapture`) for the issue's closing note.

#![expect(
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a failed exchange must fail the test loudly"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::{KEY, start_gateway};
use metaforge_ports::UsageStore;

/// The most events one usage transaction holds (`USAGE_BATCH_MAX` in `app::pipeline::store_sink`).
const BATCH_MAX: u64 = metaforge_app::pipeline::USAGE_BATCH_MAX as u64;
/// Clients driving chat calls at once.
const CLIENTS: usize = 4;
const KILLS: usize = 10;

/// A minimal OpenAI-compatible upstream answering every request with one fixed completion, on
/// kept-alive connections (aimock's own latency would hide the gateway's).
fn start_fast_upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve_upstream(stream));
        }
    });
    port
}

fn serve_upstream(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let body = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0_usize;
        let mut line = String::new();
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
        let mut request_body = vec![0; length];
        if reader.read_exact(&mut request_body).is_err()
            || reader.get_mut().write_all(reply.as_bytes()).is_err()
        {
            return;
        }
    }
}

fn gateway_env(upstream: u16, home: &Path) -> Vec<(&'static str, String)> {
    vec![
        (
            "HARNESS_OPENAI_BASE_URL",
            format!("http://127.0.0.1:{upstream}/v1"),
        ),
        ("OPENAI_API_KEY", "sk-test-fast".to_owned()),
        ("METAFORGE_ROUTE_CHAT", "openai:gpt-4o-mini".to_owned()),
        ("METAFORGE_GATEWAY_RATE_LIMIT_PER_MINUTE", "0".to_owned()),
        (
            "METAFORGE_CREDENTIALS_PATH",
            home.join("credentials.json").display().to_string(),
        ),
    ]
}

/// One chat completion on a kept-alive connection; `true` when the gateway acknowledged it (200).
fn chat(reader: &mut BufReader<TcpStream>, addr: &str) -> bool {
    let body = r#"{"model":"chat","messages":[{"role":"user","content":"hi"}]}"#;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nX-API-Key: {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    if reader.get_mut().write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut status_line = String::new();
    if reader.read_line(&mut status_line).unwrap_or(0) == 0 {
        return false;
    }
    let mut length = 0_usize;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return false;
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
    reader.read_exact(&mut body).is_ok() && status_line.starts_with("HTTP/1.1 200")
}

/// Drives chat calls from [`CLIENTS`] threads until `stop`; returns the acknowledged count.
fn drive(addr: &str, stop: &Arc<AtomicBool>) -> (Arc<AtomicU64>, Vec<std::thread::JoinHandle<()>>) {
    let acked = Arc::new(AtomicU64::new(0));
    let threads = (0..CLIENTS)
        .map(|_| {
            let (addr, stop, acked) = (addr.to_owned(), Arc::clone(stop), Arc::clone(&acked));
            std::thread::spawn(move || {
                let Ok(stream) = TcpStream::connect(&addr) else {
                    return;
                };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut reader = BufReader::new(stream);
                while !stop.load(Ordering::Relaxed) {
                    if !chat(&mut reader, &addr) {
                        return;
                    }
                    acked.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    (acked, threads)
}

fn count_events(home: &Path) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = metaforge_adapters_store::usage::SqliteUsageStore::open(&home.join("llm_usage.db"))
            .await
            .expect("open the usage ledger");
        let epoch = chrono::DateTime::from_timestamp(0, 0).expect("epoch");
        store.events_since(epoch).await.expect("read events").len() as u64
    })
}

#[test]
fn usage_events_survive_kill_9_up_to_one_commit_window_and_a_graceful_stop_loses_none() {
    let upstream = start_fast_upstream();
    let home = tempfile::tempdir().expect("home");
    let vars = gateway_env(upstream, home.path());
    let mut acked_total = 0_u64;
    let mut found_before = 0_u64;
    let mut worst_loss = 0_u64;
    let mut worst_window_ms = 0.0_f64;
    let mut lines = Vec::new();
    for cycle in 0..KILLS {
        let (gateway, addr) = start_gateway(home.path(), &vars);
        let stop = Arc::new(AtomicBool::new(false));
        let (acked, threads) = drive(&addr, &stop);
        let started = Instant::now();
        std::thread::sleep(Duration::from_millis(300 + 37 * cycle as u64));
        // SIGKILL with the clients still calling: acknowledged calls are in flight to the writer.
        let acked_at_kill = acked.load(Ordering::SeqCst);
        drop(gateway);
        stop.store(true, Ordering::Relaxed);
        for thread in threads {
            let _ = thread.join();
        }
        let acked_now = acked.load(Ordering::SeqCst);
        let found = count_events(home.path()) - found_before;
        found_before += found;
        acked_total += acked_now;
        let loss = acked_now.saturating_sub(found);
        worst_loss = worst_loss.max(loss);
        let load = started.elapsed();
        // The loss as time: how long the clients took to make that many calls.
        let window_ms = loss as f64 / acked_now.max(1) as f64 * load.as_secs_f64() * 1000.0;
        worst_window_ms = worst_window_ms.max(window_ms);
        lines.push(format!(
            "kill {cycle}: {acked_now} acknowledged ({acked_at_kill} before the signal), {found} found, {loss} lost (~{window_ms:.0} ms of calls), {load:?} of load"
        ));
        assert!(
            acked_now > 0,
            "no call was acknowledged in cycle {cycle}: the load never ran"
        );
        assert!(
            loss <= BATCH_MAX,
            "cycle {cycle}: {loss} acknowledged events lost, more than one commit window ({BATCH_MAX})"
        );
        assert!(
            found <= acked_now + CLIENTS as u64,
            "cycle {cycle}: {found} events found for {acked_now} acknowledged calls"
        );
    }
    // A graceful stop: every acknowledged call's event is committed before the process exits.
    let (gateway, addr) = start_gateway(home.path(), &vars);
    let stop = Arc::new(AtomicBool::new(false));
    let (acked, threads) = drive(&addr, &stop);
    std::thread::sleep(Duration::from_millis(400));
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    let acked_graceful = acked.load(Ordering::SeqCst);
    let mut gateway = gateway;
    let child = gateway.child_mut();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let exited = child.wait().expect("wait for the gateway");
    assert!(exited.success(), "graceful stop exited with {exited}");
    let found_graceful = count_events(home.path()) - found_before;
    lines.push(format!(
        "graceful stop: {acked_graceful} acknowledged, {found_graceful} found"
    ));
    eprintln!(
        "{}\n{KILLS} kills: {acked_total} acknowledged in all, {found_before} found, worst loss per kill {worst_loss} events (~{worst_window_ms:.0} ms of calls)",
        lines.join("\n")
    );
    assert_eq!(
        found_graceful, acked_graceful,
        "a graceful stop loses no acknowledged event"
    );
}
