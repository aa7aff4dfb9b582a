//! The brief one phase attempt is given (FORGE-475/581), built once here from the frozen flow and
//! the run state, so the server's agent loop and a client task are told exactly the same thing.

use metaforge_ports::{
    EarlierSummary, IntelligenceMode, PhaseBrief, PhaseStatus, RunState, phase_attempt_key,
};

use super::frozen::FrozenFlow;
use super::refusal::RunRefusal;

/// The brief for the attempt of `phase` now in flight: goal, deliverables and slots, flow
/// context, retry or rework feedback, and the summaries of the phases that passed before it.
pub fn phase_brief(
    flow: &FrozenFlow,
    state: &RunState,
    phase: &str,
    project_id: Option<&str>,
    intelligence: IntelligenceMode,
) -> Result<PhaseBrief, RunRefusal> {
    if flow.reference() != &state.flow {
        return Err(RunRefusal::WrongVersion {
            expected: state.flow.version_id.clone(),
            got: flow.reference().version_id.clone(),
        });
    }
    let definition = flow.phase(phase).ok_or_else(|| RunRefusal::UnknownPhase {
        phase: phase.to_owned(),
    })?;
    let current = state.phase(phase).ok_or_else(|| RunRefusal::UnknownPhase {
        phase: phase.to_owned(),
    })?;
    if current.status != PhaseStatus::Running {
        return Err(RunRefusal::NotInFlight {
            phase: phase.to_owned(),
            attempt: current.attempt,
            status: current.status.as_str(),
            current: current.attempt,
        });
    }
    let earlier = state
        .phases
        .iter()
        .take_while(|p| p.id != phase)
        .filter(|p| p.status == PhaseStatus::Passed)
        .filter_map(|p| {
            p.summary.as_ref().map(|summary| EarlierSummary {
                phase: p.id.clone(),
                summary: summary.clone(),
            })
        })
        .collect();
    let mut goal = format!("Complete the '{}' phase", definition.title);
    if !definition.expected_artifacts.is_empty() {
        goal.push_str(&format!(": produce {}", definition.expected_artifacts.join(", ")));
    }
    if !definition.required_deliverables.is_empty() {
        goal.push_str(&format!(
            "; its gate requires {} recorded in the twin",
            definition.required_deliverables.join(", ")
        ));
    }
    goal.push('.');
    let whole = flow.flow();
    Ok(PhaseBrief {
        run_id: state.run_id.clone(),
        project_id: project_id.map(str::to_owned),
        flow_version_id: state.flow.version_id.clone(),
        intelligence,
        phase: phase.to_owned(),
        title: definition.title.clone(),
        goal,
        disciplines: definition.disciplines.clone(),
        expected_artifacts: definition.expected_artifacts.clone(),
        required_deliverables: definition.required_deliverables.clone(),
        items: definition.items.clone(),
        flow_context: format!("{} ({} {})", whole.title, whole.id, whole.version),
        model: definition.model.clone(),
        attempt: current.attempt,
        key: phase_attempt_key(&state.run_id, phase, current.attempt),
        feedback: current.feedback.clone(),
        earlier,
    })
}
