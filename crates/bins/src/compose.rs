//! The composition root of every serving command (`gateway`, `up`, `worker`): the gateway's
//! options, the ledgers, services, engines, tools and doors built once from the [`Settings`],
//! and the one typed [`StartError`] every composition step answers with. Commands in `cmd/*`
//! only run what this builds.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::process::ExitCode;
use std::sync::Arc;

use metaforge_adapters_store::{FileSelectionStore, SELECTION_FILE, StorePaths};
use metaforge_app::approvals::ApprovalService;
use metaforge_app::flows::FlowService;
use metaforge_app::pipeline::StoreSink as UsageStoreSink;
use metaforge_app::routing::RouteResolver;
use metaforge_app::usage_metrics::UsageMetrics;
use metaforge_gateway::providers::ProviderRow;

use metaforge_app::flow_generator::PipelineGenerator;
use metaforge_app::pipeline::{Candidate, ProviderPipeline};
use metaforge_gateway::{self as gateway, AuthState, GatewayState};
use metaforge_ports::approval_ledger::ApprovalLedger;
use metaforge_ports::flow_version_store::FlowVersionStore;
use metaforge_ports::usage_store::UsageStore;
use metaforge_ports::{Clock, IdGen};

use crate::providers_config::{self, BuildError};
use crate::settings::Settings;
use crate::system::{SystemClock, UuidV7Ids};

/// Options of `metaforge gateway`.
#[derive(Debug, clap::Args)]
pub(crate) struct GatewayArgs {
    /// Address to bind. Anything but loopback requires METAFORGE_GATEWAY_API_KEY.
    #[arg(long, env = "METAFORGE_GATEWAY_BIND", default_value = "127.0.0.1:8787")]
    pub(crate) bind: SocketAddr,
    /// Requests per minute per API key (0 disables the limit).
    #[arg(long, env = "METAFORGE_GATEWAY_RATE_LIMIT_PER_MINUTE", default_value_t = 600)]
    pub(crate) rate_limit_per_minute: u32,
    /// Wrong-key attempts one client address may make per minute before every further request
    /// from it is answered 429 (0 disables the throttle).
    #[arg(long, env = "METAFORGE_GATEWAY_AUTH_FAILURES_PER_MINUTE", default_value_t = gateway::auth::DEFAULT_AUTH_FAILURES_PER_MINUTE)]
    pub(crate) auth_failures_per_minute: u32,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = "METAFORGE_GATEWAY_BODY_LIMIT_BYTES", default_value_t = gateway::DEFAULT_BODY_LIMIT_BYTES)]
    pub(crate) body_limit_bytes: usize,
}

/// Why a serving command could not start, or stopped: the cause with its chain of context,
/// printed once by [`run_serving`] and mapped to the exit code there.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// Bad configuration: nothing was started (exit 2).
    #[error("{0:#}")]
    Config(anyhow::Error),
    /// A ledger, an engine or the listener failed (exit 1).
    #[error("{0:#}")]
    Runtime(anyhow::Error),
}

impl StartError {
    /// A configuration problem: `cause` says what is wrong.
    pub(crate) fn config(cause: impl Into<anyhow::Error>) -> Self {
        Self::Config(cause.into())
    }

    /// A failure while starting or serving.
    pub(crate) fn runtime(cause: impl Into<anyhow::Error>) -> Self {
        Self::Runtime(cause.into())
    }

    /// A configuration problem a step reported as text.
    pub(crate) fn config_text(message: impl std::fmt::Display) -> Self {
        Self::Config(anyhow::anyhow!("{message}"))
    }

    /// A runtime failure a step reported as text.
    pub(crate) fn runtime_text(message: impl std::fmt::Display) -> Self {
        Self::Runtime(anyhow::anyhow!("{message}"))
    }

    /// The process's exit code: 2 for configuration, 1 for a runtime failure.
    pub(crate) fn exit_code(&self) -> ExitCode {
        match self {
            Self::Config(_) => ExitCode::from(2),
            Self::Runtime(_) => ExitCode::FAILURE,
        }
    }
}

