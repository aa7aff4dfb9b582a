//! `cargo xtask readme-check`: runs the README's walk-through, as written, against a real
//! `metaforge up`, so the walk-through cannot drift from the binary again.
//!
//! Every ```` ```sh ```` block of the `## Walk-through`, `## Run the flow` and `## Chat with the
//! agent` sections is run, in order, as one bash script under `set -euo pipefail`, from the repository root, with
//! the freshly built `metaforge` first on `PATH` (as the README's link puts it) and `metaforge
//! up` listening on the README's own addresses over a scratch `METAFORGE_HOME`. The chat section
//! needs a model and a tool server: the check gives `up` aimock (the fixtures of the chat process
//! tests) as its OpenAI provider for the `chat` role and server-everything in the servers file,
//! as the README tells a reader to configure their own; the run section needs the phase roles: the
//! check starts the README's scripted phase model example and routes them to it (provider
//! `vllm`), as the README shows. The check fails
//! when a command fails, a command is not found, or a field the README selects with jq comes
//! back `null` (the sign of a renamed field).

use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};
use cargo_metadata::MetadataCommand;

use crate::Binaries;

/// Fields the walk-through selects; a `null` for any of them means the README and the API drifted.
const MUST_NOT_BE_NULL: &[&str] = &[
    "id",
    "version",
    "status",
    "approvalId",
    "version_id",
    "approver",
    "kind",
    "content_hash",
    "error",
    "message",
    "flow_engine",
    "flow_content_hash",
    "phase",
    "artifact",
];

