//! Table: the run state machine — every gate decision, readiness, auto-approve, the rework cap,
//! retry feedback, expiry, cancel, flow changes at and away from a gate boundary, terminal runs,
//! and events for another version — from `fixtures/rules/run_reducer.json`.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "fixture helpers: a malformed fixture must fail the test loudly"
)]

use std::collections::BTreeMap;

use chrono::{Duration, TimeZone, Utc};
use metaforge_domain::flow::{Flow, freeze};
use metaforge_domain::run::{FrozenFlow, RunRefusal, Transition, apply, start};
use metaforge_ports::{
    GateDecision, GateDecisionKind, PhaseFailureKind, RunCommand, RunEvent, RunSettings, RunState, Timestamp,
};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    flow: String,
    #[serde(default)]
    settings: Option<RunSettings>,
    events: Vec<Step>,
    expect: Expect,
    #[serde(default)]
    start_refused: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    event: String,
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    attempt: Option<u32>,
    #[serde(default)]
    deliverables: Option<Vec<String>>,
    #[serde(default)]
    decision: Option<GateDecision>,
    #[serde(default)]
    approver: Option<String>,
    #[serde(default)]
    approval_id: Option<String>,
    #[serde(default)]
    failure: Option<PhaseFailureKind>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    by: Option<String>,
    #[serde(default)]
    to: Option<String>,
    #[serde(default)]
    corrupt: bool,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    with_flow: Option<String>,
    #[serde(default)]
    at_minutes: Option<i64>,
    #[serde(default)]
    refused: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    order: Option<Vec<String>>,
    #[serde(default)]
    phases: BTreeMap<String, String>,
    #[serde(default)]
    attempts: BTreeMap<String, u32>,
    #[serde(default)]
    feedback: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "some")]
    gate: Option<Option<GateExpect>>,
    #[serde(default, deserialize_with = "some")]
    error: Option<Option<String>>,
    #[serde(default)]
    decisions: Option<Vec<String>>,
    #[serde(default)]
    reworks_used: Option<u32>,
    #[serde(default)]
    commands: Option<Vec<String>>,
    #[serde(default)]
    deadline_minutes: Option<i64>,
    #[serde(default)]
    unchanged: bool,
}

/// Tells "absent" (`None`) from an explicit `null` (`Some(None)`).
fn some<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct GateExpect {
    phase: String,
    ready: bool,
    findings: Vec<String>,
    allowed: Vec<GateDecisionKind>,
}

fn t0() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

fn minutes(n: i64) -> Timestamp {
    t0() + Duration::minutes(n)
}

/// One line per command, so a table can say what the engine is asked to do.
pub(crate) fn render(command: &RunCommand) -> String {
    match command {
        RunCommand::StartPhase {
            phase,
            attempt,
            key,
            feedback,
            ..
        } => {
            let mut line = format!("start_phase {phase} {attempt} key={key}");
            if let Some(f) = feedback {
                line.push_str(&format!(" feedback={}", source(f.source)));
            }
            line
        }
        RunCommand::OpenGate { phase, ready, .. } => {
            format!("open_gate {phase} {}", if *ready { "ready" } else { "not_ready" })
        }
        RunCommand::AnnounceGate { phase, reason, .. } => format!("announce_gate {phase}: {reason}"),
        RunCommand::AutoApproveGate { phase, .. } => format!("auto_approve_gate {phase}"),
        RunCommand::CloseGate { phase, reason, .. } => format!("close_gate {phase}: {reason}"),
        RunCommand::CancelPhase { key, .. } => format!("cancel_phase {key}"),
        RunCommand::CompleteRun { .. } => "complete_run".to_owned(),
        RunCommand::FailRun { reason, .. } => format!("fail_run: {reason}"),
        RunCommand::CancelRun { reason, .. } => format!("cancel_run: {reason}"),
    }
}

