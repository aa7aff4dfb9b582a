//! Properties of the run state machine over arbitrary event sequences on the shipped templates:
//! no sequence reopens a terminal run, passes a human gate without a person's approval, or starts
//! a phase of a version other than the one the run is pinned to; every state survives a serde
//! round trip and the reducer answers the same way twice.

#![expect(
    clippy::unwrap_used,
    reason = "the shipped templates and fixed timestamps are valid; a failure is a test failure"
)]

use std::collections::BTreeMap;

use chrono::{Duration, TimeZone, Utc};
use metaforge_domain::flow::{Flow, content_hash, freeze, template};
use metaforge_domain::run::{FrozenFlow, apply, start};
use metaforge_ports::{
    GateDecision, PhaseFailureKind, PhaseStatus, RunCommand, RunEvent, RunSettings, RunState, Timestamp,
};
use proptest::prelude::*;

const TEMPLATES: [&str; 3] = ["design_v1", "mech_v1", "hardware_v1"];

/// One step of a generated run: what kind of event, and the dice that shape it.
#[derive(Debug, Clone)]
enum Choice {
    Finish {
        mask: u8,
        wrong_attempt: bool,
    },
    Fail {
        configuration: bool,
    },
    Started,
    Opened,
    Decide {
        kind: u8,
        target: u8,
        other_phase: Option<u8>,
        blank: bool,
    },
    Expire {
        minutes: u16,
    },
    Change {
        to_variant: bool,
        corrupt: bool,
    },
    Cancel,
    ForeignVersionEvent,
    ApplyWithOtherFlow,
}

fn choice() -> impl Strategy<Value = Choice> {
    prop_oneof![
        6 => (any::<u8>(), prop::bool::weighted(0.1))
            .prop_map(|(mask, wrong_attempt)| Choice::Finish { mask, wrong_attempt }),
        1 => any::<bool>().prop_map(|configuration| Choice::Fail { configuration }),
        1 => Just(Choice::Started),
        2 => Just(Choice::Opened),
        6 => (0u8..4, any::<u8>(), prop::option::weighted(0.1, any::<u8>()), prop::bool::weighted(0.1))
            .prop_map(|(kind, target, other_phase, blank)| Choice::Decide { kind, target, other_phase, blank }),
        1 => (0u16..200).prop_map(|minutes| Choice::Expire { minutes }),
        1 => (any::<bool>(), prop::bool::weighted(0.2))
            .prop_map(|(to_variant, corrupt)| Choice::Change { to_variant, corrupt }),
        1 => Just(Choice::Cancel),
        1 => Just(Choice::ForeignVersionEvent),
        1 => Just(Choice::ApplyWithOtherFlow),
    ]
}

/// The template and a variant of it (its second phase dropped), both frozen, keyed by version id.
fn versions(id: &str) -> BTreeMap<String, (Flow, FrozenFlow)> {
    let base = template(id).unwrap();
    let mut variant = base.clone();
    variant.phases.remove(1);
    let mut out = BTreeMap::new();
    for (version, flow) in [(format!("{id}-v1"), base), (format!("{id}-v2"), variant)] {
        let frozen = FrozenFlow::new(&version, flow.clone()).unwrap();
        out.insert(version, (flow, frozen));
    }
    out
}

fn t0() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

