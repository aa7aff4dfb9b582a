//! Design-flow runs as the binary composes them: the run ledger, the client-task store, the twin
//! and the event bus, the two phase brains and the engine `METAFORGE_FLOW_ENGINE` selects —
//! never a silent fall-through from one engine to another.

use std::path::Path;
use std::sync::Arc;

use metaforge_agent::{Agent, LoopMode, ToolBoxes};
use metaforge_app::runs::{
    ClientPhaseBrain, EmbeddedEngine, EngineOptions, EnginePorts, PhaseBrains, RunEngine, RunService,
    RunServicePorts, RunServiceSettings, ServerBrainSettings, ServerPhaseBrain,
};
use metaforge_ports::{
    ApprovalLedger, ClientTaskStore, Clock, EventBus, FlowEngine, FlowEngineKind, FlowVersionStore, IdGen,
    IntelligenceMode, LeaseStore, RunLedger, RunSettings, TwinStore, UsageStore,
};

use crate::compose::{StartContext, StartError};
#[cfg(not(feature = "kafka"))]
use crate::settings::KAFKA_BOOTSTRAP_SERVERS_ENV;

/// What the runs composition hands the gateway and the sidecar.
#[expect(
    dead_code,
    reason = "held for the process's life; the doors read the service only"
)]
pub(crate) struct ComposedRuns {
    /// The run use cases both doors call.
    pub(crate) service: Arc<RunService>,
    /// The engine runs are started on (the embedded one, or the unavailable Temporal one).
    pub(crate) engine: Arc<dyn FlowEngine>,
    /// The embedded engine, when it is the one selected (events, shutdown).
    pub(crate) embedded: Option<Arc<EmbeddedEngine>>,
    /// The run ledger.
    pub(crate) runs: Arc<dyn RunLedger>,
    /// Client tasks.
    pub(crate) tasks: Arc<dyn ClientTaskStore>,
    /// The twin.
    pub(crate) twin: Arc<dyn TwinStore>,
    /// The event bus every run transition is published on.
    pub(crate) bus: Arc<dyn EventBus>,
    /// Who does phase work when a run request names nobody (`METAFORGE_INTELLIGENCE`).
    pub(crate) default_intelligence: IntelligenceMode,
    /// The phase brains (the embedded engine's, and what `metaforge worker` registers).
    pub(crate) brains: PhaseBrains,
    /// The Temporal engine, when it is the one selected (the gateway follows its runs).
    #[cfg(feature = "temporal")]
    pub(crate) temporal: Option<Arc<metaforge_app::runs::FollowedEngine>>,
    /// The embedded engine's lease task (renewing, or standing by), given up on a graceful stop.
    pub(crate) leadership: Option<metaforge_app::runs::EngineLeadership>,
    /// Where leases live (beside the run ledger): the engine's, and every process's presence.
    pub(crate) leases: Arc<dyn LeaseStore>,
}

impl ComposedRuns {
    /// In a gateway (not a worker): follows the Temporal runs in the background — record status
    /// and gate holds — from now on. Nothing to do on the embedded engine, whose run tasks keep
    /// both themselves.
    pub(crate) fn follow_runs(&self) {
        #[cfg(feature = "temporal")]
        if let Some(engine) = &self.temporal {
            engine.follow_in_background();
        }
    }

    /// Stops the embedded engine's run tasks on a graceful stop (nothing is written: every
    /// transition is already in the ledger, and the next start resumes at the last boundary).
    pub(crate) async fn shutdown(&self) {
        if let Some(engine) = &self.embedded {
            engine.shutdown().await;
            if let Some(leadership) = &self.leadership {
                leadership.release().await;
            }
            tracing::info!(
                event = "flow_engine_stopped",
                "run tasks stopped; runs resume at the next start"
            );
        }
    }
}