fn source(source: metaforge_ports::FeedbackSource) -> &'static str {
    match source {
        metaforge_ports::FeedbackSource::Retry => "retry",
        metaforge_ports::FeedbackSource::Rework => "rework",
    }
}

struct Table {
    flows: BTreeMap<String, Flow>,
}

impl Table {
    fn frozen(&self, name: &str) -> FrozenFlow {
        FrozenFlow::new(name, self.flows[name].clone()).unwrap()
    }

    fn event(&self, step: &Step, state: &RunState, index: usize) -> RunEvent {
        let at = step
            .at_minutes
            .map_or_else(|| minutes(i64::try_from(index).unwrap() + 1), minutes);
        let phase = step.phase.clone().unwrap_or_default();
        let in_flight = state.phase(&phase).map_or(1, |p| p.attempt);
        let attempt = step.attempt.unwrap_or(in_flight);
        let flow_version_id = step
            .version
            .clone()
            .unwrap_or_else(|| state.flow.version_id.clone());
        match step.event.as_str() {
            "phase_started" => RunEvent::PhaseStarted {
                flow_version_id,
                phase,
                attempt,
                at,
            },
            "phase_finished" => {
                let deliverables = step.deliverables.clone().unwrap_or_else(|| {
                    self.flows[&state.flow.version_id]
                        .phase(&phase)
                        .map(|p| p.required_deliverables.clone())
                        .unwrap_or_default()
                });
                RunEvent::PhaseFinished {
                    flow_version_id,
                    summary: format!("{phase} done"),
                    phase,
                    attempt,
                    deliverables,
                    at,
                }
            }
            "phase_failed" => RunEvent::PhaseFailed {
                flow_version_id,
                phase,
                attempt,
                failure: step.failure.unwrap(),
                reason: step.reason.clone().unwrap(),
                at,
            },
            "gate_opened" => RunEvent::GateOpened {
                phase,
                approval_id: step.approval_id.clone(),
                at,
            },
            "gate_decided" => RunEvent::GateDecided {
                phase,
                decision: step.decision.clone().unwrap(),
                approver: step.approver.clone().unwrap(),
                surface: metaforge_ports::DecisionSurface::Api,
                at,
            },
            "gate_expired" => RunEvent::GateExpired { phase, at },
            "flow_changed" => {
                let to = step.to.clone().unwrap();
                let frozen = freeze(&self.flows[&to]).unwrap();
                let content_hash = if step.corrupt {
                    "0".repeat(64)
                } else {
                    metaforge_domain::flow::sha256_hex(&frozen)
                };
                RunEvent::FlowChanged {
                    version_id: to,
                    content_hash,
                    frozen,
                    at,
                }
            }
            "canceled" => RunEvent::Canceled {
                by: step.by.clone().unwrap(),
                reason: step.reason.clone(),
                at,
            },
            other => panic!("unknown event {other}"),
        }
    }
}

