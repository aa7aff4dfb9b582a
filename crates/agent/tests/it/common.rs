//! The rig every test builds: an agent over a scripted model (or two), a fake MCP server, an
//! optional native host and the in-memory approval ledger. The tools reach the loop through
//! [`PortTools`], a plain [`ToolBox`] over the ports; the composition's central registry
//! (`metaforge_app::tools::ToolRegistry`, tested in the app and the binary) is the real one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use metaforge_agent::{
    Agent, AgentPorts, AgentTool, EventSink, ModelProfile, ModelTarget, ProviderModels, ToolBox, ToolPolicy,
    TurnEvent,
};
use metaforge_domain::tool_cap::ToolOrigin;
use metaforge_domain::tool_naming::{mcp_tool_id, preferred_provider_name};
use metaforge_ports::{
    ApiFamily, Billing, CallerContext, HostCallOutcome, PortError, PortErrorKind, ToolHost, ToolOutput,
    ToolSource,
};
use metaforge_test_support::doubles::{
    FakeToolSource, MemoryApprovalLedger, MemoryUsageStore, ScriptStep, ScriptedLlm,
};
use metaforge_test_support::{ManualClock, SequentialIds};
use serde_json::{Map, Value};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// A model profile for `provider`.
pub(crate) fn profile(provider: &str, native_tools: bool) -> ModelProfile {
    ModelProfile {
        provider: provider.to_owned(),
        model: format!("{provider}-model"),
        family: ApiFamily::OpenaiCompatible,
        native_tools,
        context_window_tokens: 128_000,
        max_tools: None,
    }
}

/// A target serving `profile` from `llm`.
pub(crate) fn target(profile: ModelProfile, llm: &Arc<ScriptedLlm>) -> ModelTarget {
    ModelTarget {
        profile,
        adapter: Arc::clone(llm) as _,
        billing: Billing::Metered,
    }
}

/// What a test drives and inspects.
pub(crate) struct Rig {
    pub(crate) agent: Agent,
    pub(crate) llm: Arc<ScriptedLlm>,
    pub(crate) second: Arc<ScriptedLlm>,
    pub(crate) server: Arc<FakeToolSource>,
    pub(crate) ledger: Arc<MemoryApprovalLedger>,
    pub(crate) usage: Arc<MemoryUsageStore>,
}

/// How to build a rig.
pub(crate) struct RigSpec {
    pub(crate) steps: Vec<ScriptStep>,
    pub(crate) second_steps: Vec<ScriptStep>,
    pub(crate) profile: ModelProfile,
    pub(crate) server: FakeToolSource,
    pub(crate) native: Option<(Arc<dyn ToolHost>, CallerContext)>,
    pub(crate) policy: ToolPolicy,
    /// Wire the approval ledger (holds are refused without one).
    pub(crate) ledger: bool,
    /// Configure `anthropic` as the evaluator's second provider.
    pub(crate) second_evaluator: bool,
}

impl RigSpec {
    /// A native-tools model answering `steps`, over `server`.
    pub(crate) fn new(steps: Vec<ScriptStep>, server: FakeToolSource) -> Self {
        Self {
            steps,
            second_steps: Vec::new(),
            profile: profile("openai", true),
            server,
            native: None,
            policy: ToolPolicy::default(),
            ledger: true,
            second_evaluator: true,
        }
    }
}

/// Builds the rig: `chat`, `planner` and `generator` on `openai` (the first script); `evaluator`
/// on `openai` then `anthropic` (the second script).
pub(crate) async fn rig(spec: RigSpec) -> Rig {
    let llm = Arc::new(ScriptedLlm::new(spec.steps));
    let second = Arc::new(ScriptedLlm::new(spec.second_steps));
    let primary = target(spec.profile.clone(), &llm);
    let mut roles = BTreeMap::new();
    for role in ["chat", "planner", "generator"] {
        roles.insert(role.to_owned(), vec![primary.clone()]);
    }
    let mut evaluators = vec![primary.clone()];
    if spec.second_evaluator {
        evaluators.push(target(profile("anthropic", true), &second));
    }
    roles.insert("evaluator".to_owned(), evaluators);
    let server = Arc::new(spec.server);
    let tools = PortTools::build(Arc::clone(&server), spec.native, &spec.policy).await;
    let clock = Arc::new(ManualClock::fixed());
    let ledger = Arc::new(MemoryApprovalLedger::new(clock.clone()));
    let usage = Arc::new(MemoryUsageStore::new());
    let agent = Agent::new(AgentPorts {
        model: Arc::new(ProviderModels::new(roles).with_usage_store(usage.clone(), clock.clone())),
        tools: Arc::new(tools),
        approvals: spec.ledger.then(|| ledger.clone() as _),
        clock,
        ids: Arc::new(SequentialIds::new("hold")),
    });
    Rig {
        agent,
        llm,
        second,
        server,
        ledger,
        usage,
    }
}