/// Context for a step's failure: the step's name is prefixed to the cause (`credentials: …`).
pub(crate) trait StartContext<T> {
    /// The failure is a configuration problem in `step`.
    fn config_in(self, step: &'static str) -> Result<T, StartError>;
    /// The failure is a runtime failure in `step`.
    fn runtime_in(self, step: &'static str) -> Result<T, StartError>;
}

impl<T, E: Into<anyhow::Error>> StartContext<T> for Result<T, E> {
    fn config_in(self, step: &'static str) -> Result<T, StartError> {
        self.map_err(|e| StartError::Config(e.into().context(step)))
    }

    fn runtime_in(self, step: &'static str) -> Result<T, StartError> {
        self.map_err(|e| StartError::Runtime(e.into().context(step)))
    }
}

/// Runs a serving command (`gateway`, `up`, `worker`) on a multi-threaded runtime; its failure
/// is printed once, with its causes, and mapped to the exit code.
pub(crate) fn run_serving<F>(command: &str, serve: F) -> ExitCode
where
    F: std::future::Future<Output = Result<(), StartError>>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("metaforge {command}: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("metaforge {command}: {err}");
            err.exit_code()
        }
    }
}

/// Everything the gateway composes, built once so `metaforge up` can share it.
pub(crate) struct Composition {
    pub(crate) state: Arc<GatewayState>,
    pub(crate) auth: Arc<AuthState>,
    /// The usage writer, flushed on a graceful stop (none when no provider is configured).
    pub(crate) usage_sink: Option<Arc<UsageStoreSink>>,
    /// What `metaforge up`'s MCP sidecar serves: the natives plus the run tools, and who
    /// confirms a caller's claimed class before every call.
    pub(crate) mcp: ComposedMcp,
    /// The tool registry and the MCP servers' states (`crate::tool_servers`).
    #[expect(
        dead_code,
        reason = "only held: the servers and their refresh task live as long as the gateway"
    )]
    pub(crate) tools: crate::tool_servers::ComposedTools,
    /// Design-flow runs: the engine, its stores and brains.
    pub(crate) runs: crate::runs_config::ComposedRuns,
    /// This process's presence on the ledgers (renewed, sweeping the holds of gone processes).
    pub(crate) presence: metaforge_app::processes::PresenceTask,
    /// `METAFORGE_HOME` (where `up --engine temporal` keeps its dev server's history).
    #[cfg_attr(
        not(feature = "temporal"),
        expect(dead_code, reason = "read only by `up --engine temporal`")
    )]
    pub(crate) home: std::path::PathBuf,
    /// Holds the temporary ledger directory alive when the ledgers are disabled.
    _scratch: Option<tempfile::TempDir>,
}

/// Opens the ledgers, restores them, and builds the gateway state from the environment.
pub(crate) async fn compose(args: &GatewayArgs, settings: &Settings) -> Result<Composition, StartError> {
    compose_as(args, settings, None).await
}

