//! The central tool registry over the tool ports' doubles: natives per caller class, MCP tools
//! named by the domain's rule, domain scoping, `search_tools` registering and pinning (and the
//! agent loop's tool cap keeping what it pinned), servers that cannot list or stop answering.
//! The same registry over real MCP servers is `crates/bins/src/tool_servers.rs`'s tests.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns: a double that misbehaves must fail the test loudly"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metaforge_agent::{
    Agent, AgentPorts, AgentTool, CancellationToken, EventSink, ModelProfile, ModelTarget, ProviderModels,
    ToolBox, ToolBoxes, TurnConfig, TurnInput,
};
use metaforge_app::tools::naming::is_valid_provider_name;
use metaforge_app::tools::{DomainScope, RegistryError, SEARCH_TOOLS_ID, ServerStatus, ToolRegistry};
use metaforge_domain::tool_cap::ToolOrigin;
use metaforge_ports::{
    ApiFamily, Billing, CallerClass, CallerContext, ContentPart, HostCallOutcome, InputChannel,
    InputQuestion, PortError, PortErrorKind, ResourceTemplateDescriptor, ResourceText, ToolDescriptor,
    ToolHints, ToolHost, ToolOutput, ToolSource,
};
use metaforge_test_support::doubles::{FakeToolSource, ScriptStep, ScriptedLlm, descriptor};
use metaforge_test_support::{ManualClock, SequentialIds};
use serde_json::{Map, Value, json};

const LIST_WITHIN: Duration = Duration::from_secs(5);

fn schema() -> Value {
    json!({"type": "object", "properties": {"x": {"type": "integer"}}})
}

fn server(name: &str, tools: &[&str]) -> Arc<dyn ToolSource> {
    let mut fake = FakeToolSource::new(name);
    for tool in tools {
        let mut d = descriptor(tool, schema(), true);
        d.description = format!("{name} {tool}");
        fake = fake.with_echo(d, Duration::ZERO);
    }
    Arc::new(fake)
}

fn caller(class: CallerClass, session: Option<&str>) -> CallerContext {
    CallerContext {
        class,
        session: session.map(str::to_owned),
        input_channel: InputChannel::None,
        identity: None,
    }
}

fn local(session: Option<&str>) -> CallerContext {
    caller(CallerClass::Local, session)
}

fn ids(tools: &[AgentTool]) -> Vec<String> {
    tools.iter().map(|t| t.id.clone()).collect()
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

fn find<'a>(tools: &'a [AgentTool], id: &str) -> &'a AgentTool {
    tools
        .iter()
        .find(|t| t.id == id)
        .unwrap_or_else(|| panic!("{id} is not offered: {:?}", ids(tools)))
}

/// A native host: `flow.list` for everyone, `project.create` for local callers only, and
/// `flow.ask` that needs a person's answers.
struct Host;

#[async_trait::async_trait]
impl ToolHost for Host {
    fn tools(&self, caller: CallerClass) -> Vec<ToolDescriptor> {
        let mut tools = vec![
            descriptor("flow.list", json!({"type": "object"}), true),
            descriptor("flow.ask", json!({"type": "object"}), true),
        ];
        if caller == CallerClass::Local {
            tools.push(descriptor("project.create", json!({"type": "object"}), false));
        }
        tools
    }

    async fn call(
        &self,
        caller: &CallerContext,
        tool: &str,
        _arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        match tool {
            "flow.ask" => Ok(HostCallOutcome::NeedsInput {
                message: "which route?".to_owned(),
                questions: vec![InputQuestion {
                    id: "route".to_owned(),
                    prompt: "which route?".to_owned(),
                    choices: Vec::new(),
                    optional: false,
                }],
                result: ToolOutput::json(json!({"status": "needs_input", "questions": ["route"]})),
            }),
            other => Ok(HostCallOutcome::Done(ToolOutput::json(
                json!({"native": other, "caller": caller.class.as_str()}),
            ))),
        }
    }

