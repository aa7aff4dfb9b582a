//! A run's gate holds in the one approval ledger (FORGE-401/485): a human gate is parked there
//! when it opens, decided with the person's answer, timed out at its deadline, canceled when the
//! run no longer waits, and an auto-approved checkpoint is parked and approved at once — so every
//! open gate shows in the one approvals list, whichever engine runs the flow. Each effect is
//! idempotent by the hold's id (`gate:<run>:<phase>:<attempt>`), so a re-act after a restart, or
//! an engine that follows a run's transitions from outside (Temporal), does each once.
//!
//! The embedded driver calls these as it acts on a transition; the Temporal engine's follower
//! calls [`GateHolds::follow`] for every transition its workflow made.

use std::sync::Arc;

use metaforge_domain::run::approval_reason;
use metaforge_ports::{
    AUTO_APPROVER, ApprovalDecision, ApprovalKind, ApprovalLedger, ApprovalRecord, ApprovalStatus, Clock,
    GateDecision, PortError, PortErrorKind, RunCommand, RunEvent, RunRecord, RunState, RunTransition,
    WaiterResolution, gate_approval_id,
};
use serde_json::json;

/// The approval ledger as a run's gates use it.
#[derive(Clone)]
pub struct GateHolds {
    approvals: Arc<dyn ApprovalLedger>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for GateHolds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateHolds").finish_non_exhaustive()
    }
}

/// The note a gate decision leaves on its hold.
fn decision_note(decision: &GateDecision) -> Option<String> {
    match decision {
        GateDecision::Approve { reason } | GateDecision::Reject { reason } => reason.clone(),
        GateDecision::Retry { reason } => Some(format!("retry: {reason}")),
        GateDecision::Rework { phase, reason } => Some(format!("rework from '{phase}': {reason}")),
    }
}

/// A hold-ledger answer that leaves the hold as the run needs it: done, already closed or
/// decided (a re-act), or never parked.
pub(crate) fn settled_enough(result: &Result<(), PortError>) -> bool {
    match result {
        Ok(()) => true,
        Err(e) => matches!(e.kind, PortErrorKind::Conflict | PortErrorKind::NotFound),
    }
}

/// The gate hold `event` itself decides (a person's decision) or times out (an expiry), as of
/// `state`, the state right after it; `None` for every other event. Closed as the event's
/// effect, also on resume; the start-up sweep of stray holds leaves it to the driver.
pub(crate) fn event_hold(run_id: &str, event: &RunEvent, state: &RunState) -> Option<String> {
    match event {
        RunEvent::GateDecided { phase, .. } => {
            let attempt = state
                .decisions
                .iter()
                .rev()
                .find(|d| d.phase == *phase && !d.auto)
                .map_or(0, |d| d.attempt);
            Some(gate_approval_id(run_id, phase, attempt))
        }
        RunEvent::GateExpired { phase, .. } => {
            let attempt = state.phase(phase).map_or(0, |p| p.attempt);
            Some(gate_approval_id(run_id, phase, attempt))
        }
        RunEvent::PhaseStarted { .. }
        | RunEvent::PhaseFinished { .. }
        | RunEvent::PhaseFailed { .. }
        | RunEvent::GateOpened { .. }
        | RunEvent::FlowChanged { .. }
        | RunEvent::Canceled { .. } => None,
    }
}

impl GateHolds {
    /// Holds in `approvals`, stamped by `clock`.
    pub fn new(approvals: Arc<dyn ApprovalLedger>, clock: Arc<dyn Clock>) -> Self {
        Self { approvals, clock }
    }

    /// The id of `phase`'s hold in `state` (its current attempt).
    pub fn hold_id(run_id: &str, state: &RunState, phase: &str) -> String {
        let attempt = state.phase(phase).map_or(0, |p| p.attempt);
        gate_approval_id(run_id, phase, attempt)
    }

    /// The hold of `phase`'s gate as of `state`: what a person deciding it sees.
    pub fn hold(
        &self,
        record: &RunRecord,
        state: &RunState,
        phase: &str,
        gate: &str,
        reason: String,
    ) -> ApprovalRecord {
        let open = state.gate.as_ref().filter(|g| g.phase == phase);
        let attempt = state.phase(phase).map_or(0, |p| p.attempt);
        ApprovalRecord {
            id: gate_approval_id(&record.id, phase, attempt),
            kind: ApprovalKind::Gate,
            tool: "run.gate".to_owned(),
            arguments: json!({
                "run_id": record.id,
                "project_id": record.project_id,
                "phase": phase,
                "gate": gate,
                "attempt": attempt,
                "ready": open.map(|g| g.ready),
                "findings": open.map(|g| g.findings.clone()),
                "allowed": open.map(|g| g.allowed.clone()),
                "deadline": open.and_then(|g| g.deadline),
                "flow_version_id": state.flow.version_id,
                "content_hash": state.flow.content_hash,
            }),
            caller: "service".to_owned(),
            status: ApprovalStatus::AwaitingApproval,
            reason: Some(reason),
            approver: None,
            flow_version_id: None,
            created_at: self.clock.now(),
            decided_at: None,
            deadline: None,
            requested_by: None,
        }
    }