/// [`compose`] with the flow engine fixed (`metaforge worker` always composes Temporal, so it
/// never resumes embedded runs whatever `METAFORGE_FLOW_ENGINE` says).
pub(crate) async fn compose_as(
    args: &GatewayArgs,
    settings: &Settings,
    engine: Option<metaforge_ports::FlowEngineKind>,
) -> Result<Composition, StartError> {
    for name in settings.env().unknown_variables() {
        tracing::warn!(event = "unknown_variable", variable = %name, "not a MetaForge variable (a typo?); ignored; `metaforge config variables` lists them");
    }
    let keys = gateway::parse_api_keys(&settings.api_keys).map_err(StartError::config)?;
    gateway::check_bind_policy(args.bind, &keys).map_err(StartError::config)?;
    let approver_policy = approver_policy(settings.approver_policy);
    let paths = settings.store().map_err(StartError::config)?.clone();
    let scratch = if paths.tool_approvals.is_none() || paths.flow_versions.is_none() {
        tracing::warn!(
            event = "ledgers_not_durable",
            "METAFORGE_RUNS_LEDGER_DISABLE is set: approvals and flow versions live in a temporary directory and are lost at exit"
        );
        Some(tempfile::tempdir().runtime_in("cannot create a scratch dir")?)
    } else {
        None
    };
    let scratch_path = |file: &str| scratch.as_ref().map(|d| d.path().join(file)).unwrap_or_default();
    let approvals_path = paths
        .tool_approvals
        .clone()
        .unwrap_or_else(|| scratch_path("tool_approvals_ledger.db"));
    let versions_path = paths
        .flow_versions
        .clone()
        .unwrap_or_else(|| scratch_path("flow_versions.db"));

    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let ids: Arc<dyn IdGen> = Arc::new(UuidV7Ids);
    // One name per start: on the holds this process parks, its presence and its engine lease.
    let process = crate::local_processes::this_process(ids.as_ref());
    let crate::ledgers::Ledgers {
        approvals: ledger,
        versions,
        restored,
    } = crate::ledgers::open_ledgers(
        &settings.ledgers,
        &approvals_path,
        &versions_path,
        &clock,
        &process,
    )
    .await
    .map_err(StartError::runtime)?;
    let approvals = Arc::new(
        ApprovalService::new(
            Arc::clone(&ledger),
            Arc::clone(&versions),
            Arc::clone(&clock),
            Arc::clone(&ids),
        )
        .with_approver_policy(approver_policy),
    );
    let usage = settings
        .ledgers
        .usage(&paths.llm_usage)
        .await
        .map_err(StartError::runtime)?;
    let flows = Arc::new(FlowService::new(
        Arc::clone(&versions),
        Arc::clone(&ledger),
        Arc::clone(&clock),
        Arc::clone(&ids),
    ));
    let metrics =
        metaforge_app::exposition::Exposition::install().runtime_in("cannot install the metrics recorder")?;
    let rows = providers_config::provider_rows(settings)
        .await
        .config_in("credentials")?;
    let harness = harness_config(&paths, &settings.routing, providers_config::credentialed(&rows))?;
    let store = Arc::clone(&usage);
    let (pipeline, usage_sink) =
        gateway_pipeline(&harness, &rows, store, Arc::clone(&clock), settings).await?;
    let auth = Arc::new(
        AuthState::new(keys, NonZeroU32::new(args.rate_limit_per_minute))
            .with_auth_failures_per_minute(NonZeroU32::new(args.auth_failures_per_minute)),
    );
    let harness = Arc::new(harness);
    let generator = Arc::new(PipelineGenerator::new(
        pipeline.clone(),
        Arc::clone(&harness),
        Arc::clone(&flows),
    ));
    // `METAFORGE_TWIN_URL` decides (crate::twin_engine): the embedded file, or FalkorDB.
    let twin_store = settings
        .twin
        .open(&paths.twin)
        .await
        .map_err(StartError::runtime)?;
    let twin = Arc::new(metaforge_app::twin::TwinService::new(
        Arc::clone(&twin_store),
        Arc::clone(&clock),
        Arc::clone(&ids),
    ));
    // Which run a twin write belongs to is asked of the engine, which is built after the tools.
    let run_scopes = Arc::new(metaforge_app::twin::LateRunScopes::new());
    let twin_tools = metaforge_sidecar::SidecarTwin::new(Arc::clone(&twin), run_scopes.clone() as _);
    let mut natives = crate::tool_servers::sidecar_natives(crate::tool_servers::natives_host(
        &ledger,
        &versions,
        &clock,
        &ids,
        generator.clone(),
        Some(twin_tools.clone()),
    ));
    natives.evidence = Some(Arc::new(metaforge_app::twin::EvidenceRecorder::new(
        Arc::clone(&twin),
        run_scopes.clone() as _,
    )));
    let tools = crate::tool_servers::compose_tools(
        &paths.home,
        settings.mcp.servers_path.as_deref(),
        settings.mcp.engineering_tool_servers,
        settings.skills_dirs.as_deref(),
        &natives,
        settings.env(),
    )
    .await
    .map_err(StartError::config)?;
    let chat_settings = settings.chat.clone();
    let chat_settings_loop_mode = chat_settings.loop_mode;
    let agent = compose_agent(
        pipeline.clone(),
        &harness,
        &tools,
        &ledger,
        &clock,
        &ids,
        chat_settings.loop_mode,
    );
    let chat = compose_chat(
        &settings.ledgers,
        &paths,
        agent.clone(),
        &tools,
        &clock,
        &ids,
        chat_settings,
    )
    .await?;
    let runs = crate::runs_config::compose_runs(crate::runs_config::RunInputs {
        ledgers: &settings.ledgers,
        runs_path: &paths
            .runs
            .clone()
            .unwrap_or_else(|| scratch_path("runs_ledger.db")),
        tasks_path: &paths.client_tasks,
        twin: twin_store,
        run_scopes,
        agent,
        tools: Arc::clone(&tools.registry) as _,
        approvals: Arc::clone(&ledger),
        versions: Arc::clone(&versions),
        clock: Arc::clone(&clock),
        ids: Arc::clone(&ids),
        loop_mode: chat_settings_loop_mode,
        usage: usage.clone(),
        engine,
        settings: &settings.runs,
        process: process.clone(),
    })
    .await?;
    // This process shows it is alive before it parks anything, then orphans only the holds of
    // processes that are gone (on one ledger shared by several gateways, the others' stay).
    let presence = Arc::new(metaforge_app::processes::Presence::new(
        Arc::clone(&runs.leases),
        Arc::clone(&clock),
        Arc::new(crate::local_processes::ThisHost),
        process,
        metaforge_app::processes::LeaseTimings::default(),
    ));
    presence
        .announce()
        .await
        .runtime_in("announcing this process on the run ledger")?;
    let (orphaned, carried) = approvals.restore(&presence).await.map_err(StartError::runtime)?;
    tracing::info!(
        event = "ledgers_restored",
        approvals = %settings.ledgers.describe(&approvals_path),
        flow_versions = %settings.ledgers.describe(&versions_path),
        versions_served = restored.restored.len(),
        versions_skipped = restored.skipped.len(),
        orphaned_holds = orphaned,
        decisions_carried = carried,
        process = %presence.name(),
        "ledgers open"
    );
    let presence = presence.keep(Arc::clone(&approvals));
    let mcp = compose_mcp(McpInputs {
        ledger: &ledger,
        versions: &versions,
        clock: &clock,
        ids: &ids,
        generator: generator.clone(),
        twin: twin_tools,
        runs: &runs,
        skills: Arc::clone(&tools.skills),
        client_task_writes: settings.mcp.client_task_writes,
    })?;
    let state = Arc::new(GatewayState {
        metrics: Some(Arc::new(metrics)),
        approvals,
        flows,
        usage,
        clock,
        harness,
        generator: generator.clone(),
        chat: Some(chat),
        providers: rows,
        pipeline,
        mcp_servers: Arc::clone(&tools.statuses),
        twin: Some(twin),
        runs: Some(Arc::clone(&runs.service)),
    });
    Ok(Composition {
        state,
        auth,
        usage_sink,
        mcp,
        tools,
        runs,
        presence,
        home: paths.home.clone(),
        _scratch: scratch,
    })
}

