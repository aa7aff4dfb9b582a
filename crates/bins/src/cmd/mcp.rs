//! `metaforge mcp serve [--stdio | --http 127.0.0.1:PORT]`: the MCP sidecar external harnesses
//! (Claude Code, Codex, the Inspector) drive MetaForge through.
//!
//! stdio serves one session on stdin/stdout (the caller is `local`); HTTP serves streamable HTTP
//! on `/mcp` (callers are `remote`, or `service` with `METAFORGE_MCP_SERVICE_KEY`). Logs go to
//! stderr, never stdout, which belongs to the protocol on stdio.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use std::time::Duration;

use crate::settings::Settings;
use clap::{Args, Subcommand};
use metaforge_api::FlowBindings;
use metaforge_api::RunBindings;
use metaforge_app::approvals::ApprovalService;
use metaforge_app::unreachable_holds::UnreachableApproverLedger;
use metaforge_ports::{CallerGrants, Clock, ToolHost};
use metaforge_sidecar::{
    ClientTaskGrants, FlowStores, HeldWrites, HoldPolicy, SidecarCallerGrants, SidecarRuns,
    host_with_bindings, host_with_stores, with_runs,
};

use crate::system::{SystemClock, UuidV7Ids};

/// Selects remote mode (FORGE-406/462): held calls park in this gateway's ledger and the flow
/// tools call its routes.
const GATEWAY_URL_ENV: &str = "METAFORGE_GATEWAY_URL";

/// The gateway's API keys (`identity:key,...` or a bare key); the sidecar sends the first key.
pub(crate) const GATEWAY_API_KEY_ENV: &str = "METAFORGE_GATEWAY_API_KEY";

/// The owner's opt-in (FORGE-584): `on` lets an HTTP session holding a claimed client task (and
/// sending a stable `X-MetaForge-Session`) run as `client_task`, confirmed with the run service
/// before every call; `off` or unset keeps its writes held.
pub(crate) const CLIENT_TASK_WRITES_ENV: &str = "METAFORGE_CLIENT_TASK_WRITES";

/// Arguments of `metaforge mcp`.
#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// The mcp command.
    #[command(subcommand)]
    command: McpCommand,
}

/// The `mcp` subcommands.
#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Serve the MetaForge MCP sidecar (stdio by default).
    Serve {
        /// Serve one session on stdin/stdout.
        #[arg(long, conflicts_with = "http")]
        stdio: bool,
        /// Serve streamable HTTP on this loopback address, e.g. 127.0.0.1:8765 (path /mcp).
        #[arg(long, value_name = "ADDR")]
        http: Option<SocketAddr>,
        /// Wrong keys one client address may present per minute over HTTP before its further
        /// wrong keys are answered 429 (0 turns the throttle off; a valid key is always admitted).
        #[arg(long, env = "METAFORGE_GATEWAY_AUTH_FAILURES_PER_MINUTE", default_value_t = metaforge_gateway::auth::DEFAULT_AUTH_FAILURES_PER_MINUTE)]
        auth_failures_per_minute: u32,
    },
}

