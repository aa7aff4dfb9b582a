//! The composed registry over real MCP servers, configured through a servers file in the
//! `mcpServers` shape: `@modelcontextprotocol/server-everything` over stdio and streamable HTTP,
//! MetaForge's own sidecar served over streamable HTTP, a server that cannot start, a disabled
//! one; a scripted model calling a tool through the agent loop; a server killed mid-turn.
//! server-everything is a peer: a test that needs it prints why it is skipped when it is missing
//! (and fails under `METAFORGE_REQUIRE_PEERS=1`).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metaforge_agent::{
    Agent, AgentPorts, CancellationToken, EventSink, ModelProfile, ModelTarget, ProviderModels, ToolBoxes,
    TurnConfig, TurnInput, TurnOutcome,
};
use metaforge_app::flow_generator::{GenerateError, GenerateRequest, Generated, ProposalGenerator};
use metaforge_app::tools::{SEARCH_TOOLS_ID, ServerStatus};
use metaforge_ports::approval_ledger::ApprovalLedger;
use metaforge_ports::flow_version_store::FlowVersionStore;
use metaforge_ports::{ApiFamily, Billing, CallerClass, CallerContext, Clock, IdGen, InputChannel};
use metaforge_test_support::doubles::{
    MemoryApprovalLedger, MemoryFlowVersionStore, ScriptStep, ScriptedLlm,
};
use metaforge_test_support::{ChildGuard, ManualClock, Peer, SequentialIds, net, require};
use serde_json::{Value, json};

use super::{ComposedTools, Natives, SERVERS_FILE, ToolServersError, compose_tools, sidecar_natives};

fn local(session: Option<&str>) -> CallerContext {
    CallerContext {
        class: CallerClass::Local,
        session: session.map(str::to_owned),
        input_channel: InputChannel::None,
        identity: None,
    }
}

fn read_only_natives() -> Natives {
    Natives {
        host: Arc::new(metaforge_sidecar::read_only_host()),
        gates: std::collections::BTreeMap::new(),
        holds: std::collections::BTreeSet::new(),
        evidence: None,
    }
}

fn ids(composed: &ComposedTools, domains: Option<&[String]>) -> Vec<String> {
    composed
        .registry
        .for_turn(&local(None), domains)
        .tools()
        .into_iter()
        .map(|t| t.id)
        .collect()
}

/// The tool servers of `home` (its servers file at `servers_file`, else the default place) over
/// the read-only natives, with this process's environment.
async fn compose_read_only(
    home: &std::path::Path,
    servers_file: Option<&std::path::Path>,
) -> Result<ComposedTools, ToolServersError> {
    compose_tools(
        home,
        servers_file,
        false,
        None,
        &read_only_natives(),
        &crate::system::environment(),
    )
    .await
}

fn write(dir: &std::path::Path, name: &str, doc: &Value) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(doc).unwrap()).unwrap();
    path
}

#[tokio::test]
async fn no_file_at_the_default_place_means_the_native_tools_only() {
    let home = tempfile::tempdir().unwrap();
    let composed = compose_read_only(home.path(), None).await.unwrap();
    assert_eq!(composed.servers_file, None);
    assert!(composed.statuses.snapshot().is_empty());
    // The natives, and the skill layer's two tools over the bundled skills.
    assert_eq!(
        ids(&composed, None),
        [
            "flow.list",
            "flow.validate",
            "skills.activate",
            "skills.activate_committing"
        ]
    );
}

#[tokio::test]
async fn a_missing_file_at_an_explicitly_set_path_refuses_start_naming_the_variable() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("nope.json");
    let err = compose_read_only(home.path(), Some(path.as_path()))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolServersError::MissingExplicit { .. }), "{err}");
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!(
            "METAFORGE_MCP_SERVERS_PATH={}: no such file",
            path.display()
        )),
        "{shown}"
    );
}

