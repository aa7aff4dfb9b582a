//! Gate readiness (FORGE-495): a gate whose required deliverables are not recorded is not ready.
//! It parks with findings instead of ending the run; it cannot be approved, only retried,
//! reworked or rejected. The decisions a gate allows are computed here, once, so the API, the
//! chat elicitation and the reducer offer and accept the same set.

use std::collections::BTreeSet;

use metaforge_ports::{GateDecisionKind, OpenGate, PhaseStatus, RunState};

use crate::flow::Phase;

/// What the gate on `phase` finds missing, given every deliverable the run has recorded in its
/// phases that finished (empty: ready). Only enforced gates check.
pub fn readiness_findings(phase: &Phase, state: &RunState) -> Vec<String> {
    if !phase.enforce_deliverables {
        return Vec::new();
    }
    let recorded: BTreeSet<&str> = state
        .phases
        .iter()
        .filter(|p| matches!(p.status, PhaseStatus::Passed | PhaseStatus::AwaitingGate))
        .flat_map(|p| p.deliverables.iter().map(String::as_str))
        .collect();
    phase
        .required_deliverables
        .iter()
        .filter(|d| !recorded.contains(d.as_str()))
        .map(|d| format!("required deliverable '{d}' is not recorded"))
        .collect()
}

/// The decisions a gate allows: approve only when ready; reject and retry always; rework while
/// the cap allows and some phase runs before the gated one.
pub fn allowed_decisions(ready: bool, has_earlier_phase: bool, reworks_left: bool) -> Vec<GateDecisionKind> {
    let mut allowed = Vec::with_capacity(4);
    if ready {
        allowed.push(GateDecisionKind::Approve);
    }
    allowed.push(GateDecisionKind::Reject);
    allowed.push(GateDecisionKind::Retry);
    if has_earlier_phase && reworks_left {
        allowed.push(GateDecisionKind::Rework);
    }
    allowed
}

/// The approval reason a parked gate shows: its name and its check summary.
pub fn gate_reason(gate: &OpenGate) -> String {
    if gate.ready {
        format!("{}: ready for review", gate.gate)
    } else {
        format!("{}: not ready: {}", gate.gate, gate.findings.join("; "))
    }
}

/// The approval reason for the run's open gate, if it is parked at one.
pub fn approval_reason(state: &RunState) -> Option<String> {
    state.gate.as_ref().map(gate_reason)
}