/// Kills the server when the check ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Builds the binary (unless `binaries` says it is built), starts `metaforge up`, runs the
/// walk-through, stops the server.
pub(crate) fn run(binaries: Binaries) -> Result<()> {
    let readme = std::fs::read_to_string("README.md").context("cannot read README.md")?;
    let script = walkthrough_script(&readme)?;
    crate::setup::ensure()?;
    if binaries == Binaries::Build {
        crate::run("cargo", &["build", "--locked", "-p", "metaforge-bins"])?;
        crate::run(
            "cargo",
            &[
                "build",
                "--locked",
                "-p",
                "metaforge-bins",
                "--example",
                "scripted_phase_model",
            ],
        )?;
    }
    let target = MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata failed")?
        .target_directory;
    let bin_dir = target.join("debug");
    let home = std::env::temp_dir().join(format!("metaforge-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    let path = std::env::join_paths(std::iter::once(bin_dir.clone().into_std_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .context("PATH cannot be joined")?;
    let log = std::fs::File::create(std::env::temp_dir().join("metaforge-readme-up.log"))
        .context("cannot create the server log")?;
    let (model, model_env) = start_model(&home)?;
    let _model = Server(model);
    let (phase_model, phase_env) = start_phase_model(&bin_dir.join("examples").join("scripted_phase_model"))?;
    let _phase_model = Server(phase_model);
    let mut child = Command::new(bin_dir.join("metaforge").as_std_path())
        .arg("up")
        .env("METAFORGE_HOME", &home)
        .envs(model_env)
        .envs(phase_env)
        .env_remove("METAFORGE_GATEWAY_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .context("cannot start metaforge up")?;
    let stdout = child.stdout.take();
    let server = Server(child);
    let banners = read_banners(stdout)?;
    eprintln!("xtask: readme-check: {}", banners.join(" | "));
    let output = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{script}"))
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .context("cannot run bash")?;
    drop(server);
    let _ = std::fs::remove_dir_all(&home);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprint!("{stderr}");
    if !output.status.success() {
        bail!("the README walk-through failed ({})", output.status);
    }
    if let Some(line) = stderr.lines().find(|l| l.contains("command not found")) {
        bail!("the README walk-through calls a command that does not exist: {line}");
    }
    let nulls: Vec<&str> = stdout
        .lines()
        .filter(|line| {
            MUST_NOT_BE_NULL
                .iter()
                .any(|field| line.trim_start().starts_with(&format!("\"{field}\": null")))
        })
        .collect();
    if !nulls.is_empty() {
        bail!(
            "the README selects fields the API no longer returns: {}",
            nulls.join("; ")
        );
    }
    eprintln!("xtask: readme-check ok");
    Ok(())
}

/// aimock serving the chat process tests' fixtures on a free port, server-everything written into
/// `home`'s servers file, and the environment that points `up`'s chat role at them.
fn start_model(home: &std::path::Path) -> Result<(Child, Vec<(String, String)>)> {
    let node_dir = crate::setup::tool_env()
        .iter()
        .find(|(k, _)| k == "METAFORGE_NODE_DIR")
        .map(|(_, v)| std::path::PathBuf::from(v))
        .context("the test tools are not set up (cargo xtask setup)")?;
    let modules = node_dir.join("node_modules");
    let everything = modules.join("@modelcontextprotocol/server-everything/dist/index.js");
    std::fs::create_dir_all(home).context("cannot create the scratch home")?;
    let servers = serde_json::json!({"mcpServers": {"everything": {
        "command": "node", "args": [everything, "stdio"], "requires_approval": ["toggle-*"]
    }}});
    std::fs::write(home.join("mcp_servers.json"), servers.to_string())
        .context("cannot write the servers file")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = Command::new("node")
        .arg(modules.join("@copilotkit/aimock/dist/cli.js"))
        .args([
            "-p",
            &port.to_string(),
            "-h",
            "127.0.0.1",
            "-f",
            "crates/bins/tests/fixtures/aimock_chat.json",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start aimock")?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if std::time::Instant::now() > deadline {
            bail!("aimock did not listen on 127.0.0.1:{port}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let env = vec![
        ("OPENAI_API_KEY".to_owned(), "sk-readme-check".to_owned()),
        (
            "HARNESS_OPENAI_BASE_URL".to_owned(),
            format!("http://127.0.0.1:{port}/v1"),
        ),
        ("METAFORGE_ROUTE_CHAT".to_owned(), "openai:gpt-4o-mini".to_owned()),
        (
            "METAFORGE_CREDENTIALS_PATH".to_owned(),
            home.join("credentials.json").display().to_string(),
        ),
    ];
    Ok((child, env))
}

/// The README's scripted phase model on a free port, and the environment that routes the phase
/// roles to it the way the README does (provider `vllm`, so the chat role keeps its own model).
fn start_phase_model(binary: &cargo_metadata::camino::Utf8Path) -> Result<(Child, Vec<(String, String)>)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut child = Command::new(binary.as_std_path())
        .args(["--port", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot start {binary}"))?;
    let ready =
        match crate::gate::lines_within(child.stdout.take(), 1, BANNER_WITHIN, "the scripted phase model") {
            Ok(lines) => lines.concat(),
            Err(err) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(err);
            }
        };
    if !ready.contains("listening") {
        let _ = child.kill();
        bail!("the scripted phase model did not start: {ready:?}");
    }
    let route = "vllm:scripted".to_owned();
    let env = vec![
        (
            "HARNESS_VLLM_BASE_URL".to_owned(),
            format!("http://127.0.0.1:{port}/v1"),
        ),
        ("METAFORGE_AGENT_LOOP".to_owned(), "native".to_owned()),
        ("METAFORGE_ROUTE_PHASE_BRAIN".to_owned(), route.clone()),
        ("METAFORGE_ROUTE_PLANNER".to_owned(), route.clone()),
        ("METAFORGE_ROUTE_EVALUATOR".to_owned(), route),
    ];
    Ok((child, env))
}

/// The two banner lines of `metaforge up` (gateway, sidecar), or why they never came.
fn read_banners(stdout: Option<std::process::ChildStdout>) -> Result<Vec<String>> {
    crate::gate::lines_within(stdout, 2, BANNER_WITHIN, "metaforge up's two banners").with_context(|| {
        format!(
            "is something else on 127.0.0.1:8787 or :8765? its log: {}",
            std::env::temp_dir().join("metaforge-readme-up.log").display()
        )
    })
}

/// How long a server this check starts may take to say where it listens.
const BANNER_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// The `sh` blocks of the walk-through section, joined in order.
fn walkthrough_script(readme: &str) -> Result<String> {
    let mut in_section = false;
    let mut in_block = false;
    let mut script = String::new();
    for line in readme.lines() {
        if line.starts_with("## ") {
            in_section = line.starts_with("## Walk-through")
                || line.starts_with("## Run the flow")
                || line.starts_with("## Chat with the agent");
            continue;
        }
        if !in_section {
            continue;
        }
        if in_block {
            if line.trim_start().starts_with("```") {
                in_block = false;
                script.push('\n');
            } else {
                script.push_str(line);
                script.push('\n');
            }
        } else if line.trim_start().starts_with("```sh") {
            in_block = true;
        }
    }
    if script.trim().is_empty() {
        bail!(
            "README.md has no sh blocks under a '## Walk-through', '## Run the flow' or '## Chat with the agent' heading"
        );
    }
    Ok(script)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_sh_blocks_of_the_walkthrough_section_are_run() {
        let readme = "# T\n## On a fresh machine\n```sh\ncargo run\n```\n## Walk-through: x\ntext\n```sh\necho one\n```\n\
                      ```json\n{}\n```\n```sh\necho two\n```\n## The CLI\n```sh\nmetaforge up\n```\n\
                      ## Run the flow: y\n```\nnot run\n```\n```sh\necho three\n```\n\
                      ## Chat with the agent\n```sh\necho four\n```\n";
        assert_eq!(
            walkthrough_script(readme).ok().as_deref(),
            Some("echo one\n\necho two\n\necho three\n\necho four\n\n")
        );
        assert!(walkthrough_script("# nothing\n").is_err());
    }
}