#[tokio::test]
async fn a_bad_servers_file_refuses_start_naming_the_path_and_the_field() {
    let home = tempfile::tempdir().unwrap();
    let path = write(
        home.path(),
        SERVERS_FILE,
        &json!({"mcpServers": {"good": {"command": "true"}, "cad": {"url": "ftp://cad"}}}),
    );
    let err = compose_read_only(home.path(), None).await.unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.contains(&format!(
            "{}: mcpServers.cad.url: must start with http://",
            path.display()
        )),
        "{shown}"
    );
    let syntax = write(home.path(), "syntax.json", &json!(null));
    std::fs::write(&syntax, "{\"mcpServers\": {\n  \"a\": {\"command\": \"x\",}\n}}").unwrap();
    let err = compose_read_only(home.path(), Some(syntax.as_path()))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(&format!("{}:2:", syntax.display())),
        "file:line:col for JSON syntax: {err}"
    );
}

/// A generator that is never reachable (no model in these tests).
struct NoGenerator;

#[async_trait::async_trait]
impl ProposalGenerator for NoGenerator {
    async fn generate(&self, _request: GenerateRequest) -> Result<Generated, GenerateError> {
        Err(GenerateError::Unavailable("no model in this test".to_owned()))
    }
}

#[tokio::test]
async fn the_native_tools_are_the_sidecars_flow_and_approval_tools() {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::fixed());
    let ledger: Arc<dyn ApprovalLedger> = Arc::new(MemoryApprovalLedger::new(Arc::clone(&clock)));
    let versions: Arc<dyn FlowVersionStore> = Arc::new(MemoryFlowVersionStore::new());
    let ids_gen: Arc<dyn IdGen> = Arc::new(SequentialIds::new("id"));
    let natives = sidecar_natives(super::natives_host(
        &ledger,
        &versions,
        &clock,
        &ids_gen,
        Arc::new(NoGenerator),
        None,
    ));
    let home = tempfile::tempdir().unwrap();
    let composed = compose_tools(
        home.path(),
        None,
        false,
        None,
        &natives,
        &crate::system::environment(),
    )
    .await
    .unwrap();
    assert_eq!(
        ids(&composed, None),
        [
            "approvals.list",
            "flow.list",
            "flow.propose",
            "flow.validate",
            "flow.version",
            "skills.activate",
            "skills.activate_committing"
        ]
    );
}

/// server-everything's entry point; `None` (skipped, printed) when it is not installed.
fn everything_js() -> Option<String> {
    require(Peer::ServerEverything).map(|path| path.display().to_string())
}

/// server-everything over streamable HTTP, killed with its process group on drop.
struct HttpEverything {
    child: ChildGuard,
    url: String,
}