    fn resource_templates(&self) -> Vec<ResourceTemplateDescriptor> {
        Vec::new()
    }

    async fn read_resource(&self, uri: &str) -> Result<ResourceText, PortError> {
        Err(PortError::new(PortErrorKind::NotFound, uri.to_owned()))
    }
}

#[tokio::test]
async fn natives_are_listed_per_caller_class_and_called_through_the_host() {
    let registry = ToolRegistry::builder()
        .natives(Arc::new(Host))
        .server(server("cad", &["read"]), LIST_WITHIN)
        .build()
        .await
        .unwrap();
    let local_tools = registry.for_turn(&local(None), None);
    let offered = local_tools.tools();
    assert_eq!(
        ids(&offered),
        [
            "flow.list",
            "flow.ask",
            "project.create",
            SEARCH_TOOLS_ID,
            "cad.read"
        ]
    );
    let flow_list = find(&offered, "flow.list");
    assert_eq!(flow_list.provider_name, "flow_list");
    assert_eq!(flow_list.origin, ToolOrigin::Native);
    assert_eq!(find(&offered, "cad.read").provider_name, "mcp_cad_read");
    assert_eq!(
        find(&offered, "cad.read").origin,
        ToolOrigin::Mcp("cad".to_owned())
    );
    let out = local_tools.call(flow_list, Map::new()).await.unwrap();
    assert_eq!(out.structured.unwrap()["caller"], "local");
    let asked = local_tools
        .call(find(&offered, "flow.ask"), Map::new())
        .await
        .unwrap();
    assert_eq!(
        asked.structured.unwrap()["status"],
        "needs_input",
        "a turn cannot ask a person mid-call: the questions are the result"
    );

    let service = registry.for_turn(&caller(CallerClass::Service, None), None);
    let service_ids = ids(&service.tools());
    assert!(
        !service_ids.contains(&"project.create".to_owned()),
        "{service_ids:?}"
    );
    let out = service
        .call(find(&service.tools(), "flow.list"), Map::new())
        .await
        .unwrap();
    assert_eq!(out.structured.unwrap()["caller"], "service");
}

#[tokio::test]
async fn without_servers_there_is_no_search_tool_and_only_natives() {
    let registry = ToolRegistry::builder()
        .natives(Arc::new(Host))
        .build()
        .await
        .unwrap();
    assert_eq!(
        ids(&registry.for_turn(&local(None), None).tools()),
        ["flow.list", "flow.ask", "project.create"]
    );
    assert!(registry.statuses().snapshot().is_empty());
}

#[tokio::test]
async fn domain_scoping_offers_core_servers_and_the_named_disciplines_only_and_no_disciplines_scope_nothing()
{
    let mut scope = DomainScope::seed();
    scope.add_server("freecad", None, &["mechanical".to_owned()]);
    scope.add_server("kicad", None, &["electronics".to_owned()]);
    scope
        .disciplines
        .entry("electronics".to_owned())
        .or_default()
        .push("spice.simulate".to_owned());
    let registry = ToolRegistry::builder()
        .server(server("twin", &["commit_geometry", "query"]), LIST_WITHIN)
        .server(server("kicad", &["open_board", "drc"]), LIST_WITHIN)
        .server(server("spice", &["simulate", "sweep"]), LIST_WITHIN)
        .server(server("freecad", &["open_session", "pad"]), LIST_WITHIN)
        .scope(scope)
        .build()
        .await
        .unwrap();
    let everything = vec![
        "twin.commit_geometry",
        "twin.query",
        "kicad.open_board",
        "kicad.drc",
        "spice.simulate",
        "spice.sweep",
        "freecad.open_session",
        "freecad.pad",
    ];
    let table: [(Option<Vec<&str>>, Vec<&str>); 6] = [
        (Some(vec![]), everything.clone()),
        (
            Some(vec!["mechanical"]),
            vec![
                "twin.commit_geometry",
                "twin.query",
                "freecad.open_session",
                "freecad.pad",
            ],
        ),
        (
            Some(vec!["electronics"]),
            vec![
                "twin.commit_geometry",
                "twin.query",
                "kicad.open_board",
                "kicad.drc",
                "spice.simulate",
            ],
        ),
        (
            Some(vec!["mechanical", "electronics"]),
            vec![
                "twin.commit_geometry",
                "twin.query",
                "kicad.open_board",
                "kicad.drc",
                "spice.simulate",
                "freecad.open_session",
                "freecad.pad",
            ],
        ),
        (
            Some(vec!["unknown-discipline"]),
            vec!["twin.commit_geometry", "twin.query"],
        ),
        (None, everything),
    ];
    for (domains, expected) in table {
        let domains: Option<Vec<String>> = domains.map(|d| d.iter().map(|s| (*s).to_owned()).collect());
        let view = registry.for_turn(&local(None), domains.as_deref());
        let mut got = ids(&view.tools());
        assert_eq!(got.remove(0), SEARCH_TOOLS_ID, "search_tools is always offered");
        assert_eq!(got, expected, "{domains:?}");
    }
}

