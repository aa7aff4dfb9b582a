//! Properties of the flow rules: the validator never panics and ignores list order once a flow
//! declares dependencies (and reads a flow without any as its list order), the hash
//! ignores source key order and whitespace, freezing round-trips, and no sequence of tailoring
//! operations makes a template laxer; the generator's answer is read without panicking whatever the
//! model wrote, and every operation it proposed is accounted for exactly once.

use metaforge_domain::flow::{
    Flow, FlowContext, Gate, Operation, Phase, Syntax, TailorMode, TailorStatus, content_hash, freeze,
    parse_answer, parse_document, tailor, tailor_generated, template, uses_list_order, validate,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const IDS: &[&str] = &["intent", "requirements", "design", "simulation", "review", "x"];
const ARTIFACTS: &[&str] = &[
    "requirements",
    "cad_model",
    "simulation_result",
    "verification_report",
    "test_plan",
    "report",
    "drawing",
];
const GATE_NAMES: &[&str] = &["G6 Design Review", "Release Gate", "Final Sign-off", "Checkpoint"];
const MODELS: &[&str] = &[
    "anthropic:gpt-4o",
    "anthropic:claude-sonnet-4-5",
    "nosuch:m",
    "gpt-4o",
    "openrouter:x/y",
];

fn pick(pool: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(pool).prop_map(str::to_owned)
}

fn picks(pool: &'static [&'static str], max: usize) -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(pick(pool), 0..=max)
}

fn gate() -> impl Strategy<Value = Gate> {
    (pick(GATE_NAMES), any::<bool>(), picks(&["c1", "c2"], 2)).prop_map(|(name, auto_approve, criteria)| {
        Gate {
            name,
            auto_approve,
            criteria,
        }
    })
}

fn phase() -> impl Strategy<Value = Phase> {
    (
        pick(IDS),
        picks(IDS, 2),
        prop::option::weighted(0.2, Just("only sometimes".to_owned())),
        picks(ARTIFACTS, 3),
        picks(ARTIFACTS, 3),
        prop::bool::weighted(0.85),
        prop::option::weighted(0.6, gate()),
        prop::option::weighted(0.2, pick(MODELS)),
        picks(&["part_a", "part_b"], 2),
    )
        .prop_map(
            |(
                id,
                depends_on,
                condition,
                expected_artifacts,
                required_deliverables,
                enforce,
                gate,
                model,
                items,
            )| Phase {
                title: format!("Phase {id}"),
                id,
                disciplines: vec!["mechanical".to_owned()],
                depends_on,
                condition,
                expected_artifacts,
                required_deliverables,
                enforce_deliverables: enforce,
                gate,
                model,
                items,
            },
        )
}

fn flow() -> impl Strategy<Value = Flow> {
    (
        prop::collection::vec(phase(), 0..6),
        prop::option::of(Just("Label".to_owned())),
    )
        .prop_map(|(phases, label)| Flow {
            id: "prop".to_owned(),
            version: "1".to_owned(),
            title: "Property flow".to_owned(),
            label: label.unwrap_or_default(),
            phases,
        })
}

fn context() -> impl Strategy<Value = Option<FlowContext>> {
    prop::option::of(
        (
            prop::sample::select(&["in_house", "vendor", "undecided"][..]),
            prop::sample::select(&["unknown", "tbd", "20 kg static"][..]),
        )
            .prop_map(|(route, loads)| {
                serde_json::from_value(json!({
                    "manufacturing_context": {"route": route, "processes": ["laser cutting"]},
                    "target_maturity": "physically_validated",
                    "loads_and_use": loads
                }))
                .unwrap_or_default()
            }),
    )
}