impl HttpEverything {
    async fn start(js: &str) -> Self {
        let port = net::unused_port();
        let child = ChildGuard::spawn(
            Command::new("node")
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
        Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

/// MetaForge's own sidecar (the read-only host) served over streamable HTTP on loopback by the
/// MCP adapter, as `metaforge mcp serve --http` serves it; stops when the token is cancelled.
async fn sidecar_over_http(stop: &tokio_util::sync::CancellationToken) -> String {
    let sidecar = metaforge_adapters_mcp::bind_http(
        read_only_natives().host,
        "127.0.0.1:0".parse().unwrap(),
        None,
        stop.clone(),
    )
    .await
    .unwrap();
    let url = format!(
        "http://{}{}",
        sidecar.local_addr,
        metaforge_adapters_mcp::MCP_PATH
    );
    tokio::spawn(sidecar.run());
    url
}

/// Log lines (JSON) written while the guard lives, on this thread.
struct LogCapture {
    lines: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl LogCapture {
    fn start() -> Self {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_writer(move || Writer(sink.clone()))
            .finish();
        Self {
            lines,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// Every logged line's `fields` whose `event` is `event`.
    fn events(&self, event: &str) -> Vec<Value> {
        let bytes = self.lines.lock().unwrap().clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["fields"]["event"] == event)
            .map(|v| v["fields"].clone())
            .collect()
    }
}

struct Writer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn one_registry_over_server_everything_on_stdio_the_sidecar_a_broken_and_a_disabled_server() {
    let Some(js) = everything_js() else {
        return;
    };
    let logs = LogCapture::start();
    let stop = tokio_util::sync::CancellationToken::new();
    let sidecar_url = sidecar_over_http(&stop).await;
    let home = tempfile::tempdir().unwrap();
    write(
        home.path(),
        SERVERS_FILE,
        &json!({"mcpServers": {
            "everything": {"command": "node", "args": [js, "stdio"],
                           "include": ["echo", "get-*"], "exclude": ["get-env"],
                           "protocol": "2025-11-25", "domains": ["mechanical"]},
            "metaforge": {"type": "http", "url": sidecar_url, "core": true},
            "broken": {"command": "/nonexistent/mcp-server", "connect_timeout_secs": 5},
            "off": {"command": "node", "args": [js, "stdio"], "disabled": true}
        }}),
    );
    let composed = compose_read_only(home.path(), None).await.unwrap();
    assert_eq!(composed.servers_file, Some(home.path().join(SERVERS_FILE)));

    let statuses = composed.statuses.snapshot();
    println!("statuses: {statuses:?}");
    assert!(
        matches!(statuses["everything"], ServerStatus::Ok { tools } if tools >= 3),
        "{statuses:?}"
    );
    assert_eq!(statuses["metaforge"], ServerStatus::Ok { tools: 2 });
    assert_eq!(statuses["off"], ServerStatus::Disabled);
    let ServerStatus::Unavailable { reason } = &statuses["broken"] else {
        panic!("the broken server is unavailable: {statuses:?}");
    };
    assert!(
        reason.contains("mcp server broken: cannot start /nonexistent/mcp-server"),
        "{reason}"
    );
    let unavailable = logs.events("mcp_server_unavailable");
    assert_eq!(unavailable.len(), 1, "{unavailable:?}");
    assert_eq!(unavailable[0]["server"], "broken", "{unavailable:?}");

    // Unscoped: the natives, search_tools, every listed server's tools after its globs.
    let all = ids(&composed, None);
    println!("offered: {all:?}");
    for must in [
        "flow.list",
        "flow.validate",
        SEARCH_TOOLS_ID,
        "everything.echo",
        "everything.get-sum",
        "metaforge.flow.list",
        "metaforge.flow.validate",
    ] {
        assert!(all.contains(&must.to_owned()), "{must} missing from {all:?}");
    }
    assert!(!all.contains(&"everything.get-env".to_owned()), "excluded");
    assert!(
        all.iter()
            .filter(|id| id.starts_with("everything."))
            .all(|id| id == "everything.echo" || id.starts_with("everything.get-")),
        "included only: {all:?}"
    );
    let names: BTreeMap<String, String> = composed
        .registry
        .for_turn(&local(None), None)
        .tools()
        .into_iter()
        .map(|t| (t.id, t.provider_name))
        .collect();
    assert_eq!(names["everything.echo"], "mcp_everything_echo");
    assert_eq!(names["metaforge.flow.list"], "mcp_metaforge_flow_list");
    assert_eq!(names["flow.list"], "flow_list");

    // Scoped to electronics: natives, search_tools and the core sidecar; everything is
    // mechanical's. search_tools reaches it anyway, registering and pinning for the session.
    let electronics = vec!["electronics".to_owned()];
    let scoped = ids(&composed, Some(&electronics));
    assert!(
        scoped.iter().all(|id| !id.starts_with("everything.")),
        "{scoped:?}"
    );
    assert!(scoped.contains(&"metaforge.flow.list".to_owned()), "core: true");
    let turn = composed
        .registry
        .for_turn(&local(Some("thread-9")), Some(&electronics));
    let search = turn
        .tools()
        .into_iter()
        .find(|t| t.id == SEARCH_TOOLS_ID)
        .unwrap();
    let found = turn
        .call(&search, json!({"query": "echo"}).as_object().cloned().unwrap())
        .await
        .unwrap()
        .structured
        .unwrap();
    println!("search_tools echo: {found}");
    let echo = found["matches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "everything.echo")
        .unwrap();
    assert_eq!(echo["status"], "registered");
    assert_eq!(echo["name"], "mcp_everything_echo");
    assert!(turn.pinned().contains("everything.echo"));
    let next = composed
        .registry
        .for_turn(&local(Some("thread-9")), Some(&electronics));
    assert!(
        next.tools().iter().any(|t| t.id == "everything.echo"),
        "kept for the session"
    );
    let mechanical = vec!["mechanical".to_owned()];
    assert!(ids(&composed, Some(&mechanical)).contains(&"everything.get-sum".to_owned()));
    stop.cancel();
}

fn profile() -> ModelProfile {
    ModelProfile {
        provider: "openai".to_owned(),
        model: "gpt-test".to_owned(),
        family: ApiFamily::OpenaiCompatible,
        native_tools: true,
        context_window_tokens: 128_000,
        max_tools: Some(128),
    }
}

/// One chat turn of a scripted model over `composed`'s registry, as a local person's thread.
async fn run_turn(composed: &ComposedTools, steps: Vec<ScriptStep>) -> (TurnOutcome, Arc<ScriptedLlm>) {
    let llm = Arc::new(ScriptedLlm::new(steps));
    let target = ModelTarget {
        profile: profile(),
        adapter: Arc::clone(&llm) as _,
        billing: Billing::Metered,
    };
    let clock = Arc::new(ManualClock::fixed());
    let agent = Agent::new(AgentPorts {
        model: Arc::new(ProviderModels::new(BTreeMap::from([(
            "chat".to_owned(),
            vec![target],
        )]))),
        tools: composed.registry.for_turn(&local(Some("thread-1")), None),
        approvals: Some(Arc::new(MemoryApprovalLedger::new(clock.clone()))),
        clock,
        ids: Arc::new(SequentialIds::new("hold")),
    });
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let outcome = agent
        .run_turn(
            &TurnConfig::chat("thread-1"),
            &TurnInput {
                system: "You are MetaForge.".to_owned(),
                history: Vec::new(),
                user: "use the tools".to_owned(),
            },
            &EventSink::channel(tx),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    (outcome, llm)
}

#[tokio::test]
async fn a_scripted_model_calls_server_everything_and_the_sidecar_through_the_registry() {
    let Some(js) = everything_js() else {
        return;
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let sidecar_url = sidecar_over_http(&stop).await;
    let home = tempfile::tempdir().unwrap();
    write(
        home.path(),
        SERVERS_FILE,
        &json!({"mcpServers": {
            "everything": {"command": "node", "args": [js, "stdio"]},
            "metaforge": {"url": sidecar_url}
        }}),
    );
    let composed = compose_read_only(home.path(), None).await.unwrap();
    let (outcome, llm) = run_turn(
        &composed,
        vec![
            ScriptStep::calls(&[
                (
                    "c1",
                    "mcp_everything_echo",
                    json!({"message": "hello from the loop"}),
                ),
                ("c2", "mcp_metaforge_flow_list", json!({})),
                ("c3", "mcp_everything_get-sum", json!({"a": 2, "b": 40})),
            ]),
            ScriptStep::text("Echoed, listed and summed."),
        ],
    )
    .await;
    for call in &outcome.calls {
        println!("{} -> {}", call.tool, call.content);
        assert!(!call.is_error, "{}: {}", call.tool, call.content);
    }
    assert_eq!(
        outcome.calls.iter().map(|c| c.tool.as_str()).collect::<Vec<_>>(),
        ["everything.echo", "metaforge.flow.list", "everything.get-sum"]
    );
    assert!(
        outcome.calls[0].content.contains("Echo: hello from the loop"),
        "{}",
        outcome.calls[0].content
    );
    assert_eq!(
        outcome.calls[1].result["count"], 3,
        "the sidecar's three templates"
    );
    assert!(
        outcome.calls[2].content.contains("42"),
        "{}",
        outcome.calls[2].content
    );
    assert_eq!(outcome.reply, "Echoed, listed and summed.");
    // The model read the results on its next request, in call order.
    let requests = llm.requests();
    assert!(requests[0].tools.iter().any(|t| t.name == "mcp_everything_echo"));
    let last = requests[1].messages.last().unwrap();
    let results: Vec<&str> = last
        .content
        .iter()
        .filter_map(|p| match p {
            metaforge_ports::ContentPart::ToolResult { call_id, .. } => Some(call_id.as_str()),
            metaforge_ports::ContentPart::Text { .. } | metaforge_ports::ContentPart::ToolCall { .. } => None,
        })
        .collect();
    assert_eq!(results, ["c1", "c2", "c3"]);
    stop.cancel();
}

#[tokio::test]
async fn a_server_killed_mid_turn_answers_error_envelopes_and_turns_unavailable() {
    let Some(js) = everything_js() else {
        return;
    };
    let mut remote = HttpEverything::start(&js).await;
    let home = tempfile::tempdir().unwrap();
    write(
        home.path(),
        SERVERS_FILE,
        &json!({"mcpServers": {
            "remote": {"type": "streamable-http", "url": remote.url, "protocol": "2025-11-25",
                       "connect_timeout_secs": 5, "call_timeout_secs": 3}
        }}),
    );
    let composed = compose_read_only(home.path(), None).await.unwrap();
    assert!(matches!(
        composed.statuses.snapshot()["remote"],
        ServerStatus::Ok { .. }
    ));
    // Over streamable HTTP, a call answers like any other.
    let (before, _llm) = run_turn(
        &composed,
        vec![
            ScriptStep::calls(&[("c0", "mcp_remote_echo", json!({"message": "over http"}))]),
            ScriptStep::text("Echoed over HTTP."),
        ],
    )
    .await;
    assert!(!before.calls[0].is_error, "{}", before.calls[0].content);
    assert!(
        before.calls[0].content.contains("Echo: over http"),
        "{}",
        before.calls[0].content
    );
    // The first step's call runs for 4 s, a progress notification every second (the 3 s call
    // timeout is an idle timeout); the server is killed 1 s into it, so it goes silent.
    let pid = remote.child.id();
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        remote.child.kill();
        println!("killed server-everything (pid {pid}) mid-call");
        remote
    });
    let (outcome, _llm) = run_turn(
        &composed,
        vec![
            ScriptStep::calls(&[(
                "c1",
                "mcp_remote_trigger-long-running-operation",
                json!({"duration": 4, "steps": 4}),
            )]),
            ScriptStep::calls(&[("c2", "mcp_remote_echo", json!({"message": "anyone there?"}))]),
            ScriptStep::text("The remote server is down."),
        ],
    )
    .await;
    let _remote = killer.await.unwrap();
    for call in &outcome.calls {
        println!("{} -> {}", call.tool, call.content);
        assert!(call.is_error, "{}: {}", call.tool, call.content);
        assert_eq!(call.result["status"], "error", "{}", call.result);
        assert_eq!(call.result["error"], "unavailable", "{}", call.result);
        assert_eq!(call.result["tool"], call.tool.as_str());
        assert!(
            call.result["message"]
                .as_str()
                .unwrap()
                .contains("mcp server remote"),
            "{}",
            call.result
        );
    }
    assert_eq!(outcome.calls.len(), 2);
    assert_eq!(outcome.reply, "The remote server is down.");
    let ServerStatus::Unavailable { reason } = &composed.statuses.snapshot()["remote"] else {
        panic!("the killed server is unavailable");
    };
    println!("remote: unavailable: {reason}");
    assert!(composed.statuses.any_unavailable());
    // A refresh answers from the client's cache: it must not call a dead server ok.
    composed.registry.refresh().await;
    assert!(matches!(
        composed.statuses.snapshot()["remote"],
        ServerStatus::Unavailable { .. }
    ));
}
