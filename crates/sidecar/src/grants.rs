//! Who a call is working for beyond what its connection proves, confirmed with the authority
//! before every call (FORGE-487, FORGE-584):
//!
//! - [`ClientTaskGrants`]: the client tasks this sidecar's sessions took with `phase.claim` (which
//!   a person approved) and have not handed back with `phase.submit` — the sidecar's own record of
//!   *which session* holds a claim (through the gateway, the claim records the key's identity);
//! - [`SidecarCallerGrants`]: the transport's [`CallerGrants`]: a service-key call is `service`
//!   only while the run it names (its `X-MetaForge-Session`) is running on an approved version in
//!   the call's project; with `METAFORGE_CLIENT_TASK_WRITES=on`, a session holding a grant is
//!   `client_task` only while its task is still claimed by it, its run is running in client mode
//!   and the run is in the call's project. Anything unconfirmed is `false`: fail closed;
//! - [`BindingsRunScopes`]: the twin's [`RunScopes`] over the same bindings, for a sidecar whose
//!   engine is behind the gateway (remote mode): a writer's twin writes go to the run's branch
//!   only while the run is confirmed running the phase it works on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use metaforge_api::FlowBindings;
use metaforge_api::RunBindings;
use metaforge_app::twin::{RunScope, RunScopeFacts};
use metaforge_ports::{
    CallerClass, CallerContext, CallerGrants, ClassClaim, ClientTaskStatus, FlowVersionStatus,
    IntelligenceMode, PortError, PortErrorKind, RunStatus,
};

/// At most this many sessions hold a grant at once (a bound on the sidecar's memory; the oldest
/// grant is dropped first, which only makes its session `remote` again).
pub const MAX_GRANTS: usize = 4_096;

/// One session's claim on a client task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The claimed task (`run:phase:attempt`).
    pub task_id: String,
    /// Its run.
    pub run_id: String,
    /// Its phase.
    pub phase: String,
    /// Who the task store recorded as the claimant (the session in process, the key's identity
    /// through the gateway): the claim is confirmed against it.
    pub claimant: String,
    /// The identity the transport authenticated for the claiming session, if any: later calls
    /// of the session must come from the same one.
    pub identity: Option<String>,
    /// When it was recorded (for the bound), as a sequence number.
    seq: u64,
}

impl Grant {
    /// A grant on `task_id` of `run_id`'s `phase`, recorded for `claimant`.
    pub fn new(
        task_id: impl Into<String>,
        run_id: impl Into<String>,
        phase: impl Into<String>,
        claimant: impl Into<String>,
        identity: Option<String>,
    ) -> Self {
        Self {
            task_id: task_id.into(),
            run_id: run_id.into(),
            phase: phase.into(),
            claimant: claimant.into(),
            identity,
            seq: 0,
        }
    }
}

/// The client tasks this sidecar's sessions hold, by session.
#[derive(Debug, Default)]
pub struct ClientTaskGrants {
    inner: Mutex<(u64, HashMap<String, Grant>)>,
}

impl ClientTaskGrants {
    /// No grants.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, HashMap<String, Grant>)> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `session` took `grant`'s task (replacing any grant it held).
    pub fn record(&self, session: &str, mut grant: Grant) {
        let mut inner = self.lock();
        inner.0 += 1;
        grant.seq = inner.0;
        if inner.1.len() >= MAX_GRANTS && !inner.1.contains_key(session) {
            let oldest = inner.1.iter().min_by_key(|(_, g)| g.seq).map(|(s, _)| s.clone());
            if let Some(oldest) = oldest {
                inner.1.remove(&oldest);
            }
        }
        tracing::info!(event = "client_task_grant_recorded", session, task_id = %grant.task_id, run_id = %grant.run_id, phase = %grant.phase, "a session took a client task");
        inner.1.insert(session.to_owned(), grant);
    }

    /// The grant `session` holds.
    pub fn get(&self, session: &str) -> Option<Grant> {
        self.lock().1.get(session).cloned()
    }

    /// Ends `session`'s grant on `task_id` (after `phase.submit`, or when the task is no longer
    /// its own); `true` when it held it.
    pub fn end(&self, session: &str, task_id: &str, why: &str) -> bool {
        let mut inner = self.lock();
        if inner.1.get(session).is_some_and(|g| g.task_id == task_id) {
            inner.1.remove(session);
            tracing::info!(
                event = "client_task_grant_ended",
                session,
                task_id,
                why,
                "the session's client-task grant ended"
            );
            return true;
        }
        false
    }
}

