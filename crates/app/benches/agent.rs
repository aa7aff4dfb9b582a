//! Agent-loop overhead benchmark (run through `cargo xtask bench agent`).
//!
//! One turn = three tool calls and a final answer: four model calls to a local scripted
//! OpenAI-compatible upstream and three `echo` calls to a real MCP server (server-everything over
//! stdio). In one run, interleaved turn by turn:
//! - **direct**: the same four requests through the OpenAI-compatible adapter and the same three
//!   tool calls through the MCP client, back to back, with no loop around them;
//! - **agent**: `Agent::run_turn` over `PipelineTurnModel` (routing, the provider pipeline, usage
//!   accounting) and the central tool registry (gating, schema validation, the turn cache, events,
//!   grounding, history budgeting).
//!
//! The difference is the loop's own cost per turn. Turn counts are bounded
//! (`METAFORGE_BENCH_TURNS`, default 200).
#![expect(
    clippy::disallowed_methods,
    reason = "a benchmark configured through its environment"
)]
#![expect(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use metaforge_adapters_llm::{HttpSettings, OpenAiCompatibleProvider};
use metaforge_adapters_mcp::{McpToolServer, ServerConfig, ServerTransport, StdioLaunch};
use metaforge_agent::{Agent, AgentPorts, CancellationToken, EventSink, ToolBoxes, TurnConfig, TurnInput};
use metaforge_app::pipeline::{
    CallUsage, Candidate, CredentialRotor, FallbackAlarm, ProviderEntry, ProviderPipeline, RetryPolicy,
    RoleModelSlots, UsageSink,
};
use metaforge_app::routing::RouteResolver;
use metaforge_app::tools::ToolRegistry;
use metaforge_app::turn_model::PipelineTurnModel;
use metaforge_ports::{
    Billing, CallerClass, CallerContext, ContentPart, InputChannel, LlmMessage, LlmProvider, LlmRequest,
    LlmRole, ModelTool, SelectionStore, ToolCall, ToolSource,
};
use metaforge_test_support::upstream::{Reply, Scripted};
use metaforge_test_support::{ManualClock, SequentialIds};
use serde_json::{Value, json};

/// Tool calls per turn.
const CALLS_PER_TURN: usize = 3;

struct NoUsage;

impl UsageSink for NoUsage {
    fn record(&self, _usage: CallUsage) {}
}

struct NoSelection;

#[async_trait::async_trait]
impl SelectionStore for NoSelection {
    async fn get(&self) -> Result<Option<String>, metaforge_ports::PortError> {
        Ok(None)
    }
    async fn set(&self, _route: &str) -> Result<(), metaforge_ports::PortError> {
        Ok(())
    }
}

