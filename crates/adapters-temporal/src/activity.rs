//! The `run_phase` activity: one phase attempt handed to the run's phase brain (server agent loop
//! or client task, by the brief's intelligence), heartbeating while the brain works so a killed
//! worker is noticed within the heartbeat timeout and the attempt is retried elsewhere with the
//! same `run:phase:attempt` key (a brain re-called with it finds the work already started).

#![expect(
    missing_docs,
    reason = "the temporalio macros emit an undocumented associated constant per workflow/activity method"
)]

use std::sync::Arc;
use std::time::Duration;

use metaforge_ports::{
    IntelligenceMode, PhaseBrain, PhaseBrief, PhaseFailureKind, PhaseOutcome, PortError, TwinStore,
    run_branch,
};
use serde::{Deserialize, Serialize};
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tracing::Instrument as _;

use crate::trace_context::activity_span;

/// How often the activity heartbeats while the brain works.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// What one attempt came to, as a value: the brain's own failures travel back to the workflow
/// as data so the domain reducer (not Temporal's retry policy) decides whether the phase runs
/// again, exactly as it does on the embedded engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum PhaseAttempt {
    /// The brain finished; its summary and the deliverables recorded in the twin.
    Finished(PhaseOutcome),
    /// The brain failed; configuration (fails the run once) or retryable.
    Failed {
        /// Which kind.
        kind: PhaseFailureKind,
        /// Why.
        reason: String,
    },
}

/// What happens once a run completes (the binary merges its twin branch into `main` with the
/// twin use case, so the rule stays in one place). Called again after a worker restart: it must
/// be idempotent.
#[async_trait::async_trait]
pub trait RunCompletion: Send + Sync {
    /// The run completed; an error is retried by Temporal.
    async fn completed(&self, run_id: &str) -> Result<(), PortError>;
}

/// The activities a worker registers: the two phase brains (the ones the embedded engine would
/// use), the twin whose `run/<id>` branch each phase writes to and what a completed run settles;
/// `new` takes them in field order.
#[derive(derive_more::Constructor)]
pub struct PhaseActivities {
    server: Arc<dyn PhaseBrain>,
    client: Arc<dyn PhaseBrain>,
    twin: Arc<dyn TwinStore>,
    completion: Arc<dyn RunCompletion>,
}

#[activities]
impl PhaseActivities {
    /// Settles a completed run (the twin merge); a failure is retried by Temporal.
    #[activity]
    pub async fn complete_run(
        self: Arc<Self>,
        ctx: ActivityContext,
        run_id: String,
    ) -> Result<(), ActivityError> {
        let span = activity_span(&ctx, "complete_run", &run_id);
        self.completion
            .completed(&run_id)
            .instrument(span)
            .await
            .map_err(ActivityError::from)
    }

    /// Runs one phase attempt. A twin branch that cannot be created is a retryable failure (the
    /// reducer counts it); anything the brain reports comes back as a [`PhaseAttempt`].
    #[activity]
    pub async fn run_phase(
        self: Arc<Self>,
        ctx: ActivityContext,
        brief: PhaseBrief,
    ) -> Result<PhaseAttempt, ActivityError> {
        let span = activity_span(&ctx, "run_phase", &brief.run_id);
        Self::attempt(&self, ctx, brief).instrument(span).await
    }
}

impl PhaseActivities {
    /// One attempt of `run_phase`, inside its span.
    async fn attempt(&self, ctx: ActivityContext, brief: PhaseBrief) -> Result<PhaseAttempt, ActivityError> {
        let branch = run_branch(&brief.run_id);
        match self
            .twin
            .create_branch(&branch, metaforge_ports::TWIN_MAIN_BRANCH)
            .await
        {
            Ok(_) => {}
            Err(e) if e.kind == metaforge_ports::PortErrorKind::Conflict => {}
            Err(e) => {
                return Ok(PhaseAttempt::Failed {
                    kind: PhaseFailureKind::Retryable,
                    reason: format!("the run's twin branch {branch} could not be created: {e}"),
                });
            }
        }
        let brain = match brief.intelligence {
            IntelligenceMode::Server => Arc::clone(&self.server),
            IntelligenceMode::Client => Arc::clone(&self.client),
        };
        let key = brief.key.clone();
        let work = brain.run_phase(brief);
        tokio::pin!(work);
        loop {
            tokio::select! {
                result = &mut work => {
                    return Ok(match result {
                        Ok(outcome) => PhaseAttempt::Finished(outcome),
                        Err(failure) => PhaseAttempt::Failed { kind: failure.kind, reason: failure.reason },
                    });
                }
                () = tokio::time::sleep(HEARTBEAT_EVERY) => {
                    if ctx.is_cancelled() {
                        return Err(ActivityError::cancelled());
                    }
                    ctx.record_heartbeat(key.clone()).await?;
                }
            }
        }
    }
}
