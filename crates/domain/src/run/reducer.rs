//! The run reducer: `(frozen flow, run state, event) -> (new state, commands)` or a refusal.
//!
//! Phases run one at a time in execution order ([`super::FrozenFlow::order`]). After each
//! transition the run advances as far as it can without outside input: a finished phase without
//! a gate passes, an auto-approved checkpoint whose deliverables are recorded passes (and is
//! recorded), anything else parks at its gate. A refusal leaves the state exactly as it was.

use std::collections::BTreeSet;

use chrono::Duration;
use metaforge_ports::{
    AUTO_APPROVER, DEADLINE_APPROVER, FeedbackSource, FlowRef, GateDecision, GateRecord, OpenGate,
    PhaseFailureKind, PhaseFeedback, PhaseState, PhaseStatus, RunCommand, RunEvent, RunSettings, RunState,
    RunStatus, Timestamp, phase_attempt_key,
};

use super::frozen::FrozenFlow;
use super::gate::{allowed_decisions, gate_reason, readiness_findings};
use super::refusal::RunRefusal;

/// The outcome of an accepted event: the state to persist and the commands to carry out after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The new state.
    pub state: RunState,
    /// What the engine does next, in order.
    pub commands: Vec<RunCommand>,
}

/// Starts a run on `flow`: every phase pending in execution order, the first one started.
pub fn start(
    flow: &FrozenFlow,
    run_id: &str,
    settings: RunSettings,
    at: Timestamp,
) -> Result<Transition, RunRefusal> {
    if run_id.trim().is_empty() {
        return Err(RunRefusal::Missing("run_id"));
    }
    if run_id.contains(':') {
        return Err(RunRefusal::ColonInId {
            field: "run_id",
            value: run_id.to_owned(),
        });
    }
    let mut state = RunState {
        run_id: run_id.to_owned(),
        flow: flow.reference().clone(),
        status: RunStatus::Running,
        settings,
        phases: flow.order().iter().map(PhaseState::pending).collect(),
        gate: None,
        reworks_used: 0,
        decisions: Vec::new(),
        error: None,
        started_at: at,
        updated_at: at,
    };
    let mut commands = Vec::new();
    advance(flow, &mut state, at, &mut commands);
    Ok(Transition { state, commands })
}

