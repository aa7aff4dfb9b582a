//! The rig every test builds: an agent over a scripted model (or two), a fake MCP server, an
//! optional native host and the in-memory approval ledger.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use metaforge_agent::{
    Agent, AgentPorts, EventSink, ModelProfile, ModelTarget, PortToolBox, ProviderModels, ToolPolicy,
    TurnEvent,
};
use metaforge_ports::{ApiFamily, Billing, CallerContext, ToolHost, ToolSource};
use metaforge_test_support::doubles::{FakeToolSource, MemoryApprovalLedger, ScriptStep, ScriptedLlm};
use metaforge_test_support::{ManualClock, SequentialIds};
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
}

/// How to build a rig.
pub(crate) struct RigSpec {
    pub(crate) steps: Vec<ScriptStep>,
    pub(crate) second_steps: Vec<ScriptStep>,
    pub(crate) profile: ModelProfile,
    pub(crate) server: FakeToolSource,
    pub(crate) native: Option<(Arc<dyn ToolHost>, CallerContext)>,
    pub(crate) policy: ToolPolicy,
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
    roles.insert(
        "evaluator".to_owned(),
        vec![primary.clone(), target(profile("anthropic", true), &second)],
    );
    let server = Arc::new(spec.server);
    let tools = PortToolBox::build(
        vec![Arc::clone(&server) as Arc<dyn ToolSource>],
        spec.native,
        &spec.policy,
    )
    .await
    .expect("tools list");
    let clock = Arc::new(ManualClock::fixed());
    let ledger = Arc::new(MemoryApprovalLedger::new(clock.clone()));
    let agent = Agent::new(AgentPorts {
        model: Arc::new(ProviderModels::new(roles)),
        tools: Arc::new(tools),
        approvals: Some(ledger.clone() as _),
        clock,
        ids: Arc::new(SequentialIds::new("hold")),
    });
    Rig {
        agent,
        llm,
        second,
        server,
        ledger,
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