fn event(
    choice: &Choice,
    state: &RunState,
    flows: &BTreeMap<String, (Flow, FrozenFlow)>,
    at: Timestamp,
) -> RunEvent {
    let version = state.flow.version_id.clone();
    let flow = &flows[&version].0;
    let running = state.running_phase().cloned();
    let gate_phase = state.gate.as_ref().map(|g| g.phase.clone());
    let any_phase = |n: u8| {
        let at = usize::from(n) % state.phases.len();
        state.phases[at].id.clone()
    };
    let (phase, attempt) = running
        .as_ref()
        .map_or_else(|| (any_phase(0), 1), |p| (p.id.clone(), p.attempt));
    match choice {
        Choice::Finish { mask, wrong_attempt } => {
            let required = flow
                .phase(&phase)
                .map(|p| p.required_deliverables.clone())
                .unwrap_or_default();
            let deliverables = required
                .into_iter()
                .enumerate()
                .filter(|(i, _)| *i >= 8 || mask & (1 << i) != 0 || *mask > 200)
                .map(|(_, d)| d)
                .collect();
            RunEvent::PhaseFinished {
                flow_version_id: version,
                phase,
                attempt: attempt + u32::from(*wrong_attempt),
                summary: "done".to_owned(),
                deliverables,
                at,
            }
        }
        Choice::Fail { configuration } => RunEvent::PhaseFailed {
            flow_version_id: version,
            phase,
            attempt,
            failure: if *configuration {
                PhaseFailureKind::Configuration
            } else {
                PhaseFailureKind::Retryable
            },
            reason: "boom".to_owned(),
            at,
        },
        Choice::Started => RunEvent::PhaseStarted {
            flow_version_id: version,
            phase,
            attempt,
            at,
        },
        Choice::Opened => RunEvent::GateOpened {
            phase: gate_phase.unwrap_or(phase),
            approval_id: Some("ap".to_owned()),
            at,
        },
        Choice::Decide {
            kind,
            target,
            other_phase,
            blank,
        } => {
            let reason = if *blank {
                " ".to_owned()
            } else {
                "because".to_owned()
            };
            let decision = match kind {
                0 => GateDecision::Approve { reason: None },
                1 => GateDecision::Reject { reason: Some(reason) },
                2 => GateDecision::Retry { reason },
                _ => GateDecision::Rework {
                    phase: any_phase(*target),
                    reason,
                },
            };
            RunEvent::GateDecided {
                phase: other_phase.map_or_else(|| gate_phase.unwrap_or(phase), any_phase),
                decision,
                approver: if *blank { String::new() } else { "alice".to_owned() },
                surface: metaforge_ports::DecisionSurface::Api,
                at,
            }
        }
        Choice::Expire { minutes } => RunEvent::GateExpired {
            phase: gate_phase.unwrap_or(phase),
            at: at + Duration::minutes(i64::from(*minutes)),
        },
        Choice::Change { to_variant, corrupt } => {
            let target = flows
                .keys()
                .find(|k| k.ends_with(if *to_variant { "-v2" } else { "-v1" }))
                .unwrap()
                .clone();
            let (target_flow, _) = &flows[&target];
            RunEvent::FlowChanged {
                version_id: target,
                content_hash: if *corrupt {
                    "0".repeat(64)
                } else {
                    content_hash(target_flow).unwrap()
                },
                frozen: freeze(target_flow).unwrap(),
                at,
            }
        }
        Choice::Cancel => RunEvent::Canceled {
            by: "alice".to_owned(),
            reason: None,
            at,
        },
        Choice::ForeignVersionEvent => RunEvent::PhaseFinished {
            flow_version_id: "some-other-version".to_owned(),
            phase,
            attempt,
            summary: "done".to_owned(),
            deliverables: Vec::new(),
            at,
        },
        Choice::ApplyWithOtherFlow => RunEvent::PhaseStarted {
            flow_version_id: version,
            phase,
            attempt,
            at,
        },
    }
}