/// The transport's caller grants over the run bindings (and the flow bindings, for the version's
/// approval).
pub struct SidecarCallerGrants {
    runs: Arc<dyn RunBindings>,
    flows: Arc<dyn FlowBindings>,
    grants: Arc<ClientTaskGrants>,
    client_task_writes: bool,
}

impl SidecarCallerGrants {
    /// Grants confirmed through `runs` and `flows`; client-task sessions only when
    /// `client_task_writes` (`METAFORGE_CLIENT_TASK_WRITES=on`).
    pub fn new(
        runs: Arc<dyn RunBindings>,
        flows: Arc<dyn FlowBindings>,
        grants: Arc<ClientTaskGrants>,
        client_task_writes: bool,
    ) -> Self {
        Self {
            runs,
            flows,
            grants,
            client_task_writes,
        }
    }

    /// Why a service call naming `run_id` is not confirmed (`Ok(None)`: it is).
    async fn service_refusal(&self, claim: &ClassClaim) -> Result<Option<String>, PortError> {
        let run = match self.runs.get(&claim.session).await {
            Ok(run) => run.run,
            Err(e) if e.kind == PortErrorKind::NotFound => {
                return Ok(Some(format!("no run {} exists", claim.session)));
            }
            Err(e) => return Err(e),
        };
        if run.status != RunStatus::Running {
            return Ok(Some(format!(
                "run {} is {}, not running",
                run.id,
                run.status.as_str()
            )));
        }
        // The service caller is the server's own phase worker (issue 38 item 11): a client-mode
        // run's phases are done by a person's client through claimed tasks, never by the key.
        match run.intelligence {
            IntelligenceMode::Server => {}
            IntelligenceMode::Client => {
                return Ok(Some(format!(
                    "run {} is in client mode: its phases are claimed by a person's client (phase.claim), not done by the service key",
                    run.id
                )));
            }
        }
        if run.project_id != claim.project {
            return Ok(Some(project_mismatch(&run.project_id, &claim.project)));
        }
        let version = self.flows.version(&run.flow_version_id).await?;
        if version.status != FlowVersionStatus::Approved {
            return Ok(Some(format!(
                "run {}'s flow version {} is {:?}, not approved",
                run.id, version.id, version.status
            )));
        }
        Ok(None)
    }

    /// Why a client-task session is not confirmed (`Ok(None)`: it is), and whether its grant
    /// is over for good.
    async fn client_task_refusal(&self, claim: &ClassClaim) -> Result<Option<(String, bool)>, PortError> {
        let Some(grant) = self.grants.get(&claim.session) else {
            return Ok(Some((
                "the session holds no claimed client task".to_owned(),
                false,
            )));
        };
        if grant.identity != claim.identity {
            return Ok(Some((
                "the call is not from the identity that claimed the task".to_owned(),
                false,
            )));
        }
        let task = match self.runs.client_task(&grant.task_id).await {
            Ok(task) => task,
            Err(e) if e.kind == PortErrorKind::NotFound => {
                return Ok(Some((format!("task {} no longer exists", grant.task_id), true)));
            }
            Err(e) => return Err(e),
        };
        if task.status != ClientTaskStatus::Claimed || task.claimed_by.as_deref() != Some(&grant.claimant) {
            return Ok(Some((
                format!(
                    "task {} is {} (claimed by {}), no longer this session's",
                    task.id,
                    task.status.as_str(),
                    task.claimed_by.as_deref().unwrap_or("nobody")
                ),
                true,
            )));
        }
        let run = self.runs.get(&task.run_id).await?.run;
        if run.intelligence != IntelligenceMode::Client {
            return Ok(Some((format!("run {} is not in client mode", run.id), true)));
        }
        if run.status != RunStatus::Running {
            return Ok(Some((
                format!("run {} is {}, not running", run.id, run.status.as_str()),
                run.status.is_terminal(),
            )));
        }
        if run.project_id != claim.project {
            return Ok(Some((project_mismatch(&run.project_id, &claim.project), false)));
        }
        Ok(None)
    }
}

fn project_mismatch(run: &Option<String>, call: &Option<String>) -> String {
    format!(
        "the run is in project {}, the call in {} (X-MetaForge-Project)",
        run.as_deref().unwrap_or("(none)"),
        call.as_deref().unwrap_or("(none)")
    )
}