/// The ports the runs composition shares with the rest of the gateway.
pub(crate) struct RunInputs<'a> {
    /// Where the run ledger and the client tasks live (`METAFORGE_DATABASE_URL`).
    pub(crate) ledgers: &'a crate::ledger_engine::LedgerEngine,
    /// The run ledger's file (under the SQLite files).
    pub(crate) runs_path: &'a Path,
    /// The client-task store's file.
    pub(crate) tasks_path: &'a Path,
    /// The twin (the same store the twin tools and routes use).
    pub(crate) twin: Arc<dyn TwinStore>,
    /// Where the twin tools ask which run a write belongs to; set here once the engine exists.
    pub(crate) run_scopes: Arc<metaforge_app::twin::LateRunScopes>,
    /// The agent loop (server intelligence).
    pub(crate) agent: Agent,
    /// The central tool registry.
    pub(crate) tools: Arc<dyn ToolBoxes>,
    /// The one approval ledger (gates are holds of kind `gate`).
    pub(crate) approvals: Arc<dyn ApprovalLedger>,
    /// Flow versions.
    pub(crate) versions: Arc<dyn FlowVersionStore>,
    /// Time.
    pub(crate) clock: Arc<dyn Clock>,
    /// Ids.
    pub(crate) ids: Arc<dyn IdGen>,
    /// The agent loop's protocol (`METAFORGE_AGENT_LOOP`).
    pub(crate) loop_mode: LoopMode,
    /// Model-call usage (a run's totals by phase, role and model).
    pub(crate) usage: Arc<dyn UsageStore>,
    /// The engine to compose whatever `METAFORGE_FLOW_ENGINE` says (`metaforge worker`).
    pub(crate) engine: Option<FlowEngineKind>,
    /// The runs' variables.
    pub(crate) settings: &'a crate::settings::RunSettings,
    /// This process's name (`crate::local_processes::this_process`), the engine lease's holder.
    pub(crate) process: String,
}