/// The scripted model: a tool call while fewer than three results came back, then the answer.
fn model_reply(body: &Value) -> Reply {
    let results = body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
    let message = if results < CALLS_PER_TURN {
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call_{results}"), "type": "function",
            "function": {"name": "mcp_everything_echo", "arguments": format!("{{\"message\":\"part {results}\"}}")}
        }]})
    } else {
        json!({"role": "assistant", "content": "Echoed three parts."})
    };
    let finish = if results < CALLS_PER_TURN {
        "tool_calls"
    } else {
        "stop"
    };
    Reply::json(
        200,
        json!({"id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
               "choices": [{"index": 0, "message": message, "finish_reason": finish}],
               "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}})
        .to_string(),
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The direct path of one turn: the four model requests as the loop would send them (the
/// conversation growing by one call and its result each time) and the three tool calls.
async fn direct_turn(adapter: &Arc<dyn LlmProvider>, server: &McpToolServer, echo: &ModelTool) {
    let mut messages = vec![LlmMessage::user_text("echo three parts")];
    for step in 0..=CALLS_PER_TURN {
        let request = LlmRequest {
            model: "gpt-4o-mini".into(),
            messages: messages.clone(),
            tools: vec![echo.clone()],
            ..LlmRequest::default()
        };
        let answer = adapter.complete(&request, None).await.unwrap();
        if step == CALLS_PER_TURN {
            break;
        }
        let call: &ToolCall = answer
            .tool_calls
            .first()
            .expect("the scripted model asks for a tool");
        let arguments = call.arguments.as_object().cloned().unwrap_or_default();
        let output = server.call_tool("echo", arguments).await.unwrap();
        messages.push(LlmMessage {
            role: LlmRole::Assistant,
            content: vec![ContentPart::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            }],
        });
        messages.push(LlmMessage {
            role: LlmRole::User,
            content: vec![ContentPart::ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content: output.text(),
                is_error: false,
            }],
        });
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Ok(everything) = std::env::var("METAFORGE_BENCH_SERVER_EVERYTHING") else {
        println!("agent bench: set METAFORGE_BENCH_SERVER_EVERYTHING (run `cargo xtask bench agent`)");
        return;
    };
    let turns: usize = std::env::var("METAFORGE_BENCH_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    metaforge_adapters_llm::http::ensure_crypto_provider();
    let upstream = Scripted::respond(|received| model_reply(&received.body)).await;
    let v1 = format!("{}/v1", upstream.url());
    let adapter: Arc<dyn LlmProvider> =
        Arc::new(OpenAiCompatibleProvider::new(v1, HttpSettings::default(), true).unwrap());
    let pipeline = Arc::new(
        ProviderPipeline::new(
            vec![ProviderEntry {
                id: "openai".into(),
                adapter: Arc::clone(&adapter),
                billing: Billing::Metered,
            }],
            RoleModelSlots::new(BTreeMap::from([(
                "chat".to_owned(),
                vec![Candidate {
                    provider: "openai".into(),
                    model: "gpt-4o-mini".into(),
                }],
            )]))
            .unwrap(),
            RetryPolicy::default(),
            CredentialRotor::new(None),
            Arc::new(FallbackAlarm::new()),
            Arc::new(NoUsage) as Arc<dyn UsageSink>,
        )
        .unwrap(),
    );
    let routes = Arc::new(RouteResolver {
        table: metaforge_domain::routing::RoutingTable::default(),
        env_routes: BTreeMap::from([("METAFORGE_ROUTE_CHAT".to_owned(), "openai:gpt-4o-mini".to_owned())]),
        credentialed: BTreeSet::from(["openai".to_owned()]),
        default_route: None,
        selection: Arc::new(NoSelection),
    });
    let launch = Arc::new(StdioLaunch::new(
        [("PATH".to_owned(), metaforge_test_support::peers::path())],
        std::env::temp_dir().join("metaforge-bench-agent"),
    ));
    let stdio = |name: &str| {
        McpToolServer::new(
            ServerConfig::new(
                name,
                ServerTransport::Stdio {
                    command: "node".into(),
                    args: vec![everything.clone(), "stdio".into()],
                    env: BTreeMap::new(),
                },
            ),
            Arc::clone(&launch),
        )
    };
    // Two connections to the same server: one behind the registry, one called directly.
    let direct_server = stdio("everything");
    direct_server.connect().await.unwrap();
    let echo_descriptor = direct_server
        .list_tools()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == "echo")
        .expect("server-everything offers echo");
    let echo = ModelTool {
        name: "mcp_everything_echo".into(),
        description: echo_descriptor.description.clone(),
        parameters: echo_descriptor.input_schema.clone(),
    };
    let registry = ToolRegistry::builder()
        .server(
            Arc::new(stdio("everything")) as Arc<dyn ToolSource>,
            Duration::from_secs(30),
        )
        .build()
        .await
        .unwrap();
    let caller = CallerContext {
        class: CallerClass::Local,
        session: Some("bench".into()),
        input_channel: InputChannel::None,
        identity: None,
    };
    let clock = Arc::new(ManualClock::fixed());
    let agent = Agent::new(AgentPorts {
        model: Arc::new(PipelineTurnModel::new(Some(pipeline), routes)),
        tools: registry.for_turn(&caller, None),
        approvals: None,
        clock,
        ids: Arc::new(SequentialIds::new("bench")),
    });
    let input = TurnInput {
        system: "You are MetaForge.".into(),
        history: Vec::new(),
        user: "echo three parts".into(),
    };
    let agent_turn = |n: usize| {
        let (agent, input) = (agent.clone(), input.clone());
        async move {
            let config = TurnConfig::chat(format!("bench-{n}"));
            let outcome = agent
                .run_turn(&config, &input, &EventSink::none(), &CancellationToken::new())
                .await
                .expect("the turn ends with an answer");
            assert_eq!(outcome.calls.len(), CALLS_PER_TURN);
        }
    };
    for n in 0..turns / 10 + 1 {
        direct_turn(&adapter, &direct_server, &echo).await;
        agent_turn(n).await;
    }
    let (mut direct, mut looped) = (Vec::with_capacity(turns), Vec::with_capacity(turns));
    for n in 0..turns {
        let order = n % 2 == 0;
        for first in [order, !order] {
            let started = Instant::now();
            if first {
                direct_turn(&adapter, &direct_server, &echo).await;
                direct.push(started.elapsed());
            } else {
                agent_turn(turns + n).await;
                looped.push(started.elapsed());
            }
        }
    }
    direct.sort();
    looped.sort();
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len() as u32;
    println!(
        "agent bench: {turns} turns per path, each 4 model calls (scripted OpenAI-compatible upstream) + {CALLS_PER_TURN} tool calls (server-everything echo over stdio), interleaved"
    );
    println!(
        "{:<46} {:>9} {:>9} {:>9} {:>10}",
        "path", "p50 ms", "p99 ms", "mean ms", "turns/s"
    );
    for (name, samples) in [
        ("direct (adapter + MCP client, no loop)", &direct),
        ("agent loop (pipeline + registry + rules)", &looped),
    ] {
        println!(
            "{name:<46} {:>9.3} {:>9.3} {:>9.3} {:>10.1}",
            ms(percentile(samples, 0.5)),
            ms(percentile(samples, 0.99)),
            ms(mean(samples)),
            1.0 / mean(samples).as_secs_f64()
        );
    }
    let p50 = ms(percentile(&looped, 0.5)) - ms(percentile(&direct, 0.5));
    println!(
        "loop overhead per turn: p50 {p50:+.3} ms ({:+.3} ms per model call), p99 {:+.3} ms; agent/direct p50 ratio {:.2}×",
        p50 / (CALLS_PER_TURN as f64 + 1.0),
        ms(percentile(&looped, 0.99)) - ms(percentile(&direct, 0.99)),
        ms(percentile(&looped, 0.5)) / ms(percentile(&direct, 0.5))
    );
}