/// Rebuilds every object with its keys in an order derived from `seed`.
fn permute_keys(value: &Value, seed: u64) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by_key(|k| {
                k.bytes().fold(seed, |h, b| {
                    h.wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(u64::from(b))
                })
            });
            let mut out = Map::new();
            for key in keys {
                out.insert(key.clone(), permute_keys(&map[key.as_str()], seed.rotate_left(7)));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|i| permute_keys(i, seed)).collect()),
        other => other.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn validator_reports_the_same_set_whatever_the_phase_order(
        (flow, shuffled) in flow().prop_flat_map(|f| {
            let phases = f.phases.clone();
            (Just(f), Just(phases).prop_shuffle())
        }),
        ctx in context(),
    ) {
        // List order is presentation only once the flow declares its dependencies.
        prop_assume!(!uses_list_order(&flow));
        let reordered = Flow { phases: shuffled, ..flow.clone() };
        prop_assert_eq!(validate(&flow, ctx.as_ref()), validate(&reordered, ctx.as_ref()));
    }

    #[test]
    fn a_flow_without_depends_on_is_judged_as_its_list_order_written_out(
        flow in flow().prop_map(|mut f| {
            for p in &mut f.phases { p.depends_on.clear(); }
            f
        }),
        ctx in context(),
    ) {
        // Write the sequence out: each distinct id (first appearance) after the one before it.
        let mut explicit = flow.clone();
        let mut seen: Vec<String> = Vec::new();
        for phase in &mut explicit.phases {
            if seen.contains(&phase.id) { continue; }
            if let Some(before) = seen.last() { phase.depends_on = vec![before.clone()]; }
            seen.push(phase.id.clone());
        }
        prop_assert!(uses_list_order(&flow));
        prop_assert_eq!(validate(&flow, ctx.as_ref()), validate(&explicit, ctx.as_ref()));
    }

    #[test]
    fn hash_ignores_source_key_order_and_whitespace(flow in flow(), seed in any::<u64>(), style in 0u8..3) {
        let permuted = permute_keys(&serde_json::to_value(&flow).unwrap(), seed);
        let (text, syntax) = match style {
            0 => (serde_json::to_string(&permuted).unwrap(), Syntax::Json),
            1 => (format!("\n\n  {}  \n", serde_json::to_string_pretty(&permuted).unwrap()), Syntax::Json),
            _ => (serde_saphyr::to_string(&permuted).unwrap(), Syntax::Yaml),
        };
        let reparsed: Flow = parse_document(&text, syntax).unwrap();
        prop_assert_eq!(content_hash(&reparsed).unwrap(), content_hash(&flow).unwrap());
    }

    #[test]
    fn freeze_parse_freeze_is_the_identity(flow in flow()) {
        let frozen = freeze(&flow).unwrap();
        let thawed: Flow = parse_document(&frozen, Syntax::Json).unwrap();
        prop_assert_eq!(&thawed, &flow);
        prop_assert_eq!(freeze(&thawed).unwrap(), frozen);
    }

    #[test]
    fn no_operation_sequence_makes_a_template_laxer(
        template_id in prop::sample::select(&["design_v1", "mech_v1", "hardware_v1"][..]),
        ops in prop::collection::vec(operation(), 0..8),
        ctx in context(),
        strict in any::<bool>(),
    ) {
        let base = template(template_id).unwrap();
        let mode = if strict { TailorMode::Strict } else { TailorMode::Lenient };
        let result = tailor(&base, &ops, ctx.as_ref(), mode);
        if let Some(tailored) = &result.flow {
            for old in &base.phases {
                let Some(new) = tailored.phase(&old.id) else { continue };
                for wanted in &old.required_deliverables {
                    prop_assert!(new.required_deliverables.contains(wanted), "{} lost {}", old.id, wanted);
                }
                prop_assert!(new.enforce_deliverables || !old.enforce_deliverables, "{} stopped enforcing", old.id);
                if let Some(old_gate) = &old.gate {
                    let new_gate = new.gate.as_ref();
                    prop_assert!(new_gate.is_some(), "{} lost its gate", old.id);
                    prop_assert_eq!(new_gate.map(|g| g.auto_approve), Some(old_gate.auto_approve));
                    prop_assert_eq!(new_gate.map(|g| &g.criteria), Some(&old_gate.criteria));
                }
            }
            for line in &result.diff {
                prop_assert!(!line.contains("NO LONGER requires") && !line.contains("REMOVED")
                    && !line.contains("AUTO-APPROVED") && !line.contains("NO LONGER enforces"), "{}", line);
            }
        }
        prop_assert_eq!(result.status == TailorStatus::Proposed, result.content_hash.is_some());
        if result.status == TailorStatus::Proposed {
            prop_assert!(result.violations.is_empty());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn reading_any_model_answer_never_panics_and_keeps_at_most_three_questions(text in ".{0,400}") {
        if let Ok(answer) = parse_answer(&text) {
            prop_assert!(answer.questions.len() <= 3);
        }
    }

    #[test]
    fn every_generated_operation_is_applied_or_skipped_exactly_once_and_no_phase_model_is_unroutable(
        template_id in prop::sample::select(&["design_v1", "mech_v1", "hardware_v1", "ghost_v1"][..]),
        ops in prop::collection::vec(operation(), 0..8),
        bad_models in prop::collection::vec(prop::sample::select(MODELS), 0..3),
        ctx in context(),
        prose in prop::sample::select(&["", "Sure, here it is:\n```json\n", "Proposal: "][..]),
    ) {
        let mut entries: Vec<Value> = ops.iter().map(|op| serde_json::to_value(op).unwrap()).collect();
        for (i, model) in bad_models.iter().enumerate() {
            entries.push(json!({"op": "set_model", "phase": "design", "value": model, "rationale": format!("model {i}")}));
        }
        entries.push(json!("not an operation"));
        let text = format!("{prose}{}", json!({"template": template_id, "operations": entries}));
        let answer = parse_answer(&text).unwrap();
        let generated = tailor_generated(&answer, ctx.as_ref());
        let result = &generated.result;
        prop_assert!(result.violations.iter().all(|v| v.rule != "phase-model-routable"), "{:?}", result.violations);
        let mut seen: Vec<usize> = result.applied.iter().filter_map(|a| a.index).collect();
        seen.extend(result.skipped.iter().map(|p| p.index));
        seen.sort_unstable();
        if result.status != TailorStatus::NeedsInput {
            prop_assert_eq!(seen, (0..entries.len()).collect::<Vec<_>>());
        }
    }
}

fn operation() -> impl Strategy<Value = Operation> {
    let kinds = &[
        "drop_phase",
        "add_deliverable",
        "set_disciplines",
        "set_model",
        "declare_items",
        "set_dependencies",
        "set_condition",
        "add_route_selection",
        "remove_gate",
    ][..];
    let phases = &[
        "intent",
        "needs",
        "requirements",
        "feasibility",
        "design",
        "simulation",
        "manufacturing",
        "ghost",
    ][..];
    let values = prop_oneof![
        Just(Value::Null),
        Just(json!("test_plan")),
        Just(json!(["mechanical", "electrical"])),
        Just(json!("anthropic:claude-sonnet-4-5")),
        Just(json!(["requirements"])),
        Just(json!(42)),
    ];
    (
        prop::sample::select(kinds),
        prop::sample::select(phases),
        values,
        prop::option::weighted(0.85, Just("because".to_owned())),
    )
        .prop_map(|(op, phase, value, rationale)| Operation {
            op: op.to_owned(),
            phase: Some(phase.to_owned()),
            value: if value.is_null() { None } else { Some(value) },
            rationale,
        })
}
