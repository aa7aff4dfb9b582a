//! `cargo xtask bench gateway`: the gateway's overhead against the upstream it fronts, and against
//! LiteLLM's proxy fronting the same upstream (issue 13).
//!
//! Release build. Two upstreams on the load core: the light fixed-response server written for the
//! bench (`bench upstream`) and aimock. The MetaForge gateway (one per upstream) and the LiteLLM
//! proxy (`pip install 'litellm[proxy]'`, one worker) on the other core; wrk (load core) posts a
//! chat completion at c = 1, 8, 64, 256 to the upstream directly and through each proxy. Prints
//! req/s, p50/p99, latency added over direct, RSS idle and under load, and the ratios to LiteLLM.
//! Every process started here is stopped by PID.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::bench_kit::{
    Guard, LOAD_CORE, SUT_CORE, bench_seconds, free_port, measure_cells, pinned, print_table, release_binary,
    rss_kb, start_light_upstream, wait_listening, write_script,
};

/// The LiteLLM master key (not the default one).
const LITELLM_KEY: &str = "sk-metaforge-bench-7f3a";

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
    let child = pinned(LOAD_CORE, "node")
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

fn start_gateway(binary: &Path, scratch: &Path, name: &str, upstream: u16) -> Result<(Guard, String)> {
    let mut child = pinned(SUT_CORE, binary)
        .args(["gateway", "--bind", "127.0.0.1:0"])
        .env("METAFORGE_HOME", scratch.join(format!("home-{name}")))
        .env(
            "METAFORGE_CREDENTIALS_PATH",
            scratch.join(format!("credentials-{name}.json")),
        )
        .env(
            "HARNESS_OPENAI_BASE_URL",
            format!("http://127.0.0.1:{upstream}/v1"),
        )
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
fn start_litellm(scratch: &Path, aimock: u16, light: u16) -> Result<(Guard, u16)> {
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
            "model_list:\n  - model_name: chat\n    litellm_params:\n      model: openai/gpt-4o-mini\n      api_base: http://127.0.0.1:{aimock}/v1\n      api_key: sk-bench-aimock\n  - model_name: chat-light\n    litellm_params:\n      model: openai/gpt-4o-mini\n      api_base: http://127.0.0.1:{light}/v1\n      api_key: sk-bench-aimock\ngeneral_settings:\n  master_key: {LITELLM_KEY}\n"
        ),
    )?;
    let port = free_port()?;
    let log = std::fs::File::create(scratch.join("litellm.log"))?;
    let child = pinned(SUT_CORE, "litellm")
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

/// A chat-completion wrk script for `model` with bearer `key`.
fn chat_script(dir: &Path, name: &str, model: &str, key: &str) -> Result<PathBuf> {
    let body =
        serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    write_script(
        dir,
        name,
        &body,
        &[
            ("Content-Type", "application/json".to_owned()),
            ("Authorization", format!("Bearer {key}")),
        ],
    )
}

/// Runs the benchmark and prints the tables.
pub(crate) fn run() -> Result<()> {
    let seconds = bench_seconds();
    let binary = release_binary()?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let scratch = std::env::temp_dir().join(format!("metaforge-bench-gateway-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = bench(&binary, &root, &scratch, seconds);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn bench(binary: &Path, root: &Path, scratch: &Path, seconds: u64) -> Result<()> {
    let (_light, light_port) = start_light_upstream()?;
    let (_aimock, aimock_port) = start_aimock(root)?;
    let (gateway_light, light_addr) = start_gateway(binary, scratch, "light", light_port)?;
    let (gateway_aimock, aimock_addr) = start_gateway(binary, scratch, "aimock", aimock_port)?;
    let litellm = match start_litellm(scratch, aimock_port, light_port) {
        Ok(started) => Some(started),
        Err(err) => {
            println!("LiteLLM not benchmarked: {err:#}");
            None
        }
    };
    std::thread::sleep(Duration::from_secs(2));
    let mut idle = vec![("metaforge gateway".to_owned(), rss_kb(gateway_light.0.id()))];
    if let Some((g, _)) = &litellm {
        idle.push(("litellm proxy".to_owned(), rss_kb(g.0.id())));
    }
    for (upstream, upstream_port, gateway_addr, gateway_pid, litellm_model) in [
        (
            "light upstream",
            light_port,
            &light_addr,
            gateway_light.0.id(),
            "chat-light",
        ),
        ("aimock", aimock_port, &aimock_addr, gateway_aimock.0.id(), "chat"),
    ] {
        let direct = format!("{upstream} direct");
        let mut targets: Vec<(String, String, PathBuf, Option<u32>)> = vec![
            (
                direct.clone(),
                format!("http://127.0.0.1:{upstream_port}/v1/chat/completions"),
                chat_script(
                    scratch,
                    &format!("direct-{upstream_port}"),
                    "gpt-4o-mini",
                    "sk-bench-aimock",
                )?,
                None,
            ),
            (
                "metaforge gateway".to_owned(),
                format!("http://{gateway_addr}/v1/chat/completions"),
                chat_script(scratch, &format!("gateway-{upstream_port}"), "chat", "none")?,
                Some(gateway_pid),
            ),
        ];
        if let Some((guard, port)) = &litellm {
            targets.push((
                "litellm proxy".to_owned(),
                format!("http://127.0.0.1:{port}/v1/chat/completions"),
                chat_script(
                    scratch,
                    &format!("litellm-{upstream_port}"),
                    litellm_model,
                    LITELLM_KEY,
                )?,
                Some(guard.0.id()),
            ));
        }
        let mut rows = Vec::new();
        for (name, url, script, pid) in &targets {
            measure_cells(&mut rows, name, url, script, seconds, *pid)?;
        }
        print_table(
            &format!(
                "OpenAI chat completion via {upstream}, wrk {seconds}s per cell (proxies on core {SUT_CORE}, wrk + upstream on core {LOAD_CORE})"
            ),
            &rows,
            Some(&direct),
            "metaforge gateway",
            "litellm proxy",
            &idle,
        );
    }
    drop(litellm);
    Ok(())
}
