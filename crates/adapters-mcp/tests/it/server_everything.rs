//! The MCP client against a real peer: `@modelcontextprotocol/server-everything`, started by the
//! tests over stdio and streamable HTTP (each test prints why it is skipped when it is missing).
//! Install it with
//! `npm i --prefix /var/tmp/metaforge-node @modelcontextprotocol/server-everything`
//! (or point `METAFORGE_NODE_DIR` at another prefix).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a failed peer start must fail the test loudly"
)]

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metaforge_adapters_mcp::{McpToolServer, ProtocolChoice, ServerConfig, ServerTransport};
use metaforge_ports::{PortErrorKind, ToolSource};
use metaforge_test_support::{ChildGuard, Peer, net, require};
use serde_json::{Map, Value, json};

/// server-everything's entry point; `None` (skipped, printed) when it is not installed.
fn everything_js() -> Option<String> {
    require(Peer::ServerEverything).map(|path| path.display().to_string())
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn stdio_config(name: &str) -> Option<ServerConfig> {
    let mut c = ServerConfig::new(
        name,
        ServerTransport::Stdio {
            command: "node".into(),
            args: vec![everything_js()?, "stdio".into()],
            env: Default::default(),
        },
    );
    c.protocol = ProtocolChoice::Initialize;
    c.call_timeout = Duration::from_secs(20);
    Some(c)
}

/// server-everything over streamable HTTP, killed with its process group on drop.
struct HttpEverything {
    child: ChildGuard,
    port: u16,
}

impl HttpEverything {
    async fn start(js: &str, port: u16) -> Self {
        let child = ChildGuard::spawn(
            std::process::Command::new("node")
                .arg(js)
                .arg("streamableHttp")
                .env("PORT", port.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "server-everything did not listen on {port}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self { child, port }
    }

    async fn kill(mut self) {
        let pid = self.child.id();
        self.child.kill();
        println!("killed server-everything pid {pid} on port {}", self.port);
    }
}

#[tokio::test]
async fn stdio_lists_and_calls_server_everything_tools() {
    let Some(config) = stdio_config("everything") else {
        return;
    };
    let client = McpToolServer::new(config, crate::launch());
    let tools = client.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"echo") && names.contains(&"get-sum"), "{names:?}");
    let sum = client
        .call_tool("get-sum", args(json!({"a": 2, "b": 40})))
        .await
        .unwrap();
    assert!(!sum.is_error);
    assert!(sum.text().contains("42"), "{}", sum.text());
    assert_eq!(client.protocol_version().await.as_deref(), Some("2025-11-25"));
    client.close().await;
}

#[tokio::test]
async fn a_stdio_server_sees_only_path_its_own_home_and_its_entry_env_never_the_parents() {
    let Some(mut config) = stdio_config("isolated") else {
        return;
    };
    if let ServerTransport::Stdio { env, .. } = &mut config.transport {
        env.insert("SERVER_OWN_TOKEN".into(), "named-in-the-entry".into());
    }
    let launch = crate::launch();
    let client = McpToolServer::new(config, std::sync::Arc::clone(&launch));
    let answer = client.call_tool("get-env", Map::new()).await.unwrap();
    let seen: Map<String, Value> = serde_json::from_str(&answer.text()).unwrap();
    let mut names: Vec<&str> = seen.keys().map(String::as_str).collect();
    names.sort_unstable();
    let home = launch.home_of("isolated").display().to_string();
    // PWD is the sandbox's working directory, the server's own (bwrap sets it).
    assert_eq!(
        names,
        ["HOME", "PATH", "PWD", "SERVER_OWN_TOKEN", "TMPDIR"],
        "{seen:?}"
    );
    assert_eq!(seen["HOME"], home.as_str());
    assert_eq!(seen["PWD"], home.as_str());
    assert_eq!(seen["TMPDIR"], home.as_str());
    assert_eq!(seen["PATH"], metaforge_test_support::peers::path().as_str());
    assert_eq!(seen["SERVER_OWN_TOKEN"], "named-in-the-entry");
    // The test process's own variables (cargo's, nextest's) stayed behind.
    assert!(std::path::Path::new(&home).is_dir());
    client.close().await;
}

#[tokio::test]
async fn include_and_exclude_globs_filter_the_listed_tools() {
    let Some(mut config) = stdio_config("everything") else {
        return;
    };
    config.include = vec!["get-*".into(), "echo".into()];
    config.exclude = vec!["get-env".into()];
    let client = McpToolServer::new(config, crate::launch());
    let tools = client.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"echo") && names.contains(&"get-sum"), "{names:?}");
    assert!(!names.contains(&"get-env"), "{names:?}");
    assert!(
        names.iter().all(|n| *n == "echo" || n.starts_with("get-")),
        "{names:?}"
    );
    client.close().await;
}