/// The MCP sidecar of `metaforge up`: the host it serves and the caller grants its transport
/// asks before every call.
pub(crate) struct ComposedMcp {
    /// The natives plus the run tools over the in-process run bindings.
    pub(crate) host: Arc<dyn metaforge_ports::ToolHost>,
    /// Service-key runs and client-task sessions, confirmed with this process's run service.
    pub(crate) grants: Arc<dyn metaforge_ports::CallerGrants>,
}

/// What [`compose_mcp`] builds the sidecar's host from.
struct McpInputs<'a> {
    ledger: &'a Arc<dyn ApprovalLedger>,
    versions: &'a Arc<dyn FlowVersionStore>,
    clock: &'a Arc<dyn Clock>,
    ids: &'a Arc<dyn IdGen>,
    generator: Arc<dyn metaforge_app::flow_generator::ProposalGenerator>,
    twin: metaforge_sidecar::SidecarTwin,
    runs: &'a crate::runs_config::ComposedRuns,
    skills: Arc<metaforge_app::skills::SkillShelf>,
    /// `METAFORGE_CLIENT_TASK_WRITES`.
    client_task_writes: bool,
}

/// The run tools in process (the sidecar runs inside the gateway, so its run bindings are the
/// app's own [`metaforge_app::runs::RunService`]) and the caller grants over the same service;
/// `METAFORGE_CLIENT_TASK_WRITES=on` lets a session holding a claimed client task run as
/// `client_task`.
fn compose_mcp(inputs: McpInputs<'_>) -> Result<ComposedMcp, StartError> {
    let client_task_writes = inputs.client_task_writes;
    let bindings: Arc<dyn metaforge_api::RunBindings> = Arc::new(
        metaforge_sidecar::InProcessRunBindings::new(Arc::clone(&inputs.runs.service)),
    );
    let claims = Arc::new(metaforge_sidecar::ClientTaskGrants::new());
    let runs = metaforge_sidecar::SidecarRuns::new(Arc::clone(&bindings), Arc::clone(&claims));
    let host = crate::tool_servers::sidecar_mcp_host(
        crate::tool_servers::natives_host(
            inputs.ledger,
            inputs.versions,
            inputs.clock,
            inputs.ids,
            inputs.generator,
            Some(inputs.twin),
        ),
        &runs,
        inputs.skills,
    );
    let flows: Arc<dyn metaforge_api::FlowBindings> = Arc::new(
        metaforge_sidecar::InProcessFlowBindings::new(metaforge_sidecar::FlowStores {
            approvals: Arc::clone(inputs.ledger),
            versions: Arc::clone(inputs.versions),
            clock: Arc::clone(inputs.clock),
            ids: Arc::clone(inputs.ids),
        }),
    );
    tracing::info!(
        event = "mcp_run_bindings_in_process",
        client_task_writes,
        "the MCP sidecar's run tools call this process's run service"
    );
    Ok(ComposedMcp {
        host,
        grants: Arc::new(metaforge_sidecar::SidecarCallerGrants::new(
            bindings,
            flows,
            claims,
            client_task_writes,
        )),
    })
}

