//! `DesignFlowWorkflow` (FORGE-401/474): one interpreter workflow over the frozen flow it is
//! started with. Every decision is `metaforge_domain::run::{start, apply, resume}`; this file
//! only carries out the reducer's commands the Temporal way:
//!
//! - `StartPhase` → the `run_phase` activity (brief built by `metaforge_domain::run::phase_brief`),
//!   raced against the inbox so a cancel stops the attempt;
//! - `OpenGate` → `GateOpened` at once (Temporal keeps no approval hold), then the run waits on a
//!   signal raced against a durable timer to the gate's deadline (`GateExpired`, a rejection);
//! - `CompleteRun` → the `complete_run` activity (the twin merge), then the workflow returns;
//! - a flow change accepted at a gate → continue-as-new with the new frozen flow and the state, so
//!   history restarts at the boundary and the next run resumes by `resume`.
//!
//! Signals arrive as [`RunSignal`]s; one the reducer refuses changes nothing and is kept in
//! [`DesignFlowSnapshot::refusals`] (the engine checks a decision with the same reducer before
//! signalling, so a person sees the refusal synchronously).

#![expect(
    missing_docs,
    reason = "the temporalio macros emit an undocumented associated constant per workflow/activity method"
)]

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use metaforge_domain::run::{FrozenFlow, Transition, apply, phase_brief, resume, start};
use metaforge_ports::{
    GateAnswer, IntelligenceMode, RunCommand, RunEvent, RunSettings, RunState, RunTransition, Timestamp,
};
use serde::{Deserialize, Serialize};
use temporalio_common::RetryPolicy;
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{
    ActivityOptions, ApplicationFailure, ContinueAsNewOptions, SyncWorkflowContext, WorkflowContext,
    WorkflowContextView, WorkflowResult,
};

use crate::activity::{PhaseActivities, PhaseAttempt};

/// How long one phase attempt may take (a client task waits for a person's client).
pub const PHASE_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);
/// A worker that stops heartbeating for this long is presumed dead; the attempt is retried.
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(30);
/// Temporal's own retries of one activity task (a lost worker, a timeout): the seed's 3.
pub const ACTIVITY_RETRIES: u32 = 3;

/// What a run starts (or continues-as-new) from: the frozen version, whole, so the workflow runs
/// exactly the approved text and verifies its hash itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesignFlowInput {
    /// The run (also the workflow id).
    pub run_id: String,
    /// The project it belongs to.
    pub project_id: Option<String>,
    /// Who does the phase work.
    pub intelligence: IntelligenceMode,
    /// The frozen version's id.
    pub version_id: String,
    /// Its content hash, verified before the first phase.
    pub content_hash: String,
    /// Its canonical JSON.
    pub frozen: String,
    /// The run's bounds.
    pub settings: RunSettings,
    /// The state to resume from (continue-as-new); `None`: a new run.
    pub state: Option<RunState>,
    /// How many transitions the run made before this execution (continue-as-new), so the
    /// transition numbers watchers see keep counting across the boundary.
    #[serde(default)]
    pub transitions_before: u64,
}

/// A message to a running design flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "signal", rename_all = "snake_case")]
pub enum RunSignal {
    /// A person's answer to the open gate.
    Decide {
        /// The answer.
        answer: GateAnswer,
    },
    /// A person stops the run.
    Cancel {
        /// Who.
        by: String,
        /// Why.
        reason: Option<String>,
    },
    /// An approved new version, applied only at a gate.
    ChangeFlow {
        /// Its id.
        version_id: String,
        /// Its hash.
        content_hash: String,
        /// Its canonical JSON.
        frozen: String,
    },
}

/// What the `run_state` query answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesignFlowSnapshot {
    /// The run's state (absent before the workflow's first task ran).
    pub state: Option<RunState>,
    /// The frozen version it runs now (after any flow change).
    pub version_id: String,
    /// Its hash.
    pub content_hash: String,
    /// Its canonical JSON (the engine checks decisions against it with the reducer).
    pub frozen: String,
    /// Signals the reducer refused, oldest first (at most [`MAX_REFUSALS`]).
    pub refusals: Vec<String>,
    /// The W3C `traceparent` of the request that started the run (its start header), so what
    /// the gateway publishes about the run joins that trace; `None` when none was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// Refusals kept for the query.
pub const MAX_REFUSALS: usize = 16;

