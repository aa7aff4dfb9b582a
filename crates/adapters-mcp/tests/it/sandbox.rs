//! The tool-server sandbox against a real stdio server (`tests/fixtures/sandbox_probe.py`, on the
//! Python `mcp` package) in a real bubblewrap: what the server can see, reach and write, and what
//! happens past its CPU limit. Each check has its unsandboxed control, so the check can fail.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a probe that misbehaves must fail the test loudly"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use metaforge_adapters_mcp::sandbox::{ResourceLimits, Sandbox, SandboxOptions, Workspace};
use metaforge_adapters_mcp::{McpToolServer, ProtocolChoice, ServerConfig, ServerTransport, StdioLaunch};
use metaforge_ports::{PortErrorKind, ToolSource};
use metaforge_test_support::{Peer, require};
use serde_json::{Map, Value, json};

/// The interpreter with `mcp` installed, when the probe and the sandbox can run here.
fn probe_python() -> Option<PathBuf> {
    require(Peer::Bubblewrap)?;
    require(Peer::PythonMcp)
}

fn probe_script() -> String {
    metaforge_test_support::peers::manifest_dir()
        .join("tests/fixtures/sandbox_probe.py")
        .display()
        .to_string()
}

/// A launch whose parent environment carries secrets and whose MetaForge home is `home`.
fn launch_in(home: &Path, user_home: &Path) -> Arc<StdioLaunch> {
    Arc::new(StdioLaunch::new(
        [
            ("PATH".to_owned(), metaforge_test_support::peers::path()),
            ("HOME".to_owned(), user_home.display().to_string()),
            ("OPENAI_API_KEY".to_owned(), "sk-parent-secret".to_owned()),
            (
                "METAFORGE_MCP_SERVICE_KEY".to_owned(),
                "service-secret".to_owned(),
            ),
            ("PROBE_ALLOWED".to_owned(), "passed-by-name".to_owned()),
        ],
        home.join("tool-servers"),
    ))
}

fn probe(python: &Path, launch: &Arc<StdioLaunch>, name: &str, sandbox: Sandbox) -> McpToolServer {
    let mut config = ServerConfig::new(
        name,
        ServerTransport::Stdio {
            command: python.display().to_string(),
            args: vec![probe_script()],
            env: Default::default(),
        },
    );
    config.protocol = ProtocolChoice::Initialize;
    config.call_timeout = Duration::from_secs(30);
    config.sandbox = sandbox;
    McpToolServer::new(config, Arc::clone(launch))
}

async fn call(server: &McpToolServer, tool: &str, arguments: Value) -> String {
    let arguments: Map<String, Value> = arguments.as_object().cloned().unwrap_or_default();
    let output = server.call_tool(tool, arguments).await.unwrap();
    assert!(!output.is_error, "{tool}: {}", output.text());
    output.text()
}

struct Dirs {
    _root: tempfile::TempDir,
    home: PathBuf,
    user_home: PathBuf,
    workspace: PathBuf,
}

fn dirs() -> Dirs {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("metaforge-home");
    let user_home = root.path().join("user");
    let workspace = root.path().join("project");
    for dir in [&home, &user_home.join(".aws"), &workspace] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(home.join("credentials.json"), "{\"openai\": \"sk-on-disk\"}").unwrap();
    std::fs::write(user_home.join(".aws/credentials"), "aws_secret_access_key = x").unwrap();
    std::fs::write(workspace.join("part.step"), "ISO-10303-21;").unwrap();
    Dirs {
        home,
        user_home,
        workspace,
        _root: root,
    }
}