/// Applies `event` to `state` under the run's frozen `flow`.
pub fn apply(flow: &FrozenFlow, state: &RunState, event: &RunEvent) -> Result<Transition, RunRefusal> {
    check_version(flow.reference(), &state.flow)?;
    if state.status.is_terminal() {
        return Err(RunRefusal::Terminal {
            run_id: state.run_id.clone(),
            status: state.status,
        });
    }
    let mut next = state.clone();
    let mut commands = Vec::new();
    let at = event.at();
    let mut flow_after = None;
    match event {
        RunEvent::PhaseStarted {
            flow_version_id,
            phase,
            attempt,
            ..
        } => {
            check_event_version(&state.flow, flow_version_id)?;
            in_flight(&next, phase, *attempt)?;
        }
        RunEvent::PhaseFinished {
            flow_version_id,
            phase,
            attempt,
            summary,
            deliverables,
            ..
        } => {
            check_event_version(&state.flow, flow_version_id)?;
            let at_index = in_flight(&next, phase, *attempt)?;
            if let Some(p) = next.phases.get_mut(at_index) {
                let mut seen = BTreeSet::new();
                p.deliverables = deliverables
                    .iter()
                    .filter(|d| !d.trim().is_empty() && seen.insert(d.as_str()))
                    .cloned()
                    .collect();
                p.summary = Some(summary.clone());
                p.status = PhaseStatus::AwaitingGate;
                p.failures = 0;
                p.finished_at = Some(at);
            }
            advance(flow, &mut next, at, &mut commands);
        }
        RunEvent::PhaseFailed {
            flow_version_id,
            phase,
            attempt,
            failure,
            reason,
            ..
        } => {
            check_event_version(&state.flow, flow_version_id)?;
            let at_index = in_flight(&next, phase, *attempt)?;
            let retries = next.settings.phase_retries;
            let retry = match (failure, next.phases.get_mut(at_index)) {
                (PhaseFailureKind::Retryable, Some(p)) if p.failures < retries => {
                    p.failures += 1;
                    Some(start_command(&next.run_id, &next.flow, p))
                }
                (PhaseFailureKind::Retryable | PhaseFailureKind::Configuration, _) => None,
            };
            match retry {
                Some(command) => commands.push(command),
                None => {
                    if let Some(p) = next.phases.get_mut(at_index) {
                        p.status = PhaseStatus::Failed;
                        p.finished_at = Some(at);
                    }
                    fail(
                        &mut next,
                        format!("Phase '{phase}' failed: {reason}"),
                        &mut commands,
                    );
                }
            }
        }
        RunEvent::GateOpened {
            phase, approval_id, ..
        } => {
            let gate = open_gate_mut(&mut next, phase)?;
            if gate.announced {
                return Err(RunRefusal::AlreadyOpened { phase: phase.clone() });
            }
            gate.announced = true;
            gate.approval_id.clone_from(approval_id);
            let announce = RunCommand::AnnounceGate {
                run_id: state.run_id.clone(),
                phase: gate.phase.clone(),
                gate: gate.gate.clone(),
                reason: gate_reason(gate),
            };
            commands.push(announce);
        }
        RunEvent::GateDecided {
            phase,
            decision,
            approver,
            ..
        } => {
            decide(flow, &mut next, phase, decision, approver, at, &mut commands)?;
        }
        RunEvent::GateExpired { phase, .. } => {
            let gate = open_gate_mut(&mut next, phase)?.clone();
            match gate.deadline {
                Some(deadline) if at >= deadline => {}
                Some(_) | None => {
                    return Err(RunRefusal::NotExpired {
                        gate: gate.gate,
                        deadline: gate.deadline.map(|d| d.to_rfc3339()),
                    });
                }
            }
            let deadline = gate.deadline.map(|d| d.to_rfc3339()).unwrap_or_default();
            let reason = format!(
                "Gate '{}' expired at {deadline} without a decision: treated as a rejection",
                gate.gate
            );
            record(
                &mut next,
                &gate,
                GateDecision::Reject {
                    reason: Some(reason.clone()),
                },
                DEADLINE_APPROVER,
                false,
                at,
            );
            set_phase_status(&mut next, phase, PhaseStatus::Failed);
            close_gate(&mut next, "the gate expired", &mut commands);
            fail(&mut next, reason, &mut commands);
        }
        RunEvent::FlowChanged {
            version_id,
            content_hash,
            frozen,
            ..
        } => {
            if *version_id == state.flow.version_id {
                return Err(RunRefusal::SameVersion {
                    version_id: version_id.clone(),
                });
            }
            if next.gate.is_none() {
                let phase = next
                    .running_phase()
                    .map_or_else(|| "(none)".to_owned(), |p| p.id.clone());
                return Err(RunRefusal::NotAtGateBoundary { phase });
            }
            let changed = FrozenFlow::from_frozen(version_id, content_hash, frozen)?;
            close_gate(
                &mut next,
                &format!("the run's flow changed to version {version_id}"),
                &mut commands,
            );
            rebase(&changed, &mut next);
            flow_after = Some(changed);
        }
        RunEvent::Canceled { by, reason, .. } => {
            if by.trim().is_empty() {
                return Err(RunRefusal::Missing("canceled by"));
            }
            let running = next.phases.iter_mut().find(|p| p.status == PhaseStatus::Running);
            if let Some(p) = running {
                p.status = PhaseStatus::Canceled;
                commands.push(RunCommand::CancelPhase {
                    run_id: state.run_id.clone(),
                    phase: p.id.clone(),
                    attempt: p.attempt,
                    key: phase_attempt_key(&state.run_id, &p.id, p.attempt),
                });
            }
            close_gate(&mut next, "the run was canceled", &mut commands);
            let why = match reason.as_deref().map(str::trim) {
                Some(text) if !text.is_empty() => format!("canceled by {by}: {text}"),
                Some(_) | None => format!("canceled by {by}"),
            };
            next.status = RunStatus::Canceled;
            next.error = Some(why.clone());
            commands.push(RunCommand::CancelRun {
                run_id: next.run_id.clone(),
                reason: why,
            });
        }
    }
    if let Some(changed) = &flow_after {
        advance(changed, &mut next, at, &mut commands);
    }
    if next != *state {
        next.updated_at = at;
    }
    Ok(Transition {
        state: next,
        commands,
    })
}

