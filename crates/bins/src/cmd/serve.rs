//! `metaforge gateway` and `metaforge up`: the HTTP front door on embedded defaults (SQLite
//! ledgers under `METAFORGE_HOME`), and `up`'s MCP sidecar beside it, over what
//! [`crate::compose`] builds.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use metaforge_gateway as gateway;

use crate::compose::{
    Composition, GatewayArgs, StartContext, StartError, compose, compose_as, console_settings, flush_usage,
    run_serving,
};
use crate::settings::Settings;
use crate::system::{bind_failure, init_logging};

/// Options of `metaforge gateway`.
/// Waits for Ctrl-C or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { () = ctrl_c => {}, () = term => {} }
    tracing::info!(event = "shutdown_requested", "draining in-flight requests");
}

/// Runs `metaforge gateway`.
pub(crate) fn run(args: &GatewayArgs, settings: &Settings) -> ExitCode {
    let _traces = init_logging(&settings.log, "gateway");
    run_serving("gateway", serve(args, settings))
}

async fn serve(args: &GatewayArgs, settings: &Settings) -> Result<(), StartError> {
    let limits = settings.http;
    let composition = compose(args, settings).await?;
    composition.runs.follow_runs();
    let router = gateway::build_with_console(
        Arc::clone(&composition.state),
        Arc::clone(&composition.auth),
        args.body_limit_bytes,
        console_settings(args.bind),
    );
    let listener = tokio::net::TcpListener::bind(args.bind).await.map_err(|e| {
        StartError::runtime_text(bind_failure(
            args.bind,
            "--bind",
            Some("METAFORGE_GATEWAY_BIND"),
            &e,
        ))
    })?;
    let addr = listener.local_addr().map_err(StartError::runtime)?;
    crate::banner::announce(&format!(
        "metaforge gateway listening on http://{addr}  (OpenAPI: http://{addr}/openapi.json, console: http://{addr}/)"
    ));
    tracing::info!(event = "gateway_started", addr = %addr, keys_required = composition.auth.keys_required());
    let served = metaforge_gateway::listen::serve(listener, router, limits, shutdown_signal()).await;
    composition.runs.shutdown().await;
    composition.presence.stop().await;
    flush_usage(&composition).await;
    served.runtime_in("server error")
}

/// Options of `metaforge up`: the gateway's, plus where the MCP sidecar listens.
#[derive(Debug, clap::Args)]
pub(crate) struct UpArgs {
    /// The gateway's options.
    #[command(flatten)]
    pub(crate) gateway: GatewayArgs,
    /// Loopback address of the MCP sidecar (streamable HTTP on /mcp).
    #[arg(long, env = "METAFORGE_MCP_BIND", default_value = "127.0.0.1:8765")]
    pub(crate) mcp_bind: SocketAddr,
    /// The flow engine, over `METAFORGE_FLOW_ENGINE`: `temporal` (feature `temporal`) also
    /// runs a design-flow worker in this process and, with no `TEMPORAL_HOST` and nothing on
    /// 127.0.0.1:7233, a `temporal server start-dev` from PATH (history in METAFORGE_HOME).
    #[arg(long, value_name = "embedded|temporal", value_parser = ["embedded", "temporal"])]
    pub(crate) engine: Option<String>,
}

/// Runs `metaforge up`: the gateway and the HTTP MCP sidecar in one process, sharing one
/// approval ledger and one flow-version store (the in-process bindings are correct here, because
/// the sidecar runs inside the gateway).
pub(crate) fn run_up(args: &UpArgs, settings: &Settings) -> ExitCode {
    let _traces = init_logging(&settings.log, "up");
    run_serving("up", up(args, settings))
}

