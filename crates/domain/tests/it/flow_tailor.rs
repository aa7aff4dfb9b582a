//! Tailoring by the closed operation set: lenient and strict modes, the server-only route
//! selection, needs_input questions, and validation of the result with its context.

use metaforge_domain::flow::{
    FlowContext, Operation, OperationList, Syntax, TailorMode, TailorStatus, parse_document, propose,
    required_questions, template,
};
use serde_json::json;

#[expect(clippy::unwrap_used, reason = "a malformed test context is a test failure")]
fn ctx(value: serde_json::Value) -> FlowContext {
    serde_json::from_value(value).unwrap()
}

fn known_context() -> FlowContext {
    ctx(json!({
        "manufacturing_context": {"route": "vendor"},
        "target_maturity": "physically_validated",
        "loads_and_use": "holds 20 kg of books"
    }))
}

fn op(kind: &str, phase: &str, value: serde_json::Value, rationale: Option<&str>) -> Operation {
    Operation {
        op: kind.to_owned(),
        phase: Some(phase.to_owned()),
        value: if value.is_null() { None } else { Some(value) },
        rationale: rationale.map(str::to_owned),
    }
}

fn question_ids(context: Option<&FlowContext>) -> Vec<&'static str> {
    required_questions(context)
        .iter()
        .map(|q| q.id.as_str())
        .collect()
}

#[test]
fn missing_context_asks_every_required_question_in_fixed_order() {
    assert_eq!(
        question_ids(None),
        ["manufacturing_route", "target_maturity", "loads_and_use"]
    );
    let result = propose("mech_v1", &[], None, TailorMode::Lenient).unwrap();
    assert_eq!(result.status, TailorStatus::NeedsInput);
    assert!(result.flow.is_none() && result.content_hash.is_none() && result.diff.is_empty());
    let first = serde_json::to_value(&result.questions[0]).unwrap();
    assert_eq!(first["id"], "manufacturing_route");
    assert_eq!(first["answer_type"], "choice");
    assert_eq!(first["options"], json!(["in_house", "vendor", "undecided"]));
    assert_eq!(first["field"], "manufacturing_context.route");
    assert!(first["why"].as_str().is_some_and(|w| !w.is_empty()));
}

#[test]
fn in_house_without_capabilities_asks_for_them_after_the_route() {
    let c = ctx(json!({"manufacturing_context": {"route": "in_house"}}));
    assert_eq!(
        question_ids(Some(&c)),
        ["in_house_capabilities", "target_maturity", "loads_and_use"]
    );
    let c = ctx(
        json!({"manufacturing_context": {"route": "in_house", "machines": ["Prusa MK4"]},
        "target_maturity": "concept", "loads_and_use": "unknown"}),
    );
    assert!(
        question_ids(Some(&c)).is_empty(),
        "'unknown' is a valid answer for loads"
    );
}

#[test]
fn camel_case_context_is_accepted() {
    let text = r#"{"manufacturingContext": {"route": "in_house", "stockMaterials": ["birch ply"],
        "productionQuantity": 2}, "targetMaturity": "sim_validated", "loadsAndUse": "books"}"#;
    let c: FlowContext = parse_document(text, Syntax::Json).unwrap();
    assert!(question_ids(Some(&c)).is_empty());
    assert_eq!(c.manufacturing_context.unwrap().production_quantity, Some(2));
}

#[test]
fn undecided_route_inserts_a_human_gated_route_selection_before_the_first_geometry_phase() {
    let c = ctx(json!({"manufacturing_context": {"route": "undecided"},
        "target_maturity": "physically_validated", "loads_and_use": "20 kg"}));
    let result = propose("mech_v1", &[], Some(&c), TailorMode::Strict).unwrap();
    assert_eq!(result.status, TailorStatus::Proposed, "{:?}", result.violations);
    let flow = result.flow.unwrap();
    let ids: Vec<&str> = flow.phases.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "intent",
            "needs",
            "requirements",
            "feasibility",
            "route_selection",
            "design",
            "simulation",
            "release"
        ]
    );
    let route = flow.phase("route_selection").unwrap();
    assert!(route.has_human_gate());
    assert_eq!(route.depends_on, ["feasibility"]);
    assert_eq!(flow.phase("design").unwrap().depends_on, ["route_selection"]);
    let server_op = result.applied.last().unwrap();
    assert_eq!(
        (server_op.op.as_str(), server_op.index),
        ("add_route_selection", None)
    );
    assert!(server_op.basis.contains("route=undecided"));
    assert!(
        result
            .diff
            .iter()
            .any(|l| l.starts_with("phase 'route_selection' added before 'design'"))
    );
}