fn check(case: &Case, table: &Table) -> Vec<String> {
    let mut problems = Vec::new();
    let mut fail = |what: String| problems.push(format!("{}: {what}", case.name));
    let settings = case.settings.unwrap_or_default();
    let started = FrozenFlow::new(&case.flow, table.flows[&case.flow].clone())
        .and_then(|flow| start(&flow, case.run_id.as_deref().unwrap_or("run-1"), settings, t0()));
    let Transition {
        mut state,
        mut commands,
    } = match (started, &case.start_refused) {
        (Err(refusal), Some(code)) => {
            if refusal.code() != code {
                fail(format!("start refused with {}, expected {code}", refusal.code()));
            }
            return problems;
        }
        (Err(refusal), None) => {
            fail(format!("start refused: {refusal}"));
            return problems;
        }
        (Ok(_), Some(code)) => {
            fail(format!("start accepted, expected refusal {code}"));
            return problems;
        }
        (Ok(transition), None) => transition,
    };
    let mut before_last = state.clone();
    for (index, step) in case.events.iter().enumerate() {
        let event = table.event(step, &state, index);
        let flow = table.frozen(step.with_flow.as_deref().unwrap_or(&state.flow.version_id));
        match (apply(&flow, &state, &event), &step.refused) {
            (Ok(transition), None) => {
                before_last = state.clone();
                state = transition.state;
                commands = transition.commands;
            }
            (Ok(_), Some(code)) => fail(format!("step {index} ({}) accepted, expected {code}", step.event)),
            (Err(refusal), None) => fail(format!("step {index} ({}) refused: {refusal}", step.event)),
            (Err(refusal), Some(code)) => {
                if refusal.code() != code {
                    fail(format!(
                        "step {index} ({}) refused with {} ({refusal}), expected {code}",
                        step.event,
                        refusal.code()
                    ));
                }
                refusal_is_specific(&refusal, &mut fail);
            }
        }
    }
    let expect = &case.expect;
    if let Some(status) = &expect.status
        && state.status.as_str() != status
    {
        fail(format!("status {}, expected {status}", state.status.as_str()));
    }
    if let Some(version) = &expect.version
        && &state.flow.version_id != version
    {
        fail(format!("version {}, expected {version}", state.flow.version_id));
    }
    if let Some(order) = &expect.order {
        let got: Vec<&str> = state.phases.iter().map(|p| p.id.as_str()).collect();
        if got != order.iter().map(String::as_str).collect::<Vec<_>>() {
            fail(format!("order {got:?}, expected {order:?}"));
        }
    }
    for (phase, status) in &expect.phases {
        let got = state.phase(phase).map(|p| p.status.as_str());
        if got != Some(status.as_str()) {
            fail(format!("phase {phase} is {got:?}, expected {status}"));
        }
    }
    for (phase, attempt) in &expect.attempts {
        let got = state.phase(phase).map(|p| p.attempt);
        if got != Some(*attempt) {
            fail(format!("phase {phase} attempt {got:?}, expected {attempt}"));
        }
    }
    for (phase, text) in &expect.feedback {
        let got = state.phase(phase).and_then(|p| p.feedback.as_ref()).map(|f| {
            format!(
                "{} by {} at {}: {} [{}]",
                source(f.source),
                f.approver,
                f.gate,
                f.reason,
                f.findings.join("; ")
            )
        });
        if got.as_deref() != Some(text.as_str()) {
            fail(format!("phase {phase} feedback {got:?}, expected {text}"));
        }
    }
    if let Some(gate) = &expect.gate {
        let got = state.gate.as_ref().map(|g| GateExpect {
            phase: g.phase.clone(),
            ready: g.ready,
            findings: g.findings.clone(),
            allowed: g.allowed.clone(),
        });
        if &got != gate {
            fail(format!("gate {got:?}, expected {gate:?}"));
        }
    }
    if let Some(error) = &expect.error
        && &state.error != error
    {
        fail(format!("error {:?}, expected {error:?}", state.error));
    }
    if let Some(decisions) = &expect.decisions {
        let got: Vec<String> = state
            .decisions
            .iter()
            .map(|d| format!("{} {} {}", d.phase, d.decision.kind().as_str(), d.approver))
            .collect();
        if &got != decisions {
            fail(format!("decisions {got:?}, expected {decisions:?}"));
        }
    }
    if let Some(used) = expect.reworks_used
        && state.reworks_used != used
    {
        fail(format!("reworks_used {}, expected {used}", state.reworks_used));
    }
    if let Some(expected) = &expect.commands {
        let got: Vec<String> = commands.iter().map(render).collect();
        if &got != expected {
            fail(format!("commands {got:?}, expected {expected:?}"));
        }
    }
    if let Some(deadline) = expect.deadline_minutes {
        let got = state.gate.as_ref().and_then(|g| g.deadline);
        if got != Some(minutes(deadline)) {
            fail(format!("deadline {got:?}, expected minute {deadline}"));
        }
    }
    if expect.unchanged && state != before_last {
        fail("the last event changed the state".to_owned());
    }
    problems
}

