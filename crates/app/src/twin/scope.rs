//! Where a caller's twin writes go: the run phase it works for, asked of the authority each time
//! (the flow engine, the client-task store), never taken from a tool argument.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use metaforge_ports::{
    CallerClass, CallerContext, ClientTaskStatus, ClientTaskStore, FlowEngine, PortError, PortErrorKind,
    RunStatus, TWIN_MAIN_BRANCH, run_branch,
};

/// The run phase a writer works for: its writes go to the run's branch and carry both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunScope {
    /// The run.
    pub run_id: String,
    /// The phase in flight.
    pub phase: String,
}

impl RunScope {
    /// The scope of a `service` caller whose session names `run_id`: that run, while it runs a
    /// phase (`running_phase`); otherwise none.
    pub fn of_service_session(run_id: &str, running_phase: Option<String>) -> Option<Self> {
        running_phase.map(|phase| Self {
            run_id: run_id.to_owned(),
            phase,
        })
    }
}

/// Where one twin write goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteTarget {
    /// `main`: a person's chat, a local client, anyone working for no run.
    Main,
    /// The run's branch `run/<id>`, the work product stamped with the run and phase.
    Run(RunScope),
}

impl WriteTarget {
    /// The branch written.
    pub fn branch(&self) -> String {
        match self {
            Self::Main => TWIN_MAIN_BRANCH.to_owned(),
            Self::Run(scope) => run_branch(&scope.run_id),
        }
    }

    /// The run scope, when the write is a run's.
    pub fn run(&self) -> Option<&RunScope> {
        match self {
            Self::Main => None,
            Self::Run(scope) => Some(scope),
        }
    }
}

/// Which run phase, if any, a caller works for, confirmed with the authority at every call (so a
/// phase that finished, a run that was cancelled or a claim that was withdrawn stops granting
/// the run's branch at once).
#[async_trait]
pub trait RunScopes: Send + Sync {
    /// The running phase `caller` works for; `Ok(None)` when it works for none (or it could not
    /// be confirmed: a caller is never given a run's branch on a guess).
    async fn scope_of(&self, caller: &CallerContext) -> Result<Option<RunScope>, PortError>;
}

/// What a [`RunScopes`] asks of wherever its runs live (the engine in this process, or the run
/// bindings of a gateway); [`confirm_scope`] holds the one rule that turns the answers into a scope.
#[async_trait]
pub trait RunScopeFacts: Send + Sync {
    /// The phase `run_id` is running now; `None` when it is unknown, parked or finished.
    async fn running_phase(&self, run_id: &str) -> Result<Option<String>, PortError>;

    /// The run phase of the client task `caller` claimed in `session`, while the claim is still
    /// its own; `None` without one.
    async fn claimed_phase(
        &self,
        caller: &CallerContext,
        session: &str,
    ) -> Result<Option<RunScope>, PortError>;
}

/// Whatever can answer the facts has the scopes the one rule derives from them.
#[async_trait]
impl<T: RunScopeFacts> RunScopes for T {
    async fn scope_of(&self, caller: &CallerContext) -> Result<Option<RunScope>, PortError> {
        confirm_scope(self, caller).await
    }
}

/// The scope rule: no session is no scope; a `service` caller's session names its run, which must
/// be running a phase; any other caller works for the client task it claimed in its session,
/// while that run is running that task's phase.
async fn confirm_scope(
    facts: &dyn RunScopeFacts,
    caller: &CallerContext,
) -> Result<Option<RunScope>, PortError> {
    let Some(session) = caller.session_id() else {
        return Ok(None);
    };
    match caller.class {
        CallerClass::Service => Ok(RunScope::of_service_session(
            session,
            facts.running_phase(session).await?,
        )),
        CallerClass::ClientTask | CallerClass::Local | CallerClass::Remote | CallerClass::Untrusted => {
            let Some(claimed) = facts.claimed_phase(caller, session).await? else {
                return Ok(None);
            };
            let in_flight = facts.running_phase(&claimed.run_id).await?;
            Ok((in_flight.as_deref() == Some(claimed.phase.as_str())).then_some(claimed))
        }
    }
}

/// No caller works for a run (a process with no run engine): service writes are refused by the
/// door, everyone else's go to `main`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRunScopes;