fn search_args(query: &str) -> Map<String, Value> {
    args(json!({"query": query}))
}

#[tokio::test]
async fn search_tools_registers_matches_for_the_session_pins_them_and_reports_known_ones() {
    let mut scope = DomainScope::seed();
    scope.add_server("freecad", None, &["mechanical".to_owned()]);
    let registry = ToolRegistry::builder()
        .server(server("twin", &["query"]), LIST_WITHIN)
        .server(server("kicad", &["run_drc", "open_board"]), LIST_WITHIN)
        .server(server("freecad", &["pad"]), LIST_WITHIN)
        .scope(scope)
        .build()
        .await
        .unwrap();
    let mech = vec!["mechanical".to_owned()];
    let turn = registry.for_turn(&local(Some("thread-1")), Some(&mech));
    assert_eq!(ids(&turn.tools()), [SEARCH_TOOLS_ID, "twin.query", "freecad.pad"]);
    let search = find(&turn.tools(), SEARCH_TOOLS_ID).clone();

    let first = turn
        .call(&search, search_args("kicad drc"))
        .await
        .unwrap()
        .structured
        .unwrap();
    assert_eq!(first["count"], 1);
    assert_eq!(first["matches"][0]["id"], "kicad.run_drc");
    assert_eq!(first["matches"][0]["name"], "mcp_kicad_run_drc");
    assert_eq!(first["matches"][0]["status"], "registered");
    // Callable on the very next step of the same turn, and pinned.
    assert!(ids(&turn.tools()).contains(&"kicad.run_drc".to_owned()));
    assert_eq!(turn.pinned(), BTreeSet::from(["kicad.run_drc".to_owned()]));

    let again = turn
        .call(&search, search_args("drc"))
        .await
        .unwrap()
        .structured
        .unwrap();
    assert_eq!(again["matches"][0]["status"], "already available");
    let known = turn
        .call(&search, search_args("twin query"))
        .await
        .unwrap()
        .structured
        .unwrap();
    assert_eq!(known["matches"][0]["status"], "already available");
    assert!(
        turn.pinned().contains("twin.query"),
        "an already-known match is pinned too: the promise must hold under the cap"
    );
    let none = turn
        .call(&search, search_args("gazebo"))
        .await
        .unwrap()
        .structured
        .unwrap();
    assert_eq!(none["count"], 0);

    // The next turn of the same session keeps what was found; another session does not.
    let next = registry.for_turn(&local(Some("thread-1")), Some(&mech));
    assert!(ids(&next.tools()).contains(&"kicad.run_drc".to_owned()));
    assert!(next.pinned().contains("kicad.run_drc"));
    let other = registry.for_turn(&local(Some("thread-2")), Some(&mech));
    assert!(!ids(&other.tools()).contains(&"kicad.run_drc".to_owned()));
    assert!(other.pinned().is_empty());
    let sessionless = registry.for_turn(&local(None), Some(&mech));
    assert!(sessionless.pinned().is_empty());
}