/// A [`ToolBox`] over one fake MCP server and an optional native host, listed once.
pub(crate) struct PortTools {
    tools: Vec<AgentTool>,
    server: Arc<FakeToolSource>,
    native: Option<(Arc<dyn ToolHost>, CallerContext)>,
}

impl PortTools {
    async fn build(
        server: Arc<FakeToolSource>,
        native: Option<(Arc<dyn ToolHost>, CallerContext)>,
        policy: &ToolPolicy,
    ) -> Self {
        let mut tools = Vec::new();
        if let Some((host, caller)) = &native {
            for d in host.tools(caller.class) {
                let name = preferred_provider_name(None, &d.name);
                tools.push(AgentTool::new(
                    d.name.clone(),
                    name,
                    ToolOrigin::Native,
                    d,
                    policy,
                ));
            }
        }
        let listed = server.list_tools().await.unwrap_or_default();
        for d in listed {
            let id = mcp_tool_id(server.server_name(), &d.name);
            let name = preferred_provider_name(Some(server.server_name()), &d.name);
            let origin = ToolOrigin::Mcp(server.server_name().to_owned());
            tools.push(AgentTool::new(id, name, origin, d, policy));
        }
        Self {
            tools,
            server,
            native,
        }
    }
}

#[async_trait::async_trait]
impl ToolBox for PortTools {
    fn tools(&self) -> Vec<AgentTool> {
        self.tools.clone()
    }

    async fn call(&self, tool: &AgentTool, arguments: Map<String, Value>) -> Result<ToolOutput, PortError> {
        match (&tool.origin, &self.native) {
            (ToolOrigin::Mcp(_), _) => self.server.call_tool(&tool.descriptor.name, arguments).await,
            (ToolOrigin::Native, Some((host, caller))) => {
                match host.call(caller, &tool.descriptor.name, arguments).await? {
                    HostCallOutcome::Done(output) | HostCallOutcome::NeedsInput { result: output, .. } => {
                        Ok(output)
                    }
                }
            }
            (ToolOrigin::Native, None) => Err(PortError::new(PortErrorKind::NotFound, "no native host")),
        }
    }
}

/// An event sink and the receiver to drain it.
pub(crate) fn events() -> (EventSink, UnboundedReceiver<TurnEvent>) {
    let (tx, rx) = unbounded_channel();
    (EventSink::channel(tx), rx)
}

/// Everything sent so far.
pub(crate) fn drain(rx: &mut UnboundedReceiver<TurnEvent>) -> Vec<TurnEvent> {
    let mut out = Vec::new();
    while let Ok(event) = rx.try_recv() {
        out.push(event);
    }
    out
}

/// The SSE names of `events`.
pub(crate) fn names(events: &[TurnEvent]) -> Vec<&'static str> {
    events.iter().map(TurnEvent::name).collect()
}

/// Short enough for a test, long enough for a loaded CI box.
pub(crate) const SLOW: Duration = Duration::from_millis(150);

/// Log lines (JSON) written while the guard lives, on this thread.
pub(crate) struct LogCapture {
    lines: Arc<std::sync::Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl LogCapture {
    /// Starts capturing.
    pub(crate) fn start() -> Self {
        let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
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

    /// The `event` fields logged so far, with their level.
    pub(crate) fn events(&self) -> Vec<(String, String)> {
        let bytes = self.lines.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| {
                Some((
                    v["level"].as_str()?.to_owned(),
                    v["fields"]["event"].as_str()?.to_owned(),
                ))
            })
            .collect()
    }
}

struct Writer(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut lines) = self.0.lock() {
            lines.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