/// Runs `metaforge mcp …`.
pub(crate) fn run(args: McpArgs, settings: &Settings) -> ExitCode {
    let McpCommand::Serve {
        stdio: _,
        http,
        auth_failures_per_minute,
    } = args.command;
    let _traces = crate::system::init_logging(&settings.log, "mcp");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("metaforge mcp serve: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Refuse a non-loopback address before anything is opened or written.
    if let Some(addr) = http.filter(|a| !a.ip().is_loopback()) {
        eprintln!(
            "metaforge mcp serve: --http: {}",
            metaforge_adapters_mcp::ServeError::NotLoopback(addr)
        );
        return ExitCode::from(2);
    }
    let client_task_writes = settings.mcp.client_task_writes;
    let composed = match runtime.block_on(compose_host(settings)) {
        Ok(composed) => composed,
        Err(e @ ComposeError::Config(_)) => {
            eprintln!("metaforge mcp serve: {e}");
            return ExitCode::from(2);
        }
        Err(e @ ComposeError::Runtime(_)) => {
            eprintln!("metaforge mcp serve: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match http {
        None => {
            if client_task_writes {
                tracing::warn!(
                    event = "mcp_client_task_writes_unused",
                    "{CLIENT_TASK_WRITES_ENV}=on has no effect on stdio: the caller is local and sends no X-MetaForge-Session"
                );
            }
            runtime.block_on(metaforge_adapters_mcp::serve_stdio(composed.host))
        }
        Some(addr) => {
            let service_key = settings.mcp.service_key.clone();
            let client_keys = match client_keys(settings) {
                Ok(keys) => keys,
                Err(e) => {
                    eprintln!("metaforge mcp serve: {e}");
                    return ExitCode::from(2);
                }
            };
            let failures = std::num::NonZeroU32::new(auth_failures_per_minute).map(|n| {
                Arc::new(metaforge_gateway::auth::FailureThrottle::new(n))
                    as Arc<dyn metaforge_ports::auth_failures::AuthFailures>
            });
            runtime.block_on(serve_http(
                composed,
                addr,
                service_key,
                client_keys,
                failures,
                settings.http,
            ))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ metaforge_adapters_mcp::ServeError::NotLoopback(_)) => {
            eprintln!("metaforge mcp serve: --http: {e}");
            ExitCode::from(2)
        }
        Err(metaforge_adapters_mcp::ServeError::Io { addr, source })
            if source.kind() == std::io::ErrorKind::AddrInUse =>
        {
            eprintln!(
                "metaforge mcp serve: {}",
                crate::system::bind_failure(addr, "--http", None, &source)
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("metaforge mcp serve: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The seed's deny-by-default window for a held call (`chat_approval_timeout_seconds`).
pub(crate) const HOLD_TIMEOUT: Duration = Duration::from_secs(1800);
pub(crate) const HOLD_POLL: Duration = Duration::from_millis(500);

/// What the standalone sidecar serves: its host, and (remote mode) the caller grants its HTTP
/// transport confirms a service-key run and a client-task session with.
struct ComposedSidecar {
    host: Arc<dyn ToolHost>,
    grants: Option<Arc<dyn CallerGrants>>,
}

/// Why the sidecar could not be composed: configuration (exit 2) or a store (exit 1).
#[derive(Debug, thiserror::Error)]
enum ComposeError {
    /// Bad configuration: nothing was opened.
    #[error("{0}")]
    Config(anyhow::Error),
    /// A store could not be opened.
    #[error("{0}")]
    Runtime(anyhow::Error),
}

/// The sidecar's host: remote mode with `METAFORGE_GATEWAY_URL` set (the run tools call the
/// gateway), otherwise the in-process host over the SQLite approval ledger and flow-version
/// store under `METAFORGE_HOME` (the same files the gateway uses, so there is one ledger; no run
/// engine runs here, so no run tools). With the ledgers disabled the sidecar serves the reads
/// only and says so: nothing is written without a ledger.
async fn compose_host(settings: &Settings) -> Result<ComposedSidecar, ComposeError> {
    let client_task_writes = settings.mcp.client_task_writes;
    if let Some(url) = &settings.mcp.gateway_url {
        return compose_remote_host(url, &settings.api_keys, client_task_writes)
            .map_err(ComposeError::Config);
    }
    if client_task_writes {
        return Err(ComposeError::Config(anyhow::anyhow!(
            "{CLIENT_TASK_WRITES_ENV}=on needs {GATEWAY_URL_ENV}: a client task's claim is confirmed with the gateway's run service, and without one no claim can be"
        )));
    }
    tracing::warn!(
        event = "mcp_flow_bindings_in_process",
        "METAFORGE_GATEWAY_URL is unset: held calls and flow proposals use this process's own \
         ledgers under METAFORGE_HOME; correct only inside the gateway, wrong in a sidecar \
         (a person at the gateway will not see them unless it shares these files)"
    );
    let host = compose_local_host(settings)
        .await
        .map_err(ComposeError::Runtime)?;
    Ok(ComposedSidecar { host, grants: None })
}

/// The keys an HTTP client must present: with `METAFORGE_GATEWAY_API_KEY` set the sidecar is no
/// more open than the gateway (issue 12), so every key it lists (or the service key) is required,
/// each authenticating the identity the gateway gives it (recorded as a gate's approver).
pub(crate) fn client_keys(settings: &Settings) -> anyhow::Result<Vec<metaforge_adapters_mcp::ClientKey>> {
    let keys = metaforge_gateway::parse_api_keys(&settings.api_keys)?;
    Ok(keys
        .into_iter()
        .map(|k| metaforge_adapters_mcp::ClientKey::from((k.identity, k.key)))
        .collect())
}

/// The key part of the first `identity:key` (or bare `key`) entry.
pub(crate) fn first_api_key(raw: &str) -> Option<String> {
    let entry = raw.split(',').map(str::trim).find(|e| !e.is_empty())?;
    let key = entry.split_once(':').map_or(entry, |(_, key)| key).trim();
    (!key.is_empty()).then(|| key.to_owned())
}

/// Remote mode: one ledger, the gateway's. Held calls park and are polled over HTTP and the
/// flow and run tools call the gateway's routes; nothing is written under this process's home.
/// `raw_keys` is `METAFORGE_GATEWAY_API_KEY`: the first key is the sidecar's own, and each
/// `identity:key` entry lets a person authenticated here with that key answer a gate, or claim
/// a task, as themselves at the gateway.
fn compose_remote_host(
    url: &str,
    raw_keys: &str,
    client_task_writes: bool,
) -> anyhow::Result<ComposedSidecar> {
    let api_key = first_api_key(raw_keys);
    let identities: Vec<(String, String)> = metaforge_gateway::parse_api_keys(raw_keys)
        .map_err(|e| anyhow::anyhow!("{GATEWAY_API_KEY_ENV}: {e}"))?
        .into_iter()
        .map(|k| (k.identity, k.key))
        .collect();
    let client = metaforge_adapters_gateway::GatewayClient::new(url, api_key.clone())
        .map_err(|e| anyhow::anyhow!("{GATEWAY_URL_ENV}: {e}"))?;
    tracing::info!(
        event = "mcp_flow_bindings_remote",
        gateway = client.base_url(),
        api_key = api_key.is_some(),
        "held calls park in the gateway's approval ledger; flow tools call the gateway",
    );
    let ledger = Arc::new(metaforge_adapters_gateway::RemoteApprovalLedger::new(
        client.clone(),
    ));
    let bindings = Arc::new(metaforge_adapters_gateway::RemoteFlowBindings::new(
        client.clone(),
    ));
    let runs: Arc<dyn RunBindings> =
        Arc::new(metaforge_adapters_gateway::RemoteRunBindings::new(client).with_identity_keys(identities));
    let held = HeldWrites {
        approvals: Arc::new(ApprovalService::waiter(
            ledger,
            Arc::new(SystemClock),
            Arc::new(UuidV7Ids),
        )),
        policy: HoldPolicy {
            timeout: HOLD_TIMEOUT,
            poll: HOLD_POLL,
        },
    };
    let flows: Arc<dyn FlowBindings> = bindings.clone();
    let claims = Arc::new(ClientTaskGrants::new());
    let run_tools = SidecarRuns::new(Arc::clone(&runs), Arc::clone(&claims));
    tracing::info!(
        event = "mcp_run_bindings_remote",
        client_task_writes,
        "the run tools call the gateway's /v1/runs and /v1/client-tasks; callers' grants are confirmed with it before every call"
    );
    // No twin is composed here (the twin tools write a store, and in remote mode nothing is
    // written locally): a client-mode phase's deliverables cannot be recorded through this
    // sidecar until the gateway serves twin writes.
    tracing::warn!(
        event = "mcp_remote_twin_unavailable",
        "remote mode offers no twin.* tools: a client phase's deliverables are recorded through `metaforge up`'s sidecar"
    );
    Ok(ComposedSidecar {
        host: Arc::new(with_runs(host_with_bindings(bindings, held), &run_tools)),
        grants: Some(Arc::new(SidecarCallerGrants::new(
            runs,
            flows,
            claims,
            client_task_writes,
        ))),
    })
}

/// In-process mode over the SQLite ledgers under METAFORGE_HOME.
async fn compose_local_host(settings: &Settings) -> anyhow::Result<Arc<dyn ToolHost>> {
    let paths = settings.store()?;
    let (Some(approvals_path), Some(versions_path)) = (&paths.tool_approvals, &paths.flow_versions) else {
        tracing::warn!(
            event = "mcp_sidecar_ledgers_disabled",
            "approval ledger disabled: serving read-only flow tools; flow.propose is not offered"
        );
        return Ok(Arc::new(metaforge_sidecar::read_only_host()));
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let crate::ledgers::Ledgers {
        approvals, versions, ..
    } = crate::ledgers::open_ledgers(
        &settings.ledgers,
        approvals_path,
        versions_path,
        &clock,
        // No presence lease is kept here: a gateway orphans these holds once this pid is gone
        // from this host; on another host they wait for their deadlines.
        &crate::local_processes::this_process(&UuidV7Ids),
    )
    .await?;
    tracing::info!(
        event = "mcp_sidecar_ledgers",
        approvals = %settings.ledgers.describe(approvals_path),
        flow_versions = %settings.ledgers.describe(versions_path),
    );
    // No approver is known to reach this process (it is not the gateway): every hold it parks is
    // logged and counted so the ApprovalHoldWithNoApprover alert can say so.
    // The same twin the gateway opens (`METAFORGE_TWIN_URL`: the embedded file, or FalkorDB).
    let twin_store = settings.twin.open(&paths.twin).await?;
    let ids: Arc<dyn metaforge_ports::IdGen> = Arc::new(UuidV7Ids);
    // No run engine runs in a standalone sidecar: every twin write here goes to `main`.
    let twin = metaforge_sidecar::SidecarTwin::new(
        Arc::new(metaforge_app::twin::TwinService::new(
            twin_store,
            Arc::clone(&clock),
            Arc::clone(&ids),
        )),
        Arc::new(metaforge_app::twin::NoRunScopes),
    );
    let stores = FlowStores {
        approvals: Arc::new(UnreachableApproverLedger::new(approvals)),
        versions,
        clock,
        ids,
    };
    let host = host_with_stores(
        stores,
        HoldPolicy {
            timeout: HOLD_TIMEOUT,
            poll: HOLD_POLL,
        },
    );
    // The skill catalogue of this home, re-read when it changes for as long as the process runs.
    let (skills, _reload) = crate::skills::shelf(&paths.home, settings.skills_dirs.as_deref())?;
    Ok(Arc::new(metaforge_sidecar::with_twin(
        host.with_skills(skills),
        &twin,
    )))
}

async fn serve_http(
    composed: ComposedSidecar,
    addr: SocketAddr,
    service_key: Option<String>,
    client_keys: Vec<metaforge_adapters_mcp::ClientKey>,
    failures: Option<Arc<dyn metaforge_ports::auth_failures::AuthFailures>>,
    limits: metaforge_gateway::listen::Limits,
) -> Result<(), metaforge_adapters_mcp::ServeError> {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let keys_required = !client_keys.is_empty();
    let sidecar =
        metaforge_adapters_mcp::bind_http(composed.host, addr, service_key.clone(), shutdown.clone())
            .await?
            .require_keys(client_keys)
            .with_auth_failures(failures);
    let sidecar = match composed.grants {
        Some(grants) => sidecar.with_caller_grants(grants),
        None => sidecar,
    };
    // The sidecar's own counters (held-write resolutions, holds no approver can reach) are
    // scrapeable at /metrics on the same loopback listener.
    let sidecar = match metaforge_app::exposition::Exposition::install() {
        Ok(exposition) => sidecar.with_metrics(Arc::new(move || exposition.render())),
        Err(err) => {
            tracing::error!(event = "mcp_sidecar_metrics_unavailable", error = %err, "cannot install the metrics recorder; /metrics is not served");
            sidecar
        }
    };
    tracing::info!(
        event = "mcp_sidecar_listening",
        url = %format!("http://{}{}", sidecar.local_addr, metaforge_adapters_mcp::MCP_PATH),
        service_key = service_key.is_some(),
        keys_required,
    );
    let stop = shutdown.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stop.cancel();
        }
    });
    let (listener, router) = sidecar.into_parts();
    metaforge_gateway::listen::serve(listener, router, limits, async move {
        shutdown.cancelled_owned().await
    })
    .await
    .map_err(|source| metaforge_adapters_mcp::ServeError::Io {
        addr: addr.to_string(),
        source,
    })
}
