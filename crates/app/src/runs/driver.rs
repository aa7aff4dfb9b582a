//! One active run's task: the only writer of the run in this process. It applies one event at a
//! time through the reducer, persists the transition (compare-and-set on the sequence) BEFORE
//! acting, then carries out the transition's effects, each idempotent by key, and publishes its
//! notices. A person's answer is acknowledged only once its transition is in the ledger.

use std::collections::VecDeque;
use std::sync::Arc;

use metaforge_agent::CancellationToken;
use metaforge_domain::run::{FrozenFlow, apply, approval_reason, phase_brief, resume};
use metaforge_ports::{
    GateAnswer, IntelligenceMode, PhaseFailure, PhaseFailureKind, PhaseOutcome, PortError, PortErrorKind,
    RunCommand, RunEvent, RunRecord, RunState, RunStatus, RunTransition, TWIN_MAIN_BRANCH, run_branch,
};
use tokio::sync::{mpsc, oneshot};

use super::engine::Shared;
use super::holds::{GateHolds, event_hold, settled_enough};
use super::notices::{RunNoticeKind, notices_of};

/// What a run's task is asked to do.
pub(crate) enum Msg {
    /// A person answers the open gate.
    Decide {
        answer: GateAnswer,
        reply: oneshot::Sender<Result<RunState, PortError>>,
    },
    /// A person cancels the run.
    Cancel {
        by: String,
        reason: Option<String>,
        reply: oneshot::Sender<Result<RunState, PortError>>,
    },
    /// A phase brain came back.
    PhaseDone {
        phase: String,
        attempt: u32,
        result: Result<PhaseOutcome, PhaseFailure>,
    },
}

/// How a task begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
    /// A run just started: act on its first transition.
    Fresh,
    /// Picked up at start-up: re-act on its last transition and the reducer's `resume`.
    Resume,
}

/// How the effects of the latest transition are carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Acting {
    /// Just persisted: every command, then the notices.
    Now,
    /// After a restart: the last transition's effects again (phase start and gate park as the
    /// reducer's `resume` says), then its notices again (consumers drop duplicates).
    Resume,
    /// Some effect of the latest transition failed a moment ago: the same as a resume, without
    /// the notices.
    Retry,
    /// Some effect of an earlier transition failed: its event effects and its commands again,
    /// except starting a phase or parking a gate (the current state decides those).
    Older,
}

/// Why a step did not happen.
enum StepError {
    /// The reducer refused the event (or another writer ended the run): nothing changed.
    Refused(PortError),
    /// The transition could not be persisted: nothing changed, trying again may work.
    Persist(PortError),
}

impl StepError {
    fn into_port(self) -> PortError {
        match self {
            Self::Refused(e) | Self::Persist(e) => e,
        }
    }
}

/// The phase attempt whose brain is working.
struct InFlight {
    phase: String,
    attempt: u32,
    token: CancellationToken,
}

/// One run's task.
pub(crate) struct Driver {
    shared: Arc<Shared>,
    flow: FrozenFlow,
    record: RunRecord,
    last: RunTransition,
    tx: mpsc::UnboundedSender<Msg>,
    rx: mpsc::UnboundedReceiver<Msg>,
    in_flight: Option<InFlight>,
    /// Transitions with an effect that failed, oldest first, tried again after `effect_retry`.
    retry: Vec<RunTransition>,
    follow_ups: VecDeque<RunEvent>,
}

/// The run record's reason for a state: the gate's approval reason while parked, the error once
/// ended failed or canceled.
fn record_reason(state: &RunState) -> Option<String> {
    match state.status {
        RunStatus::AwaitingApproval => approval_reason(state),
        RunStatus::Failed | RunStatus::Canceled => state.error.clone(),
        RunStatus::Queued | RunStatus::Running | RunStatus::Completed => None,
    }
}

impl Driver {
    pub(crate) fn new(
        shared: Arc<Shared>,
        flow: FrozenFlow,
        record: RunRecord,
        last: RunTransition,
        tx: mpsc::UnboundedSender<Msg>,
        rx: mpsc::UnboundedReceiver<Msg>,
    ) -> Self {
        Self {
            shared,
            flow,
            record,
            last,
            tx,
            rx,
            in_flight: None,
            retry: Vec::new(),
            follow_ups: VecDeque::new(),
        }
    }

    fn run_id(&self) -> &str {
        &self.record.id
    }

