//! `TemporalEngine`: the `FlowEngine` port over temporalio-client (FORGE-401/485).
//!
//! - **start**: a worker must poll `metaforge-design-flows` (DescribeTaskQueue, cached for
//!   [`TemporalSettings::poller_cache`]); none, or a server that cannot be reached, is
//!   `Unavailable` (HTTP 503) with the reason and nothing is recorded. The version is verified
//!   and the run's first transition computed by the domain reducer before anything is sent; the
//!   workflow (id = run id) starts, then the run record is created (`flow_engine: temporal`).
//! - **decide_gate / cancel**: the decision is checked with the same reducer against the state
//!   the workflow's `run_state` query answers, so a refusal comes back at once and changes
//!   nothing; an accepted one is signalled, and the answer is the state once the workflow
//!   applied it.
//! - **state**: the query (the result of a closed workflow); the run record follows the state
//!   read (FORGE-485: the record is a cache of the workflow, never guessed). An engine that
//!   cannot be asked reads `live: false` with the reason.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use metaforge_domain::run::{FrozenFlow, apply, start};
use metaforge_ports::{
    Clock, DrivenRuns, FlowEngine, FlowEngineKind, GateAnswer, PortError, PortErrorKind, RunEvent, RunLedger,
    RunState, RunTransition, RunView, StartRun, WorkerHealth,
};
use temporalio_client::{
    Client, WorkflowGetResultOptions, WorkflowQueryOptions, WorkflowSignalOptions, WorkflowStartOptions,
    errors::WorkflowQueryError,
};
use temporalio_common::protos::temporal::api::enums::v1::{TaskQueueKind, TaskQueueType};
use temporalio_common::protos::temporal::api::taskqueue::v1::TaskQueue;
use temporalio_common::protos::temporal::api::workflowservice::v1::DescribeTaskQueueRequest;

use crate::workflow::{DesignFlowInput, DesignFlowSnapshot, DesignFlowWorkflow, RunSignal};
use crate::{NAMESPACE, TASK_QUEUE};

/// Where the engine finds Temporal and how it paces its checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemporalSettings {
    /// `host:port` of the frontend (`TEMPORAL_HOST`).
    pub host: String,
    /// How long a poller check is trusted (the seed: "cached a few seconds").
    pub poller_cache: Duration,
    /// How long one call to the server may take before the engine reports it unreachable.
    pub call_timeout: Duration,
    /// How long a decision or cancel waits for the workflow to apply it.
    pub apply_wait: Duration,
}

impl TemporalSettings {
    /// Settings for `host` with the default timings.
    pub fn new(host: impl Into<String>) -> Self {
        Self {
            host: host.into(),
            poller_cache: Duration::from_secs(3),
            call_timeout: Duration::from_secs(5),
            apply_wait: Duration::from_secs(15),
        }
    }
}

/// The Temporal flow engine.
pub struct TemporalEngine {
    settings: TemporalSettings,
    runs: Arc<dyn RunLedger>,
    clock: Arc<dyn Clock>,
    client: tokio::sync::Mutex<Option<Client>>,
    presence: Mutex<Option<(Instant, WorkerHealth)>>,
}

impl std::fmt::Debug for TemporalEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemporalEngine")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn unavailable(reason: impl Into<String>) -> PortError {
    PortError::new(PortErrorKind::Unavailable, reason.into())
}

impl TemporalEngine {
    /// An engine talking to `settings.host`, recording runs in `runs`. Nothing is dialled until
    /// the first call, so a server that is down does not stop the gateway from serving.
    pub fn new(settings: TemporalSettings, runs: Arc<dyn RunLedger>, clock: Arc<dyn Clock>) -> Self {
        Self {
            settings,
            runs,
            clock,
            client: tokio::sync::Mutex::new(None),
            presence: Mutex::new(None),
        }
    }

    /// The engine's settings.
    pub fn settings(&self) -> &TemporalSettings {
        &self.settings
    }

    async fn client(&self) -> Result<Client, PortError> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let client = tokio::time::timeout(
            self.settings.call_timeout,
            crate::worker::connect(&self.settings.host),
        )
        .await
        .map_err(|_| {
            unavailable(format!(
                "the Temporal server at {} did not answer within {:?}",
                self.settings.host, self.settings.call_timeout
            ))
        })?
        .map_err(|e| unavailable(e.to_string()))?;
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Whether a worker polls the queue now (cached for [`TemporalSettings::poller_cache`]).
    pub async fn worker_presence(&self) -> WorkerHealth {
        if let Ok(cache) = self.presence.lock()
            && let Some((at, presence)) = cache.as_ref()
            && at.elapsed() < self.settings.poller_cache
        {
            return presence.clone();
        }
        let presence = self.ask_pollers().await;
        if let Ok(mut cache) = self.presence.lock() {
            *cache = Some((Instant::now(), presence.clone()));
        }
        presence
    }

