//! [`RunBindings`] in process (issue 16 item 7): the port the gateway's HTTP client implements
//! (`metaforge_adapters_gateway::RemoteRunBindings`), over the same [`RunService`] the gateway's
//! `/v1/runs` and `/v1/client-tasks` routes call. The sidecar's run tools go through this port in
//! both deployment modes, so there is one code path and one answer shape, refusals included.
//!
//! The service answers with the run views of `metaforge_api::run_views`, the very types a remote
//! sidecar decodes from the gateway, so the values are handed over as they are: no serialisation
//! round trip, and no copy that could drop a field.

use std::sync::{Arc, OnceLock};

use metaforge_api::{
    ClientTaskView, FlowStateView, GateDecisionBody, RefusalKind, RunBindings, RunDetail, RunQuery,
    RunRefused, RunReply, RunSummary, StartRunBody, TaskSubmission,
};
use metaforge_app::runs::{ClientTaskSubmission, RunFilter, RunService, RunServiceError};
use metaforge_ports::{Claimant, ClientTaskStatus, PortError, PortErrorKind};

/// A service answer as the port carries it: the view, the refusal typed with its code (its class
/// as the gateway answers it: `Invalid` 422, everything else 409), or the port failure.
fn reply<T>(result: Result<T, RunServiceError>) -> Result<RunReply<T>, PortError> {
    match result {
        Ok(value) => Ok(RunReply::Done(value)),
        Err(RunServiceError::Port(e)) => Err(e),
        Err(refused) => Ok(RunReply::Refused(RunRefused {
            kind: match refused.kind() {
                PortErrorKind::Invalid => RefusalKind::Invalid,
                PortErrorKind::NotFound
                | PortErrorKind::Conflict
                | PortErrorKind::Unavailable
                | PortErrorKind::Corrupt
                | PortErrorKind::Internal => RefusalKind::Conflict,
            },
            code: refused.code().unwrap_or("refused").to_owned(),
            message: refused.to_string(),
            details: refused.details(),
        })),
    }
}

/// A service answer that is never a refusal (reads): the view, or the port failure.
fn read<T>(result: Result<T, RunServiceError>) -> Result<T, PortError> {
    match result {
        Ok(value) => Ok(value),
        Err(RunServiceError::Port(e)) => Err(e),
        Err(other) => Err(PortError::new(other.kind(), other.to_string())),
    }
}

/// [`RunBindings`] over the run service of this process (`metaforge up`, where the sidecar runs
/// inside the gateway).
#[derive(Clone)]
pub struct InProcessRunBindings {
    service: Arc<RunService>,
}

impl InProcessRunBindings {
    /// The bindings over `service`.
    pub fn new(service: Arc<RunService>) -> Self {
        Self { service }
    }
}

#[async_trait::async_trait]
impl RunBindings for InProcessRunBindings {
    async fn start(&self, request: StartRunBody) -> Result<RunReply<RunDetail>, PortError> {
        reply(self.service.start(request).await)
    }

    async fn list(&self, query: RunQuery) -> Result<Vec<RunSummary>, PortError> {
        read(
            self.service
                .list(RunFilter {
                    status: query.status,
                    project_id: query.project_id,
                })
                .await,
        )
    }

    async fn get(&self, run_id: &str) -> Result<RunDetail, PortError> {
        read(self.service.get(run_id).await)
    }

    async fn flow_state(&self, run_id: &str) -> Result<FlowStateView, PortError> {
        read(self.service.flow_state(run_id).await)
    }

    async fn answer_gate(
        &self,
        run_id: &str,
        answer: GateDecisionBody,
        approver: &str,
    ) -> Result<RunReply<FlowStateView>, PortError> {
        reply(self.service.answer_gate(run_id, answer, approver).await)
    }

    async fn client_tasks(
        &self,
        run_id: Option<&str>,
        status: Option<ClientTaskStatus>,
    ) -> Result<Vec<ClientTaskView>, PortError> {
        read(self.service.client_tasks(run_id, status).await)
    }

    async fn client_task(&self, id: &str) -> Result<ClientTaskView, PortError> {
        read(self.service.client_task(id).await)
    }

    async fn claim_client_task(
        &self,
        id: &str,
        claimant: &Claimant,
    ) -> Result<RunReply<ClientTaskView>, PortError> {
        reply(self.service.claim_client_task(id, claimant).await)
    }

    async fn submit_client_task(
        &self,
        id: &str,
        claimant: &Claimant,
        submission: TaskSubmission,
    ) -> Result<RunReply<ClientTaskView>, PortError> {
        let submission = ClientTaskSubmission {
            summary: submission.summary,
            details: submission.details,
        };
        reply(
            self.service
                .submit_client_task(id, &claimant.identity, submission)
                .await,
        )
    }
}

/// Run bindings that exist before the run service they call: a composition builds the
/// sidecar's tools (which the agent loop, and so the engine's server brain, needs) before the
/// engine and its service, then [`set`](Self::set)s the real bindings. Until then every call is
/// `Unavailable`, naming why (no run is started, nothing is claimed).
#[derive(Default)]
pub struct LateRunBindings {
    inner: OnceLock<Arc<dyn RunBindings>>,
}

/// Why a run tool cannot answer before the run service is composed.
const NOT_COMPOSED: &str = "the run service is not composed in this process yet; nothing was done";

impl LateRunBindings {
    /// Bindings not set yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the bindings every later call goes through; `false` (and no change) when they were
    /// set already.
    pub fn set(&self, bindings: Arc<dyn RunBindings>) -> bool {
        self.inner.set(bindings).is_ok()
    }

    fn get(&self) -> Result<&Arc<dyn RunBindings>, PortError> {
        self.inner
            .get()
            .ok_or_else(|| PortError::new(PortErrorKind::Unavailable, NOT_COMPOSED))
    }
}

#[async_trait::async_trait]
impl RunBindings for LateRunBindings {
    async fn start(&self, request: StartRunBody) -> Result<RunReply<RunDetail>, PortError> {
        self.get()?.start(request).await
    }

    async fn list(&self, query: RunQuery) -> Result<Vec<RunSummary>, PortError> {
        self.get()?.list(query).await
    }

    async fn get(&self, run_id: &str) -> Result<RunDetail, PortError> {
        self.get()?.get(run_id).await
    }

    async fn flow_state(&self, run_id: &str) -> Result<FlowStateView, PortError> {
        self.get()?.flow_state(run_id).await
    }

    async fn answer_gate(
        &self,
        run_id: &str,
        answer: GateDecisionBody,
        approver: &str,
    ) -> Result<RunReply<FlowStateView>, PortError> {
        self.get()?.answer_gate(run_id, answer, approver).await
    }

    async fn client_tasks(
        &self,
        run_id: Option<&str>,
        status: Option<ClientTaskStatus>,
    ) -> Result<Vec<ClientTaskView>, PortError> {
        self.get()?.client_tasks(run_id, status).await
    }

    async fn client_task(&self, id: &str) -> Result<ClientTaskView, PortError> {
        self.get()?.client_task(id).await
    }

    async fn claim_client_task(
        &self,
        id: &str,
        claimant: &Claimant,
    ) -> Result<RunReply<ClientTaskView>, PortError> {
        self.get()?.claim_client_task(id, claimant).await
    }

    async fn submit_client_task(
        &self,
        id: &str,
        claimant: &Claimant,
        submission: TaskSubmission,
    ) -> Result<RunReply<ClientTaskView>, PortError> {
        self.get()?.submit_client_task(id, claimant, submission).await
    }
}