#[tokio::test]
async fn colliding_provider_names_stay_distinct_and_stable_across_scopes() {
    let mut scope = DomainScope::seed();
    scope.add_server("my-srv", None, &["a".to_owned()]);
    let first: Arc<dyn ToolSource> = Arc::new(
        FakeToolSource::new("my-srv")
            .with_echo(descriptor("do.it", schema(), true), Duration::ZERO)
            .with_echo(descriptor("do_it", schema(), true), Duration::ZERO),
    );
    let registry = ToolRegistry::builder()
        .server(first, LIST_WITHIN)
        .scope(scope)
        .build()
        .await
        .unwrap();
    let names = |domains: Option<&[String]>| -> BTreeMap<String, String> {
        registry
            .for_turn(&local(None), domains)
            .tools()
            .into_iter()
            .map(|t| (t.id, t.provider_name))
            .collect()
    };
    let all = names(None);
    assert_eq!(all["my-srv.do.it"], "mcp_my-srv_do_it");
    let second = &all["my-srv.do_it"];
    assert_ne!(second, "mcp_my-srv_do_it");
    assert!(is_valid_provider_name(second), "{second}");
    assert_eq!(
        names(Some(&["a".to_owned()])),
        all,
        "the same names in a scoped turn"
    );
}

#[tokio::test]
async fn a_server_that_cannot_list_is_unavailable_loudly_and_the_others_are_offered() {
    let logs = LogCapture::start();
    let registry = ToolRegistry::builder()
        .server(
            Arc::new(FakeToolSource::new("sim").unlistable("connection refused")),
            LIST_WITHIN,
        )
        .server(server("cad", &["read"]), LIST_WITHIN)
        .disabled_server("old")
        .build()
        .await
        .unwrap();
    let statuses = registry.statuses().snapshot();
    assert_eq!(
        statuses["sim"],
        ServerStatus::Unavailable {
            reason: "connection refused".to_owned()
        }
    );
    assert_eq!(statuses["cad"], ServerStatus::Ok { tools: 1 });
    assert_eq!(statuses["old"], ServerStatus::Disabled);
    assert!(registry.statuses().any_unavailable());
    assert_eq!(
        ids(&registry.for_turn(&local(None), None).tools()),
        [SEARCH_TOOLS_ID, "cad.read"]
    );
    let events = logs.events();
    assert!(
        events.contains(&("ERROR".to_owned(), "mcp_server_unavailable".to_owned())),
        "{events:?}"
    );
    assert!(events.contains(&("INFO".to_owned(), "mcp_server_disabled".to_owned())));
}

/// A server whose calls fail as unreachable while `down` is set.
struct Flaky {
    down: AtomicBool,
}

#[async_trait::async_trait]
impl ToolSource for Flaky {
    fn server_name(&self) -> &str {
        "flaky"
    }
    async fn list_tools(&self) -> Result<Vec<ToolDescriptor>, PortError> {
        Ok(vec![descriptor("echo", schema(), true)])
    }
    async fn call_tool(&self, _tool: &str, arguments: Map<String, Value>) -> Result<ToolOutput, PortError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(PortError::new(
                PortErrorKind::Unavailable,
                "mcp server flaky: handshake failed: connection refused",
            ));
        }
        Ok(ToolOutput::json(Value::Object(arguments)))
    }
}

