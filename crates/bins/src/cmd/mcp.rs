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

use clap::{Args, Subcommand};
use metaforge_adapters_store::{SqliteApprovalLedger, SqliteFlowVersionStore, StorePaths};
use metaforge_app::sidecar::{FlowStores, HoldPolicy, host_with_stores};
use metaforge_ports::{Clock, ToolHost};

use crate::system::{SystemClock, UuidV7Ids};

/// The env variable carrying the service key (FORGE-487); only this binary reads it.
const SERVICE_KEY_ENV: &str = "METAFORGE_MCP_SERVICE_KEY";

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
    },
}

/// Runs `metaforge mcp …`.
pub(crate) fn run(args: McpArgs) -> ExitCode {
    let McpCommand::Serve { stdio: _, http } = args.command;
    let _logging = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn")),
        )
        .try_init();
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
    let host = match runtime.block_on(compose_host()) {
        Ok(host) => host,
        Err(e) => {
            eprintln!("metaforge mcp serve: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match http {
        None => runtime.block_on(metaforge_adapters_mcp::serve_stdio(host)),
        Some(addr) => {
            let service_key = std::env::var(SERVICE_KEY_ENV).ok();
            runtime.block_on(serve_http(host, addr, service_key))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ metaforge_adapters_mcp::ServeError::NotLoopback(_)) => {
            eprintln!("metaforge mcp serve: --http: {e}");
            ExitCode::from(2)
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

/// The sidecar's host over the SQLite approval ledger and flow-version store under
/// `METAFORGE_HOME` (the same files the gateway uses, so there is one ledger). With the ledgers
/// disabled the sidecar serves the reads only and says so: nothing is written without a ledger.
async fn compose_host() -> Result<Arc<dyn ToolHost>, String> {
    let paths = StorePaths::resolve(
        |name| std::env::var(name).ok(),
        std::env::var_os("HOME").map(std::path::PathBuf::from),
    )
    .map_err(|e| e.to_string())?;
    let (Some(approvals_path), Some(versions_path)) = (&paths.tool_approvals, &paths.flow_versions) else {
        tracing::warn!(
            event = "mcp_sidecar_ledgers_disabled",
            "approval ledger disabled: serving read-only flow tools; flow.propose is not offered"
        );
        return Ok(Arc::new(metaforge_app::sidecar::read_only_host()));
    };
    for path in [approvals_path, versions_path] {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
    }
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let approvals = SqliteApprovalLedger::open(approvals_path, Arc::clone(&clock))
        .await
        .map_err(|e| format!("approval ledger {}: {e}", approvals_path.display()))?;
    let versions = SqliteFlowVersionStore::open(versions_path)
        .await
        .map_err(|e| format!("flow-version store {}: {e}", versions_path.display()))?;
    tracing::info!(
        event = "mcp_sidecar_ledgers",
        approvals = %approvals_path.display(),
        flow_versions = %versions_path.display(),
    );
    let stores = FlowStores {
        approvals: Arc::new(approvals),
        versions: Arc::new(versions),
        clock,
        ids: Arc::new(UuidV7Ids),
    };
    Ok(Arc::new(host_with_stores(
        stores,
        HoldPolicy {
            timeout: HOLD_TIMEOUT,
            poll: HOLD_POLL,
        },
    )))
}

async fn serve_http(
    host: Arc<dyn ToolHost>,
    addr: SocketAddr,
    service_key: Option<String>,
) -> Result<(), metaforge_adapters_mcp::ServeError> {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let sidecar =
        metaforge_adapters_mcp::bind_http(host, addr, service_key.clone(), shutdown.clone()).await?;
    tracing::info!(
        event = "mcp_sidecar_listening",
        url = %format!("http://{}{}", sidecar.local_addr, metaforge_adapters_mcp::MCP_PATH),
        service_key = service_key.is_some(),
    );
    let stop = shutdown.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stop.cancel();
        }
    });
    sidecar.run().await
}