#[tokio::test]
async fn a_sandboxed_server_sees_none_of_the_parents_secrets_only_the_names_its_entry_allows() {
    let Some(python) = probe_python() else {
        return;
    };
    let d = dirs();
    let launch = launch_in(&d.home, &d.user_home);
    let options = SandboxOptions {
        env: vec!["PROBE_ALLOWED".to_owned()],
        ..SandboxOptions::default()
    };
    let server = probe(&python, &launch, "secrets", Sandbox::On(options));
    let names = call(&server, "environment", json!({})).await;
    println!("the sandboxed server sees: {names}");
    for secret in ["OPENAI_API_KEY", "METAFORGE_MCP_SERVICE_KEY"] {
        assert!(!names.split(' ').any(|n| n == secret), "{secret} leaked: {names}");
    }
    assert!(names.split(' ').any(|n| n == "PROBE_ALLOWED"), "{names}");
    let on_disk = call(
        &server,
        "read",
        json!({"path": d.home.join("credentials.json").display().to_string()}),
    )
    .await;
    assert!(
        on_disk.starts_with("refused"),
        "MetaForge's home is hidden: {on_disk}"
    );
    let aws = call(
        &server,
        "read",
        json!({"path": d.user_home.join(".aws/credentials").display().to_string()}),
    )
    .await;
    assert!(
        aws.starts_with("refused"),
        "the user's key store is hidden: {aws}"
    );
    server.close().await;

    // The control: unsandboxed, the same file reads.
    let plain = probe(&python, &launch, "secrets-off", Sandbox::Off);
    let on_disk = call(
        &plain,
        "read",
        json!({"path": d.home.join("credentials.json").display().to_string()}),
    )
    .await;
    assert!(on_disk.contains("sk-on-disk"), "{on_disk}");
    plain.close().await;
}

#[tokio::test]
async fn a_sandboxed_server_cannot_reach_a_listener_on_the_hosts_loopback() {
    let Some(python) = probe_python() else {
        return;
    };
    let d = dirs();
    let launch = launch_in(&d.home, &d.user_home);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepting = tokio::spawn(async move {
        loop {
            if listener.accept().await.is_err() {
                break;
            }
        }
    });
    let sandboxed = probe(&python, &launch, "net", Sandbox::default());
    let inside = call(&sandboxed, "connect", json!({"port": port})).await;
    assert!(inside.starts_with("refused"), "{inside}");
    sandboxed.close().await;
    let plain = probe(&python, &launch, "net-off", Sandbox::Off);
    let outside = call(&plain, "connect", json!({"port": port})).await;
    assert_eq!(outside, "connected", "the control reaches the listener");
    plain.close().await;
    accepting.abort();
}

#[tokio::test]
async fn the_workspace_is_read_only_unless_its_entry_says_rw() {
    let Some(python) = probe_python() else {
        return;
    };
    let d = dirs();
    let launch = launch_in(&d.home, &d.user_home);
    for writable in [false, true] {
        let options = SandboxOptions {
            workspace: Some(Workspace {
                path: d.workspace.clone(),
                writable,
            }),
            ..SandboxOptions::default()
        };
        let server = probe(
            &python,
            &launch,
            if writable { "ws-rw" } else { "ws-ro" },
            Sandbox::On(options),
        );
        let read = call(
            &server,
            "read",
            json!({"path": d.workspace.join("part.step").display().to_string()}),
        )
        .await;
        assert_eq!(read, "read: ISO-10303-21;");
        let target = d.workspace.join(format!("result-{writable}.txt"));
        let wrote = call(&server, "write", json!({"path": target.display().to_string()})).await;
        if writable {
            assert_eq!(wrote, "written");
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "probe");
        } else {
            assert!(wrote.contains("Read-only file system"), "{wrote}");
            assert!(!target.exists());
        }
        server.close().await;
    }
}