/// The agent loop every turn runs on — chat threads and server-intelligence phases: the provider
/// pipeline (every model call routed, retried, accounted), the central tool registry, holds in the
/// one approval ledger. One agent, so one set of session write-locks.
fn compose_agent(
    pipeline: Option<Arc<ProviderPipeline>>,
    routes: &Arc<metaforge_app::routing::RouteResolver>,
    tools: &crate::tool_servers::ComposedTools,
    ledger: &Arc<dyn ApprovalLedger>,
    clock: &Arc<dyn Clock>,
    ids: &Arc<dyn IdGen>,
    loop_mode: metaforge_agent::LoopMode,
) -> metaforge_agent::Agent {
    use metaforge_agent::{Agent, AgentPorts, ToolBoxes as _};
    let model = metaforge_app::turn_model::PipelineTurnModel::new(pipeline, Arc::clone(routes))
        .with_loop_mode(loop_mode);
    let local = metaforge_ports::CallerContext {
        class: metaforge_ports::CallerClass::Local,
        session: None,
        input_channel: metaforge_ports::InputChannel::None,
        identity: None,
    };
    Agent::new(AgentPorts {
        model: Arc::new(model),
        tools: tools.registry.for_turn(&local, None),
        approvals: Some(Arc::clone(ledger)),
        clock: Arc::clone(clock),
        ids: Arc::clone(ids),
    })
}

/// Chat threads: the session ledger and the agent loop.
async fn compose_chat(
    ledgers: &crate::ledger_engine::LedgerEngine,
    paths: &StorePaths,
    agent: metaforge_agent::Agent,
    tools: &crate::tool_servers::ComposedTools,
    clock: &Arc<dyn Clock>,
    ids: &Arc<dyn IdGen>,
    settings: metaforge_app::chat::ChatSettings,
) -> Result<Arc<metaforge_app::chat::ChatService>, StartError> {
    let sessions = ledgers
        .sessions(&paths.sessions)
        .await
        .map_err(StartError::runtime)?;
    tracing::info!(
        event = "chat_composed",
        sessions = %ledgers.describe(&paths.sessions),
        max_iterations = settings.max_iterations,
        token_budget = settings.token_budget.unwrap_or(0),
        disabled_gates = %settings.disabled_gates.join(","),
        "chat threads served"
    );
    Ok(Arc::new(metaforge_app::chat::ChatService::new(
        sessions,
        agent,
        Arc::clone(&tools.registry) as _,
        Arc::clone(clock),
        Arc::clone(ids),
        settings,
    )))
}