/// The interpreter workflow.
#[workflow]
#[derive(Default)]
pub struct DesignFlowWorkflow {
    state: Option<RunState>,
    version_id: String,
    content_hash: String,
    frozen: String,
    inbox: VecDeque<RunSignal>,
    refusals: Vec<String>,
    /// Every transition this execution made, in order (the `run_transitions` query): kept in
    /// workflow memory only, never in a command, so it does not touch determinism.
    transitions: Vec<RunTransition>,
    /// Transitions made by earlier executions (continue-as-new).
    transitions_before: u64,
    /// The start header's `traceparent` (history holds the header, so replay reads the same).
    traceparent: Option<String>,
}

/// Transitions one `run_transitions` answer carries at most (a watcher asks again for more).
pub const MAX_TRANSITIONS_PER_QUERY: usize = 64;

fn now_of(time: Option<SystemTime>) -> Timestamp {
    time.map_or_else(
        || DateTime::<Utc>::from(SystemTime::UNIX_EPOCH),
        DateTime::<Utc>::from,
    )
}

fn failed(reason: String) -> ApplicationFailure {
    ApplicationFailure::non_retryable(RunFailed(reason))
}

/// Why the workflow ended without running (a corrupt or unrunnable flow).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct RunFailed(String);

fn phase_options(run_id: &str, phase: &str, attempt: u32) -> ActivityOptions {
    ActivityOptions::with_start_to_close_timeout(PHASE_TIMEOUT)
        .heartbeat_timeout(HEARTBEAT_TIMEOUT)
        .retry_policy(
            RetryPolicy::builder()
                .maximum_attempts(ACTIVITY_RETRIES + 1)
                .non_retryable_error_types(["PhaseConfiguration"])
                .build(),
        )
        .summary(format!("{run_id}:{phase}:{attempt}"))
        .build()
}

