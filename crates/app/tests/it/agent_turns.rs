//! The agent loop over the real provider pipeline: `Agent::run_turn` and `Agent::run_pge` with
//! `PipelineTurnModel` over `ProviderPipeline` + `RouteResolver`, the real family adapters
//! (OpenAI-compatible, Anthropic, Gemini, Bedrock, Codex/Responses) and a local scripted upstream
//! per provider answering in that family's wire shape.
//!
//! Every family: the native loop with a parallel batch answered in call order, the ReAct loop
//! forced by the deployment setting, the same-turn duplicate guard, a schema-invalid call refused
//! before anything runs, a fallback to a second provider when the first answers 503 (usage
//! attributed to run, phase, role, caller and the serving provider). Then Planner → Generator →
//! Evaluator over the pipeline, and the errors the model port gives when it cannot serve.

#![expect(clippy::unwrap_used, reason = "test helpers outside #[test] fns may panic")]

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metaforge_adapters_llm::{
    AnthropicProvider, BedrockProvider, CodexProvider, FileCredentialStore, GeminiProvider, HttpSettings,
    OpenAiCompatibleProvider,
};
use metaforge_agent::pge::{PgeConfig, Verdict};
use metaforge_agent::{
    Agent, AgentPorts, CancellationToken, EventSink, LoopMode, ModelCall, ModelError, ToolPolicy, TurnConfig,
    TurnInput, TurnModel, UsageScope,
};
use metaforge_app::pipeline::{
    CallUsage, Candidate, CredentialRotor, FallbackAlarm, FallbackReason, ProviderEntry, ProviderPipeline,
    RetryPolicy, RoleModelSlots, UsageSink,
};
use metaforge_app::routing::RouteResolver;
use metaforge_app::turn_model::PipelineTurnModel;
use metaforge_domain::routing::{RoutingTable, env_var_for_role};
use metaforge_ports::{
    ApiFamily, ApprovalLedger, Billing, Credential, CredentialSecret, CredentialStore, LlmMessage,
    LlmProvider, LlmRequest, PortError, SelectionStore, ToolOutput, ToolSource,
};
use metaforge_test_support::doubles::{FakeToolSource, MemoryApprovalLedger, descriptor};
use metaforge_test_support::upstream::{Reply, Scripted};
use metaforge_test_support::{ManualClock, SequentialIds};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// The families' wire shapes.

/// One scripted model answer, rendered in a family's wire shape by [`Wire::reply`].
#[derive(Debug, Clone)]
enum Step {
    /// Tool calls `(id, name, arguments)`, in order.
    Calls(Vec<(&'static str, &'static str, Value)>),
    /// A text answer.
    Text(String),
}

fn calls(list: &[(&'static str, &'static str, Value)]) -> Step {
    Step::Calls(list.to_vec())
}

fn text(t: &str) -> Step {
    Step::Text(t.to_owned())
}

/// A provider family as its adapter speaks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    OpenAi,
    Anthropic,
    Gemini,
    Bedrock,
    Codex,
}

impl Wire {
    /// The provider id and model each family is tested with.
    fn route(self) -> (&'static str, &'static str) {
        match self {
            Self::OpenAi => ("openai", "gpt-4o"),
            Self::Anthropic => ("anthropic", "claude-sonnet-4-5"),
            Self::Gemini => ("gemini", "gemini-2.5-flash"),
            Self::Bedrock => ("bedrock", "anthropic.claude-3-5-sonnet-20240620-v1:0"),
            Self::Codex => ("openai-codex", "gpt-5-codex"),
        }
    }

    fn family(self) -> ApiFamily {
        match self {
            Self::OpenAi => ApiFamily::OpenaiCompatible,
            Self::Anthropic => ApiFamily::Anthropic,
            Self::Gemini => ApiFamily::Gemini,
            Self::Bedrock => ApiFamily::Bedrock,
            Self::Codex => ApiFamily::OpenaiCodex,
        }
    }

    fn adapter(self, url: &str) -> Arc<dyn LlmProvider> {
        let settings = HttpSettings {
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            stream_idle_timeout: Duration::from_secs(10),
        };
        match self {
            Self::OpenAi => {
                Arc::new(OpenAiCompatibleProvider::new(format!("{url}/v1"), settings, false).unwrap())
            }
            Self::Anthropic => Arc::new(AnthropicProvider::new(url, settings).unwrap()),
            Self::Gemini => Arc::new(GeminiProvider::new(url, settings).unwrap()),
            Self::Bedrock => Arc::new(BedrockProvider::new(url, settings).unwrap()),
            Self::Codex => Arc::new(CodexProvider::new(url, settings).unwrap()),
        }
    }

    /// Whether a request body this family's adapter wrote declares tools natively.
    fn declares_tools(self, body: &Value) -> bool {
        match self {
            Self::OpenAi | Self::Anthropic | Self::Gemini | Self::Codex => body.get("tools").is_some(),
            Self::Bedrock => body.get("toolConfig").is_some(),
        }
    }