/// Every refusal's message names something (it is what a 409 body says).
fn refusal_is_specific(refusal: &RunRefusal, fail: &mut impl FnMut(String)) {
    if refusal.to_string().trim().len() < 10 {
        fail(format!("refusal message too vague: {refusal}"));
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NamedFlow {
    name: String,
    flow: Flow,
}

fn table() -> (Table, Vec<Case>) {
    let flows = metaforge_test_support::cases::section::<NamedFlow>("run_reducer", "flows")
        .into_iter()
        .map(|f| (f.name, f.flow))
        .collect();
    (Table { flows }, metaforge_test_support::cases("run_reducer"))
}

/// Every case in `fixtures/rules/run_reducer.json` holds.
#[test]
fn every_run_reducer_case_holds() {
    let (table, cases) = table();
    let mut problems = Vec::new();
    for case in &cases {
        problems.extend(check(case, &table));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The table covers every decision, refusal and command, so a new rule comes with a case.
#[test]
fn the_run_reducer_table_has_a_case_for_every_decision_and_refusal() {
    let text =
        std::fs::read_to_string(metaforge_test_support::cases::rules_dir().join("run_reducer.json")).unwrap();
    for needle in [
        "\"approve\"",
        "\"reject\"",
        "\"retry\"",
        "\"rework\"",
        "gate_expired",
        "flow_changed",
        "canceled",
        "\"terminal\"",
        "\"wrong_version\"",
        "\"not_ready\"",
        "\"rework_cap_reached\"",
        "\"not_at_gate_boundary\"",
        "auto_approve_gate",
        "complete_run",
        "fail_run",
        "cancel_run",
        "close_gate",
        "announce_gate",
    ] {
        assert!(
            text.contains(needle),
            "run_reducer.json has no case with {needle}"
        );
    }
    let cases: Vec<serde_json::Value> = metaforge_test_support::cases("run_reducer");
    assert!(cases.len() >= 50, "only {} cases", cases.len());
}

fn linear() -> (Table, FrozenFlow) {
    let (table, _) = table();
    let frozen = table.frozen("linear");
    (table, frozen)
}

fn finish(state: &RunState, phase: &str, deliverables: &[&str], minute: i64) -> RunEvent {
    RunEvent::PhaseFinished {
        flow_version_id: state.flow.version_id.clone(),
        phase: phase.to_owned(),
        attempt: state.phase(phase).unwrap().attempt,
        summary: format!("{phase} summary"),
        deliverables: deliverables.iter().map(|d| (*d).to_owned()).collect(),
        at: minutes(minute),
    }
}

/// After a restart the phase in flight re-runs under the same `run:phase:attempt` key, a gate not
/// yet reported parked is parked again, a parked gate stays parked, and a terminal run resumes
/// nothing.
#[test]
fn resuming_reruns_the_phase_in_flight_with_the_same_key_and_leaves_a_parked_gate_parked() {
    use metaforge_domain::run::resume;
    let (_, flow) = linear();
    let started = start(&flow, "run-1", RunSettings::default(), t0()).unwrap();
    assert_eq!(resume(&flow, &started.state).unwrap(), started.commands);
    let at_concept = apply(
        &flow,
        &started.state,
        &finish(&started.state, "concept", &["concept_note"], 1),
    )
    .unwrap();
    let at_gate = apply(
        &flow,
        &at_concept.state,
        &finish(&at_concept.state, "design", &["cad_model"], 2),
    )
    .unwrap();
    let again: Vec<String> = resume(&flow, &at_gate.state)
        .unwrap()
        .iter()
        .map(render)
        .collect();
    assert_eq!(again, vec!["open_gate design ready".to_owned()]);
    let opened = RunEvent::GateOpened {
        phase: "design".into(),
        approval_id: Some("ap-1".into()),
        at: minutes(3),
    };
    let parked = apply(&flow, &at_gate.state, &opened).unwrap();
    assert_eq!(
        parked.state.gate.as_ref().unwrap().approval_id.as_deref(),
        Some("ap-1")
    );
    assert!(resume(&flow, &parked.state).unwrap().is_empty());
    let canceled = apply(
        &flow,
        &parked.state,
        &RunEvent::Canceled {
            by: "alice".into(),
            reason: None,
            at: minutes(4),
        },
    )
    .unwrap();
    assert!(resume(&flow, &canceled.state).unwrap().is_empty());
}

/// The brief a re-run phase gets carries the retry reason and findings first, and the summaries
/// of the phases that passed before it.
#[test]
fn the_phase_brief_carries_retry_feedback_and_earlier_summaries() {
    use metaforge_domain::run::phase_brief;
    use metaforge_ports::IntelligenceMode;
    let (_, flow) = linear();
    let s0 = start(&flow, "run-1", RunSettings::default(), t0()).unwrap().state;
    let s1 = apply(&flow, &s0, &finish(&s0, "concept", &["concept_note"], 1))
        .unwrap()
        .state;
    let s2 = apply(&flow, &s1, &finish(&s1, "design", &[], 2)).unwrap().state;
    let retry = RunEvent::GateDecided {
        phase: "design".into(),
        decision: GateDecision::Retry {
            reason: "record the model".into(),
        },
        approver: "alice".into(),
        surface: metaforge_ports::DecisionSurface::Api,
        at: minutes(3),
    };
    let s3 = apply(&flow, &s2, &retry).unwrap().state;
    let brief = phase_brief(&flow, &s3, "design", Some("p1"), IntelligenceMode::Client).unwrap();
    assert_eq!(brief.key, "run-1:design:2");
    assert_eq!(brief.required_deliverables, vec!["cad_model".to_owned()]);
    let feedback = brief.feedback.unwrap();
    assert_eq!(feedback.reason, "record the model");
    assert_eq!(
        feedback.findings,
        vec!["required deliverable 'cad_model' is not recorded".to_owned()]
    );
    assert_eq!(brief.earlier.len(), 1);
    assert_eq!(brief.earlier[0].summary, "concept summary");
    assert!(brief.goal.contains("cad_model"), "{}", brief.goal);
    let refused = phase_brief(&flow, &s2, "design", None, IntelligenceMode::Server).unwrap_err();
    assert_eq!(refused.code(), "not_in_flight");
}

/// A run starts only on an approved version whose frozen text matches its hash.
#[test]
fn a_run_starts_only_on_an_approved_version_whose_text_matches_its_hash() {
    use metaforge_ports::{FlowVersionOrigin, FlowVersionRecord, FlowVersionStatus};
    let (table, _) = linear();
    let frozen = freeze(&table.flows["linear"]).unwrap();
    let mut version = FlowVersionRecord {
        id: "v-1".into(),
        template_id: "linear".into(),
        template_version: "1".into(),
        status: FlowVersionStatus::Approved,
        content_hash: metaforge_domain::flow::sha256_hex(&frozen),
        frozen,
        origin: FlowVersionOrigin::Server,
        approval_id: None,
        approver: Some("alice".into()),
        created_at: t0(),
        decided_at: Some(t0()),
    };
    let flow = FrozenFlow::from_version(&version).unwrap();
    assert_eq!(flow.reference().version_id, "v-1");
    assert_eq!(flow.order(), ["concept", "design", "release"]);
    version.status = FlowVersionStatus::Proposed;
    assert_eq!(
        FrozenFlow::from_version(&version).unwrap_err().code(),
        "not_approved"
    );
    version.status = FlowVersionStatus::Approved;
    version.frozen.push(' ');
    assert_eq!(FrozenFlow::from_version(&version).unwrap_err().code(), "corrupt");
}