    /// Drives the run until it ends or the engine stops.
    pub(crate) async fn run(mut self, opening: Opening) {
        let acting = match opening {
            Opening::Fresh => Acting::Now,
            Opening::Resume => Acting::Resume,
        };
        self.act(acting).await;
        self.drain_follow_ups().await;
        let stopping = self.shared.stopping.clone();
        loop {
            let unsettled = !self.retry.is_empty();
            if self.last.state.status.is_terminal() && !unsettled {
                break;
            }
            let deadline_armed = self
                .last
                .state
                .gate
                .as_ref()
                .is_some_and(|g| g.deadline.is_some());
            let tick = self.shared.options.deadline_tick;
            let retry = self.shared.options.effect_retry;
            tokio::select! {
                biased;
                () = stopping.cancelled() => {
                    if let Some(flight) = self.in_flight.take() {
                        flight.token.cancel();
                    }
                    return;
                }
                msg = self.rx.recv() => match msg {
                    Some(msg) => self.handle(msg).await,
                    None => return,
                },
                () = tokio::time::sleep(tick), if deadline_armed => self.check_deadline().await,
                () = tokio::time::sleep(retry), if unsettled => self.retry_effects().await,
            }
            self.drain_follow_ups().await;
        }
        tracing::info!(event = "run_ended", run_id = %self.record.id, status = self.last.state.status.as_str(), seq = self.last.seq, "design-flow run ended");
        self.shared.finished(&self.record.id);
    }

    async fn handle(&mut self, msg: Msg) {
        let now = self.shared.ports.clock.now();
        match msg {
            Msg::Decide { answer, reply } => {
                let event = RunEvent::GateDecided {
                    phase: answer.phase,
                    decision: answer.decision,
                    approver: answer.approver.trim().to_owned(),
                    surface: answer.surface,
                    at: now,
                };
                let result = self.step(event).await.map_err(StepError::into_port);
                let _caller_gone = reply.send(result);
            }
            Msg::Cancel { by, reason, reply } => {
                let event = RunEvent::Canceled { by, reason, at: now };
                let result = self.step(event).await.map_err(StepError::into_port);
                let _caller_gone = reply.send(result);
            }
            Msg::PhaseDone {
                phase,
                attempt,
                result,
            } => self.phase_done(phase, attempt, result, now).await,
        }
    }