#[async_trait::async_trait]
impl CallerGrants for SidecarCallerGrants {
    async fn confirm(&self, claim: &ClassClaim) -> bool {
        let tool = claim.tool.as_deref().unwrap_or("(listing)");
        match claim.class {
            CallerClass::Service => match self.service_refusal(claim).await {
                Ok(None) => {
                    tracing::info!(event = "mcp_service_call_authorised", run_id = %claim.session, tool, "a service-key call was confirmed on its running, approved run");
                    true
                }
                Ok(Some(reason)) => {
                    tracing::warn!(event = "mcp_service_call_unconfirmed", run_id = %claim.session, tool, reason = %reason, "a service-key call is untrusted: its run was not confirmed");
                    false
                }
                Err(e) => {
                    tracing::warn!(event = "mcp_service_call_unconfirmed", run_id = %claim.session, tool, reason = %e, "a service-key call is untrusted: its run could not be confirmed");
                    false
                }
            },
            CallerClass::ClientTask if self.client_task_writes => {
                match self.client_task_refusal(claim).await {
                    Ok(None) => {
                        let grant = self.grants.get(&claim.session);
                        tracing::info!(
                            event = "mcp_client_task_call_authorised",
                            session = %claim.session,
                            task_id = grant.as_ref().map(|g| g.task_id.as_str()).unwrap_or_default(),
                            run_id = grant.as_ref().map(|g| g.run_id.as_str()).unwrap_or_default(),
                            phase = grant.as_ref().map(|g| g.phase.as_str()).unwrap_or_default(),
                            tool,
                            "a call of a session holding a claimed client task runs as client_task"
                        );
                        true
                    }
                    Ok(Some((reason, over))) => {
                        if over && let Some(grant) = self.grants.get(&claim.session) {
                            self.grants.end(&claim.session, &grant.task_id, &reason);
                        }
                        tracing::debug!(event = "mcp_client_task_call_unconfirmed", session = %claim.session, tool, reason = %reason);
                        false
                    }
                    Err(e) => {
                        tracing::warn!(event = "mcp_client_task_call_unconfirmed", session = %claim.session, tool, reason = %e, "the client-task claim could not be confirmed; the call is held as before");
                        false
                    }
                }
            }
            CallerClass::ClientTask | CallerClass::Local | CallerClass::Remote | CallerClass::Untrusted => {
                false
            }
        }
    }
}

/// The twin's run scopes confirmed through the run bindings (a sidecar whose engine is behind the
/// gateway): a `service` caller's session names its run, which must be running a phase; any
/// other caller is scoped by the client task its session holds ([`ClientTaskGrants`]) while the
/// task is still its claim and the run is running that phase. Anything unconfirmed is no scope.
pub struct BindingsRunScopes {
    runs: Arc<dyn RunBindings>,
    grants: Arc<ClientTaskGrants>,
}

impl BindingsRunScopes {
    /// Scopes over `runs` and the sessions' `grants`.
    pub fn new(runs: Arc<dyn RunBindings>, grants: Arc<ClientTaskGrants>) -> Self {
        Self { runs, grants }
    }

    async fn phase_in_flight(&self, run_id: &str) -> Result<Option<String>, PortError> {
        match self.runs.flow_state(run_id).await {
            Ok(state) => Ok(state
                .running_phase()
                .filter(|_| state.status == RunStatus::Running.as_str())
                .map(|p| p.id.clone())),
            Err(e) if e.kind == PortErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[async_trait::async_trait]
impl RunScopeFacts for BindingsRunScopes {
    async fn running_phase(&self, run_id: &str) -> Result<Option<String>, PortError> {
        self.phase_in_flight(run_id).await
    }

    /// The task this session's grant names, while it is still claimed by the grant's claimant;
    /// a session id is a header any client can send, so the grant is the claiming identity's only.
    async fn claimed_phase(
        &self,
        caller: &CallerContext,
        session: &str,
    ) -> Result<Option<RunScope>, PortError> {
        let Some(grant) = self.grants.get(session) else {
            return Ok(None);
        };
        if grant.identity != caller.identity {
            return Ok(None);
        }
        let task = match self.runs.client_task(&grant.task_id).await {
            Ok(task) => task,
            Err(e) if e.kind == PortErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let still_claimed =
            task.status == ClientTaskStatus::Claimed && task.claimed_by.as_deref() == Some(&grant.claimant);
        Ok(still_claimed.then_some(RunScope {
            run_id: task.run_id,
            phase: task.phase,
        }))
    }
}