    /// `step` as this family's upstream answers it (12 prompt and 3 completion tokens reported).
    fn reply(self, step: &Step) -> Reply {
        let (text, calls): (Option<&str>, &[(&str, &str, Value)]) = match step {
            Step::Calls(c) => (None, c),
            Step::Text(t) => (Some(t), &[]),
        };
        let tooling = !calls.is_empty();
        match self {
            Self::OpenAi => {
                let mut message = json!({"role": "assistant", "content": text});
                if tooling {
                    message["tool_calls"] = calls
                        .iter()
                        .map(|(id, name, args)| {
                            json!({"id": id, "type": "function",
                                "function": {"name": name, "arguments": args.to_string()}})
                        })
                        .collect();
                }
                Reply::json(
                    200,
                    json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",
                        "choices": [{"index": 0, "message": message,
                            "finish_reason": if tooling { "tool_calls" } else { "stop" }}],
                        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}})
                    .to_string(),
                )
            }
            Self::Anthropic => {
                let content: Vec<Value> = match text {
                    Some(t) => vec![json!({"type": "text", "text": t})],
                    None => calls
                        .iter()
                        .map(|(id, name, args)| json!({"type": "tool_use", "id": id, "name": name, "input": args}))
                        .collect(),
                };
                Reply::json(
                    200,
                    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                        "content": content, "stop_reason": if tooling { "tool_use" } else { "end_turn" },
                        "usage": {"input_tokens": 12, "output_tokens": 3}})
                    .to_string(),
                )
            }
            Self::Gemini => {
                // Gemini's functionCall parts carry no id; the adapter numbers them.
                let parts: Vec<Value> = match text {
                    Some(t) => vec![json!({"text": t})],
                    None => calls
                        .iter()
                        .map(|(_, name, args)| json!({"functionCall": {"name": name, "args": args}}))
                        .collect(),
                };
                Reply::json(
                    200,
                    json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
                        "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 3, "totalTokenCount": 15},
                        "modelVersion": "gemini-2.5-flash"})
                    .to_string(),
                )
            }
            Self::Bedrock => {
                let content: Vec<Value> = match text {
                    Some(t) => vec![json!({"text": t})],
                    None => calls
                        .iter()
                        .map(|(id, name, args)| json!({"toolUse": {"toolUseId": id, "name": name, "input": args}}))
                        .collect(),
                };
                Reply::json(
                    200,
                    json!({"output": {"message": {"role": "assistant", "content": content}},
                        "stopReason": if tooling { "tool_use" } else { "end_turn" },
                        "usage": {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15}})
                    .to_string(),
                )
            }
            Self::Codex => {
                let mut events: Vec<Value> =
                    vec![json!({"type": "response.created", "response": {"id": "resp_1"}})];
                if let Some(t) = text {
                    events.push(json!({"type": "response.output_text.delta", "output_index": 0, "delta": t}));
                }
                for (index, (id, name, args)) in calls.iter().enumerate() {
                    let item = json!({"type": "function_call", "call_id": id, "name": name, "arguments": ""});
                    events.push(
                        json!({"type": "response.output_item.added", "output_index": index, "item": item}),
                    );
                    events.push(json!({"type": "response.function_call_arguments.delta",
                        "output_index": index, "delta": args.to_string()}));
                    events.push(json!({"type": "response.output_item.done", "output_index": index,
                        "item": {"type": "function_call", "call_id": id, "name": name, "arguments": args.to_string()}}));
                }
                events.push(
                    json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed",
                    "usage": {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15}}}),
                );
                Reply::Sse(
                    events
                        .iter()
                        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
                        .collect(),
                )
            }
        }
    }
}