async fn up(args: &UpArgs, settings: &Settings) -> Result<(), StartError> {
    if !args.mcp_bind.ip().is_loopback() {
        return Err(StartError::config_text(format!(
            "--mcp-bind {}: the MCP sidecar listens on loopback only",
            args.mcp_bind
        )));
    }
    let limits = settings.http;
    // `--engine` over METAFORGE_FLOW_ENGINE: either way, Temporal brings its worker (and, if
    // needed, its dev server) up beside the gateway.
    let engine = match args.engine.as_deref() {
        Some(name) => metaforge_app::runs::parse_flow_engine(Some(name)).map_err(StartError::config)?,
        None => settings.runs.engine,
    };
    let temporal = engine == metaforge_ports::FlowEngineKind::Temporal;
    let engine = Some(engine);
    // Asked for by name in a build without it: refuse. (From the environment the gateway still
    // starts and answers every run start 503 naming the feature, as `gateway` does.)
    #[cfg(not(feature = "temporal"))]
    if args.engine.as_deref() == Some("temporal") {
        return Err(StartError::config_text(super::without_temporal(
            "--engine temporal",
        )));
    }
    let composition = compose_as(&args.gateway, settings, engine).await?;
    composition.runs.follow_runs();
    #[cfg(feature = "temporal")]
    let _dev_server = if temporal {
        crate::runs_temporal::ensure_server(&composition.home, settings.runs.temporal_host.as_deref())
            .await
            .map_err(StartError::config)?
    } else {
        None
    };
    let router = gateway::build_with_console(
        Arc::clone(&composition.state),
        Arc::clone(&composition.auth),
        args.gateway.body_limit_bytes,
        console_settings(args.gateway.bind),
    );
    let listener = tokio::net::TcpListener::bind(args.gateway.bind)
        .await
        .map_err(|e| {
            StartError::runtime_text(bind_failure(
                args.gateway.bind,
                "--bind",
                Some("METAFORGE_GATEWAY_BIND"),
                &e,
            ))
        })?;
    let gateway_addr = listener.local_addr().map_err(StartError::runtime)?;
    // The MCP sidecar serves the agent loop's native tools plus the run tools, in process.
    let host = Arc::clone(&composition.mcp.host);
    let cancel = tokio_util::sync::CancellationToken::new();
    let service_key = settings.mcp.service_key.clone().filter(|k| !k.trim().is_empty());
    let sidecar = metaforge_adapters_mcp::bind_http(host, args.mcp_bind, service_key, cancel.clone())
        .await
        .map_err(|e| {
            StartError::runtime_text(format!(
                "MCP sidecar: {}",
                bind_failure(args.mcp_bind, "--mcp-bind", Some("METAFORGE_MCP_BIND"), &e)
            ))
        })?
        .require_keys(crate::cmd::mcp::client_keys(settings).map_err(StartError::config)?)
        .with_auth_failures(composition.auth.auth_failures())
        .with_caller_grants(Arc::clone(&composition.mcp.grants));
    let mcp_url = format!(
        "http://{}{}",
        sidecar.local_addr,
        metaforge_adapters_mcp::MCP_PATH
    );
    crate::banner::announce(&format!(
        "metaforge gateway listening on http://{gateway_addr}  (OpenAPI: http://{gateway_addr}/openapi.json, console: http://{gateway_addr}/)"
    ));
    crate::banner::announce(&format!(
        "metaforge MCP sidecar listening on {mcp_url}  (in-process ledger, shared with the gateway)"
    ));
    tracing::info!(event = "metaforge_up", gateway = %gateway_addr, mcp = %mcp_url);
    let stop = cancel.clone();
    let shutdown = async move {
        tokio::select! {
            () = shutdown_signal() => {}
            () = stop.cancelled() => {}
        }
        stop.cancel();
    };
    let (sidecar_listener, sidecar_router) = sidecar.into_parts();
    let sidecar_stop = cancel.clone();
    let worker_stop = cancel.clone();
    let composed = &composition;
    let worker = async move {
        if !temporal {
            return Ok(());
        }
        worker_beside(composed, settings, worker_stop).await
    };
    let (gateway_result, sidecar_result, worker_result) = tokio::join!(
        metaforge_gateway::listen::serve(listener, router, limits, shutdown),
        async {
            let result =
                metaforge_gateway::listen::serve(sidecar_listener, sidecar_router, limits, async move {
                    sidecar_stop.cancelled_owned().await;
                })
                .await;
            cancel.cancel();
            result
        },
        worker
    );
    composition.runs.shutdown().await;
    composition.presence.stop().await;
    flush_usage(&composition).await;
    worker_result?;
    gateway_result.runtime_in("gateway")?;
    sidecar_result.runtime_in("MCP sidecar")
}

/// `up --engine temporal`'s design-flow worker, beside the gateway in this process with the
/// brains the gateway composed: polls until `stop`; if it fails, everything stops with its error.
#[cfg(feature = "temporal")]
async fn worker_beside(
    composition: &Composition,
    settings: &Settings,
    stop: tokio_util::sync::CancellationToken,
) -> Result<(), StartError> {
    let activities =
        crate::runs_temporal::activities(&composition.runs.brains, Arc::clone(&composition.runs.twin));
    let host = crate::runs_temporal::temporal_host(&settings.runs);
    crate::banner::announce(&format!(
        "metaforge worker polling {} on {host}  (beside the gateway)",
        metaforge_adapters_temporal::TASK_QUEUE
    ));
    tokio::select! {
        worked = metaforge_adapters_temporal::run_worker(&host, activities) => {
            stop.cancel();
            worked.runtime_in("design-flow worker")
        }
        () = stop.cancelled() => Ok(()),
    }
}

/// Without the feature `up` never runs a worker (`--engine temporal` was refused).
#[cfg(not(feature = "temporal"))]
async fn worker_beside(
    _composition: &Composition,
    _settings: &Settings,
    _stop: tokio_util::sync::CancellationToken,
) -> Result<(), StartError> {
    Ok(())
}