#[workflow_methods]
impl DesignFlowWorkflow {
    /// Runs the design flow to its end and returns its final state.
    #[run]
    pub async fn run(ctx: &mut WorkflowContext<Self>, input: DesignFlowInput) -> WorkflowResult<RunState> {
        // The hash is verified (and the text re-frozen) before anything else happens.
        let mut flow = FrozenFlow::from_frozen(&input.version_id, &input.content_hash, &input.frozen)
            .map_err(|e| failed(e.to_string()))?;
        let now = now_of(ctx.workflow_time());
        let first = match &input.state {
            None => start(&flow, &input.run_id, input.settings, now).map_err(|e| failed(e.to_string()))?,
            Some(state) => Transition {
                state: state.clone(),
                commands: resume(&flow, state).map_err(|e| failed(e.to_string()))?,
            },
        };
        let started = input.state.is_none().then(|| RunTransition {
            run_id: input.run_id.clone(),
            seq: 1,
            event: None,
            state: first.state.clone(),
            commands: first.commands.clone(),
            reason: None,
            at: now,
        });
        let traceparent = crate::trace_context::traceparent_of(ctx.headers());
        ctx.state_mut(|w| {
            w.state = Some(first.state.clone());
            w.version_id.clone_from(&input.version_id);
            w.content_hash.clone_from(&input.content_hash);
            w.frozen.clone_from(&input.frozen);
            w.transitions_before = input.transitions_before;
            w.transitions.extend(started);
            w.traceparent = traceparent;
        });
        let mut state = first.state;
        let mut commands: VecDeque<RunCommand> = first.commands.into();
        loop {
            while let Some(command) = commands.pop_front() {
                match command {
                    RunCommand::StartPhase { phase, attempt, .. } => {
                        let brief = phase_brief(
                            &flow,
                            &state,
                            &phase,
                            input.project_id.as_deref(),
                            input.intelligence,
                        )
                        .map_err(|e| failed(e.to_string()))?;
                        let mut work = Box::pin(ctx.execute_activity(
                            PhaseActivities::run_phase,
                            brief,
                            phase_options(&state.run_id, &phase, attempt),
                        ));
                        let result = loop {
                            let signalled = temporalio_sdk::workflows::select! {
                                r = work.as_mut() => Some(r),
                                _ = ctx.wait_condition(|w| !w.inbox.is_empty()) => None,
                            };
                            match signalled {
                                Some(result) => break Some(result),
                                None => {
                                    // Only a cancel can be taken mid-phase; the reducer says so.
                                    let (next, more) = Self::take_signals(ctx, &flow, &state);
                                    state = next;
                                    commands.extend(more);
                                    if state.status.is_terminal() {
                                        break None;
                                    }
                                }
                            }
                        };
                        let Some(result) = result else {
                            // Dropping the activity future cancels the attempt.
                            continue;
                        };
                        let at = now_of(ctx.workflow_time());
                        let flow_version_id = state.flow.version_id.clone();
                        let event = match result {
                            Ok(PhaseAttempt::Finished(outcome)) => RunEvent::PhaseFinished {
                                flow_version_id,
                                phase,
                                attempt,
                                summary: outcome.summary,
                                deliverables: outcome.deliverables,
                                at,
                            },
                            Ok(PhaseAttempt::Failed { kind, reason }) => RunEvent::PhaseFailed {
                                flow_version_id,
                                phase,
                                attempt,
                                failure: kind,
                                reason,
                                at,
                            },
                            Err(e) => RunEvent::PhaseFailed {
                                flow_version_id,
                                phase,
                                attempt,
                                failure: metaforge_ports::PhaseFailureKind::Retryable,
                                reason: format!("the run_phase activity failed: {e}"),
                                at,
                            },
                        };
                        Self::step(ctx, &flow, &mut state, &event, &mut commands);
                    }
                    RunCommand::OpenGate { phase, .. } => {
                        let event = RunEvent::GateOpened {
                            phase,
                            approval_id: None,
                            at: now_of(ctx.workflow_time()),
                        };
                        Self::step(ctx, &flow, &mut state, &event, &mut commands);
                    }
                    RunCommand::CompleteRun { run_id } => {
                        ctx.execute_activity(
                            PhaseActivities::complete_run,
                            run_id,
                            ActivityOptions::with_start_to_close_timeout(Duration::from_secs(60))
                                .retry_policy(
                                    RetryPolicy::builder()
                                        .maximum_attempts(ACTIVITY_RETRIES + 1)
                                        .build(),
                                )
                                .build(),
                        )
                        .await?;
                    }
                    RunCommand::AnnounceGate { .. }
                    | RunCommand::AutoApproveGate { .. }
                    | RunCommand::CloseGate { .. }
                    | RunCommand::CancelPhase { .. }
                    | RunCommand::FailRun { .. }
                    | RunCommand::CancelRun { .. } => {}
                }
            }
            if state.status.is_terminal() {
                return Ok(state);
            }
            let deadline = state.gate.as_ref().and_then(|g| g.deadline);
            let expired = match deadline {
                Some(deadline) => {
                    let left = (deadline - now_of(ctx.workflow_time()))
                        .to_std()
                        .unwrap_or(Duration::ZERO);
                    temporalio_sdk::workflows::select! {
                        _ = ctx.timer(left) => true,
                        _ = ctx.wait_condition(|w| !w.inbox.is_empty()) => false,
                    }
                }
                None => {
                    ctx.wait_condition(|w| !w.inbox.is_empty()).await?;
                    false
                }
            };
            if expired && ctx.state(|w| w.inbox.is_empty()) {
                if let Some(phase) = state.gate.as_ref().map(|g| g.phase.clone()) {
                    let event = RunEvent::GateExpired {
                        phase,
                        at: now_of(ctx.workflow_time()),
                    };
                    Self::step(ctx, &flow, &mut state, &event, &mut commands);
                }
                continue;
            }
            let before = state.flow.clone();
            let (next, more) = Self::take_signals(ctx, &flow, &state);
            state = next;
            commands.extend(more);
            if state.flow != before {
                // A flow change was accepted at the gate: restart history at this boundary.
                let (version_id, content_hash, frozen) =
                    ctx.state(|w| (w.version_id.clone(), w.content_hash.clone(), w.frozen.clone()));
                flow = FrozenFlow::from_frozen(&version_id, &content_hash, &frozen)
                    .map_err(|e| failed(e.to_string()))?;
                let transitions_before = ctx.state(|w| w.transitions_before + w.transitions.len() as u64);
                let input = DesignFlowInput {
                    version_id,
                    content_hash,
                    frozen,
                    state: Some(state.clone()),
                    transitions_before,
                    ..input.clone()
                };
                ctx.continue_as_new(input, ContinueAsNewOptions::default())?;
            }
        }
    }