/// The commands that re-establish the run's last boundary after a restart: the phase in flight
/// re-runs with the same `run:phase:attempt` key; a gate not yet reported parked is parked again;
/// a parked gate stays parked (nothing to do); a terminal run has nothing to resume.
pub fn resume(flow: &FrozenFlow, state: &RunState) -> Result<Vec<RunCommand>, RunRefusal> {
    check_version(flow.reference(), &state.flow)?;
    if state.status.is_terminal() {
        return Ok(Vec::new());
    }
    if let Some(p) = state.running_phase() {
        return Ok(vec![start_command(&state.run_id, &state.flow, p)]);
    }
    Ok(state
        .gate
        .iter()
        .filter(|g| !g.announced)
        .map(|g| open_command(&state.run_id, g))
        .collect())
}

fn check_version(flow: &FlowRef, pinned: &FlowRef) -> Result<(), RunRefusal> {
    if flow == pinned {
        return Ok(());
    }
    Err(RunRefusal::WrongVersion {
        expected: format!("{}@{}", pinned.version_id, pinned.content_hash),
        got: format!("{}@{}", flow.version_id, flow.content_hash),
    })
}

fn check_event_version(pinned: &FlowRef, named: &str) -> Result<(), RunRefusal> {
    if pinned.version_id == named {
        return Ok(());
    }
    Err(RunRefusal::WrongVersion {
        expected: pinned.version_id.clone(),
        got: named.to_owned(),
    })
}

/// The index of `phase` when `attempt` of it is in flight.
fn in_flight(state: &RunState, phase: &str, attempt: u32) -> Result<usize, RunRefusal> {
    let (index, p) = state
        .phases
        .iter()
        .enumerate()
        .find(|(_, p)| p.id == phase)
        .ok_or_else(|| RunRefusal::UnknownPhase {
            phase: phase.to_owned(),
        })?;
    if p.status == PhaseStatus::Running && p.attempt == attempt {
        return Ok(index);
    }
    Err(RunRefusal::NotInFlight {
        phase: phase.to_owned(),
        attempt,
        status: p.status.as_str(),
        current: p.attempt,
    })
}

fn open_gate_mut<'s>(state: &'s mut RunState, phase: &str) -> Result<&'s mut OpenGate, RunRefusal> {
    let open = state.gate.as_ref().map(|g| g.phase.clone());
    match state.gate.as_mut() {
        Some(gate) if gate.phase == phase => Ok(gate),
        Some(_) | None => Err(RunRefusal::NoOpenGate {
            phase: phase.to_owned(),
            open,
        }),
    }
}