/// An upstream answering `steps` in `wire`'s shape, one per request, then a 500 naming it.
async fn upstream(wire: Wire, steps: Vec<Step>) -> Scripted {
    let script = Mutex::new(VecDeque::from(steps));
    Scripted::respond(move |_| match script.lock().unwrap().pop_front() {
        Some(step) => wire.reply(&step),
        None => Reply::json(500, r#"{"error":{"message":"script exhausted"}}"#),
    })
    .await
}

/// An upstream that answers every request 503.
async fn unavailable() -> Scripted {
    Scripted::respond(|_| {
        Reply::json(
            503,
            r#"{"error":{"message":"injected 503","type":"overloaded_error"}}"#,
        )
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// The rig: pipeline, routes, model port, tools, ledger.

#[derive(Default)]
struct Collect(Mutex<Vec<CallUsage>>);

impl UsageSink for Collect {
    fn record(&self, usage: CallUsage) {
        self.0.lock().unwrap().push(usage);
    }
}

impl Collect {
    fn events(&self) -> Vec<metaforge_ports::UsageEvent> {
        self.0.lock().unwrap().iter().map(|u| u.event.clone()).collect()
    }
}

#[derive(Default)]
struct MemorySelection(Mutex<Option<String>>);

#[async_trait::async_trait]
impl SelectionStore for MemorySelection {
    async fn get(&self) -> Result<Option<String>, PortError> {
        Ok(self.0.lock().unwrap().clone())
    }
    async fn set(&self, route: &str) -> Result<(), PortError> {
        *self.0.lock().unwrap() = Some(route.to_owned());
        Ok(())
    }
}

/// One wired provider.
#[derive(Debug, Clone)]
struct Endpoint {
    id: &'static str,
    model: &'static str,
    wire: Wire,
    url: String,
}

impl Endpoint {
    fn of(wire: Wire, upstream: &Scripted) -> Self {
        let (id, model) = wire.route();
        Self {
            id,
            model,
            wire,
            url: upstream.url().to_owned(),
        }
    }

    /// OpenRouter (OpenAI-compatible) on `upstream`: the second provider of the fallback tests.
    fn openrouter(upstream: &Scripted) -> Self {
        Self {
            id: "openrouter",
            model: "openai/gpt-4o-mini",
            wire: Wire::OpenAi,
            url: upstream.url().to_owned(),
        }
    }

    fn route(&self) -> String {
        format!("{}:{}", self.id, self.model)
    }

    fn candidate(&self) -> Candidate {
        Candidate {
            provider: self.id.to_owned(),
            model: self.model.to_owned(),
        }
    }
}

/// What a rig wires: providers, per role its route and its chain (indices into `endpoints`),
/// the tool server and the ask tier.
struct Wiring {
    endpoints: Vec<Endpoint>,
    /// `(role, route, chain)`.
    roles: Vec<(&'static str, usize, Vec<usize>)>,
    server: FakeToolSource,
    policy: ToolPolicy,
    loop_mode: LoopMode,
}

impl Wiring {
    /// One provider serving `chat`.
    fn single(endpoint: Endpoint) -> Self {
        Self {
            endpoints: vec![endpoint],
            roles: vec![("chat", 0, vec![0])],
            server: tools(),
            policy: ToolPolicy::default(),
            loop_mode: LoopMode::Auto,
        }
    }
}

struct Rig {
    agent: Agent,
    model: Arc<PipelineTurnModel>,
    usage: Arc<Collect>,
    alarm: Arc<FallbackAlarm>,
    ledger: Arc<MemoryApprovalLedger>,
    server: Arc<FakeToolSource>,
    _credentials: tempfile::TempDir,
}

async fn build(wiring: Wiring) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileCredentialStore::new(dir.path().join("credentials.json")));
    for endpoint in &wiring.endpoints {
        store
            .add(
                endpoint.id,
                Credential {
                    id: format!("{}-key", endpoint.id),
                    secret: CredentialSecret::ApiKey {
                        api_key: format!("sk-{}", endpoint.id),
                    },
                },
            )
            .await
            .unwrap();
    }
    let entries = wiring
        .endpoints
        .iter()
        .map(|e| ProviderEntry {
            id: e.id.to_owned(),
            adapter: e.wire.adapter(&e.url),
            billing: if e.wire == Wire::Codex {
                Billing::Subscription
            } else {
                Billing::Metered
            },
        })
        .collect();
    let slots = RoleModelSlots::new(
        wiring
            .roles
            .iter()
            .map(|(role, _, chain)| {
                (
                    (*role).to_owned(),
                    chain.iter().map(|i| wiring.endpoints[*i].candidate()).collect(),
                )
            })
            .collect(),
    )
    .unwrap();
    let usage = Arc::new(Collect::default());
    let alarm = Arc::new(FallbackAlarm::new());
    let pipeline = ProviderPipeline::new(
        entries,
        slots,
        RetryPolicy {
            api_max_retries: 0,
            base_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
            retry_after_cap: Duration::from_millis(5),
        },
        CredentialRotor::new(Some(store as Arc<dyn CredentialStore>)),
        Arc::clone(&alarm),
        Arc::clone(&usage) as Arc<dyn UsageSink>,
    )
    .unwrap();
    let routes = RouteResolver {
        table: RoutingTable::default(),
        env_routes: wiring
            .roles
            .iter()
            .map(|(role, route, _)| (env_var_for_role(role), wiring.endpoints[*route].route()))
            .collect(),
        credentialed: wiring.endpoints.iter().map(|e| e.id.to_owned()).collect(),
        default_route: None,
        selection: Arc::new(MemorySelection::default()),
    };
    let model = Arc::new(
        PipelineTurnModel::new(Some(Arc::new(pipeline)), Arc::new(routes)).with_loop_mode(wiring.loop_mode),
    );
    let server = Arc::new(wiring.server);
    let registry = metaforge_app::tools::ToolRegistry::builder()
        .server(
            Arc::clone(&server) as Arc<dyn ToolSource>,
            std::time::Duration::from_secs(5),
        )
        .policy(wiring.policy.clone())
        .build()
        .await
        .unwrap();
    let toolbox = metaforge_agent::ToolBoxes::for_turn(
        &registry,
        &metaforge_ports::CallerContext {
            class: metaforge_ports::CallerClass::Local,
            session: Some("turns".to_owned()),
            input_channel: metaforge_ports::InputChannel::None,
            identity: None,
        },
        None,
    );
    let clock = Arc::new(ManualClock::fixed());
    let ledger = Arc::new(MemoryApprovalLedger::new(clock.clone()));
    let agent = Agent::new(AgentPorts {
        model: Arc::clone(&model) as Arc<dyn TurnModel>,
        tools: toolbox,
        approvals: Some(Arc::clone(&ledger) as Arc<dyn ApprovalLedger>),
        clock,
        ids: Arc::new(SequentialIds::new("hold")),
    });
    Rig {
        agent,
        model,
        usage,
        alarm,
        ledger,
        server,
        _credentials: dir,
    }
}

fn schema_x() -> Value {
    json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})
}

/// The tool server `cad`: `slow_read` (100 ms, answers `RESULT-SLOW`), `fast_read` (answers
/// `RESULT-FAST`), both read-only, and the write `create` (needs a string `name`).
fn tools() -> FakeToolSource {
    FakeToolSource::new("cad")
        .with_tool(
            descriptor("slow_read", schema_x(), true),
            Duration::from_millis(100),
            |args| Ok(ToolOutput::json(json!({"marker": "RESULT-SLOW", "x": args["x"]}))),
        )
        .with_tool(
            descriptor("fast_read", schema_x(), true),
            Duration::ZERO,
            |args| Ok(ToolOutput::json(json!({"marker": "RESULT-FAST", "x": args["x"]}))),
        )
        .with_echo(
            descriptor(
                "create",
                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
                false,
            ),
            Duration::ZERO,
        )
}

/// A chat turn of a local person attributed to run `run-7`, phase `design`.
fn chat_config() -> TurnConfig {
    let mut config = TurnConfig::chat("thread-1");
    config.run_id = Some("run-7".to_owned());
    config.phase = Some("design".to_owned());
    config.approval_timeout = Duration::from_secs(2);
    config.approval_poll = Duration::from_millis(5);
    config
}

fn input(user: &str) -> TurnInput {
    TurnInput {
        system: "You are MetaForge.".to_owned(),
        history: Vec::new(),
        user: user.to_owned(),
    }
}

/// Every usage event is attributed to the turn and served by `provider`, with the family's
/// reported counts normalised.
fn assert_attributed(
    events: &[metaforge_ports::UsageEvent],
    provider: &str,
    role: &str,
    n: usize,
    wire: Wire,
) {
    assert_eq!(
        events.len(),
        n,
        "{wire:?}: one usage event per model call: {events:?}"
    );
    for event in events {
        assert_eq!(event.run_id.as_deref(), Some("run-7"), "{wire:?}: run");
        assert_eq!(event.phase.as_deref(), Some("design"), "{wire:?}: phase");
        assert_eq!(event.role.as_deref(), Some(role), "{wire:?}: role");
        assert_eq!(event.caller.as_deref(), Some("local"), "{wire:?}: caller");
        assert_eq!(event.provider, provider, "{wire:?}: serving provider");
        assert_eq!(event.prompt_tokens, Some(12), "{wire:?}: prompt tokens");
        assert_eq!(event.completion_tokens, Some(3), "{wire:?}: completion tokens");
    }
}

/// Where `needle` first occurs in the JSON text of `body`.
fn position(body: &Value, needle: &str) -> Option<usize> {
    body.to_string().find(needle)
}

// ---------------------------------------------------------------------------------------------
// The per-family scenarios.

async fn native_parallel_batch_answers_in_call_order(wire: Wire) {
    let up = upstream(
        wire,
        vec![
            calls(&[
                ("call_a", "mcp_cad_slow_read", json!({"x": 1})),
                ("call_b", "mcp_cad_fast_read", json!({"x": 2})),
            ]),
            text("Both read."),
        ],
    )
    .await;
    let rig = build(Wiring::single(Endpoint::of(wire, &up))).await;
    let profile = rig.model.profile("chat", None).await.unwrap();
    assert_eq!(profile.family, wire.family(), "{wire:?}");
    assert!(
        profile.native_tools,
        "{wire:?}: the domain says this family speaks native tools"
    );
    let outcome = rig
        .agent
        .run_turn(
            &chat_config(),
            &input("read both"),
            &EventSink::none(),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.mode, LoopMode::Native, "{wire:?}");
    assert_eq!(outcome.reply, "Both read.", "{wire:?}");
    let tools: Vec<&str> = outcome.calls.iter().map(|c| c.tool.as_str()).collect();
    assert_eq!(tools, ["cad.slow_read", "cad.fast_read"], "{wire:?}: call order");
    assert!(
        outcome.calls.iter().all(|c| !c.is_error),
        "{wire:?}: {:?}",
        outcome.calls
    );
    assert_eq!(
        rig.server.max_concurrency(),
        2,
        "{wire:?}: the batch ran in parallel"
    );
    assert_eq!(
        rig.server.finished(),
        ["fast_read", "slow_read"],
        "{wire:?}: the fast call finished first"
    );
    let bodies = up.bodies();
    assert_eq!(bodies.len(), 2, "{wire:?}");
    assert!(
        wire.declares_tools(&bodies[0]),
        "{wire:?}: native tools declared: {}",
        bodies[0]
    );
    let slow = position(&bodies[1], "RESULT-SLOW").unwrap();
    let fast = position(&bodies[1], "RESULT-FAST").unwrap();
    assert!(
        slow < fast,
        "{wire:?}: results go back in the model's call order, not completion order: {}",
        bodies[1]
    );
    let (provider, _) = wire.route();
    assert_attributed(&rig.usage.events(), provider, "chat", 2, wire);
    assert_eq!(
        outcome.usage_events,
        rig.usage.events(),
        "{wire:?}: the turn reports what the sink got"
    );
    assert_eq!(outcome.provider.as_deref(), Some(provider));
}

async fn react_loop_forced_by_the_deployment_setting(wire: Wire) {
    let up = upstream(
        wire,
        vec![
            text(r#"{"thought": "read it", "action": "mcp_cad_fast_read", "action_input": {"x": 3}}"#),
            text(r#"{"thought": "done", "final_answer": "Read x=3."}"#),
        ],
    )
    .await;
    let mut wiring = Wiring::single(Endpoint::of(wire, &up));
    wiring.loop_mode = LoopMode::React;
    let rig = build(wiring).await;
    let profile = rig.model.profile("chat", None).await.unwrap();
    assert!(
        !profile.native_tools,
        "{wire:?}: METAFORGE_AGENT_LOOP=react overrides the capability"
    );
    let outcome = rig
        .agent
        .run_turn(
            &chat_config(),
            &input("read x=3"),
            &EventSink::none(),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.mode, LoopMode::React, "{wire:?}");
    assert_eq!(outcome.reply, "Read x=3.", "{wire:?}");
    assert_eq!(outcome.calls.len(), 1, "{wire:?}");
    assert_eq!(outcome.calls[0].tool, "cad.fast_read", "{wire:?}");
    assert!(!outcome.calls[0].is_error, "{wire:?}: {:?}", outcome.calls[0]);
    assert_eq!(rig.server.calls_of("fast_read"), 1, "{wire:?}");
    let bodies = up.bodies();
    assert_eq!(bodies.len(), 2, "{wire:?}");
    for body in &bodies {
        assert!(
            !wire.declares_tools(body),
            "{wire:?}: ReAct declares no native tools: {body}"
        );
    }
    assert!(
        position(&bodies[0], "mcp_cad_fast_read").is_some(),
        "{wire:?}: the protocol prompt lists the tools"
    );
    assert!(
        position(&bodies[1], "Observation:").is_some() && position(&bodies[1], "RESULT-FAST").is_some(),
        "{wire:?}: the observation comes back as text: {}",
        bodies[1]
    );
    let (provider, _) = wire.route();
    assert_attributed(&rig.usage.events(), provider, "chat", 2, wire);
}

async fn same_turn_duplicate_is_answered_from_the_cache(wire: Wire) {
    let up = upstream(
        wire,
        vec![
            calls(&[("c1", "mcp_cad_fast_read", json!({"x": 1}))]),
            calls(&[("c2", "mcp_cad_fast_read", json!({"x": 1}))]),
            text("Same answer twice."),
        ],
    )
    .await;
    let rig = build(Wiring::single(Endpoint::of(wire, &up))).await;
    let outcome = rig
        .agent
        .run_turn(
            &chat_config(),
            &input("read x twice"),
            &EventSink::none(),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.calls.len(), 2, "{wire:?}");
    assert!(!outcome.calls[0].cached, "{wire:?}");
    assert!(outcome.calls[1].cached, "{wire:?}: {:?}", outcome.calls[1]);
    assert_eq!(outcome.calls[1].result["cached"], true, "{wire:?}");
    assert_eq!(rig.server.calls_of("fast_read"), 1, "{wire:?}: the tool ran once");
    let bodies = up.bodies();
    assert_eq!(bodies.len(), 3, "{wire:?}");
    assert!(
        position(&bodies[2], "cached").is_some(),
        "{wire:?}: the model reads the cached mark: {}",
        bodies[2]
    );
}

async fn schema_invalid_call_is_refused_before_anything_runs(wire: Wire) {
    let up = upstream(
        wire,
        vec![
            calls(&[("c1", "mcp_cad_create", json!({"name": 7}))]),
            text("I could not create it."),
        ],
    )
    .await;
    let mut wiring = Wiring::single(Endpoint::of(wire, &up));
    wiring.policy = ToolPolicy {
        requires_approval: BTreeSet::from(["cad.create".to_owned()]),
        ..ToolPolicy::default()
    };
    let rig = build(wiring).await;
    let outcome = rig
        .agent
        .run_turn(
            &chat_config(),
            &input("create it"),
            &EventSink::none(),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.calls.len(), 1, "{wire:?}");
    assert!(outcome.calls[0].is_error, "{wire:?}");
    assert_eq!(outcome.calls[0].result["error"], "invalid_arguments", "{wire:?}");
    assert_eq!(rig.server.calls_of("create"), 0, "{wire:?}: not run");
    assert!(
        rig.ledger.list_recent(10).await.unwrap().is_empty(),
        "{wire:?}: nobody was asked to approve an invalid call"
    );
    let bodies = up.bodies();
    assert!(
        position(&bodies[1], "invalid_arguments").is_some(),
        "{wire:?}: the model reads why: {}",
        bodies[1]
    );
}

async fn a_503_falls_back_to_the_second_provider(wire: Wire) {
    let down = unavailable().await;
    let second = upstream(
        Wire::OpenAi,
        vec![
            calls(&[("c1", "mcp_cad_fast_read", json!({"x": 5}))]),
            text("Served by the fallback."),
        ],
    )
    .await;
    let rig = build(Wiring {
        endpoints: vec![Endpoint::of(wire, &down), Endpoint::openrouter(&second)],
        roles: vec![("chat", 0, vec![0, 1])],
        server: tools(),
        policy: ToolPolicy::default(),
        loop_mode: LoopMode::Auto,
    })
    .await;
    let outcome = rig
        .agent
        .run_turn(
            &chat_config(),
            &input("read x=5"),
            &EventSink::none(),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.reply, "Served by the fallback.", "{wire:?}");
    assert_eq!(outcome.provider.as_deref(), Some("openrouter"), "{wire:?}");
    assert_eq!(rig.server.calls_of("fast_read"), 1, "{wire:?}");
    assert_eq!(
        down.received().len(),
        2,
        "{wire:?}: the primary was tried for each model call"
    );
    assert_attributed(&rig.usage.events(), "openrouter", "chat", 2, wire);
    assert_eq!(
        rig.alarm.fallback_count(),
        2,
        "{wire:?}: each fallback raised the alarm"
    );
    let last = rig.alarm.last_fallback().unwrap();
    let (provider, _) = wire.route();
    assert_eq!(last.primary, provider, "{wire:?}");
    assert_eq!(last.fallback, "openrouter", "{wire:?}");
    assert_eq!(last.reason, FallbackReason::CallFailed, "{wire:?}");
    assert!(
        last.primary_error.contains("503"),
        "{wire:?}: {}",
        last.primary_error
    );
}

macro_rules! every_family {
    ($($family:ident => $wire:expr),+ $(,)?) => {$(
        mod $family {
            use super::*;

            #[tokio::test]
            async fn the_native_loop_runs_a_parallel_batch_and_answers_in_call_order() {
                native_parallel_batch_answers_in_call_order($wire).await;
            }

            #[tokio::test]
            async fn the_react_loop_runs_when_the_deployment_forces_it() {
                react_loop_forced_by_the_deployment_setting($wire).await;
            }

            #[tokio::test]
            async fn a_repeated_call_in_the_same_turn_is_answered_from_the_cache() {
                same_turn_duplicate_is_answered_from_the_cache($wire).await;
            }

            #[tokio::test]
            async fn a_schema_invalid_call_is_refused_before_any_hold_or_run() {
                schema_invalid_call_is_refused_before_anything_runs($wire).await;
            }

            #[tokio::test]
            async fn a_503_from_this_family_falls_back_to_the_second_provider_with_usage_attributed() {
                a_503_falls_back_to_the_second_provider($wire).await;
            }
        }
    )+};
}

every_family! {
    openai_compatible => Wire::OpenAi,
    anthropic => Wire::Anthropic,
    gemini => Wire::Gemini,
    bedrock => Wire::Bedrock,
    codex_responses => Wire::Codex,
}

// ---------------------------------------------------------------------------------------------
// Planner → Generator → Evaluator over the pipeline.

/// Log lines (JSON) written while the guard lives, on this thread.
struct LogCapture {
    lines: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl LogCapture {
    fn start() -> Self {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_writer(move || Writer(Arc::clone(&sink)))
            .finish();
        Self {
            lines,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// `(level, event)` of every line logged so far.
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

/// `planner` and `generator` on openai; `evaluator` routed to openai with `evaluator_chain`
/// behind it (indices: 0 = openai, 1 = anthropic).
async fn pge_rig(openai: &Scripted, anthropic: &Scripted, evaluator_chain: Vec<usize>) -> Rig {
    build(Wiring {
        endpoints: vec![
            Endpoint::of(Wire::OpenAi, openai),
            Endpoint::of(Wire::Anthropic, anthropic),
        ],
        roles: vec![
            ("planner", 0, vec![0]),
            ("generator", 0, vec![0]),
            ("evaluator", 0, evaluator_chain),
        ],
        server: tools(),
        policy: ToolPolicy::default(),
        loop_mode: LoopMode::Auto,
    })
    .await
}

fn pge_config(max_iterations: usize) -> PgeConfig {
    PgeConfig {
        turn: chat_config(),
        max_iterations,
    }
}

#[tokio::test]
async fn the_evaluator_runs_on_a_provider_other_than_the_generators_and_passes() {
    let openai = upstream(
        Wire::OpenAi,
        vec![
            text("1. Read x with fast_read.\n2. Report it."),
            calls(&[("g1", "mcp_cad_fast_read", json!({"x": 4}))]),
            text("x is 4."),
        ],
    )
    .await;
    let anthropic = upstream(Wire::Anthropic, vec![text(r#"{"passed": true, "findings": []}"#)]).await;
    let rig = pge_rig(&openai, &anthropic, vec![0, 1]).await;
    let logs = LogCapture::start();
    let outcome = rig
        .agent
        .run_pge(
            &pge_config(3),
            "You are MetaForge.",
            "Read x and report it.",
            &EventSink::none(),
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(outcome.verdict, Verdict::Passed, "{outcome:?}");
    assert!(outcome.findings.is_empty());
    assert_eq!(outcome.iterations, 1);
    assert_eq!(outcome.generator_provider.as_deref(), Some("openai"));
    assert_eq!(outcome.evaluator_provider.as_deref(), Some("anthropic"));
    let judged = anthropic.bodies();
    assert_eq!(judged.len(), 1, "the evaluator was asked once, on anthropic");
    assert!(
        position(&judged[0], "x is 4.").is_some() && position(&judged[0], "RESULT-FAST").is_some(),
        "the evaluator reads the answer and the tool evidence: {}",
        judged[0]
    );
    let by_role: Vec<(String, String)> = rig
        .usage
        .events()
        .iter()
        .map(|e| (e.role.clone().unwrap(), e.provider.clone()))
        .collect();
    assert_eq!(
        by_role,
        [
            ("planner".to_owned(), "openai".to_owned()),
            ("generator".to_owned(), "openai".to_owned()),
            ("generator".to_owned(), "openai".to_owned()),
            ("evaluator".to_owned(), "anthropic".to_owned()),
        ]
    );
    assert!(
        rig.usage
            .events()
            .iter()
            .all(|e| e.run_id.as_deref() == Some("run-7"))
    );
    assert_eq!(outcome.usage_events, rig.usage.events());
    assert!(
        !logs
            .events()
            .iter()
            .any(|(_, e)| e == "evaluator_provider_not_independent"),
        "an independent evaluator logs no warning"
    );
    assert!(logs.events().iter().any(|(_, e)| e == "pge_verdict"));
}

#[tokio::test]
async fn with_only_the_generators_provider_the_evaluator_shares_it_and_says_so() {
    let openai = upstream(
        Wire::OpenAi,
        vec![
            text("1. Answer."),
            text("Done."),
            text(r#"{"passed": true, "findings": []}"#),
        ],
    )
    .await;
    let anthropic = upstream(Wire::Anthropic, Vec::new()).await;
    let rig = pge_rig(&openai, &anthropic, vec![0]).await;
    let logs = LogCapture::start();
    let outcome = rig
        .agent
        .run_pge(
            &pge_config(3),
            "You are MetaForge.",
            "Answer.",
            &EventSink::none(),
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(outcome.verdict, Verdict::Passed, "{outcome:?}");
    assert_eq!(outcome.evaluator_provider.as_deref(), Some("openai"));
    assert!(anthropic.bodies().is_empty());
    assert!(
        logs.events()
            .contains(&("WARN".to_owned(), "evaluator_provider_not_independent".to_owned())),
        "{:?}",
        logs.events()
    );
}

#[tokio::test]
async fn the_run_is_exhausted_after_the_iteration_cap_with_the_evaluators_findings() {
    let openai = upstream(
        Wire::OpenAi,
        vec![
            text("1. Draw the bracket."),
            text("Draft one."),
            text("Draft two."),
        ],
    )
    .await;
    let verdict = r#"{"passed": false, "findings": ["the bracket is missing"]}"#;
    let anthropic = upstream(Wire::Anthropic, vec![text(verdict), text(verdict)]).await;
    let rig = pge_rig(&openai, &anthropic, vec![0, 1]).await;
    let outcome = rig
        .agent
        .run_pge(
            &pge_config(2),
            "You are MetaForge.",
            "Draw the bracket.",
            &EventSink::none(),
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(outcome.verdict, Verdict::Exhausted, "{outcome:?}");
    assert_eq!(outcome.iterations, 2);
    assert_eq!(outcome.findings, ["the bracket is missing"]);
    assert_eq!(outcome.answer.as_deref(), Some("Draft two."));
    let generator_bodies = openai.bodies();
    assert_eq!(generator_bodies.len(), 3, "planner + two generator turns");
    assert!(
        position(&generator_bodies[2], "the bracket is missing").is_some(),
        "the findings go back to the generator: {}",
        generator_bodies[2]
    );
    assert_eq!(anthropic.bodies().len(), 2);
}

// ---------------------------------------------------------------------------------------------
// What the model port says when it cannot serve.

fn routes_only(env: &[(&str, &str)]) -> Arc<RouteResolver> {
    Arc::new(RouteResolver {
        table: RoutingTable::default(),
        env_routes: env
            .iter()
            .map(|(role, route)| (env_var_for_role(role), (*route).to_owned()))
            .collect(),
        credentialed: ["openai".to_owned(), "anthropic".to_owned()]
            .into_iter()
            .collect(),
        default_route: None,
        selection: Arc::new(MemorySelection::default()),
    })
}

fn call(role: &str, provider: Option<&str>) -> ModelCall {
    ModelCall {
        role: role.to_owned(),
        provider: provider.map(str::to_owned),
        scope: UsageScope::default(),
        session_id: "s".to_owned(),
    }
}

fn hello() -> LlmRequest {
    LlmRequest {
        messages: vec![LlmMessage::user_text("hi")],
        ..LlmRequest::default()
    }
}

#[tokio::test]
async fn without_a_pipeline_every_call_is_not_configured_naming_what_to_set() {
    let model = PipelineTurnModel::new(None, routes_only(&[("chat", "openai:gpt-4o")]));
    let err = model.profile("chat", None).await.unwrap_err();
    let ModelError::NotConfigured { role, reason, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(role, "chat");
    assert!(reason.contains("no provider pipeline"), "{reason}");
    assert!(reason.contains("METAFORGE_ROUTE_CHAT"), "{reason}");
    assert!(model.providers("chat").await.is_empty());
    let err = model.complete(&call("chat", None), hello()).await.unwrap_err();
    assert!(matches!(err, ModelError::NotConfigured { .. }), "{err:?}");
}

#[tokio::test]
async fn a_role_without_a_route_is_not_configured_naming_its_variable() {
    let up = upstream(Wire::OpenAi, vec![text("never")]).await;
    let rig = build(Wiring::single(Endpoint::of(Wire::OpenAi, &up))).await;
    let err = rig.model.profile("evaluator", None).await.unwrap_err();
    let ModelError::NotConfigured { reason, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(reason.contains("METAFORGE_ROUTE_EVALUATOR"), "{reason}");
    assert!(up.bodies().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn the_profile_is_the_domains_capability_of_the_routed_model() {
    let up = upstream(Wire::OpenAi, Vec::new()).await;
    let rig = build(Wiring::single(Endpoint::of(Wire::OpenAi, &up))).await;
    let profile = rig.model.profile("chat", None).await.unwrap();
    assert_eq!(profile.provider, "openai");
    assert_eq!(profile.model, "gpt-4o");
    assert_eq!(profile.family, ApiFamily::OpenaiCompatible);
    assert!(profile.native_tools);
    assert_eq!(profile.context_window_tokens, 128_000);
    assert_eq!(profile.max_tools, Some(128));
    assert_eq!(rig.model.loop_mode(), LoopMode::Auto);
}

#[tokio::test]
async fn providers_list_the_routed_primary_first_then_the_roles_chain() {
    let a = upstream(Wire::OpenAi, Vec::new()).await;
    let b = upstream(Wire::Anthropic, Vec::new()).await;
    let rig = build(Wiring {
        endpoints: vec![Endpoint::of(Wire::OpenAi, &a), Endpoint::of(Wire::Anthropic, &b)],
        roles: vec![("evaluator", 1, vec![0, 1])],
        server: tools(),
        policy: ToolPolicy::default(),
        loop_mode: LoopMode::Auto,
    })
    .await;
    assert_eq!(rig.model.providers("evaluator").await, ["anthropic", "openai"]);
    let profile = rig.model.profile("evaluator", Some("openai")).await.unwrap();
    assert_eq!(
        profile.model, "gpt-4o",
        "a bare provider takes the model its chain gives it"
    );
    assert!(rig.model.providers("chat").await.is_empty());
}

#[tokio::test]
async fn an_explicit_provider_is_family_checked_before_anything_is_sent() {
    let up = upstream(Wire::Anthropic, vec![text("never")]).await;
    let rig = build(Wiring::single(Endpoint::of(Wire::Anthropic, &up))).await;
    let err = rig
        .model
        .complete(&call("chat", Some("anthropic:gpt-4o")), hello())
        .await
        .unwrap_err();
    let ModelError::NotConfigured { provider, reason, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(provider.as_deref(), Some("anthropic:gpt-4o"));
    assert!(reason.contains("gpt-4o"), "{reason}");
    let err = rig
        .model
        .complete(&call("chat", Some("gemini")), hello())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not in role 'chat''s chain"), "{err}");
    assert!(up.bodies().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn an_explicit_provider_route_is_served_by_that_provider() {
    let a = upstream(Wire::OpenAi, Vec::new()).await;
    let b = upstream(Wire::Anthropic, vec![text("from anthropic")]).await;
    let rig = build(Wiring {
        endpoints: vec![Endpoint::of(Wire::OpenAi, &a), Endpoint::of(Wire::Anthropic, &b)],
        roles: vec![("chat", 0, vec![0])],
        server: tools(),
        policy: ToolPolicy::default(),
        loop_mode: LoopMode::Auto,
    })
    .await;
    let mut explicit = call("chat", Some("claude:claude-haiku-4-5"));
    explicit.scope = UsageScope {
        run_id: Some("run-1".to_owned()),
        phase: None,
        role: None,
        caller: Some("alice".to_owned()),
    };
    let answer = rig.model.complete(&explicit, hello()).await.unwrap();
    assert_eq!(answer.provider, "anthropic");
    assert_eq!(answer.model, "claude-haiku-4-5");
    assert_eq!(answer.response.text, "from anthropic");
    assert_eq!(
        answer.usage.role.as_deref(),
        Some("chat"),
        "the call's role when the scope names none"
    );
    assert_eq!(answer.usage.caller.as_deref(), Some("alice"));
    assert_eq!(answer.usage.run_id.as_deref(), Some("run-1"));
    assert_eq!(rig.usage.events(), std::slice::from_ref(&answer.usage));
    assert_eq!(b.bodies()[0]["model"], "claude-haiku-4-5");
    assert!(a.bodies().is_empty());
}

#[tokio::test]
async fn when_every_provider_fails_the_error_names_each_attempt() {
    let down = unavailable().await;
    let rig = build(Wiring::single(Endpoint::of(Wire::OpenAi, &down))).await;
    let err = rig
        .model
        .complete(&call("chat", None), hello())
        .await
        .unwrap_err();
    let ModelError::Failed { role, message } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(role, "chat");
    assert!(message.contains("openai:gpt-4o #1"), "{message}");
    assert!(message.contains("503"), "{message}");
    assert!(rig.usage.events().is_empty(), "a failed attempt records no usage");
}

#[tokio::test]
async fn a_provider_the_process_has_not_wired_is_not_configured_naming_its_key() {
    let up = upstream(Wire::OpenAi, Vec::new()).await;
    let rig = build(Wiring::single(Endpoint::of(Wire::OpenAi, &up))).await;
    let err = rig
        .model
        .complete(&call("chat", Some("gemini:gemini-2.5-flash")), hello())
        .await
        .unwrap_err();
    let ModelError::NotConfigured { reason, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(reason.contains("'gemini' is not configured"), "{reason}");
}