#[tokio::test]
async fn a_call_that_finds_the_server_gone_flips_it_unavailable_until_it_answers_again() {
    let flaky = Arc::new(Flaky {
        down: AtomicBool::new(false),
    });
    let registry = ToolRegistry::builder()
        .server(flaky.clone(), LIST_WITHIN)
        .build()
        .await
        .unwrap();
    let turn = registry.for_turn(&local(None), None);
    let echo = find(&turn.tools(), "flaky.echo").clone();
    assert!(turn.call(&echo, args(json!({"x": 1}))).await.is_ok());
    flaky.down.store(true, Ordering::SeqCst);
    let err = turn.call(&echo, args(json!({"x": 1}))).await.unwrap_err();
    assert_eq!(err.kind, PortErrorKind::Unavailable);
    assert_eq!(
        registry.statuses().snapshot()["flaky"],
        ServerStatus::Unavailable {
            reason: "mcp server flaky: handshake failed: connection refused".to_owned()
        }
    );
    assert!(
        ids(&turn.tools()).contains(&"flaky.echo".to_owned()),
        "still offered: the next call may reach it"
    );
    flaky.down.store(false, Ordering::SeqCst);
    assert!(turn.call(&echo, args(json!({"x": 2}))).await.is_ok());
    assert_eq!(
        registry.statuses().snapshot()["flaky"],
        ServerStatus::Ok { tools: 1 }
    );
}

#[tokio::test]
async fn two_servers_of_one_name_or_a_native_search_tools_are_refused() {
    let twice = ToolRegistry::builder()
        .server(server("cad", &["a"]), LIST_WITHIN)
        .server(server("cad", &["b"]), LIST_WITHIN)
        .build()
        .await
        .unwrap_err();
    assert_eq!(twice, RegistryError::DuplicateServer("cad".to_owned()));

    struct SearchHost;
    #[async_trait::async_trait]
    impl ToolHost for SearchHost {
        fn tools(&self, _caller: CallerClass) -> Vec<ToolDescriptor> {
            vec![descriptor(SEARCH_TOOLS_ID, json!({"type": "object"}), true)]
        }
        async fn call(
            &self,
            _caller: &CallerContext,
            _tool: &str,
            _arguments: Map<String, Value>,
        ) -> Result<HostCallOutcome, PortError> {
            Err(PortError::new(PortErrorKind::Internal, "unused"))
        }
        fn resource_templates(&self) -> Vec<ResourceTemplateDescriptor> {
            Vec::new()
        }
        async fn read_resource(&self, uri: &str) -> Result<ResourceText, PortError> {
            Err(PortError::new(PortErrorKind::NotFound, uri.to_owned()))
        }
    }
    let reserved = ToolRegistry::builder()
        .natives(Arc::new(SearchHost))
        .server(server("cad", &["a"]), LIST_WITHIN)
        .build()
        .await
        .unwrap_err();
    assert_eq!(
        reserved,
        RegistryError::ReservedNative(SEARCH_TOOLS_ID.to_owned())
    );
}

fn openai_profile(max_tools: Option<usize>) -> ModelProfile {
    ModelProfile {
        provider: "openai".to_owned(),
        model: "gpt-test".to_owned(),
        family: ApiFamily::OpenaiCompatible,
        native_tools: true,
        context_window_tokens: 128_000,
        max_tools,
    }
}

fn agent_over(llm: &Arc<ScriptedLlm>, tools: Arc<dyn ToolBox>, max_tools: Option<usize>) -> Agent {
    let target = ModelTarget {
        profile: openai_profile(max_tools),
        adapter: Arc::clone(llm) as _,
        billing: Billing::Metered,
    };
    let clock = Arc::new(ManualClock::fixed());
    Agent::new(AgentPorts {
        model: Arc::new(ProviderModels::new(BTreeMap::from([(
            "chat".to_owned(),
            vec![target],
        )]))),
        tools,
        approvals: None,
        clock,
        ids: Arc::new(SequentialIds::new("hold")),
    })
}

/// `skills.read` of `path` of skill `name` through a fresh turn of `registry`.
async fn tools_read(registry: &ToolRegistry, name: &str, path: &str) -> Value {
    let tools = registry.for_turn(&local(None), None);
    let offered = tools.tools();
    let out = tools
        .call(
            find(&offered, "skills.read"),
            json!({"name": name, "path": path}).as_object().unwrap().clone(),
        )
        .await
        .unwrap();
    out.structured.unwrap()
}

