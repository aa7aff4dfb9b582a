//! Start-up of the tool servers the agent loop calls: the servers file, one MCP client per
//! server, and the central registry over them and the native tools.
//!
//! The file is `METAFORGE_MCP_SERVERS_PATH`, else `$METAFORGE_HOME/mcp_servers.json`, in the
//! `mcpServers` shape Claude Desktop and Claude Code use (`metaforge_adapters_mcp::config`). A
//! missing file at the default place means no servers; a missing file at an explicitly set path,
//! or a bad file, refuses start naming the variable, the path and the field. Every enabled
//! server is started and listed concurrently (each within twice its connect timeout); one
//! that fails is logged at ERROR (`mcp_server_unavailable`, with server and reason), reported
//! `unavailable` in `/health`, and skipped — never silently. A refresh every
//! [`REFRESH_EVERY`] retries servers that never listed and picks up changed tool lists, and a
//! server whose session opens late (a slow first `npx` start outlasting the handshake timeout)
//! or whose list changed is re-listed at once, so `/health` and chat turns follow it. A stdio
//! server starts with a cleared environment (`metaforge_adapters_mcp::StdioLaunch`): `PATH`,
//! the locale, a directory of its own under `$METAFORGE_HOME/tool-servers/`, and its entry's
//! `env` — no provider key, service key or other secret of this process.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use metaforge_adapters_mcp::{
    ConfigError, DeclaredToolClass, McpToolServer, ServerConfig, ServerTransport, StdioLaunch,
    load_servers_file,
};
use metaforge_agent::ToolPolicy;
use metaforge_app::flow_generator::ProposalGenerator;
use metaforge_app::tools::{DomainScope, RegistryError, ServerStatus, ServerStatuses, ToolRegistry};
use metaforge_domain::tool_gating::Annotation;
use metaforge_ports::approval_ledger::ApprovalLedger;
use metaforge_ports::flow_version_store::FlowVersionStore;
use metaforge_ports::{Clock, IdGen, ToolHost};
use metaforge_sidecar::{FlowStores, HoldPolicy, InProcessFlowBindings};

use crate::cmd::mcp::{HOLD_POLL, HOLD_TIMEOUT};
use crate::settings::Environment;

/// The directory under the home holding one directory per stdio tool server (its `HOME`,
/// `TMPDIR` and working directory).
const TOOL_SERVER_HOMES: &str = "tool-servers";

/// Where the servers file is, when not at its default place.
pub(crate) const SERVERS_PATH_ENV: &str = "METAFORGE_MCP_SERVERS_PATH";

/// The servers file's name under `METAFORGE_HOME`.
pub(crate) const SERVERS_FILE: &str = "mcp_servers.json";

/// How often the registry re-lists its servers (a server that never listed is retried; a
/// changed list replaces the old one).
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(60);

/// Why the tool servers could not be composed; start is refused, naming the place.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ToolServersError {
    /// `METAFORGE_MCP_SERVERS_PATH` names a file that does not exist.
    #[error(
        "{SERVERS_PATH_ENV}={}: no such file (point it at a servers file, or unset it to read $METAFORGE_HOME/{SERVERS_FILE} when present)",
        path.display()
    )]
    MissingExplicit {
        /// The path the variable names.
        path: PathBuf,
    },
    /// The file could not be read or was refused (names the path and the field or `line:col`).
    #[error("MCP servers file {0}")]
    File(#[source] ConfigError),
    /// A skill directory could not be read.
    #[error("skills: {0}")]
    Skills(#[from] metaforge_ports::PortError),
    /// The registry refused the configuration.
    #[error("MCP servers file {}: {source}", path.display())]
    Registry {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: RegistryError,
    },
}

/// Aborts the background refresh when the composition is dropped.
#[derive(Debug)]
struct RefreshTask(tokio::task::JoinHandle<()>);

impl Drop for RefreshTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The composed tools: the registry the agent loop reads (`metaforge_agent::ToolBoxes`) and
/// the per-server states `/health` reports.
#[derive(Debug)]
pub(crate) struct ComposedTools {
    /// The central registry: natives, `search_tools` and every connected server's tools.
    pub(crate) registry: Arc<ToolRegistry>,
    /// Each configured server's state (the same object the registry updates after each call).
    pub(crate) statuses: Arc<ServerStatuses>,
    /// The servers file read, `None` when there was none at the default place.
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "chat threads (issue 15 item 6) read it; the tests do now"
        )
    )]
    pub(crate) servers_file: Option<PathBuf>,
    _refresh: Option<RefreshTask>,
    /// The skill catalogue the registry discloses (the MCP sidecar of `up` serves the same).
    pub(crate) skills: Arc<metaforge_app::skills::SkillShelf>,
    _skills_reload: RefreshTask,
}