    /// Applies one event through the reducer; a refusal changes nothing and is logged.
    fn step(
        ctx: &WorkflowContext<Self>,
        flow: &FrozenFlow,
        state: &mut RunState,
        event: &RunEvent,
        commands: &mut VecDeque<RunCommand>,
    ) {
        match apply(flow, state, event) {
            Ok(transition) => {
                let published = transition.state.clone();
                let event = event.clone();
                let made = transition.commands.clone();
                *state = transition.state;
                commands.extend(transition.commands);
                let at = now_of(ctx.workflow_time());
                ctx.state_mut(|w| {
                    let seq = w.transitions_before + w.transitions.len() as u64 + 1;
                    w.transitions.push(RunTransition {
                        run_id: published.run_id.clone(),
                        seq,
                        event: Some(event),
                        state: published.clone(),
                        commands: made,
                        reason: None,
                        at,
                    });
                    w.state = Some(published);
                });
            }
            Err(refusal) => {
                let note = format!("{} refused: {refusal}", event.name());
                ctx.state_mut(|w| push_refusal(&mut w.refusals, note));
            }
        }
    }

    /// Drains the inbox, applying each signal through the reducer in arrival order.
    fn take_signals(
        ctx: &WorkflowContext<Self>,
        flow: &FrozenFlow,
        state: &RunState,
    ) -> (RunState, Vec<RunCommand>) {
        let signals: Vec<RunSignal> = ctx.state_mut(|w| w.inbox.drain(..).collect());
        let mut state = state.clone();
        let mut commands = VecDeque::new();
        let mut current = flow.clone();
        for signal in signals {
            let at = now_of(ctx.workflow_time());
            let event = match signal {
                RunSignal::Decide { answer } => RunEvent::GateDecided {
                    phase: answer.phase,
                    decision: answer.decision,
                    approver: answer.approver,
                    surface: answer.surface,
                    at,
                },
                RunSignal::Cancel { by, reason } => RunEvent::Canceled { by, reason, at },
                RunSignal::ChangeFlow {
                    version_id,
                    content_hash,
                    frozen,
                } => RunEvent::FlowChanged {
                    version_id,
                    content_hash,
                    frozen,
                    at,
                },
            };
            let before = state.flow.clone();
            Self::step(ctx, &current, &mut state, &event, &mut commands);
            if state.flow != before
                && let RunEvent::FlowChanged {
                    version_id,
                    content_hash,
                    frozen,
                    ..
                } = &event
            {
                ctx.state_mut(|w| {
                    w.version_id.clone_from(version_id);
                    w.content_hash.clone_from(content_hash);
                    w.frozen.clone_from(frozen);
                });
                match FrozenFlow::from_frozen(version_id, content_hash, frozen) {
                    Ok(changed) => current = changed,
                    Err(e) => ctx.state_mut(|w| push_refusal(&mut w.refusals, e.to_string())),
                }
            }
        }
        (state, commands.into())
    }

    /// A person's gate answer.
    #[signal]
    pub fn decide_gate(&mut self, _ctx: &mut SyncWorkflowContext<Self>, answer: GateAnswer) {
        self.inbox.push_back(RunSignal::Decide { answer });
    }

    /// Any run message (a flow change, for one).
    #[signal]
    pub fn message(&mut self, _ctx: &mut SyncWorkflowContext<Self>, signal: RunSignal) {
        self.inbox.push_back(signal);
    }

    /// The run's transitions after transition number `after` (its live notices, FORGE-396).
    #[query]
    pub fn run_transitions(&self, _ctx: &WorkflowContextView, after: u64) -> Vec<RunTransition> {
        transitions_after(&self.transitions, after)
    }

    /// The run's state and the frozen flow it runs now (flow-state, FORGE-396).
    #[query]
    pub fn run_state(&self, _ctx: &WorkflowContextView) -> DesignFlowSnapshot {
        DesignFlowSnapshot {
            state: self.state.clone(),
            version_id: self.version_id.clone(),
            content_hash: self.content_hash.clone(),
            frozen: self.frozen.clone(),
            refusals: self.refusals.clone(),
            traceparent: self.traceparent.clone(),
        }
    }
}

/// The transitions after `after` this execution still holds, oldest first, at most
/// [`MAX_TRANSITIONS_PER_QUERY`].
fn transitions_after(transitions: &[RunTransition], after: u64) -> Vec<RunTransition> {
    transitions
        .iter()
        .filter(|t| t.seq > after)
        .take(MAX_TRANSITIONS_PER_QUERY)
        .cloned()
        .collect()
}

fn push_refusal(refusals: &mut Vec<String>, note: String) {
    refusals.push(note);
    if refusals.len() > MAX_REFUSALS {
        refusals.remove(0);
    }
}