fn decide(
    flow: &FrozenFlow,
    state: &mut RunState,
    phase: &str,
    decision: &GateDecision,
    approver: &str,
    at: Timestamp,
    commands: &mut Vec<RunCommand>,
) -> Result<(), RunRefusal> {
    let approver = approver.trim();
    if approver.is_empty() {
        return Err(RunRefusal::Missing("approver"));
    }
    let gate = open_gate_mut(state, phase)?.clone();
    let kind = decision.kind();
    match decision {
        GateDecision::Approve { .. } if !gate.ready => {
            return Err(RunRefusal::NotReady {
                gate: gate.gate,
                findings: gate.findings,
            });
        }
        GateDecision::Retry { reason } | GateDecision::Rework { reason, .. } if reason.trim().is_empty() => {
            return Err(RunRefusal::Missing("reason"));
        }
        GateDecision::Rework { .. } if state.reworks_used >= state.settings.rework_cap => {
            return Err(RunRefusal::ReworkCapReached {
                cap: state.settings.rework_cap,
            });
        }
        GateDecision::Approve { .. }
        | GateDecision::Reject { .. }
        | GateDecision::Retry { .. }
        | GateDecision::Rework { .. } => {}
    }
    if !gate.allowed.contains(&kind) {
        return Err(RunRefusal::NotAllowed {
            gate: gate.gate,
            decision: kind,
            allowed: gate.allowed,
        });
    }
    let gate_index = index_of(state, phase).ok_or_else(|| RunRefusal::UnknownPhase {
        phase: phase.to_owned(),
    })?;
    let rework_from = match decision {
        GateDecision::Rework { phase: target, .. } => Some(
            index_of(state, target)
                .filter(|&i| i < gate_index)
                .ok_or_else(|| RunRefusal::ReworkTarget {
                    phase: target.clone(),
                    gate_phase: phase.to_owned(),
                })?,
        ),
        GateDecision::Approve { .. } | GateDecision::Reject { .. } | GateDecision::Retry { .. } => None,
    };
    record(state, &gate, decision.clone(), approver, false, at);
    state.gate = None;
    let feedback = |source: FeedbackSource, reason: &str| PhaseFeedback {
        source,
        gate_phase: gate.phase.clone(),
        gate: gate.gate.clone(),
        reason: reason.trim().to_owned(),
        findings: gate.findings.clone(),
        approver: approver.to_owned(),
    };
    match decision {
        GateDecision::Approve { .. } => {
            set_phase_status(state, phase, PhaseStatus::Passed);
            state.status = RunStatus::Running;
            advance(flow, state, at, commands);
        }
        GateDecision::Reject { reason } => {
            set_phase_status(state, phase, PhaseStatus::Failed);
            let why = match reason.as_deref().map(str::trim) {
                Some(text) if !text.is_empty() => {
                    format!("Gate '{}' rejected by {approver}: {text}", gate.gate)
                }
                Some(_) | None => format!("Gate '{}' rejected by {approver}", gate.gate),
            };
            fail(state, why, commands);
        }
        GateDecision::Retry { reason } => {
            if let Some(p) = state.phases.get_mut(gate_index) {
                p.status = PhaseStatus::Pending;
                p.deliverables.clear();
                p.feedback = Some(feedback(FeedbackSource::Retry, reason));
            }
            state.status = RunStatus::Running;
            advance(flow, state, at, commands);
        }
        GateDecision::Rework { reason, .. } => {
            state.reworks_used += 1;
            let from = rework_from.unwrap_or(gate_index);
            for p in state.phases.iter_mut().skip(from) {
                let ran = p.attempt > 0;
                p.status = PhaseStatus::Pending;
                p.deliverables.clear();
                p.feedback = ran.then(|| feedback(FeedbackSource::Rework, reason));
            }
            state.status = RunStatus::Running;
            advance(flow, state, at, commands);
        }
    }
    Ok(())
}

/// Moves the run on until it needs outside input: a phase in flight, a parked gate, or the end.
fn advance(flow: &FrozenFlow, state: &mut RunState, at: Timestamp, commands: &mut Vec<RunCommand>) {
    loop {
        if state.gate.is_some() || state.running_phase().is_some() || state.status.is_terminal() {
            return;
        }
        let Some(index) = state.phases.iter().position(|p| p.status != PhaseStatus::Passed) else {
            state.status = RunStatus::Completed;
            state.error = None;
            commands.push(RunCommand::CompleteRun {
                run_id: state.run_id.clone(),
            });
            return;
        };
        let Some(current) = state.phases.get(index) else {
            return;
        };
        match current.status {
            PhaseStatus::Pending => {
                let run_id = state.run_id.clone();
                let pinned = state.flow.clone();
                if let Some(p) = state.phases.get_mut(index) {
                    p.attempt += 1;
                    p.failures = 0;
                    p.status = PhaseStatus::Running;
                    p.started_at = Some(at);
                    p.summary = None;
                    commands.push(start_command(&run_id, &pinned, p));
                }
                state.status = RunStatus::Running;
                return;
            }
            PhaseStatus::AwaitingGate => {
                let id = current.id.clone();
                let attempt = current.attempt;
                let Some(phase) = flow.phase(&id) else {
                    set_phase_status(state, &id, PhaseStatus::Passed);
                    continue;
                };
                let Some(gate) = &phase.gate else {
                    set_phase_status(state, &id, PhaseStatus::Passed);
                    continue;
                };
                let findings = readiness_findings(phase, state);
                let ready = findings.is_empty();
                if gate.auto_approve && ready {
                    state.decisions.push(GateRecord {
                        phase: id.clone(),
                        gate: gate.name.clone(),
                        attempt,
                        decision: GateDecision::Approve { reason: None },
                        approver: AUTO_APPROVER.to_owned(),
                        auto: true,
                        findings: Vec::new(),
                        at,
                    });
                    commands.push(RunCommand::AutoApproveGate {
                        run_id: state.run_id.clone(),
                        phase: id.clone(),
                        gate: gate.name.clone(),
                    });
                    set_phase_status(state, &id, PhaseStatus::Passed);
                    continue;
                }
                let deadline = state
                    .settings
                    .gate_timeout_seconds
                    .and_then(|s| i64::try_from(s).ok())
                    .and_then(Duration::try_seconds)
                    .and_then(|d| at.checked_add_signed(d));
                let open = OpenGate {
                    phase: id,
                    gate: gate.name.clone(),
                    ready,
                    allowed: allowed_decisions(
                        ready,
                        index > 0,
                        state.reworks_used < state.settings.rework_cap,
                    ),
                    findings,
                    auto_approve: gate.auto_approve,
                    opened_at: at,
                    deadline,
                    approval_id: None,
                    announced: false,
                };
                commands.push(open_command(&state.run_id, &open));
                state.gate = Some(open);
                state.status = RunStatus::AwaitingApproval;
                return;
            }
            PhaseStatus::Running | PhaseStatus::Passed | PhaseStatus::Failed | PhaseStatus::Canceled => {
                return;
            }
        }
    }
}