    async fn ask_pollers(&self) -> WorkerHealth {
        let client = match self.client().await {
            Ok(client) => client,
            Err(e) => {
                return WorkerHealth::Unknown {
                    reason: format!("the Temporal engine cannot be reached: {e}"),
                };
            }
        };
        let mut missing = Vec::new();
        for (kind, name) in [
            (TaskQueueType::Workflow, "workflow"),
            (TaskQueueType::Activity, "activity"),
        ] {
            let request = DescribeTaskQueueRequest {
                namespace: NAMESPACE.to_owned(),
                task_queue: Some(TaskQueue {
                    name: TASK_QUEUE.to_owned(),
                    kind: TaskQueueKind::Normal as i32,
                    normal_name: String::new(),
                }),
                task_queue_type: kind as i32,
                ..Default::default()
            };
            let mut service = client.connection().workflow_service();
            let answer = tokio::time::timeout(
                self.settings.call_timeout,
                service.describe_task_queue(temporalio_client::tonic::Request::new(request)),
            )
            .await;
            match answer {
                Ok(Ok(response)) => {
                    if response.into_inner().pollers.is_empty() {
                        missing.push(name);
                    }
                }
                Ok(Err(status)) => {
                    return WorkerHealth::Unknown {
                        reason: format!(
                            "the Temporal server at {} could not describe task queue {TASK_QUEUE}: {}",
                            self.settings.host,
                            status.message()
                        ),
                    };
                }
                Err(_) => {
                    return WorkerHealth::Unknown {
                        reason: format!(
                            "the Temporal server at {} did not answer DescribeTaskQueue within {:?}",
                            self.settings.host, self.settings.call_timeout
                        ),
                    };
                }
            }
        }
        if missing.is_empty() {
            WorkerHealth::Ok
        } else {
            WorkerHealth::Absent {
                reason: format!(
                    "no design-flow worker polls task queue {TASK_QUEUE} on {} ({} tasks have no poller): start `metaforge worker`",
                    self.settings.host,
                    missing.join(" and ")
                ),
            }
        }
    }

    async fn snapshot(&self, run_id: &str) -> Result<DesignFlowSnapshot, PortError> {
        let client = self.client().await?;
        let handle = client.get_workflow_handle::<DesignFlowWorkflow>(run_id);
        let asked = tokio::time::timeout(
            self.settings.call_timeout,
            handle.query(DesignFlowWorkflow::run_state, (), WorkflowQueryOptions::default()),
        )
        .await
        .map_err(|_| {
            unavailable(format!(
                "the run_state query of run {run_id} got no answer within {:?} (is a worker running?)",
                self.settings.call_timeout
            ))
        })?;
        match asked {
            Ok(snapshot) => Ok(snapshot),
            Err(WorkflowQueryError::NotFound(_)) => Err(PortError::new(
                PortErrorKind::NotFound,
                format!("run {run_id} has no workflow on {}", self.settings.host),
            )),
            Err(e) => Err(unavailable(format!(
                "the run_state query of run {run_id} failed: {e}"
            ))),
        }
    }

    /// The W3C `traceparent` of the request that started the run, from its workflow; `None`
    /// when none was recorded or the workflow does not answer now.
    pub async fn traceparent(&self, run_id: &str) -> Option<String> {
        self.snapshot(run_id).await.ok().and_then(|s| s.traceparent)
    }

    async fn final_state(&self, run_id: &str) -> Result<RunState, PortError> {
        let client = self.client().await?;
        let handle = client.get_workflow_handle::<DesignFlowWorkflow>(run_id);
        tokio::time::timeout(
            self.settings.call_timeout,
            handle.get_result(WorkflowGetResultOptions::default()),
        )
        .await
        .map_err(|_| unavailable(format!("run {run_id}'s workflow has not closed")))?
        .map_err(|e| {
            unavailable(format!(
                "the result of run {run_id}'s workflow could not be read: {e}"
            ))
        })
    }

    /// The live state: the query, or the result of a closed workflow.
    async fn live_state(&self, run_id: &str) -> Result<RunState, PortError> {
        match self.snapshot(run_id).await {
            Ok(DesignFlowSnapshot {
                state: Some(state), ..
            }) => Ok(state),
            Ok(DesignFlowSnapshot { state: None, .. }) => Err(unavailable(format!(
                "run {run_id}'s workflow has not run its first task yet"
            ))),
            Err(e) if e.kind == PortErrorKind::NotFound => Err(e),
            Err(query) => self.final_state(run_id).await.map_err(|_| query),
        }
    }

