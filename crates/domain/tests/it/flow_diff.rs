//! The prose diff a reviewer reads: one line per change, relaxations shouted in capitals.

use metaforge_domain::flow::{
    FlowContext, Gate, Operation, TailorMode, is_relaxation, propose, prose_diff, template,
};
use serde_json::json;

#[test]
fn identical_flows_have_no_diff() {
    let flow = template("hardware_v1").unwrap();
    assert!(prose_diff(&flow, &flow).is_empty());
}

#[test]
fn relaxations_are_shouted() {
    let base = template("mech_v1").unwrap();
    let mut lax = base.clone();
    lax.phases.retain(|p| p.id != "simulation");
    let design = lax.phase_mut("design").unwrap();
    design.required_deliverables.retain(|d| d != "drawing");
    design.enforce_deliverables = false;
    let feasibility = lax.phase_mut("feasibility").unwrap();
    let gate = feasibility.gate.as_mut().unwrap();
    gate.auto_approve = true;
    gate.criteria.pop();
    feasibility.condition = Some("the part is novel".into());
    lax.phase_mut("requirements").unwrap().expected_artifacts.clear();
    lax.phase_mut("needs").unwrap().gate = Some(Gate {
        name: "G2 Needs Review".into(),
        auto_approve: false,
        criteria: vec![],
    });
    let lines = prose_diff(&base, &lax);
    insta::assert_snapshot!("mech_v1_relaxed", lines.join("\n"));
    // Every shouted line is marked a relaxation for the reviewer's screen; a gate gained is not.
    let marked: Vec<&String> = lines.iter().filter(|l| is_relaxation(l)).collect();
    assert_eq!(marked.len(), lines.len() - 1, "{lines:?}");
    assert!(!is_relaxation(&lines[0]), "{}", lines[0]);
}

#[test]
fn a_tightening_is_not_marked_a_relaxation() {
    let base = template("mech_v1").unwrap();
    let mut strict = base.clone();
    strict
        .phase_mut("design")
        .unwrap()
        .required_deliverables
        .push("test_plan".into());
    let lines = prose_diff(&base, &strict);
    assert!(!lines.is_empty());
    assert!(lines.iter().all(|l| !is_relaxation(l)), "{lines:?}");
    assert!(is_relaxation(
        &lines[0].replace("now requires", "NO LONGER requires")
    ));
}

#[test]
fn a_removed_gate_is_shouted_with_its_short_name() {
    let base = template("hardware_v1").unwrap();
    let mut flow = base.clone();
    flow.phase_mut("architecture").unwrap().gate = None;
    flow.phase_mut("manufacturing").unwrap().enforce_deliverables = false;
    assert_eq!(
        prose_diff(&base, &flow),
        [
            "gate 'G4' REMOVED from phase 'architecture'",
            "gate 'G8' NO LONGER enforces its deliverables"
        ]
    );
}

#[test]
fn the_acceptance_tailoring_reads_as_prose() {
    let context: FlowContext = serde_json::from_value(json!({
        "manufacturing_context": {"route": "undecided"},
        "target_maturity": "physically_validated",
        "loads_and_use": "a wall shelf carrying 20 kg of books"
    }))
    .unwrap();
    let ops: Vec<Operation> = serde_json::from_value(json!([
        {"op": "drop_phase", "phase": "feasibility", "rationale": "a shelf bracket is a well-known part"},
        {"op": "add_deliverable", "phase": "design", "value": "test_plan", "rationale": "the bracket is load-tested"},
        {"op": "set_disciplines", "phase": "design", "value": ["mechanical", "woodworking"], "rationale": "plywood shelf"},
        {"op": "declare_items", "phase": "design", "value": ["bracket", "shelf_board"], "rationale": "two parts"}
    ]))
    .unwrap();
    let result = propose("mech_v1", &ops, Some(&context), TailorMode::Strict).unwrap();
    insta::assert_snapshot!("mech_v1_tailored_route_undecided", result.diff.join("\n"));
}