/// Drives one run and checks every property at every step; returns the first violation.
fn drive(template_id: &str, settings: RunSettings, choices: &[Choice]) -> Result<(), String> {
    let flows = versions(template_id);
    let first = format!("{template_id}-v1");
    let mut state = start(&flows[&first].1, "run-p", settings, t0())
        .map_err(|e| e.to_string())?
        .state;
    for (step, choice) in choices.iter().enumerate() {
        let at = t0() + Duration::minutes(i64::try_from(step).unwrap_or(0) + 1);
        let event = event(choice, &state, &flows, at);
        let pinned = &flows[&state.flow.version_id].1;
        let other = flows
            .values()
            .map(|(_, f)| f)
            .find(|f| f.reference() != pinned.reference())
            .unwrap();
        let given = match choice {
            Choice::ApplyWithOtherFlow => other,
            _ => pinned,
        };
        let result = apply(given, &state, &event);
        if result != apply(given, &state, &event) {
            return Err(format!("step {step}: the reducer answered twice differently"));
        }
        let transition = match result {
            Ok(transition) => transition,
            Err(_) => continue,
        };
        if state.status.is_terminal() {
            return Err(format!(
                "step {step}: terminal run {:?} reopened by {}",
                state.status,
                event.name()
            ));
        }
        if given.reference() != &state.flow {
            return Err(format!(
                "step {step}: accepted an event under another version's flow"
            ));
        }
        if let RunEvent::PhaseFinished { flow_version_id, .. } = &event
            && *flow_version_id != state.flow.version_id
        {
            return Err(format!(
                "step {step}: accepted a phase of version {flow_version_id}"
            ));
        }
        let next = transition.state;
        let (next_flow, next_frozen) = &flows[&next.flow.version_id];
        for command in &transition.commands {
            if let RunCommand::StartPhase {
                flow_version_id,
                content_hash,
                phase,
                key,
                attempt,
                ..
            } = command
            {
                if flow_version_id != &next.flow.version_id || content_hash != &next.flow.content_hash {
                    return Err(format!(
                        "step {step}: started {phase} of {flow_version_id}, run is on {}",
                        next.flow.version_id
                    ));
                }
                if !next_frozen.order().contains(phase) {
                    return Err(format!(
                        "step {step}: started {phase}, which {flow_version_id} does not have"
                    ));
                }
                if key != &format!("run-p:{phase}:{attempt}") {
                    return Err(format!("step {step}: key {key} for {phase} attempt {attempt}"));
                }
            }
        }
        for phase in &next.phases {
            let was_passed = state
                .phase(&phase.id)
                .is_some_and(|p| p.status == PhaseStatus::Passed);
            let human = next_flow.phase(&phase.id).is_some_and(|p| p.has_human_gate());
            if phase.status == PhaseStatus::Passed && !was_passed && human {
                let approved_here = matches!(
                    &event,
                    RunEvent::GateDecided { phase: decided, decision: GateDecision::Approve { .. }, approver, .. }
                        if *decided == phase.id && !approver.trim().is_empty()
                );
                if !approved_here {
                    return Err(format!(
                        "step {step}: human gate on {} passed by {}",
                        phase.id,
                        event.name()
                    ));
                }
            }
        }
        if next.status == metaforge_ports::RunStatus::Completed {
            for phase in next_flow.phases.iter().filter(|p| p.has_human_gate()) {
                let approved = next.decisions.iter().any(|d| {
                    d.phase == phase.id && !d.auto && matches!(d.decision, GateDecision::Approve { .. })
                });
                if !approved {
                    return Err(format!(
                        "step {step}: completed without a person approving {}",
                        phase.id
                    ));
                }
            }
        }
        let json = serde_json::to_string(&next).map_err(|e| e.to_string())?;
        let back: RunState = serde_json::from_str(&json).map_err(|e| e.to_string())?;
        if back != next {
            return Err(format!(
                "step {step}: the state does not survive a serde round trip"
            ));
        }
        state = next;
    }
    Ok(())
}

/// A happy path through a template approves every human gate, so the generator above can reach
/// completion (otherwise the properties would hold vacuously).
#[test]
fn approving_every_gate_completes_each_shipped_template() {
    for id in TEMPLATES {
        let flows = versions(id);
        let first = format!("{id}-v1");
        let (flow, frozen) = &flows[&first];
        let mut state = start(frozen, "run-p", RunSettings::default(), t0())
            .unwrap()
            .state;
        for step in 0..1000 {
            if state.status.is_terminal() {
                break;
            }
            let at = t0() + Duration::minutes(step);
            let event = if let Some(gate) = &state.gate {
                RunEvent::GateDecided {
                    phase: gate.phase.clone(),
                    decision: GateDecision::Approve { reason: None },
                    approver: "alice".to_owned(),
                    surface: metaforge_ports::DecisionSurface::Api,
                    at,
                }
            } else {
                let running = state.running_phase().unwrap();
                RunEvent::PhaseFinished {
                    flow_version_id: first.clone(),
                    phase: running.id.clone(),
                    attempt: running.attempt,
                    summary: "done".to_owned(),
                    deliverables: flow.phase(&running.id).unwrap().required_deliverables.clone(),
                    at,
                }
            };
            state = apply(frozen, &state, &event).unwrap().state;
        }
        assert_eq!(state.status, metaforge_ports::RunStatus::Completed, "{id}");
        let human = flow.phases.iter().filter(|p| p.has_human_gate()).count();
        assert_eq!(state.decisions.iter().filter(|d| !d.auto).count(), human, "{id}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// No event sequence reopens a terminal run, passes a human gate without a person's approval,
    /// or starts a phase of a version other than the pinned one; every state round-trips.
    #[test]
    fn no_event_sequence_reopens_a_run_skips_a_human_gate_or_runs_another_version(
        template_at in 0usize..TEMPLATES.len(),
        rework_cap in 0u32..3,
        phase_retries in 0u32..3,
        timeout in prop::option::of(60u64..7200),
        choices in prop::collection::vec(choice(), 1..120),
    ) {
        let settings = RunSettings { rework_cap, phase_retries, gate_timeout_seconds: timeout };
        let verdict = drive(TEMPLATES[template_at], settings, &choices);
        prop_assert!(verdict.is_ok(), "{}", verdict.err().unwrap_or_default());
    }
}
