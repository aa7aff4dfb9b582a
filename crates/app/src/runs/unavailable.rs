//! A flow engine that cannot run anything here, so a configured but missing engine is an error
//! rather than a silent fall-through to another (design: "never a silent fallback"). Starting,
//! answering or canceling a run is `Unavailable` (HTTP 503) with the reason; reading a run gives
//! its last state the run ledger holds with `live: false` and the reason (FORGE-396: an outage is
//! never shown as "pending").

use std::sync::Arc;

use async_trait::async_trait;
use metaforge_ports::{
    FlowEngine, FlowEngineKind, GateAnswer, PortError, PortErrorKind, RunLedger, RunState, RunView, StartRun,
};

use super::notices::{RunEvents, backlog_after};
use super::service::{RunEngine, RunNoticeStream, WorkerHealth};
use super::settings::FLOW_ENGINE_ENV;

/// A flow engine of `kind` that is not available in this process.
pub struct UnavailableEngine {
    kind: FlowEngineKind,
    reason: String,
    runs: Arc<dyn RunLedger>,
}

impl std::fmt::Debug for UnavailableEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnavailableEngine")
            .field("kind", &self.kind)
            .field("reason", &self.reason)
            .finish_non_exhaustive()
    }
}

impl UnavailableEngine {
    /// An engine of `kind` refusing every write with `reason`, reading runs from `runs`.
    pub fn new(kind: FlowEngineKind, reason: impl Into<String>, runs: Arc<dyn RunLedger>) -> Self {
        Self {
            kind,
            reason: reason.into(),
            runs,
        }
    }

    /// `METAFORGE_FLOW_ENGINE=temporal` in a build without the Temporal engine (issue 17): every
    /// run start is a 503 naming the variable; logged at error level when built (at start-up).
    pub fn temporal_not_built(runs: Arc<dyn RunLedger>) -> Self {
        let reason = format!(
            "{FLOW_ENGINE_ENV}=temporal selects the Temporal engine, which this build does not include (build metaforge with `--features temporal`); \
             set {FLOW_ENGINE_ENV}=embedded (or leave it unset) to run design flows on the embedded engine"
        );
        tracing::error!(event = "flow_engine_unavailable", engine = "temporal", reason = %reason, "design-flow runs cannot start");
        Self::new(FlowEngineKind::Temporal, reason, runs)
    }

    fn refused(&self) -> PortError {
        PortError::new(PortErrorKind::Unavailable, self.reason.clone())
    }
}

#[async_trait]
impl FlowEngine for UnavailableEngine {
    fn kind(&self) -> FlowEngineKind {
        self.kind
    }

    async fn start(&self, _request: StartRun) -> Result<RunState, PortError> {
        Err(self.refused())
    }

    async fn decide_gate(&self, _run_id: &str, _answer: GateAnswer) -> Result<RunState, PortError> {
        Err(self.refused())
    }

    async fn state(&self, run_id: &str) -> Result<RunView, PortError> {
        self.runs.get(run_id).await?;
        let state = self
            .runs
            .latest_transition(run_id)
            .await
            .ok()
            .flatten()
            .map(|t| t.state);
        Ok(RunView {
            engine: self.kind,
            live: false,
            reason: Some(self.reason.clone()),
            state,
        })
    }

    async fn cancel(&self, _run_id: &str, _by: &str, _reason: Option<String>) -> Result<RunState, PortError> {
        Err(self.refused())
    }
}

#[async_trait]
impl RunEngine for UnavailableEngine {
    /// The notices of the transitions the run ledger holds (after `after`), then the end: no
    /// engine here produces live ones.
    async fn notices(&self, run_id: &str, after: Option<(u64, u32)>) -> Result<RunNoticeStream, PortError> {
        use futures::StreamExt as _;
        self.runs.get(run_id).await?;
        let backlog = backlog_after(self.runs.as_ref(), run_id, after).await?;
        Ok(RunEvents::new(backlog, None, after).boxed())
    }

    async fn worker(&self) -> WorkerHealth {
        WorkerHealth::Absent {
            reason: self.reason.clone(),
        }
    }
}