/// The native tools the agent loop offers: the MCP sidecar's host ([`natives_host`]: `flow.list`,
/// `flow.validate`, `flow.propose` with the server's generator, `flow.version`,
/// `approvals.list`) with the gates and holds its tools declare.
pub(crate) fn sidecar_natives(host: metaforge_sidecar::SidecarHost) -> Natives {
    Natives {
        gates: host.declared_gates(),
        holds: host.declared_holds(),
        host: Arc::new(host),
        evidence: None,
    }
}

/// The host `metaforge up`'s MCP sidecar serves: the same natives as the agent loop's, plus the
/// run tools over `runs` (`flow.start_run`, `flow.status`, `flow.await_gate`, `run.*`, `phase.*`,
/// the run resource and the `metaforge:flow` prompt), and the skill catalogue over the Skills
/// extension. The agent loop is not offered the run
/// tools: a run is started, followed and its gates answered from a person's MCP client.
pub(crate) fn sidecar_mcp_host(
    natives: metaforge_sidecar::SidecarHost,
    runs: &metaforge_sidecar::SidecarRuns,
    skills: Arc<metaforge_app::skills::SkillShelf>,
) -> Arc<dyn ToolHost> {
    Arc::new(metaforge_sidecar::with_runs(natives.with_skills(skills), runs))
}

/// The native host over the one approval ledger and flow-version store (and the twin, when
/// this process composes one): what the agent loop and the MCP sidecar both start from.
pub(crate) fn natives_host(
    approvals: &Arc<dyn ApprovalLedger>,
    versions: &Arc<dyn FlowVersionStore>,
    clock: &Arc<dyn Clock>,
    ids: &Arc<dyn IdGen>,
    generator: Arc<dyn ProposalGenerator>,
    twin: Option<metaforge_sidecar::SidecarTwin>,
) -> metaforge_sidecar::SidecarHost {
    let stores = FlowStores {
        approvals: Arc::clone(approvals),
        versions: Arc::clone(versions),
        clock: Arc::clone(clock),
        ids: Arc::clone(ids),
    };
    // flow.propose without operations runs the gateway's own generator: one pipeline, one
    // routing table, one ledger, whichever door the proposal came through.
    metaforge_sidecar::host_in_process_with_twin(
        InProcessFlowBindings::new(stores).with_generator(generator),
        HoldPolicy {
            timeout: HOLD_TIMEOUT,
            poll: HOLD_POLL,
        },
        twin,
    )
}

/// The sidecar's host and the static gates its tools declare (the twin writes' `twin_write`),
/// which the agent loop's gating and grounding must know.
pub(crate) struct Natives {
    /// The host.
    pub(crate) host: Arc<dyn ToolHost>,
    /// Tool id → the gates it declares.
    pub(crate) gates: std::collections::BTreeMap<String, Vec<String>>,
    /// The ask-tier tools: the agent loop holds them itself (and says so on the turn's stream),
    /// then passes the approved hold to the host, which runs the call without a second hold.
    pub(crate) holds: std::collections::BTreeSet<String>,
    /// Records a run phase's tool evidence in the twin (a composition with a twin sets it).
    pub(crate) evidence: Option<Arc<metaforge_app::twin::EvidenceRecorder>>,
}