/// One chat turn of `user` on `thread` through `agent`.
async fn chat_turn(agent: &Agent, thread: &str, user: &str) -> metaforge_agent::TurnOutcome {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    agent
        .run_turn(
            &TurnConfig::chat(thread),
            &TurnInput {
                system: "You are MetaForge.".to_owned(),
                history: Vec::new(),
                user: user.to_owned(),
            },
            &EventSink::channel(tx),
            &CancellationToken::new(),
        )
        .await
        .unwrap()
}

fn offered_names(request: &metaforge_ports::LlmRequest) -> BTreeSet<String> {
    request.tools.iter().map(|t| t.name.clone()).collect()
}

#[tokio::test]
async fn a_tool_search_tools_pinned_survives_the_providers_tool_cap_on_the_next_step() {
    // 300 MCP tools over five servers to an OpenAI-family model capped at 128: the loop's cap
    // (the domain's select_tools) drops kicad's alphabetical tail — until search_tools pins one.
    let mut builder = ToolRegistry::builder();
    for name in ["alpha", "beta", "freecad", "kicad", "twin"] {
        let tools: Vec<String> = (0..60).map(|i| format!("op_{i:03}")).collect();
        let refs: Vec<&str> = tools.iter().map(String::as_str).collect();
        builder = builder.server(server(name, &refs), LIST_WITHIN);
    }
    let registry = builder.build().await.unwrap();
    let llm = Arc::new(ScriptedLlm::new(vec![
        ScriptStep::calls(&[("c1", SEARCH_TOOLS_ID, json!({"query": "kicad op_059"}))]),
        ScriptStep::calls(&[("c2", "mcp_kicad_op_059", json!({"x": 7}))]),
        ScriptStep::text("kicad op_059 answered."),
    ]));
    let tools = registry.for_turn(&local(Some("thread-cap")), None);
    let agent = agent_over(&llm, tools, Some(128));
    let outcome = chat_turn(&agent, "thread-cap", "use kicad op_059").await;
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let before = offered_names(&requests[0]);
    assert_eq!(before.len(), 128, "the cap holds");
    assert!(before.contains(SEARCH_TOOLS_ID), "natives are always kept");
    assert!(
        !before.contains("mcp_kicad_op_059"),
        "the round-robin drops the tail before the search"
    );
    let after = offered_names(&requests[1]);
    assert_eq!(after.len(), 128);
    assert!(
        after.contains("mcp_kicad_op_059"),
        "pinned: kept on the next step"
    );
    assert_eq!(outcome.calls.len(), 2);
    assert!(!outcome.calls[1].is_error, "{}", outcome.calls[1].content);
    assert_eq!(outcome.calls[1].result["arguments"]["x"], 7);
    let ContentPart::ToolResult { content, .. } = &requests[2].messages.last().unwrap().content[0] else {
        panic!("the last request ends with the tool result");
    };
    assert!(content.contains("\"x\":7"), "{content}");
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

    /// `(level, event)` of every line so far.
    fn events(&self) -> Vec<(String, String)> {
        let bytes = self.lines.lock().unwrap().clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| {
                Some((
                    v["level"].as_str()?.to_owned(),
                    v["fields"]["event"].as_str()?.to_owned(),
                ))
            })
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

#[test]
fn tool_hints_default_makes_an_unhinted_tool_destructive_for_the_gate() {
    // The registry declares tools through the agent's one rule (AgentTool::new), so a server
    // that declares no hints gets the destructive default, never a guess.
    let bare = ToolDescriptor {
        name: "write".to_owned(),
        title: None,
        description: String::new(),
        input_schema: json!({"type": "object"}),
        hints: ToolHints::default(),
    };
    let tool = AgentTool::new(
        "cad.write".to_owned(),
        "mcp_cad_write".to_owned(),
        ToolOrigin::Mcp("cad".to_owned()),
        bare,
        &metaforge_agent::ToolPolicy::default(),
    );
    assert_eq!(
        tool.gate.annotation,
        metaforge_domain::tool_gating::Annotation::Destructive
    );
}

/// A catalogue of the bundled skills plus `review-cad` (allowed: `cad.read` only).
fn skills_shelf() -> Arc<metaforge_app::skills::SkillShelf> {
    let mut sources = metaforge_app::skills::bundled();
    sources.push(metaforge_app::skills::SkillFiles {
        origin: metaforge_app::skills::SkillOrigin::Directory("/skills".into()),
        directory: "review-cad".into(),
        skill_md:
            "---\nname: review-cad\ndescription: Reviews a CAD part. Use when asked to review a part.\n\
                   allowed-tools: cad.read\n---\n1. Read the part with cad.read (x = 7).\n2. Report.\n"
                .into(),
        files: vec!["references/checklist.md".into()],
        contents: BTreeMap::from([("references/checklist.md".to_owned(), b"- loads\n".to_vec())]),
    });
    Arc::new(metaforge_app::skills::SkillShelf::new(
        metaforge_app::skills::SkillCatalog::layer(sources),
    ))
}

#[tokio::test]
async fn a_turn_sees_only_skill_names_activates_one_follows_it_and_a_tool_outside_its_allowed_tools_is_refused()
 {
    let registry = ToolRegistry::builder()
        .server(server("cad", &["read", "write"]), LIST_WITHIN)
        .skills(skills_shelf())
        .build()
        .await
        .unwrap();
    let llm = Arc::new(ScriptedLlm::new(vec![
        ScriptStep::calls(&[("c1", "skills_activate", json!({"name": "review-cad"}))]),
        ScriptStep::calls(&[("c2", "mcp_cad_read", json!({"x": 7}))]),
        ScriptStep::calls(&[("c3", "mcp_cad_write", json!({"x": 8}))]),
        ScriptStep::text("Reviewed."),
    ]));
    let tools = registry.for_turn(&local(Some("thread-skill")), None);
    let agent = agent_over(&llm, tools, None);
    let outcome = chat_turn(&agent, "thread-skill", "review the bracket part").await;
    let requests = llm.requests();
    // Progressive disclosure: the first request names the skills, never their instructions.
    let activate = requests[0]
        .tools
        .iter()
        .find(|t| t.name == "skills_activate")
        .unwrap();
    assert!(
        activate.description.contains("- review-cad: Reviews a CAD part."),
        "{}",
        activate.description
    );
    assert!(activate.description.contains("- flow-proposal-review:"));
    assert!(
        !activate.description.contains("Read the part with cad.read"),
        "no body before activation"
    );
    assert!(
        !activate.description.contains("design-decision-record"),
        "committing skills go through their own tool"
    );
    assert!(offered_names(&requests[0]).contains("skills_activate_committing"));
    assert!(offered_names(&requests[0]).contains("mcp_cad_write"));
    // The activation answers the instructions and its files.
    assert_eq!(
        outcome.calls[0].result["instructions"],
        "1. Read the part with cad.read (x = 7).\n2. Report."
    );
    assert_eq!(
        outcome.calls[0].result["files"],
        json!(["references/checklist.md"])
    );
    // From the next step the turn is narrowed to the skill's allowed tools (and the skill tools).
    let narrowed = offered_names(&requests[1]);
    assert_eq!(
        narrowed,
        BTreeSet::from([
            "mcp_cad_read".to_owned(),
            "skills_activate".to_owned(),
            "skills_activate_committing".to_owned(),
            "skills_read".to_owned()
        ]),
    );
    // A file it lists is read on demand.
    let listed = tools_read(&registry, "review-cad", "references/checklist.md").await;
    assert_eq!(listed["text"], "- loads\n", "{listed}");
    let missing = tools_read(&registry, "review-cad", "references/none.md").await;
    assert_eq!(missing["error"], "unknown_file", "{missing}");
    assert!(!outcome.calls[1].is_error, "{}", outcome.calls[1].content);
    // A call outside it is refused, and nothing ran.
    assert!(outcome.calls[2].is_error);
    assert_eq!(
        outcome.calls[2].result["error"], "unknown_tool",
        "{}",
        outcome.calls[2].result
    );
}

#[tokio::test]
async fn a_skill_that_commits_is_activated_only_through_the_held_tool() {
    let registry = ToolRegistry::builder()
        .skills(skills_shelf())
        .build()
        .await
        .unwrap();
    let tools = registry.for_turn(&local(None), None);
    let offered = tools.tools();
    let committing = find(&offered, "skills.activate_committing");
    assert!(
        committing.requires_approval(),
        "held for a person first (FORGE-97)"
    );
    assert_eq!(
        committing.origin,
        ToolOrigin::Native,
        "protected from the tool cap"
    );
    let plain = find(&offered, "skills.activate");
    assert!(
        !plain.requires_approval(),
        "a skill that does not commit is not held"
    );
    let wrong = tools
        .call(
            plain,
            json!({"name": "design-decision-record"})
                .as_object()
                .unwrap()
                .clone(),
        )
        .await
        .unwrap();
    assert!(wrong.is_error);
    assert_eq!(wrong.structured.unwrap()["error"], "wrong_activation_tool");
    let right = tools
        .call(
            committing,
            json!({"name": "design-decision-record"})
                .as_object()
                .unwrap()
                .clone(),
        )
        .await
        .unwrap();
    assert!(!right.is_error);
    let result = right.structured.unwrap();
    assert_eq!(result["commits"], true);
    assert!(
        result["instructions"]
            .as_str()
            .unwrap()
            .contains("twin.record_decision")
    );
}

/// A server that serves one skill over the Skills extension and no tools.
struct SkillServer;

#[async_trait::async_trait]
impl ToolSource for SkillServer {
    fn server_name(&self) -> &str {
        "second"
    }

    async fn list_tools(&self) -> Result<Vec<ToolDescriptor>, PortError> {
        Ok(Vec::new())
    }

    async fn call_tool(&self, tool: &str, _arguments: Map<String, Value>) -> Result<ToolOutput, PortError> {
        Err(PortError::new(PortErrorKind::NotFound, tool.to_owned()))
    }

    async fn list_skills(&self) -> Result<Vec<metaforge_ports::ServedSkill>, PortError> {
        let manifest =
            "---\nname: bracket-check\ndescription: Checks a bracket.\n---\nRead the loads first.\n";
        let invalid = "---\nname: Bad\n---\n";
        Ok(vec![
            metaforge_ports::ServedSkill {
                name: "bracket-check".into(),
                description: "Checks a bracket.".into(),
                frontmatter: Map::new(),
                files: vec![
                    ("SKILL.md".into(), manifest.as_bytes().to_vec()),
                    ("references/loads.md".into(), b"20 kg\n".to_vec()),
                ],
            },
            metaforge_ports::ServedSkill {
                name: "bad".into(),
                description: String::new(),
                frontmatter: Map::new(),
                files: vec![("SKILL.md".into(), invalid.as_bytes().to_vec())],
            },
        ])
    }
}

#[tokio::test]
async fn a_servers_skills_are_offered_under_its_name_after_the_same_validation() {
    let registry = ToolRegistry::builder()
        .server(Arc::new(SkillServer), LIST_WITHIN)
        .skills(skills_shelf())
        .build()
        .await
        .unwrap();
    let tools = registry.for_turn(&local(None), None);
    let offered = tools.tools();
    let activate = find(&offered, "skills.activate");
    assert!(
        activate
            .descriptor
            .description
            .contains("- second.bracket-check: Checks a bracket."),
        "{}",
        activate.descriptor.description
    );
    assert!(
        !activate.descriptor.description.contains("second.bad"),
        "an invalid skill is refused"
    );
    let out = tools
        .call(
            activate,
            json!({"name": "second.bracket-check"})
                .as_object()
                .unwrap()
                .clone(),
        )
        .await
        .unwrap();
    assert!(!out.is_error, "{out:?}");
    let result = out.structured.unwrap();
    assert_eq!(result["instructions"], "Read the loads first.");
    assert_eq!(result["files"], json!(["references/loads.md"]));
}