/// Four eyes (`METAFORGE_APPROVALS_SEPARATE_APPROVER`), as `Settings` accepted it (a bad value,
/// or `on` without keys, refused the command before anything started): said once at start.
fn approver_policy(
    policy: metaforge_domain::approvals::ApproverPolicy,
) -> metaforge_domain::approvals::ApproverPolicy {
    if policy == metaforge_domain::approvals::ApproverPolicy::Separate {
        tracing::info!(
            event = "approvals_separate_approver",
            "four eyes: the identity that proposed or parked an item cannot decide it"
        );
    }
    policy
}

/// The routing table (`METAFORGE_MODEL_ROUTES_PATH`; a bad table refuses start), the
/// `METAFORGE_ROUTE_*` overrides, the credentialed providers, the default route
/// (`METAFORGE_LLM_PROVIDER` + `METAFORGE_LLM_MODEL`) and the durable selection file.
fn harness_config(
    paths: &StorePaths,
    routing: &crate::settings::RoutingSettings,
    credentialed: std::collections::BTreeSet<String>,
) -> Result<RouteResolver, StartError> {
    use metaforge_domain::routing::validate_table;
    let table = routing_table(routing).map_err(StartError::config)?;
    let env_routes = routing.overrides.clone();
    for problem in validate_table(&table, &env_routes, Some(&credentialed)) {
        if problem.blocks_start() {
            return Err(StartError::config_text(format!("routing: {problem}")));
        }
        tracing::warn!(event = "model_route_provider_unconfigured", problem = %problem, "route to a provider without credentials");
    }
    Ok(RouteResolver {
        table,
        env_routes,
        credentialed,
        default_route: routing.default_route.clone(),
        selection: Arc::new(FileSelectionStore::new(paths.home.join(SELECTION_FILE))),
    })
}

/// The routing table `METAFORGE_MODEL_ROUTES_PATH` names (the empty table when unset); a file
/// that cannot be read or parsed is an error naming it.
fn routing_table(
    routing: &crate::settings::RoutingSettings,
) -> anyhow::Result<metaforge_domain::routing::RoutingTable> {
    use metaforge_domain::routing::{MODEL_ROUTES_PATH_ENV, RoutingTable};
    match &routing.routes_path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("{MODEL_ROUTES_PATH_ENV}={path}: {e}"))?;
            RoutingTable::from_json(&text).map_err(|e| anyhow::anyhow!("{path}: {e}"))
        }
        None => Ok(RoutingTable::default()),
    }
}

/// What a start would refuse beyond the environment's own parse (`Settings`), found without
/// starting anything — `metaforge config check` runs it: the gateway's and the sidecar's bind
/// addresses against the keys, the routing table with its overrides, and the MCP servers file.
/// Each is the same rule the start applies.
pub(crate) fn preflight(settings: &Settings) -> Vec<String> {
    let mut problems = Vec::new();
    if let Ok(keys) = gateway::parse_api_keys(&settings.api_keys) {
        for (variable, default) in [
            ("METAFORGE_GATEWAY_BIND", "127.0.0.1:8787"),
            ("METAFORGE_MCP_BIND", "127.0.0.1:8765"),
        ] {
            let text = settings.env().get(variable).unwrap_or_else(|| default.to_owned());
            match text.parse::<std::net::SocketAddr>() {
                Ok(bind) => {
                    if let Err(e) = gateway::check_bind_policy(bind, &keys) {
                        problems.push(format!("{variable}: {e}"));
                    }
                }
                Err(e) => problems.push(format!("{variable}: '{text}' is not an address:port ({e})")),
            }
        }
    }
    match routing_table(&settings.routing) {
        Ok(table) => {
            for problem in
                metaforge_domain::routing::validate_table(&table, &settings.routing.overrides, None)
            {
                if problem.blocks_start() {
                    problems.push(format!("routing: {problem}"));
                }
            }
        }
        Err(problem) => problems.push(problem.to_string()),
    }
    if let Ok(paths) = settings.store()
        && let Err(e) = crate::tool_servers::read_servers(settings.mcp.servers_path.clone(), &paths.home)
    {
        problems.push(e.to_string());
    }
    problems.dedup();
    problems
}