/// Reads the servers file (`METAFORGE_MCP_SERVERS_PATH`, else `home/mcp_servers.json`), starts
/// and lists every enabled server concurrently, and builds the registry over them and `natives`.
/// A stdio server starts with the few variables of `inherited` every server may see and a
/// directory of its own under `home/tool-servers/` (never this process's environment).
pub(crate) async fn compose_tools(
    home: &Path,
    explicit: Option<&Path>,
    engineering: bool,
    skills_dirs: Option<&str>,
    natives: &Natives,
    inherited: &Environment,
) -> Result<ComposedTools, ToolServersError> {
    let (servers_file, mut servers) = read_servers(explicit.map(Path::to_path_buf), home)?;
    if engineering {
        servers.extend(engineering_servers(&servers, inherited.get("PATH").as_deref()));
    }
    let launch = Arc::new(StdioLaunch::new(inherited.pairs(), home.join(TOOL_SERVER_HOMES)));
    let mut scope = DomainScope::seed();
    let mut policy = ToolPolicy {
        required_gates: natives.gates.clone(),
        requires_approval: natives.holds.clone(),
        host_enforced: natives.holds.clone(),
        classified: Vec::new(),
    };
    let (shelf, skills_reload) = crate::skills::shelf(home, skills_dirs)?;
    // One signal for every server: a session that opens (or a list that changed) re-lists at
    // once, so `/health` and chat turns see a late server as soon as it answers (issue 38 item 14).
    let changed = Arc::new(tokio::sync::Notify::new());
    let mut builder = ToolRegistry::builder()
        .natives(Arc::clone(&natives.host))
        .skills(Arc::clone(&shelf));
    if let Some(recorder) = &natives.evidence {
        builder = builder.evidence(Arc::clone(recorder));
    }
    let mut sandboxes = Vec::new();
    for config in servers {
        if !config.disabled && matches!(config.transport, ServerTransport::Stdio { .. }) {
            sandboxes.push((config.name.clone(), config.sandbox.as_str()));
        }
        scope.add_server(&config.name, config.core, &config.domains);
        for tools in &config.requires_approval {
            policy
                .requires_approval
                .insert(format!("{}.{tools}", config.name));
        }
        for (class, tools) in &config.classify {
            let class = match class {
                DeclaredToolClass::ReadOnly => Annotation::ReadOnly,
                DeclaredToolClass::Producing => Annotation::Producing,
                DeclaredToolClass::Destructive => Annotation::Destructive,
            };
            policy
                .classified
                .push((format!("{}.{tools}", config.name), class));
        }
        if config.disabled {
            builder = builder.disabled_server(config.name);
            continue;
        }
        // Start-up waits at most twice the connect timeout per server (the handshake, then
        // tools/list), so one hanging server cannot hold the gateway's start for a call timeout.
        let list_within = config.connect_timeout * 2;
        builder = builder.server(
            Arc::new(
                McpToolServer::new(config, Arc::clone(&launch)).with_change_signal(Arc::clone(&changed)),
            ),
            list_within,
        );
    }
    let registry = builder
        .scope(scope)
        .policy(policy)
        .build()
        .await
        .map_err(|source| ToolServersError::Registry {
            path: servers_file.clone().unwrap_or_default(),
            source,
        })?;
    let registry = Arc::new(registry);
    let statuses = registry.statuses();
    for (server, sandbox) in sandboxes {
        statuses.set_sandbox(&server, sandbox);
    }
    let states = statuses.snapshot();
    let count = |wanted: &str| states.values().filter(|s| s.as_str() == wanted).count();
    tracing::info!(
        event = "mcp_servers_composed",
        file = %servers_file.as_deref().map_or_else(|| "(none)".to_owned(), |p| p.display().to_string()),
        configured = states.len(),
        ok = count("ok"),
        unavailable = count("unavailable"),
        disabled = count("disabled"),
        tools = states
            .values()
            .map(|s| match s {
                ServerStatus::Ok { tools } => *tools,
                ServerStatus::Unavailable { .. } | ServerStatus::Disabled => 0,
            })
            .sum::<usize>(),
        "MCP tool servers composed"
    );
    let refresh = (!states.is_empty()).then(|| {
        let registry = Arc::clone(&registry);
        RefreshTask(tokio::spawn(async move {
            let mut every = tokio::time::interval(REFRESH_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    () = changed.notified() => {}
                }
                registry.refresh().await;
            }
        }))
    });
    Ok(ComposedTools {
        registry,
        statuses,
        servers_file,
        _refresh: refresh,
        skills: shelf,
        _skills_reload: RefreshTask(skills_reload),
    })
}