#[tokio::test]
async fn a_server_past_its_cpu_limit_is_killed_the_call_errors_and_the_next_call_starts_it_afresh() {
    let Some(python) = probe_python() else {
        return;
    };
    let d = dirs();
    let launch = launch_in(&d.home, &d.user_home);
    let options = SandboxOptions {
        limits: ResourceLimits {
            cpu_seconds: 2,
            ..ResourceLimits::default()
        },
        ..SandboxOptions::default()
    };
    let server = probe(&python, &launch, "cpu", Sandbox::On(options));
    let before = server.stats().sessions;
    let started = std::time::Instant::now();
    let spun = server
        .call_tool(
            "spin",
            json!({"seconds": 30}).as_object().cloned().unwrap_or_default(),
        )
        .await;
    let err = spun.expect_err("a server past its CPU limit is killed");
    println!(
        "killed after {:?}: {} ({:?})",
        started.elapsed(),
        err.message,
        err.kind
    );
    assert_eq!(err.kind, PortErrorKind::Unavailable, "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "killed by its limit, not a timeout"
    );
    // Killed twice in a row (the call is retried once on a fresh server): restarted after 1 s.
    tokio::time::sleep(metaforge_adapters_mcp::restart_delay(2)).await;
    let again = call(&server, "environment", json!({})).await;
    assert!(!again.is_empty());
    assert!(
        server.stats().sessions > before + 1,
        "the server was started afresh"
    );
    server.close().await;
}

#[tokio::test]
async fn a_crashing_server_is_unavailable_until_its_backoff_ends_then_restarted() {
    let Some(python) = probe_python() else {
        return;
    };
    let d = dirs();
    let launch = launch_in(&d.home, &d.user_home);
    let server = probe(
        &python,
        &launch,
        "crashing",
        Sandbox::On(SandboxOptions::default()),
    );
    assert!(!call(&server, "environment", json!({})).await.is_empty());
    let sessions = server.stats().sessions;
    let crashed = server
        .call_tool("crash", Map::new())
        .await
        .expect_err("a server that exits mid-call does not answer");
    println!("crash: {}", crashed.message);
    assert_eq!(crashed.kind, PortErrorKind::Unavailable, "{crashed:?}");
    assert!(crashed.message.contains("restarted in"), "{}", crashed.message);
    assert_eq!(
        server.stats().sessions,
        sessions + 1,
        "restarted once at once, for the retry"
    );
    let refused = server
        .call_tool("environment", Map::new())
        .await
        .expect_err("within its backoff the server is not started");
    println!("during backoff: {}", refused.message);
    assert_eq!(refused.kind, PortErrorKind::Unavailable);
    assert!(
        refused.message.contains("lost 2 times in a row"),
        "{}",
        refused.message
    );
    assert_eq!(
        server.stats().sessions,
        sessions + 1,
        "no start during the backoff"
    );
    tokio::time::sleep(metaforge_adapters_mcp::restart_delay(2)).await;
    assert!(!call(&server, "environment", json!({})).await.is_empty());
    assert_eq!(
        server.stats().sessions,
        sessions + 2,
        "restarted after its backoff"
    );
    server.close().await;
}

#[tokio::test]
async fn a_stdout_flood_past_the_line_bound_is_dropped_and_the_call_still_answers() {
    let Some(python) = probe_python() else {
        return;
    };
    let d = dirs();
    let launch = launch_in(&d.home, &d.user_home);
    let server = probe(
        &python,
        &launch,
        "flooding",
        Sandbox::On(SandboxOptions::default()),
    );
    // 24 MiB on one line: past rmcp's 16 MiB bound, so it is discarded, never parsed or kept.
    let answer = call(&server, "flood", json!({"megabytes": 24})).await;
    assert!(answer.contains("flooded"), "{answer}");
    assert!(
        !call(&server, "environment", json!({})).await.is_empty(),
        "the session survives"
    );
    server.close().await;
}

#[tokio::test]
async fn without_bubblewrap_a_server_is_unavailable_never_started_unsandboxed() {
    let Some(python) = probe_python() else {
        return;
    };
    let d = dirs();
    let launch = Arc::new(StdioLaunch::new(
        [("PATH".to_owned(), "/nonexistent".to_owned())],
        d.home.join("tool-servers"),
    ));
    let server = probe(&python, &launch, "nobwrap", Sandbox::default());
    let err = server.list_tools().await.expect_err("no sandbox, no server");
    assert_eq!(err.kind, PortErrorKind::Unavailable);
    assert!(err.message.contains("bubblewrap"), "{}", err.message);
}