    /// The run's transitions after number `after` (at most a page; ask again from the last
    /// one), as its workflow made them: what the run's watchers are told (the notices are built
    /// from them by the same rule as on the embedded engine).
    pub async fn transitions_after(&self, run_id: &str, after: u64) -> Result<Vec<RunTransition>, PortError> {
        let client = self.client().await?;
        let handle = client.get_workflow_handle::<DesignFlowWorkflow>(run_id);
        let asked = tokio::time::timeout(
            self.settings.call_timeout,
            handle.query(
                DesignFlowWorkflow::run_transitions,
                after,
                WorkflowQueryOptions::default(),
            ),
        )
        .await
        .map_err(|_| {
            unavailable(format!(
                "the run_transitions query of run {run_id} got no answer within {:?} (is a worker running?)",
                self.settings.call_timeout
            ))
        })?;
        match asked {
            Ok(transitions) => Ok(transitions),
            Err(WorkflowQueryError::NotFound(_)) => Err(PortError::new(
                PortErrorKind::NotFound,
                format!("run {run_id} has no workflow on {}", self.settings.host),
            )),
            Err(e) => Err(unavailable(format!(
                "the run_transitions query of run {run_id} failed: {e}"
            ))),
        }
    }

    /// Waits (at most `within`) until run `run_id`'s workflow closes and returns its final
    /// state, the run record brought in line with it: what a caller that started a run and has
    /// nothing else to do (a script, a benchmark) waits on, instead of polling flow-state.
    pub async fn wait_closed(&self, run_id: &str, within: Duration) -> Result<RunState, PortError> {
        let client = self.client().await?;
        let handle = client.get_workflow_handle::<DesignFlowWorkflow>(run_id);
        let state = tokio::time::timeout(within, handle.get_result(WorkflowGetResultOptions::default()))
            .await
            .map_err(|_| unavailable(format!("run {run_id}'s workflow did not close within {within:?}")))?
            .map_err(|e| {
                unavailable(format!(
                    "the result of run {run_id}'s workflow could not be read: {e}"
                ))
            })?;
        self.reconcile(&state).await;
        Ok(state)
    }

    /// The record follows the workflow's state (FORGE-485): its status is set to the state's
    /// when they differ (never guessed: `state` is what the workflow answered).
    pub async fn reconcile(&self, state: &RunState) {
        let Ok(record) = self.runs.get(&state.run_id).await else {
            return;
        };
        if record.status == state.status {
            return;
        }
        if let Err(e) = self
            .runs
            .set_status(&state.run_id, state.status, state.error.clone(), self.clock.now())
            .await
        {
            tracing::warn!(event = "run_record_reconcile_failed", run_id = %state.run_id, error = %e, "the run record could not follow its workflow");
        }
    }