/// The servers configured, and the file they came from (`None`: no file at the default place).
/// MetaForge's own engineering tool servers (`metaforge tool-server <name>`), with the programs
/// each runs and the disciplines it serves.
const ENGINEERING_SERVERS: &[(&str, &[&str], &[&str])] = &[
    ("spice", &["ngspice"], &["electronics", "simulation"]),
    ("fea", &["gmsh", "ccx"], &["mechanical", "simulation"]),
];

/// The engineering tool servers to offer beside the servers file's: each whose programs and
/// `bwrap` are on `path` and whose name no entry of the file takes (an entry of that name, even
/// a disabled one, replaces it). Each runs this binary in its sandbox.
fn engineering_servers(configured: &[ServerConfig], path: Option<&str>) -> Vec<ServerConfig> {
    let on_path = |program: &str| {
        std::env::split_paths(path.unwrap_or("/usr/bin:/bin")).any(|dir| dir.join(program).is_file())
    };
    let Ok(binary) = std::env::current_exe() else {
        tracing::warn!(
            event = "engineering_tool_servers_unavailable",
            "cannot find this binary's path: the engineering tool servers are not offered"
        );
        return Vec::new();
    };
    if !on_path("bwrap") {
        tracing::info!(
            event = "engineering_tool_servers_unavailable",
            "bwrap is not on PATH: the engineering tool servers are not offered (apt-get install bubblewrap)"
        );
        return Vec::new();
    }
    ENGINEERING_SERVERS
        .iter()
        .filter(|(name, _, _)| !configured.iter().any(|c| c.name == *name))
        .filter(|(name, programs, _)| {
            let installed = programs.iter().all(|p| on_path(p));
            if !installed {
                tracing::info!(event = "engineering_tool_server_skipped", server = name, programs = ?programs, "its programs are not on PATH");
            }
            installed
        })
        .map(|(name, _, domains)| {
            let mut config = ServerConfig::new(
                *name,
                ServerTransport::Stdio {
                    command: binary.display().to_string(),
                    args: vec!["tool-server".to_owned(), (*name).to_owned()],
                    env: Default::default(),
                },
            );
            config.domains = domains.iter().map(|d| (*d).to_owned()).collect();
            config.call_timeout = std::time::Duration::from_secs(600);
            config
        })
        .collect()
}

pub(crate) fn read_servers(
    explicit: Option<PathBuf>,
    home: &Path,
) -> Result<(Option<PathBuf>, Vec<ServerConfig>), ToolServersError> {
    let (path, is_explicit) = match explicit {
        Some(path) => (path, true),
        None => (home.join(SERVERS_FILE), false),
    };
    match load_servers_file(&path) {
        Ok(servers) => Ok((Some(path), servers)),
        Err(e) if e.is_missing_file() && is_explicit => Err(ToolServersError::MissingExplicit { path }),
        Err(e) if e.is_missing_file() => {
            tracing::info!(
                event = "mcp_servers_file_absent",
                path = %path.display(),
                "no MCP servers file: the agent loop offers the native tools only"
            );
            Ok((None, Vec::new()))
        }
        Err(e) => Err(ToolServersError::File(e)),
    }
}

#[cfg(test)]
mod tests;
