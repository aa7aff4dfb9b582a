//! The central tool registry: naming, scoping, search_tools pinning, validation, error
//! pass-through, and schema selection under an OpenAI-family provider's 128-tool cap.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::{Arc, Mutex};

use metaforge_app::tools::naming::is_valid_provider_name;
use metaforge_app::tools::{
    DomainScope, NativeTool, Registration, SearchTools, ToolCatalogue, ToolRegistry, register_scoped,
};
use metaforge_domain::providers::{max_tools_for, resolve_provider};
use metaforge_ports::{PortError, PortErrorKind, ToolDescriptor, ToolHints, ToolOutput, ToolSource};
use serde_json::{Map, Value, json};

/// A tool server double: a fixed list, and calls that echo or fail as told.
struct FakeServer {
    name: String,
    tools: Vec<ToolDescriptor>,
}

fn tool(name: &str, description: &str) -> ToolDescriptor {
    ToolDescriptor {
        name: name.to_owned(),
        title: None,
        description: description.to_owned(),
        input_schema: json!({"type": "object", "properties": {"x": {"type": "integer"}}}),
        hints: ToolHints::default(),
    }
}

#[async_trait::async_trait]
impl ToolSource for FakeServer {
    fn server_name(&self) -> &str {
        &self.name
    }
    async fn list_tools(&self) -> Result<Vec<ToolDescriptor>, PortError> {
        Ok(self.tools.clone())
    }
    async fn call_tool(&self, tool: &str, arguments: Map<String, Value>) -> Result<ToolOutput, PortError> {
        match tool {
            "container_down" => Ok(ToolOutput {
                content: vec![json!({"type": "text", "text":
                    r#"{"status":"unavailable","message":"container freecad is down","hint":"stop retrying; ask the operator"}"#})],
                structured: None,
                is_error: true,
            }),
            "timeout" => Err(PortError::new(
                PortErrorKind::Unavailable,
                "no response within 1s",
            )),
            _ => Ok(ToolOutput::json(json!({"tool": tool, "arguments": arguments}))),
        }
    }
}

fn server(name: &str, tools: &[&str]) -> Arc<dyn ToolSource> {
    Arc::new(FakeServer {
        name: name.to_owned(),
        tools: tools.iter().map(|t| tool(t, &format!("{name} {t}"))).collect(),
    })
}

struct Native(&'static str);

#[async_trait::async_trait]
impl NativeTool for Native {
    fn descriptor(&self) -> ToolDescriptor {
        tool(self.0, "native")
    }
    async fn invoke(&self, arguments: Map<String, Value>) -> Result<ToolOutput, PortError> {
        Ok(ToolOutput::json(
            json!({"native": self.0, "arguments": arguments}),
        ))
    }
}

async fn catalogue(sources: &[Arc<dyn ToolSource>]) -> ToolCatalogue {
    ToolCatalogue::load(sources).await
}

/// Captures tracing output so a test can read what was logged.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_poisoned| std::io::Error::other("log buffer poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn three_hundred_tools_to_an_openai_provider_keep_128_with_every_native_and_protected_tool() {
    let registry = Arc::new(ToolRegistry::new());
    let natives = [
        "search_tools",
        "chat.set_project_scope",
        "flow.list",
        "flow.propose",
        "skill.run",
    ];
    for n in natives {
        registry.register_native(Arc::new(Native(n))).unwrap();
    }
    // 295 MCP tools over six servers; the protected ones sort into the alphabetical tail.
    let mut sources: Vec<Arc<dyn ToolSource>> = Vec::new();
    for (server_name, count) in [
        ("alpha", 60),
        ("beta", 60),
        ("freecad", 50),
        ("kicad", 50),
        ("twin", 45),
        ("gazebo", 30),
    ] {
        let mut names: Vec<String> = (0..count).map(|i| format!("op_{i:03}")).collect();
        if server_name == "freecad" {
            names.truncate(count - 3);
            names.extend([
                "zz_open_session".into(),
                "zz_pad_sketch".into(),
                "zzz_export".into(),
            ]);
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        sources.push(server(server_name, &refs));
    }
    let catalogue = Arc::new(catalogue(&sources).await);
    let registered = register_scoped(&registry, &catalogue, &DomainScope::default(), None);
    assert_eq!(registered, 295);
    assert_eq!(registry.len(), 300);
    // search_tools pins a tail tool the round-robin would otherwise drop.
    let search = SearchTools::new(Arc::clone(&registry), Arc::clone(&catalogue));
    let found = search
        .invoke(json!({"query": "kicad op_049"}).as_object().unwrap().clone())
        .await
        .unwrap();
    assert_eq!(
        found.structured.as_ref().unwrap()["matches"][0]["status"],
        "already available"
    );

    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let openai = resolve_provider("openai").unwrap();
    let cap = max_tools_for(openai);
    assert_eq!(cap, Some(128));
    let selection = tracing::subscriber::with_default(subscriber, || registry.schemas_for(cap));

    assert_eq!(selection.schemas.len(), 128);
    assert_eq!(selection.dropped.len(), 300 - 128);
    let sent: BTreeSet<&str> = selection.schemas.iter().map(|s| s.name.as_str()).collect();
    for must in [
        "search_tools",
        "chat_set_project_scope",
        "flow_list",
        "flow_propose",
        "skill_run",
        "mcp_freecad_zz_open_session",
        "mcp_freecad_zz_pad_sketch",
        "mcp_kicad_op_049",
    ] {
        assert!(sent.contains(must), "{must} was dropped");
    }
    assert!(sent.iter().all(|n| is_valid_provider_name(n)));
    // Every non-niche server keeps a share; the niche server gazebo is served last.
    for srv in ["alpha", "beta", "freecad", "kicad", "twin"] {
        let kept = sent
            .iter()
            .filter(|n| n.starts_with(&format!("mcp_{srv}_")))
            .count();
        assert!(kept >= 20, "{srv} kept only {kept}");
    }
    assert_eq!(sent.iter().filter(|n| n.starts_with("mcp_gazebo_")).count(), 0);
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    println!("{}", &log[..log.len().min(600)]);
    assert!(log.contains("tool_schemas_truncated"), "{log}");
    assert!(log.contains("limit=128"), "{log}");
    for dropped in selection.dropped.iter().take(5) {
        assert!(log.contains(dropped.as_str()), "{dropped} missing from the log");
    }
    // Anthropic publishes no cap: everything goes.
    let anthropic = max_tools_for(resolve_provider("anthropic").unwrap());
    assert_eq!(registry.schemas_for(anthropic).schemas.len(), 300);
}

#[tokio::test]
async fn domain_scoping_registers_core_servers_and_the_named_disciplines_only() {
    let sources = vec![
        server("twin", &["commit_geometry", "query"]),
        server("kicad", &["open_board", "drc"]),
        server("spice", &["simulate"]),
        server("freecad", &["open_session", "pad"]),
    ];
    let catalogue = catalogue(&sources).await;
    let scope = DomainScope::with_disciplines(BTreeMap::from([
        ("mechanical".to_owned(), vec!["freecad.*".to_owned()]),
        (
            "electronics".to_owned(),
            vec!["kicad.*".to_owned(), "spice.simulate".to_owned()],
        ),
    ]));
    let table: [(Option<Vec<&str>>, Vec<&str>); 4] = [
        (
            Some(vec!["mechanical"]),
            vec![
                "freecad.open_session",
                "freecad.pad",
                "twin.commit_geometry",
                "twin.query",
            ],
        ),
        (
            Some(vec!["electronics"]),
            vec![
                "kicad.drc",
                "kicad.open_board",
                "spice.simulate",
                "twin.commit_geometry",
                "twin.query",
            ],
        ),
        (
            Some(vec!["unknown-discipline"]),
            vec!["twin.commit_geometry", "twin.query"],
        ),
        (
            None,
            vec![
                "freecad.open_session",
                "freecad.pad",
                "kicad.drc",
                "kicad.open_board",
                "spice.simulate",
                "twin.commit_geometry",
                "twin.query",
            ],
        ),
    ];
    for (domains, expected) in table {
        let registry = ToolRegistry::new();
        let domains: Option<Vec<String>> = domains.map(|d| d.iter().map(|s| (*s).to_owned()).collect());
        register_scoped(&registry, &catalogue, &scope, domains.as_deref());
        let ids: Vec<String> = registry.all().into_iter().map(|t| t.id).collect();
        assert_eq!(ids, expected, "{domains:?}");
    }
}

#[tokio::test]
async fn search_tools_registers_matches_pins_them_and_reports_known_ones_as_already_available() {
    let sources = vec![
        server("twin", &["query"]),
        server("kicad", &["run_drc", "open_board"]),
    ];
    let catalogue = Arc::new(catalogue(&sources).await);
    let registry = Arc::new(ToolRegistry::new());
    register_scoped(
        &registry,
        &catalogue,
        &DomainScope::with_disciplines(BTreeMap::new()),
        Some(&["mechanical".to_owned()]),
    );
    assert!(registry.get("kicad.run_drc").is_none());
    let search = SearchTools::new(Arc::clone(&registry), Arc::clone(&catalogue));
    registry.register_native(Arc::new(search)).unwrap();

    let first = registry
        .invoke(
            "search_tools",
            json!({"query": "kicad drc"}).as_object().unwrap().clone(),
        )
        .await;
    let first = first.structured.unwrap();
    assert_eq!(first["matches"][0]["id"], "kicad.run_drc");
    assert_eq!(first["matches"][0]["status"], "registered");
    assert_eq!(first["matches"][0]["name"], "mcp_kicad_run_drc");
    assert!(
        registry.get("mcp_kicad_run_drc").is_some(),
        "callable on the next step"
    );
    assert!(registry.pinned().contains("kicad.run_drc"));

    let again = registry
        .invoke(
            "search_tools",
            json!({"query": "drc"}).as_object().unwrap().clone(),
        )
        .await;
    assert_eq!(
        again.structured.unwrap()["matches"][0]["status"],
        "already available"
    );
    let known = registry
        .invoke(
            "search_tools",
            json!({"query": "twin query"}).as_object().unwrap().clone(),
        )
        .await;
    let known = known.structured.unwrap();
    assert_eq!(known["matches"][0]["status"], "already available");
    assert!(
        registry.pinned().contains("twin.query"),
        "already-known matches are pinned too"
    );
    let none = registry
        .invoke(
            "search_tools",
            json!({"query": "gazebo"}).as_object().unwrap().clone(),
        )
        .await;
    assert_eq!(none.structured.unwrap()["count"], 0);
    // The search tool validates its own arguments like any other.
    let bad = registry.invoke("search_tools", Map::new()).await;
    assert!(bad.is_error);
    assert_eq!(bad.structured.unwrap()["error"], "invalid_arguments");
}

#[tokio::test]
async fn registering_twice_is_already_available_and_colliding_names_stay_distinct() {
    let registry = ToolRegistry::new();
    let a = server("my-srv", &["do.it"]);
    let b = server("my-srv", &["do_it"]);
    let first = registry.register_mcp(&a, tool("do.it", ""));
    assert_eq!(first, Registration::Registered("mcp_my-srv_do_it".into()));
    assert_eq!(
        registry.register_mcp(&a, tool("do.it", "")),
        Registration::AlreadyAvailable("mcp_my-srv_do_it".into())
    );
    let Registration::Registered(second) = registry.register_mcp(&b, tool("do_it", "")) else {
        panic!("a distinct id must register");
    };
    assert_ne!(second, "mcp_my-srv_do_it");
    assert!(is_valid_provider_name(&second));
    assert_eq!(registry.get(&second).unwrap().id, "my-srv.do_it");
    assert_eq!(registry.get("mcp_my-srv_do_it").unwrap().id, "my-srv.do.it");
}

#[tokio::test]
async fn failures_come_back_as_envelopes_keeping_the_servers_own_payload() {
    let registry = ToolRegistry::new();
    let s = server("freecad", &["container_down", "timeout", "fine"]);
    for name in ["container_down", "timeout", "fine"] {
        registry.register_mcp(&s, tool(name, ""));
    }
    let down = registry.invoke("mcp_freecad_container_down", Map::new()).await;
    assert!(down.is_error);
    let down = down.structured.unwrap();
    assert_eq!(down["error"], "tool_error");
    assert_eq!(down["details"]["status"], "unavailable");
    assert_eq!(down["details"]["message"], "container freecad is down");
    assert_eq!(down["details"]["hint"], "stop retrying; ask the operator");

    let slow = registry
        .invoke("freecad.timeout", Map::new())
        .await
        .structured
        .unwrap();
    assert_eq!(slow["error"], "unavailable");
    assert_eq!(slow["message"], "no response within 1s");

    let invalid = registry
        .invoke(
            "freecad.fine",
            json!({"x": "not a number"}).as_object().unwrap().clone(),
        )
        .await
        .structured
        .unwrap();
    assert_eq!(invalid["error"], "invalid_arguments");
    assert_eq!(invalid["validation_errors"][0]["path"], "/x");
    assert_eq!(invalid["validation_errors"][0]["keyword"], "type");
    assert!(invalid["hint"].as_str().unwrap().contains("NOT executed"));

    let unknown = registry.invoke("nope", Map::new()).await.structured.unwrap();
    assert_eq!(unknown["error"], "unknown_tool");
}