#[test]
fn lenient_mode_discards_and_skips_bad_operations_and_applies_the_rest() {
    let ops = vec![
        op(
            "add_deliverable",
            "design",
            json!("test_plan"),
            Some("the shelf is load-tested"),
        ),
        op(
            "set_disciplines",
            "design",
            json!(["mechanical", "woodworking"]),
            None,
        ),
        op("make_it_better", "design", json!(null), Some("because")),
        op("drop_phase", "no_such_phase", json!(null), Some("not needed")),
        op(
            "add_route_selection",
            "design",
            json!(null),
            Some("model wants it"),
        ),
    ];
    let result = propose("mech_v1", &ops, Some(&known_context()), TailorMode::Lenient).unwrap();
    assert_eq!(result.status, TailorStatus::Proposed, "{:?}", result.violations);
    assert_eq!(result.applied.len(), 1);
    assert_eq!(result.applied[0].op, "add_deliverable");
    let skipped: Vec<(usize, &str)> = result
        .skipped
        .iter()
        .map(|s| (s.index, s.reason.as_str()))
        .collect();
    assert_eq!(skipped.len(), 4, "{skipped:?}");
    assert!(skipped[0].1.contains("rationale"));
    assert!(skipped[1].1.contains("unknown operation 'make_it_better'"));
    assert!(skipped[2].1.contains("unknown phase 'no_such_phase'"));
    assert!(skipped[3].1.contains("server-only"));
    let design = result.flow.as_ref().unwrap().phase("design").unwrap().clone();
    assert!(design.required_deliverables.contains(&"test_plan".to_owned()));
    assert!(design.expected_artifacts.contains(&"test_plan".to_owned()));
    assert_eq!(
        result.diff,
        [
            "phase 'design' now requires 'test_plan'",
            "phase 'design' now produces 'test_plan'"
        ]
    );
    assert!(result.content_hash.is_some());
}

#[test]
fn strict_mode_refuses_listing_every_problem_and_applies_nothing() {
    let ops = vec![
        op("add_deliverable", "design", json!("test_plan"), Some("load test")),
        op(
            "set_model",
            "design",
            json!("anthropic:claude-sonnet-4-5"),
            Some("  "),
        ),
        op("rename_phase", "design", json!("x"), Some("clarity")),
        op("drop_phase", "ghost", json!(null), Some("gone")),
    ];
    let result = propose("mech_v1", &ops, Some(&known_context()), TailorMode::Strict).unwrap();
    assert_eq!(result.status, TailorStatus::Invalid);
    assert!(result.applied.is_empty() && result.flow.is_none() && result.skipped.is_empty());
    let indices: Vec<usize> = result.refused.iter().map(|r| r.index).collect();
    assert_eq!(indices, [1, 2, 3]);
}

#[test]
fn strict_mode_still_asks_the_required_questions() {
    let ops = vec![op("drop_phase", "feasibility", json!(null), Some("simple part"))];
    let result = propose("mech_v1", &ops, None, TailorMode::Strict).unwrap();
    assert_eq!(result.status, TailorStatus::NeedsInput);
}

#[test]
fn unknown_template_is_refused() {
    assert!(propose("nope", &[], Some(&known_context()), TailorMode::Strict).is_err());
}

#[test]
fn dropping_simulation_while_loads_are_unknown_is_invalid_physical_verification_kept() {
    let c = ctx(
        json!({"manufacturing_context": {"route": "vendor"}, "target_maturity": "concept",
        "loads_and_use": "unknown"}),
    );
    let ops = vec![
        op(
            "add_deliverable",
            "design",
            json!("test_plan"),
            Some("practical load testing will suffice"),
        ),
        op(
            "drop_phase",
            "simulation",
            json!(null),
            Some("practical load testing will suffice"),
        ),
    ];
    let result = propose("mech_v1", &ops, Some(&c), TailorMode::Lenient).unwrap();
    assert_eq!(result.status, TailorStatus::Invalid);
    let pv = result
        .violations
        .iter()
        .find(|v| v.rule == "physical-verification-kept")
        .unwrap();
    assert!(pv.message.contains("loads are unknown"));
    assert!(result.diff.contains(&"phase 'simulation' DROPPED".to_owned()));
    assert!(result.content_hash.is_none());
}