/// The pipeline behind `/v1/chat/completions`: each role's route as resolved at start (the
/// routing rules over the harness configuration, the stored selection included) as its primary,
/// `METAFORGE_FALLBACK_PROVIDERS` behind it; every configured provider is wired so an explicit
/// `provider:model` (or a selection stored later) can be served. `None` when no provider is
/// configured: the gateway still starts and chat completions answer 503 naming why.
async fn gateway_pipeline(
    harness: &RouteResolver,
    rows: &[ProviderRow],
    usage: Arc<dyn UsageStore>,
    clock: Arc<dyn Clock>,
    settings: &Settings,
) -> Result<(Option<Arc<ProviderPipeline>>, Option<Arc<UsageStoreSink>>), StartError> {
    use metaforge_domain::routing::{RouteCall, resolve_route};
    // A bad threshold refuses start even with no provider yet (`Settings`): it would bite the
    // day one is added.
    let threshold = settings.runs.spend_alert_usd;
    let configured: Vec<String> = rows
        .iter()
        .filter(|r| r.configured)
        .map(|r| r.id.clone())
        .collect();
    if configured.is_empty() {
        tracing::warn!(
            event = "gateway_pipeline_disabled",
            "no provider is configured: model calls answer 503 until a key (e.g. OPENAI_API_KEY) and a route (e.g. METAFORGE_ROUTE_CHAT=openai:gpt-4o-mini) are set"
        );
        return Ok((None, None));
    }
    let fallbacks = &settings.routing.fallbacks;
    let selection = harness.selection.get().await.runtime_in("selection")?;
    let inputs = harness.inputs(selection.as_deref());
    let roles = harness.role_names();
    let mut chains = std::collections::BTreeMap::new();
    for role in roles {
        let call = RouteCall {
            role: role.clone(),
            ..RouteCall::default()
        };
        match resolve_route(&inputs, &call) {
            Ok(resolved) => {
                let mut chain = vec![Candidate {
                    provider: resolved.provider,
                    model: resolved.model,
                }];
                chain.extend(
                    fallbacks
                        .iter()
                        .filter(|f| !chain.contains(f))
                        .cloned()
                        .collect::<Vec<_>>(),
                );
                chains.insert(role, chain);
            }
            Err(err) => {
                tracing::info!(event = "gateway_role_unrouted", role = %role, reason = %err, "role has no route; calls to it answer 503");
            }
        }
    }
    let sink =
        Arc::new(UsageStoreSink::new(usage, clock).with_metrics(Arc::new(UsageMetrics::new(threshold))));
    let pipeline =
        providers_config::build_pipeline(chains, &[], &configured, Arc::clone(&sink) as _, settings)
            .map_err(|e| match e {
                BuildError::Config(m) => StartError::config_text(format!("provider pipeline: {m}")),
                other @ BuildError::Runtime(_) => {
                    StartError::runtime_text(format!("provider pipeline: {other}"))
                }
            })?;
    Ok((Some(Arc::new(pipeline)), Some(sink)))
}

/// Commits every usage event queued before the stop: nothing acknowledged is lost on a graceful
/// stop.
pub(crate) async fn flush_usage(composition: &Composition) {
    if let Some(sink) = &composition.usage_sink {
        sink.flush().await;
        tracing::info!(event = "llm_usage_flushed", "usage events committed before exit");
    }
}

/// The console's cookie policy for a gateway bound at `bind`: off loopback it is reached over
/// TLS (a proxy in front), so the session cookie is `Secure`.
pub(crate) fn console_settings(bind: SocketAddr) -> gateway::console::ConsoleSettings {
    gateway::console::ConsoleSettings {
        secure_cookies: !bind.ip().is_loopback(),
    }
}