/// Opens the run stores, builds the brains and the selected engine, and resumes every run that
/// was not finished when the process last stopped.
pub(crate) async fn compose_runs(inputs: RunInputs<'_>) -> Result<ComposedRuns, StartError> {
    let kind = inputs.engine.unwrap_or(inputs.settings.engine);
    let default_intelligence = inputs.settings.intelligence;
    let gate_timeout_seconds = inputs.settings.gate_timeout_seconds;
    let crate::ledger_engine::RunLedgerPorts { runs, leases } = inputs
        .ledgers
        .runs(inputs.runs_path)
        .await
        .map_err(StartError::runtime)?;
    let tasks: Arc<dyn ClientTaskStore> = inputs
        .ledgers
        .client_tasks(inputs.tasks_path, &runs)
        .await
        .map_err(StartError::runtime)?;
    let twin = inputs.twin;
    let bus = event_bus(inputs.settings.kafka_bootstrap.clone()).await?;
    let service_ports = RunServicePorts {
        runs: Arc::clone(&runs),
        versions: Arc::clone(&inputs.versions),
        tasks: Arc::clone(&tasks),
        usage: inputs.usage,
        clock: Arc::clone(&inputs.clock),
        ids: Arc::clone(&inputs.ids),
    };
    let server: Arc<dyn metaforge_ports::PhaseBrain> = Arc::new(
        ServerPhaseBrain::new(inputs.agent, inputs.tools, Arc::clone(&twin)).with_settings(
            ServerBrainSettings {
                loop_mode: inputs.loop_mode,
                ..ServerBrainSettings::default()
            },
        ),
    );
    let client: Arc<dyn metaforge_ports::PhaseBrain> = Arc::new(ClientPhaseBrain::new(
        Arc::clone(&tasks),
        Arc::clone(&twin),
        Arc::clone(&inputs.clock),
    ));
    let brains = PhaseBrains { server, client };
    #[cfg(feature = "temporal")]
    let mut temporal = None;
    // The embedded engine's lease (who drives this ledger's runs) asks the same clock.
    let lease_clock = Arc::clone(&inputs.clock);
    let lease_store = Arc::clone(&leases);
    let mut leadership = None;
    let (engine, embedded): (Arc<dyn RunEngine>, Option<Arc<EmbeddedEngine>>) = match kind {
        FlowEngineKind::Embedded => {
            let engine = Arc::new(EmbeddedEngine::new(
                EnginePorts {
                    runs: Arc::clone(&runs),
                    versions: inputs.versions,
                    approvals: inputs.approvals,
                    tasks: Arc::clone(&tasks),
                    twin: Arc::clone(&twin),
                    bus: Arc::clone(&bus),
                    clock: inputs.clock,
                    ids: inputs.ids,
                },
                brains.clone(),
                EngineOptions::default(),
            ));
            inputs
                .run_scopes
                .set(Arc::new(metaforge_app::twin::EngineRunScopes::new(
                    Arc::clone(&engine) as Arc<dyn FlowEngine>,
                    Some(Arc::clone(&tasks)),
                )));
            let (start, lease) = metaforge_app::runs::lead(
                (*engine).clone(),
                leases,
                Arc::clone(&lease_clock),
                Arc::new(crate::local_processes::ThisHost),
                inputs.process.clone(),
                metaforge_app::processes::LeaseTimings::default(),
            )
            .await
            .runtime_in("resuming runs")?;
            match start {
                metaforge_app::runs::LeadStart::Leading(report) => {
                    tracing::info!(
                        event = "flow_engine_started",
                        engine = "embedded",
                        holder = %lease.holder(),
                        resumed = report.resumed.len(),
                        settled = report.settled.len(),
                        unresumable = report.failed.len(),
                        default_intelligence = default_intelligence.as_str(),
                        gate_timeout_seconds = ?gate_timeout_seconds,
                        "design-flow runs resume at their last boundary"
                    );
                    for (run, reason) in &report.failed {
                        tracing::error!(event = "run_not_resumed", run_id = %run, reason = %reason, "a run could not be resumed; it reads live: false");
                    }
                }
                metaforge_app::runs::LeadStart::StandingBy { holder } => {
                    tracing::info!(
                        event = "flow_engine_standby",
                        engine = "embedded",
                        holder = %holder,
                        "another process drives this run ledger's runs; this one takes over if it stops"
                    );
                }
            }
            leadership = Some(lease);
            (Arc::clone(&engine) as Arc<dyn RunEngine>, Some(engine))
        }
        #[cfg(feature = "temporal")]
        FlowEngineKind::Temporal => {
            let engine = Arc::new(crate::runs_temporal::engine(
                crate::runs_temporal::temporal_host(inputs.settings),
                Arc::clone(&runs),
                Arc::clone(&inputs.approvals),
                Arc::clone(&inputs.clock),
                metaforge_app::runs::Publish {
                    bus: Arc::clone(&bus),
                    ids: Arc::clone(&inputs.ids),
                },
            ));
            temporal = Some(Arc::clone(&engine));
            // A phase worker's twin writes (in the worker process) and a client's (through the
            // gateway's sidecar) are scoped by the run's phase in flight, asked of the workflow.
            inputs
                .run_scopes
                .set(Arc::new(metaforge_app::twin::EngineRunScopes::new(
                    Arc::clone(&engine) as Arc<dyn FlowEngine>,
                    Some(Arc::clone(&tasks)),
                )));
            (engine as Arc<dyn RunEngine>, None)
        }
        #[cfg(not(feature = "temporal"))]
        FlowEngineKind::Temporal => (
            Arc::new(metaforge_app::runs::UnavailableEngine::temporal_not_built(
                Arc::clone(&runs),
            )) as Arc<dyn RunEngine>,
            None,
        ),
        FlowEngineKind::InProcess => {
            return Err(StartError::config_text(format!(
                "{}=in_process names the test engine, which the binary does not run; use embedded",
                metaforge_app::runs::settings::FLOW_ENGINE_ENV
            )));
        }
    };
    let service = Arc::new(RunService::new(
        Arc::clone(&engine),
        service_ports,
        RunServiceSettings {
            default_intelligence,
            run: RunSettings {
                gate_timeout_seconds,
                ..RunSettings::default()
            },
        },
    ));
    let engine: Arc<dyn FlowEngine> = engine;
    Ok(ComposedRuns {
        service,
        engine,
        embedded,
        runs,
        tasks,
        twin,
        bus,
        default_intelligence,
        brains,
        #[cfg(feature = "temporal")]
        temporal,
        leadership,
        leases: lease_store,
    })
}

/// The event bus: in-process, or Kafka when `KAFKA_BOOTSTRAP_SERVERS` is set (an unreachable
/// broker falls back loudly to the in-process bus, as the seed's tier does).
async fn event_bus(bootstrap: Option<String>) -> Result<Arc<dyn EventBus>, StartError> {
    #[cfg(feature = "kafka")]
    {
        Ok(metaforge_adapters_store::start_event_bus(bootstrap.as_deref()).await)
    }
    #[cfg(not(feature = "kafka"))]
    match bootstrap {
        None => Ok(Arc::new(metaforge_adapters_store::InProcessEventBus::new())),
        Some(servers) => Err(StartError::config_text(format!(
            "{KAFKA_BOOTSTRAP_SERVERS_ENV}={servers}: this metaforge was built without Kafka; build it with \
             `cargo build --release -p metaforge-bins --features kafka` or unset the variable"
        ))),
    }
}