#[test]
fn dropping_a_phase_rewires_its_dependents() {
    let ops = vec![op(
        "drop_phase",
        "feasibility",
        json!(null),
        Some("a known design pattern"),
    )];
    let result = propose("mech_v1", &ops, Some(&known_context()), TailorMode::Strict).unwrap();
    assert_eq!(result.status, TailorStatus::Proposed, "{:?}", result.violations);
    let flow = result.flow.unwrap();
    assert_eq!(flow.phase("design").unwrap().depends_on, ["requirements"]);
    assert_eq!(
        result.diff,
        [
            "phase 'feasibility' DROPPED",
            "phase 'design' now depends on 'requirements' (was 'feasibility')"
        ]
    );
}

#[test]
fn a_mismatched_model_makes_the_result_invalid_naming_the_model() {
    let ops = vec![op(
        "set_model",
        "design",
        json!("anthropic:gpt-4o"),
        Some("best at CAD"),
    )];
    let result = propose("mech_v1", &ops, Some(&known_context()), TailorMode::Strict).unwrap();
    assert_eq!(result.status, TailorStatus::Invalid);
    assert_eq!(result.violations[0].rule, "phase-model-routable");
    assert!(result.violations[0].message.contains("gpt-4o"));
}

#[test]
fn every_other_operation_kind_applies() {
    let ops = vec![
        op(
            "set_disciplines",
            "design",
            json!(["mechanical", "industrial_design"]),
            Some("looks matter"),
        ),
        op(
            "declare_items",
            "design",
            json!(["bracket", "shelf_board"]),
            Some("two parts"),
        ),
        op(
            "set_condition",
            "needs",
            json!("when a customer is named"),
            Some("internal tool"),
        ),
        op(
            "set_dependencies",
            "needs",
            json!([]),
            Some("needs are known up front"),
        ),
        op(
            "set_model",
            "simulation",
            json!("openrouter:openai/gpt-4o"),
            Some("cheap"),
        ),
    ];
    let result = propose("mech_v1", &ops, Some(&known_context()), TailorMode::Strict).unwrap();
    assert_eq!(
        result.status,
        TailorStatus::Proposed,
        "{:?} {:?}",
        result.refused,
        result.violations
    );
    assert_eq!(result.applied.len(), 5);
    let flow = result.flow.unwrap();
    assert_eq!(flow.phase("design").unwrap().items, ["bracket", "shelf_board"]);
    assert_eq!(
        flow.phase("needs").unwrap().condition.as_deref(),
        Some("when a customer is named")
    );
    assert!(flow.phase("needs").unwrap().depends_on.is_empty());
    assert!(
        result
            .diff
            .iter()
            .any(|l| l == "phase 'needs' is NOW CONDITIONAL on 'when a customer is named'")
    );
}

#[test]
fn operations_documents_may_be_bare_lists_or_wrapped() {
    let bare: OperationList = parse_document(
        r#"[{"op": "drop_phase", "phase": "x", "rationale": "r"}]"#,
        Syntax::Json,
    )
    .unwrap();
    let wrapped: OperationList = parse_document(
        "operations:\n  - {op: drop_phase, phase: x, rationale: r}\n",
        Syntax::Yaml,
    )
    .unwrap();
    assert_eq!(bare.into_operations(), wrapped.into_operations());
}

#[test]
fn the_result_serializes_with_snake_case_status() {
    let result = propose("design_v1", &[], Some(&known_context()), TailorMode::Lenient).unwrap();
    let json = serde_json::to_value(&result).unwrap();
    assert_eq!(json["status"], "proposed");
    assert_eq!(json["mode"], "lenient");
    for key in [
        "applied",
        "skipped",
        "violations",
        "questions",
        "diff",
        "content_hash",
        "flow",
    ] {
        assert!(json.get(key).is_some(), "{key}");
    }
    assert_eq!(
        template("design_v1").unwrap(),
        serde_json::from_value(json["flow"].clone()).unwrap()
    );
}