/// Moves the run onto a new frozen flow at a gate boundary: phases are the new version's, in its
/// order; a phase the old version already ran keeps its results (earlier approvals stand), a new
/// one is pending, a dropped one is gone. The gated phase's gate is evaluated again under the new
/// definition when the run reaches it.
fn rebase(changed: &FrozenFlow, state: &mut RunState) {
    let mut old: Vec<PhaseState> = std::mem::take(&mut state.phases);
    state.phases = changed
        .order()
        .iter()
        .map(|id| match old.iter().position(|p| p.id == *id) {
            Some(at) => old.swap_remove(at),
            None => PhaseState::pending(id.clone()),
        })
        .collect();
    state.flow = changed.reference().clone();
    state.status = RunStatus::Running;
}

fn index_of(state: &RunState, phase: &str) -> Option<usize> {
    state.phases.iter().position(|p| p.id == phase)
}

fn set_phase_status(state: &mut RunState, phase: &str, status: PhaseStatus) {
    if let Some(p) = state.phases.iter_mut().find(|p| p.id == phase) {
        p.status = status;
    }
}

fn record(
    state: &mut RunState,
    gate: &OpenGate,
    decision: GateDecision,
    approver: &str,
    auto: bool,
    at: Timestamp,
) {
    let attempt = state.phase(&gate.phase).map_or(0, |p| p.attempt);
    state.decisions.push(GateRecord {
        phase: gate.phase.clone(),
        gate: gate.gate.clone(),
        attempt,
        decision,
        approver: approver.to_owned(),
        auto,
        findings: gate.findings.clone(),
        at,
    });
}

fn close_gate(state: &mut RunState, reason: &str, commands: &mut Vec<RunCommand>) {
    if let Some(gate) = state.gate.take() {
        commands.push(RunCommand::CloseGate {
            run_id: state.run_id.clone(),
            phase: gate.phase,
            gate: gate.gate,
            reason: reason.to_owned(),
        });
    }
}

fn fail(state: &mut RunState, reason: String, commands: &mut Vec<RunCommand>) {
    state.gate = None;
    state.status = RunStatus::Failed;
    state.error = Some(reason.clone());
    commands.push(RunCommand::FailRun {
        run_id: state.run_id.clone(),
        reason,
    });
}

fn start_command(run_id: &str, pinned: &FlowRef, phase: &PhaseState) -> RunCommand {
    RunCommand::StartPhase {
        run_id: run_id.to_owned(),
        flow_version_id: pinned.version_id.clone(),
        content_hash: pinned.content_hash.clone(),
        phase: phase.id.clone(),
        attempt: phase.attempt,
        key: phase_attempt_key(run_id, &phase.id, phase.attempt),
        feedback: phase.feedback.clone(),
    }
}

fn open_command(run_id: &str, gate: &OpenGate) -> RunCommand {
    RunCommand::OpenGate {
        run_id: run_id.to_owned(),
        phase: gate.phase.clone(),
        gate: gate.gate.clone(),
        ready: gate.ready,
        findings: gate.findings.clone(),
        allowed: gate.allowed.clone(),
        deadline: gate.deadline,
    }
}