    async fn phase_done(
        &mut self,
        phase: String,
        attempt: u32,
        result: Result<PhaseOutcome, PhaseFailure>,
        now: metaforge_ports::Timestamp,
    ) {
        let current = self
            .in_flight
            .as_ref()
            .is_some_and(|f| f.phase == phase && f.attempt == attempt);
        if !current {
            tracing::warn!(event = "run_phase_result_stale", run_id = %self.record.id, phase = %phase, attempt, "a phase brain answered for an attempt that is no longer in flight; dropped");
            return;
        }
        let marker = self.in_flight.take();
        let flow_version_id = self.last.state.flow.version_id.clone();
        let event = match &result {
            Ok(outcome) => RunEvent::PhaseFinished {
                flow_version_id,
                phase: phase.clone(),
                attempt,
                summary: outcome.summary.clone(),
                deliverables: outcome.deliverables.clone(),
                at: now,
            },
            Err(failure) => {
                tracing::warn!(event = "run_phase_failed", run_id = %self.record.id, phase = %phase, attempt, failure = ?failure.kind, reason = %failure.reason, "a phase attempt failed");
                RunEvent::PhaseFailed {
                    flow_version_id,
                    phase: phase.clone(),
                    attempt,
                    failure: failure.kind,
                    reason: failure.reason.clone(),
                    at: now,
                }
            }
        };
        match self.step(event).await {
            Ok(_) => {}
            Err(StepError::Refused(e)) => {
                tracing::warn!(event = "run_phase_result_refused", run_id = %self.record.id, phase = %phase, attempt, error = %e, "the run no longer takes this phase result");
            }
            Err(StepError::Persist(e)) => {
                tracing::error!(event = "run_transition_persist_failed", run_id = %self.record.id, phase = %phase, attempt, error = %e, "a phase result could not be persisted; trying again");
                self.in_flight = marker;
                let tx = self.tx.clone();
                let delay = self.shared.options.effect_retry;
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _run_ended = tx.send(Msg::PhaseDone {
                        phase,
                        attempt,
                        result,
                    });
                });
            }
        }
    }

    async fn check_deadline(&mut self) {
        let Some((phase, deadline)) = self
            .last
            .state
            .gate
            .as_ref()
            .and_then(|g| g.deadline.map(|d| (g.phase.clone(), d)))
        else {
            return;
        };
        let now = self.shared.ports.clock.now();
        if now < deadline {
            return;
        }
        tracing::info!(event = "run_gate_expired", run_id = %self.record.id, phase = %phase, deadline = %deadline, "a gate's deadline passed: treated as a rejection");
        if let Err(e) = self.step(RunEvent::GateExpired { phase, at: now }).await {
            tracing::error!(event = "run_gate_expiry_failed", run_id = %self.record.id, error = %e.into_port(), "a gate's expiry could not be recorded; trying again");
        }
    }

    async fn drain_follow_ups(&mut self) {
        while let Some(event) = self.follow_ups.pop_front() {
            if let Err(e) = self.step(event).await {
                match e {
                    StepError::Refused(e) => {
                        tracing::warn!(event = "run_follow_up_refused", run_id = %self.record.id, error = %e, "a follow-up event was refused");
                    }
                    StepError::Persist(e) => {
                        tracing::error!(event = "run_transition_persist_failed", run_id = %self.record.id, error = %e, "a follow-up transition could not be persisted; its effect is re-acted later");
                        let last = self.last.clone();
                        if !self.retry.iter().any(|t| t.seq == last.seq) {
                            self.retry.push(last);
                        }
                    }
                }
            }
        }
    }

    /// Applies `event`, persists the transition, then acts on it. Another writer having moved
    /// the run first (a `Conflict` on the sequence) re-reads the ledger and applies once more.
    async fn step(&mut self, event: RunEvent) -> Result<RunState, StepError> {
        let mut reloaded = false;
        loop {
            let transition = apply(&self.flow, &self.last.state, &event)
                .map_err(|r| StepError::Refused(PortError::from(r)))?;
            let next = RunTransition {
                run_id: self.record.id.clone(),
                seq: self.last.seq + 1,
                event: Some(event.clone()),
                reason: record_reason(&transition.state),
                state: transition.state,
                commands: transition.commands,
                at: event.at(),
            };
            match self.shared.ports.runs.append_transition(next.clone()).await {
                Ok(_) => {
                    tracing::info!(
                        event = "run_transition",
                        run_id = %next.run_id,
                        seq = next.seq,
                        applied = event.name(),
                        status = next.state.status.as_str(),
                        "run transition persisted"
                    );
                    self.last = next;
                    self.act(Acting::Now).await;
                    return Ok(self.last.state.clone());
                }
                Err(e) if e.kind == PortErrorKind::Conflict && !reloaded => {
                    reloaded = true;
                    tracing::warn!(event = "run_transition_conflict", run_id = %self.record.id, seq = next.seq, error = %e, "another writer moved the run; re-reading it");
                    match self.shared.ports.runs.latest_transition(&self.record.id).await {
                        Ok(Some(latest)) => self.last = latest,
                        Ok(None) => return Err(StepError::Persist(e)),
                        Err(read) => return Err(StepError::Persist(read)),
                    }
                }
                Err(e) if e.kind == PortErrorKind::Conflict => return Err(StepError::Refused(e)),
                Err(e) => return Err(StepError::Persist(e)),
            }
        }
    }

    /// Carries out the latest transition's effects, then publishes its notices.
    async fn act(&mut self, acting: Acting) {
        let t = self.last.clone();
        let ok = self.effects(&t, acting).await;
        if acting != Acting::Retry {
            for notice in notices_of(&t) {
                let published = self.shared.publish(&notice).await;
                if notice.kind == RunNoticeKind::GateOpened {
                    let outcome = if published { "announced" } else { "failed" };
                    metrics::counter!("metaforge_design_flow_gate_announce_total", "outcome" => outcome)
                        .increment(1);
                }
            }
        }
        if !ok && !self.retry.iter().any(|r| r.seq == t.seq) {
            tracing::error!(event = "run_effects_failed", run_id = %t.run_id, seq = t.seq, "some effects of a persisted transition failed; they are tried again");
            self.retry.push(t);
        }
        self.settle_if_done().await;
    }

    /// Tries the failed effects again, oldest transition first.
    async fn retry_effects(&mut self) {
        let pending = std::mem::take(&mut self.retry);
        for t in pending {
            let acting = if t.seq == self.last.seq {
                Acting::Retry
            } else {
                Acting::Older
            };
            if !self.effects(&t, acting).await {
                self.retry.push(t);
            }
        }
        self.settle_if_done().await;
    }

    /// A terminal run whose effects are all done is marked settled: the next start-up leaves it.
    async fn settle_if_done(&self) {
        let t = &self.last;
        if !self.retry.is_empty() || !t.state.status.is_terminal() {
            return;
        }
        if let Err(e) = self.shared.ports.runs.mark_settled(&t.run_id, t.seq).await {
            tracing::error!(event = "run_settle_failed", run_id = %t.run_id, seq = t.seq, error = %e, "the run's last effects are done but could not be marked; the next start-up re-acts them (idempotently)");
        }
    }

    /// The event's own effect, then the commands' (see [`Acting`]); true when all succeeded.
    async fn effects(&mut self, t: &RunTransition, acting: Acting) -> bool {
        let mut ok = true;
        if let Some(event) = &t.event {
            ok &= self.event_effect(event, &t.state).await;
        }
        let again = |t: &RunTransition| -> Vec<RunCommand> {
            t.commands
                .iter()
                .filter(|c| !matches!(c, RunCommand::StartPhase { .. } | RunCommand::OpenGate { .. }))
                .cloned()
                .collect()
        };
        let commands = match acting {
            Acting::Now => t.commands.clone(),
            Acting::Older => again(t),
            Acting::Resume | Acting::Retry => {
                let mut commands = again(t);
                match resume(&self.flow, &t.state) {
                    Ok(next) => commands.extend(next),
                    Err(e) => {
                        tracing::error!(event = "run_resume_refused", run_id = %t.run_id, error = %e, "the reducer refused to resume the run");
                    }
                }
                commands
            }
        };
        for command in &commands {
            ok &= self.command_effect(command, &t.state).await;
        }
        ok
    }

    /// The effect the event itself asks for: a decided or expired gate's hold ([`event_hold`]) is
    /// closed.
    async fn event_effect(&mut self, event: &RunEvent, state: &RunState) -> bool {
        let id = event_hold(self.run_id(), event, state).unwrap_or_default();
        let done = self.holds().event_effect(self.run_id(), event, state).await;
        self.hold_result(&id, done)
    }

    /// The run's gate holds in the approval ledger.
    fn holds(&self) -> GateHolds {
        GateHolds::new(
            Arc::clone(&self.shared.ports.approvals),
            Arc::clone(&self.shared.ports.clock),
        )
    }

    fn hold_result(&self, id: &str, result: Result<(), PortError>) -> bool {
        if let Err(e) = &result {
            if settled_enough(&result) {
                tracing::info!(event = "run_gate_hold_unchanged", run_id = %self.record.id, approval_id = %id, error = %e, "the gate hold was already as the run needs it");
            } else {
                tracing::error!(event = "run_gate_hold_update_failed", run_id = %self.record.id, approval_id = %id, error = %e, "the gate hold could not be updated");
            }
        }
        settled_enough(&result)
    }

    async fn command_effect(&mut self, command: &RunCommand, state: &RunState) -> bool {
        let now = self.shared.ports.clock.now();
        match command {
            RunCommand::StartPhase { phase, attempt, .. } => {
                self.start_phase(phase, *attempt, state).await;
                true
            }
            RunCommand::OpenGate { phase, gate, .. } => {
                match self.holds().open(&self.record, state, phase, gate).await {
                    Ok(parked) => {
                        self.follow_ups.push_back(RunEvent::GateOpened {
                            phase: phase.clone(),
                            approval_id: Some(parked.id),
                            at: now,
                        });
                        true
                    }
                    Err(e) => {
                        tracing::error!(event = "run_gate_park_failed", run_id = %self.record.id, phase = %phase, error = %e, "the gate could not be parked in the approval ledger");
                        false
                    }
                }
            }
            RunCommand::AnnounceGate { .. } | RunCommand::FailRun { .. } | RunCommand::CancelRun { .. } => {
                true
            }
            RunCommand::AutoApproveGate { phase, gate, .. } => {
                let id = GateHolds::hold_id(self.run_id(), state, phase);
                let done = self.holds().auto_approve(&self.record, state, phase, gate).await;
                self.hold_result(&id, done)
            }
            RunCommand::CloseGate { phase, reason, .. } => {
                let id = GateHolds::hold_id(self.run_id(), state, phase);
                let done = self.holds().close(self.run_id(), state, phase, reason).await;
                self.hold_result(&id, done)
            }
            RunCommand::CancelPhase {
                phase, attempt, key, ..
            } => {
                if let Some(flight) = self
                    .in_flight
                    .take_if(|f| f.phase == *phase && f.attempt == *attempt)
                {
                    flight.token.cancel();
                }
                match self.shared.ports.tasks.withdraw(key, now).await {
                    Ok(task) => {
                        tracing::info!(event = "client_task_withdrawn", task_id = %task.id, "the canceled run's client task was withdrawn");
                        true
                    }
                    Err(e) if matches!(e.kind, PortErrorKind::NotFound | PortErrorKind::Conflict) => true,
                    Err(e) => {
                        tracing::error!(event = "client_task_withdraw_failed", task_id = %key, error = %e, "the canceled run's client task could not be withdrawn");
                        false
                    }
                }
            }
            RunCommand::CompleteRun { .. } => self.merge_twin().await,
        }
    }

    /// The completed run's twin branch is merged into `main` (fast-forward only).
    async fn merge_twin(&self) -> bool {
        use crate::twin::{RunMerge, TwinError, merge_run_branch};
        match merge_run_branch(self.shared.ports.twin.as_ref(), self.run_id()).await {
            Ok(RunMerge::Merged { head }) => {
                tracing::info!(event = "run_twin_merged", run_id = %self.record.id, head = ?head, "the completed run's twin branch was merged into main");
                true
            }
            Ok(RunMerge::NothingRecorded) => {
                tracing::info!(event = "run_twin_merge_skipped", run_id = %self.record.id, "the run has no twin branch to merge");
                true
            }
            Err(e @ TwinError::MainMoved { .. }) => {
                tracing::error!(event = "run_twin_merge_refused", run_id = %self.record.id, error = %e, "the completed run's twin branch could not be fast-forwarded into main (main moved); merge it by hand");
                true
            }
            Err(
                e @ (TwinError::Store(_)
                | TwinError::Invalid { .. }
                | TwinError::UnknownBranch { .. }
                | TwinError::UnknownNode { .. }),
            ) => {
                tracing::error!(event = "run_twin_merge_failed", run_id = %self.record.id, error = %e, "the completed run's twin branch could not be merged; trying again");
                false
            }
        }
    }

    /// Hands the attempt to the run's brain in its own task (unless it is already working on
    /// it), after making sure the run's twin branch exists.
    async fn start_phase(&mut self, phase: &str, attempt: u32, state: &RunState) {
        if self
            .in_flight
            .as_ref()
            .is_some_and(|f| f.phase == phase && f.attempt == attempt)
        {
            return;
        }
        let now = self.shared.ports.clock.now();
        let fail = |kind: PhaseFailureKind, reason: String| RunEvent::PhaseFailed {
            flow_version_id: state.flow.version_id.clone(),
            phase: phase.to_owned(),
            attempt,
            failure: kind,
            reason,
            at: now,
        };
        match self
            .shared
            .ports
            .twin
            .create_branch(&run_branch(self.run_id()), TWIN_MAIN_BRANCH)
            .await
        {
            Ok(_) => {}
            Err(e) if e.kind == PortErrorKind::Conflict => {}
            Err(e) => {
                self.follow_ups.push_back(fail(
                    PhaseFailureKind::Retryable,
                    format!(
                        "the run's twin branch {} could not be created: {e}",
                        run_branch(self.run_id())
                    ),
                ));
                return;
            }
        }
        let brief = match phase_brief(
            &self.flow,
            state,
            phase,
            self.record.project_id.as_deref(),
            self.record.intelligence,
        ) {
            Ok(brief) => brief,
            Err(e) => {
                self.follow_ups
                    .push_back(fail(PhaseFailureKind::Configuration, e.to_string()));
                return;
            }
        };
        let brain = match self.record.intelligence {
            IntelligenceMode::Server => Arc::clone(&self.shared.brains.server),
            IntelligenceMode::Client => Arc::clone(&self.shared.brains.client),
        };
        let failures = state.phase(phase).map_or(0, |p| p.failures);
        let delay = self.shared.options.retry_delay.saturating_mul(failures);
        let token = self.shared.stopping.child_token();
        let cancelled = token.clone();
        let tx = self.tx.clone();
        let phase_id = phase.to_owned();
        tracing::info!(event = "run_phase_started", run_id = %self.record.id, phase = %phase, attempt, key = %brief.key, intelligence = self.record.intelligence.as_str(), "phase handed to its brain");
        tokio::spawn(async move {
            let work = tokio::spawn(async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                brain.run_phase(brief).await
            });
            let abort = work.abort_handle();
            let result = tokio::select! {
                () = cancelled.cancelled() => {
                    abort.abort();
                    return;
                }
                joined = work => joined.unwrap_or_else(|e| Err(PhaseFailure {
                    kind: PhaseFailureKind::Retryable,
                    reason: if e.is_panic() {
                        "the phase brain panicked".to_owned()
                    } else {
                        "the phase brain's task was stopped".to_owned()
                    },
                })),
            };
            let _run_ended = tx.send(Msg::PhaseDone {
                phase: phase_id,
                attempt,
                result,
            });
        });
        self.in_flight = Some(InFlight {
            phase: phase.to_owned(),
            attempt,
            token,
        });
    }
}