    /// Parks `record`, or finds the hold a previous act parked under the same id.
    pub async fn park_once(&self, record: ApprovalRecord) -> Result<ApprovalRecord, PortError> {
        match self.approvals.park(record.clone()).await {
            Ok(parked) => Ok(parked),
            Err(e) if e.kind == PortErrorKind::Conflict => {
                let existing = self.approvals.get(&record.id).await?;
                match existing.kind {
                    ApprovalKind::Gate => Ok(existing),
                    ApprovalKind::ToolCall
                    | ApprovalKind::DesignFlowProposal
                    | ApprovalKind::DesignFlowVersion => Err(PortError::new(
                        PortErrorKind::Conflict,
                        format!("approval {} exists and is not a gate hold", record.id),
                    )),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Parks the hold of the gate `state` opened at `phase` (with the reducer's approval reason).
    pub async fn open(
        &self,
        record: &RunRecord,
        state: &RunState,
        phase: &str,
        gate: &str,
    ) -> Result<ApprovalRecord, PortError> {
        let reason = approval_reason(state).unwrap_or_else(|| gate.to_owned());
        let parked = self
            .park_once(self.hold(record, state, phase, gate, reason))
            .await?;
        if parked.status != ApprovalStatus::AwaitingApproval {
            tracing::error!(event = "run_gate_hold_closed", run_id = %record.id, approval_id = %parked.id, status = parked.status.as_str(), "the gate's hold exists but is closed; the gate stays answerable through the run");
        }
        Ok(parked)
    }

    /// Parks and approves an auto-approved checkpoint's hold.
    pub async fn auto_approve(
        &self,
        record: &RunRecord,
        state: &RunState,
        phase: &str,
        gate: &str,
    ) -> Result<(), PortError> {
        let hold = self.hold(
            record,
            state,
            phase,
            gate,
            format!("{gate}: auto-approved checkpoint"),
        );
        let id = hold.id.clone();
        let parked = self.park_once(hold).await?;
        if parked.status != ApprovalStatus::AwaitingApproval {
            return Ok(());
        }
        self.approvals
            .decide(
                &id,
                ApprovalDecision {
                    approve: true,
                    approver: AUTO_APPROVER.to_owned(),
                    note: Some("auto-approved: its required deliverables are recorded".to_owned()),
                },
            )
            .await
            .map(|_| ())
    }

    /// Cancels `phase`'s hold: the run no longer waits at it.
    pub async fn close(
        &self,
        run_id: &str,
        state: &RunState,
        phase: &str,
        reason: &str,
    ) -> Result<(), PortError> {
        let id = Self::hold_id(run_id, state, phase);
        self.approvals
            .resolve(&id, WaiterResolution::Canceled, Some(reason.to_owned()))
            .await
            .map(|_| ())
    }

    /// The effect `event` itself has on a hold: a person's decision decides it, an expiry times
    /// it out; every other event leaves the holds alone. `id` is [`event_hold`]'s.
    pub async fn event_effect(
        &self,
        run_id: &str,
        event: &RunEvent,
        state: &RunState,
    ) -> Result<(), PortError> {
        let Some(id) = event_hold(run_id, event, state) else {
            return Ok(());
        };
        match event {
            RunEvent::GateDecided {
                decision,
                approver,
                surface,
                ..
            } => {
                self.approvals
                    .decide(
                        &id,
                        ApprovalDecision {
                            approve: matches!(decision, GateDecision::Approve { .. }),
                            approver: approver.clone(),
                            note: decision_note(decision),
                        },
                    )
                    .await?;
                tracing::info!(event = "approval_decided", approval_id = %id, kind = ApprovalKind::Gate.as_str(), decision = decision.kind().as_str(), approver = %approver, surface = surface.as_str(), "a person answered a run's gate");
                Ok(())
            }
            RunEvent::GateExpired { .. } => self
                .approvals
                .resolve(
                    &id,
                    WaiterResolution::TimedOut,
                    Some("the gate's deadline passed: treated as a rejection".to_owned()),
                )
                .await
                .map(|_| ()),
            RunEvent::PhaseStarted { .. }
            | RunEvent::PhaseFinished { .. }
            | RunEvent::PhaseFailed { .. }
            | RunEvent::GateOpened { .. }
            | RunEvent::FlowChanged { .. }
            | RunEvent::Canceled { .. } => Ok(()),
        }
    }

    /// Every hold effect of one transition, in order — the event's, then its commands' (a gate
    /// opened, auto-approved or closed) — for an engine whose workflow keeps no holds itself and
    /// is followed from outside. Idempotent: following a transition twice changes nothing more.
    /// The first failure that leaves a hold short of what the run needs is returned.
    pub async fn follow(&self, record: &RunRecord, t: &RunTransition) -> Result<(), PortError> {
        let mut failures = Vec::new();
        if let Some(event) = &t.event {
            let done = self.event_effect(&record.id, event, &t.state).await;
            if !settled_enough(&done) {
                failures.push(done);
            }
        }
        for command in &t.commands {
            let done = match command {
                RunCommand::OpenGate { phase, gate, .. } => {
                    self.open(record, &t.state, phase, gate).await.map(|_| ())
                }
                RunCommand::AutoApproveGate { phase, gate, .. } => {
                    self.auto_approve(record, &t.state, phase, gate).await
                }
                RunCommand::CloseGate { phase, reason, .. } => {
                    self.close(&record.id, &t.state, phase, reason).await
                }
                RunCommand::StartPhase { .. }
                | RunCommand::AnnounceGate { .. }
                | RunCommand::CancelPhase { .. }
                | RunCommand::CompleteRun { .. }
                | RunCommand::FailRun { .. }
                | RunCommand::CancelRun { .. } => Ok(()),
            };
            if !settled_enough(&done) {
                failures.push(done);
            }
        }
        failures.into_iter().next().unwrap_or(Ok(()))
    }
}