#[async_trait]
impl RunScopes for NoRunScopes {
    async fn scope_of(&self, _caller: &CallerContext) -> Result<Option<RunScope>, PortError> {
        Ok(None)
    }
}

/// Run scopes that exist before the engine they ask: a composition builds the sidecar's tools
/// (which the agent loop, and so the engine's server brain, needs) before the engine, then
/// [`set`](Self::set)s the real scopes once the engine exists. Until then no caller has a run
/// scope (fail closed: a service write is refused, never sent to `main`).
#[derive(Default)]
pub struct LateRunScopes {
    inner: OnceLock<Arc<dyn RunScopes>>,
}

impl LateRunScopes {
    /// Scopes not set yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the scopes every later call asks; `false` (and no change) when they were set already.
    pub fn set(&self, scopes: Arc<dyn RunScopes>) -> bool {
        self.inner.set(scopes).is_ok()
    }
}

#[async_trait]
impl RunScopes for LateRunScopes {
    async fn scope_of(&self, caller: &CallerContext) -> Result<Option<RunScope>, PortError> {
        match self.inner.get() {
            Some(scopes) => scopes.scope_of(caller).await,
            None => Ok(None),
        }
    }
}

/// Run scopes confirmed with the flow engine and the client-task store:
/// - a `service` caller (the design-flow worker) names its run by its session
///   (`CallerContext::session` = the run id, as the engine's server brain sets it); the scope is
///   that run's phase in flight, while the run is running;
/// - any other caller is scoped by the client task it claimed in this session (`claimed_by` =
///   the caller's authenticated identity and `claim_session` = its session: a session id alone
///   proves nothing), the task's run and phase, while the engine still has that phase in flight.
///
/// Anything that cannot be confirmed (no session, an unknown run, a parked or finished run, an
/// engine that cannot be asked right now) is no scope.
#[derive(Clone)]
pub struct EngineRunScopes {
    engine: Arc<dyn FlowEngine>,
    tasks: Option<Arc<dyn ClientTaskStore>>,
}

impl EngineRunScopes {
    /// Scopes over `engine`, with client-task claims read from `tasks` when given.
    pub fn new(engine: Arc<dyn FlowEngine>, tasks: Option<Arc<dyn ClientTaskStore>>) -> Self {
        Self { engine, tasks }
    }

    /// The phase in flight of `run_id`, when the engine confirms the run is running one now.
    async fn phase_in_flight(&self, run_id: &str) -> Result<Option<String>, PortError> {
        let view = match self.engine.state(run_id).await {
            Ok(view) => view,
            Err(e) if e.kind == PortErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if !view.live {
            tracing::warn!(event = "twin_run_scope_unconfirmed", run_id, reason = ?view.reason, "the flow engine could not confirm the run's phase; the caller gets no run scope");
            return Ok(None);
        }
        Ok(view
            .state
            .filter(|s| s.status == RunStatus::Running)
            .and_then(|s| s.running_phase().map(|p| p.id.clone())))
    }
}

/// The identity a caller acts as: the one its transport authenticated, else `local` (what a
/// claim records for a caller nobody authenticated).
pub fn caller_identity(caller: &CallerContext) -> &str {
    caller
        .identity
        .as_deref()
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .unwrap_or(LOCAL_IDENTITY)
}

/// The identity of a caller no transport authenticated (stdio, an open loopback listener).
pub const LOCAL_IDENTITY: &str = "local";

#[async_trait]
impl RunScopeFacts for EngineRunScopes {
    async fn running_phase(&self, run_id: &str) -> Result<Option<String>, PortError> {
        self.phase_in_flight(run_id).await
    }

    /// The newest task the caller's identity claimed in this session, from the client-task store.
    async fn claimed_phase(
        &self,
        caller: &CallerContext,
        session: &str,
    ) -> Result<Option<RunScope>, PortError> {
        let Some(tasks) = &self.tasks else {
            return Ok(None);
        };
        let identity = caller_identity(caller);
        let claimed = tasks
            .list(None, Some(ClientTaskStatus::Claimed))
            .await?
            .into_iter()
            .filter(|t| {
                t.claimed_by.as_deref() == Some(identity) && t.claim_session.as_deref() == Some(session)
            })
            .max_by(|a, b| a.updated_at.cmp(&b.updated_at));
        Ok(claimed.map(|task| RunScope {
            run_id: task.run_id,
            phase: task.phase,
        }))
    }
}