#[tokio::test]
async fn auto_protocol_falls_back_to_initialize_for_a_legacy_server() {
    let Some(mut config) = stdio_config("everything") else {
        return;
    };
    config.protocol = ProtocolChoice::Auto;
    let client = McpToolServer::new(config, crate::launch());
    let tools = client.list_tools().await.unwrap();
    assert!(!tools.is_empty());
    let version = client.protocol_version().await;
    println!("auto negotiated {version:?} with server-everything");
    assert!(version.is_some());
    client.close().await;
}

#[tokio::test]
async fn tools_list_changed_makes_the_client_re_list() {
    let Some(config) = stdio_config("everything") else {
        return;
    };
    let client = McpToolServer::new(config, crate::launch());
    let first = client.list_tools().await.unwrap();
    // server-everything registers its capability-dependent tools right after the handshake and
    // announces them with notifications/tools/list_changed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.stats().list_changed == 0 {
        assert!(Instant::now() < deadline, "no tools/list_changed within 10s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The notification makes the client fetch the list again on its own.
    while client.stats().tool_fetches < 2 {
        assert!(
            Instant::now() < deadline,
            "no re-list after tools/list_changed: {:?}",
            client.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = client.list_tools().await.unwrap();
    let stats = client.stats();
    println!(
        "list_changed={} fetches={} tools before={} after={}",
        stats.list_changed,
        stats.tool_fetches,
        first.len(),
        after.len()
    );
    assert!(stats.tool_fetches >= 2, "the client must fetch again: {stats:?}");
    assert!(after.len() >= first.len());
    client.close().await;
}

#[tokio::test]
async fn progress_notifications_reset_the_call_timeout() {
    let Some(mut config) = stdio_config("everything") else {
        return;
    };
    config.call_timeout = Duration::from_millis(1500);
    let client = McpToolServer::new(config, crate::launch());
    let started = Instant::now();
    // 4 s in total, a progress notification every 0.5 s: longer than the timeout, never idle.
    let out = client
        .call_tool(
            "trigger-long-running-operation",
            args(json!({"duration": 4, "steps": 8})),
        )
        .await
        .unwrap();
    assert!(!out.is_error, "{}", out.text());
    assert!(started.elapsed() >= Duration::from_secs(4));
    client.close().await;
}

#[tokio::test]
async fn a_call_silent_past_its_timeout_fails_as_unavailable() {
    let Some(mut config) = stdio_config("everything") else {
        return;
    };
    config.call_timeout = Duration::from_millis(800);
    let client = McpToolServer::new(config, crate::launch());
    client.connect().await.unwrap();
    let started = Instant::now();
    let err = client
        .call_tool(
            "trigger-long-running-operation",
            args(json!({"duration": 6, "steps": 1})),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, PortErrorKind::Unavailable, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    // The session survives a timed-out call.
    let echo = client
        .call_tool("echo", args(json!({"message": "still here"})))
        .await
        .unwrap();
    assert!(echo.text().contains("still here"));
    client.close().await;
}

#[tokio::test]
async fn http_client_survives_the_server_being_killed_and_restarted() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let Some(js) = everything_js() else {
        return;
    };
    let port = net::unused_port();
    let server = HttpEverything::start(&js, port).await;
    let mut config = ServerConfig::new(
        "everything",
        ServerTransport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
            headers: Default::default(),
        },
    );
    config.protocol = ProtocolChoice::Initialize;
    config.call_timeout = Duration::from_secs(15);
    let client = Arc::new(McpToolServer::new(config, crate::launch()));
    let first = client
        .call_tool("echo", args(json!({"message": "before restart"})))
        .await
        .unwrap();
    println!("call 1: {} | stats {:?}", first.text(), client.stats());
    server.kill().await;
    let server = HttpEverything::start(&js, port).await;
    println!("restarted server-everything on port {port}");
    let second = client
        .call_tool("echo", args(json!({"message": "after restart"})))
        .await
        .unwrap();
    let stats = client.stats();
    println!("call 2: {} | stats {:?}", second.text(), stats);
    assert!(second.text().contains("after restart"));
    assert!(
        stats.reinitialisations == 1,
        "the client must have re-initialised: {stats:?}"
    );
    let tools = client.list_tools().await.unwrap();
    println!("tools after restart: {}", tools.len());
    assert!(tools.iter().any(|t| t.name == "echo"));
    client.close().await;
    server.kill().await;
}