    /// Checks `event` with the reducer against the workflow's state, signals it, and waits until
    /// the workflow applied it.
    async fn send(&self, run_id: &str, event: RunEvent, signal: RunSignal) -> Result<RunState, PortError> {
        self.runs.get(run_id).await?;
        let snapshot = self.snapshot(run_id).await?;
        let state = snapshot
            .state
            .ok_or_else(|| unavailable(format!("run {run_id}'s workflow has not run its first task yet")))?;
        let flow = FrozenFlow::from_frozen(&snapshot.version_id, &snapshot.content_hash, &snapshot.frozen)
            .map_err(PortError::from)?;
        let expected = apply(&flow, &state, &event).map_err(PortError::from)?;
        let client = self.client().await?;
        let handle = client.get_workflow_handle::<DesignFlowWorkflow>(run_id);
        let sent = match signal {
            RunSignal::Decide { answer } => {
                handle
                    .signal(
                        DesignFlowWorkflow::decide_gate,
                        answer,
                        WorkflowSignalOptions::default(),
                    )
                    .await
            }
            other @ (RunSignal::Cancel { .. } | RunSignal::ChangeFlow { .. }) => {
                handle
                    .signal(
                        DesignFlowWorkflow::message,
                        other,
                        WorkflowSignalOptions::default(),
                    )
                    .await
            }
        };
        sent.map_err(|e| unavailable(format!("run {run_id}'s workflow could not be signalled: {e}")))?;
        let waited = Instant::now();
        loop {
            if let Ok(now) = self.live_state(run_id).await
                && (now.decisions.len() > state.decisions.len()
                    || now.status != state.status
                    || now.flow != state.flow)
            {
                self.reconcile(&now).await;
                return Ok(now);
            }
            if waited.elapsed() > self.settings.apply_wait {
                tracing::warn!(
                    event = "run_signal_not_yet_applied",
                    run_id,
                    "the workflow has not applied the signal yet; answering with the reducer's transition"
                );
                return Ok(expected.state);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[async_trait]
impl FlowEngine for TemporalEngine {
    fn kind(&self) -> FlowEngineKind {
        FlowEngineKind::Temporal
    }

    async fn start(&self, request: StartRun) -> Result<RunState, PortError> {
        match self.worker_presence().await {
            WorkerHealth::Ok => {}
            WorkerHealth::Absent { reason } | WorkerHealth::Unknown { reason } => {
                return Err(unavailable(reason));
            }
        }
        // Approved, hash-verified and reproducible, or refused before anything is sent.
        let flow = FrozenFlow::from_version(&request.version).map_err(PortError::from)?;
        let now = self.clock.now();
        let started = start(&flow, &request.run_id, request.settings, now).map_err(PortError::from)?;
        let input = DesignFlowInput {
            run_id: request.run_id.clone(),
            project_id: request.project_id.clone(),
            intelligence: request.intelligence,
            version_id: request.version.id.clone(),
            content_hash: request.version.content_hash.clone(),
            frozen: request.version.frozen.clone(),
            settings: request.settings,
            state: None,
            transitions_before: 0,
        };
        let client = self.client().await?;
        tokio::time::timeout(
            self.settings.call_timeout,
            client.start_workflow(
                DesignFlowWorkflow::run,
                input,
                WorkflowStartOptions::new(TASK_QUEUE, request.run_id.clone())
                    .maybe_header(crate::trace_context::current_header())
                    .build(),
            ),
        )
        .await
        .map_err(|_| {
            unavailable(format!(
                "the Temporal server at {} did not start the workflow in time",
                self.settings.host
            ))
        })?
        .map_err(|e| {
            unavailable(format!(
                "the Temporal server at {} refused to start the run: {e}",
                self.settings.host
            ))
        })?;
        let record = request.record(FlowEngineKind::Temporal, started.state.status, now);
        if let Err(e) = self.runs.create(record).await {
            tracing::error!(event = "run_record_failed", run_id = %request.run_id, error = %e, "the run's workflow started but its record could not be written; canceling the workflow");
            let handle = client.get_workflow_handle::<DesignFlowWorkflow>(request.run_id.as_str());
            let _canceled = handle.cancel(Default::default()).await;
            return Err(e);
        }
        tracing::info!(event = "run_started", run_id = %request.run_id, engine = "temporal", task_queue = TASK_QUEUE, "the run's workflow started");
        Ok(started.state)
    }

    async fn decide_gate(&self, run_id: &str, answer: GateAnswer) -> Result<RunState, PortError> {
        let event = RunEvent::GateDecided {
            phase: answer.phase.clone(),
            decision: answer.decision.clone(),
            approver: answer.approver.clone(),
            surface: answer.surface,
            at: self.clock.now(),
        };
        self.send(run_id, event, RunSignal::Decide { answer }).await
    }

    async fn state(&self, run_id: &str) -> Result<RunView, PortError> {
        self.runs.get(run_id).await?;
        match self.live_state(run_id).await {
            Ok(state) => {
                self.reconcile(&state).await;
                Ok(RunView {
                    engine: FlowEngineKind::Temporal,
                    live: true,
                    reason: None,
                    state: Some(state),
                })
            }
            Err(e) => Ok(RunView {
                engine: FlowEngineKind::Temporal,
                live: false,
                reason: Some(e.to_string()),
                state: None,
            }),
        }
    }

    async fn cancel(&self, run_id: &str, by: &str, reason: Option<String>) -> Result<RunState, PortError> {
        let event = RunEvent::Canceled {
            by: by.to_owned(),
            reason: reason.clone(),
            at: self.clock.now(),
        };
        self.send(
            run_id,
            event,
            RunSignal::Cancel {
                by: by.to_owned(),
                reason,
            },
        )
        .await
    }
}

/// The services follow a Temporal run through these (`metaforge_app::runs::FollowedEngine`).
#[async_trait]
impl DrivenRuns for TemporalEngine {
    async fn transitions_after(&self, run_id: &str, after: u64) -> Result<Vec<RunTransition>, PortError> {
        TemporalEngine::transitions_after(self, run_id, after).await
    }

    async fn reconcile(&self, state: &RunState) {
        TemporalEngine::reconcile(self, state).await;
    }

    async fn traceparent(&self, run_id: &str) -> Option<String> {
        TemporalEngine::traceparent(self, run_id).await
    }

    async fn worker(&self) -> WorkerHealth {
        self.worker_presence().await
    }
}
