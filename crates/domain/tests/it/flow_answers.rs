//! A person's answers to the server's questions fold into the tailoring context by question id
//! (`FlowContext::answer`), typed: the ids are the ones `required_questions` asks, and each answer
//! lands in the field its question names.

#![expect(clippy::unwrap_used, reason = "a malformed test context is a test failure")]

use metaforge_domain::flow::{FlowContext, QuestionId, required_questions};
use serde_json::{Value, json};

fn answered(start: Value, answers: &[(QuestionId, Value)]) -> Result<Value, String> {
    let mut context: FlowContext = serde_json::from_value(start).unwrap();
    for (id, answer) in answers {
        context.answer(*id, answer).map_err(|e| e.to_string())?;
    }
    Ok(serde_json::to_value(context).unwrap())
}

#[test]
fn every_asked_question_id_is_a_question_id_and_reads_back_as_itself() {
    let asked: Vec<QuestionId> = required_questions(None).iter().map(|q| q.id).collect();
    assert_eq!(
        asked,
        [
            QuestionId::ManufacturingRoute,
            QuestionId::TargetMaturity,
            QuestionId::LoadsAndUse
        ]
    );
    for id in QuestionId::ALL {
        assert_eq!(id.as_str().parse::<QuestionId>(), Ok(id));
        assert_eq!(serde_json::to_value(id).unwrap(), json!(id.as_str()));
    }
    assert!("favourite_colour".parse::<QuestionId>().is_err());
    assert!(
        "model_1".parse::<QuestionId>().is_err(),
        "the model's questions are not the server's"
    );
}

#[test]
fn answers_fill_the_fields_their_questions_name() {
    let cases = [
        (
            "route into an empty context",
            json!({}),
            vec![(QuestionId::ManufacturingRoute, json!("vendor"))],
            json!({"manufacturing_context": {"route": "vendor", "processes": [], "machines": [], "stock_materials": []},
                   "target_maturity": null, "loads_and_use": null}),
        ),
        (
            "capabilities as comma-separated text become processes, blanks dropped",
            json!({"manufacturing_context": {"route": "in_house"}}),
            vec![(
                QuestionId::InHouseCapabilities,
                json!("FDM printing, , laser cutting"),
            )],
            json!({"manufacturing_context": {"route": "in_house", "processes": ["FDM printing", "laser cutting"],
                   "machines": [], "stock_materials": []}, "target_maturity": null, "loads_and_use": null}),
        ),
        (
            "capability groups replace the groups they name and keep the rest",
            json!({"manufacturing_context": {"route": "in_house", "processes": ["milling"], "machines": ["old"]}}),
            vec![(
                QuestionId::InHouseCapabilities,
                json!({"machines": "Prusa MK4, laser", "stockMaterials": ["PETG"], "productionQuantity": 2}),
            )],
            json!({"manufacturing_context": {"route": "in_house", "processes": ["milling"],
                   "machines": ["Prusa MK4", "laser"], "stock_materials": ["PETG"], "production_quantity": 2},
                   "target_maturity": null, "loads_and_use": null}),
        ),
        (
            "maturity and loads",
            json!({}),
            vec![
                (QuestionId::TargetMaturity, json!("sim_validated")),
                (QuestionId::LoadsAndUse, json!("unknown")),
            ],
            json!({"manufacturing_context": null, "target_maturity": "sim_validated", "loads_and_use": "unknown"}),
        ),
        (
            "null clears",
            json!({"target_maturity": "concept"}),
            vec![(QuestionId::TargetMaturity, Value::Null)],
            json!({"manufacturing_context": null, "target_maturity": null, "loads_and_use": null}),
        ),
    ];
    for (name, start, answers, expected) in cases {
        assert_eq!(answered(start, &answers), Ok(expected), "{name}");
    }
}

#[test]
fn an_answer_that_does_not_fit_names_its_question_and_changes_nothing() {
    for (id, answer, named) in [
        (QuestionId::ManufacturingRoute, json!("by_owl"), "by_owl"),
        (QuestionId::TargetMaturity, json!(3), "integer"),
        (QuestionId::InHouseCapabilities, json!(true), "capability groups"),
        (
            QuestionId::InHouseCapabilities,
            json!([1, 2]),
            "capability groups",
        ),
        (QuestionId::LoadsAndUse, json!({"kg": 5}), "string"),
    ] {
        let mut context = FlowContext::default();
        let err = context.answer(id, &answer).unwrap_err();
        assert_eq!(err.question, id);
        assert!(err.to_string().starts_with(id.as_str()), "{err}");
        assert!(err.message.contains(named), "{id}: {err}");
        assert_eq!(context, FlowContext::default(), "{id}: nothing changed");
    }
}

#[test]
fn answered_questions_are_no_longer_asked() {
    let mut context = FlowContext::default();
    context
        .answer(QuestionId::ManufacturingRoute, &json!("in_house"))
        .unwrap();
    assert_eq!(
        required_questions(Some(&context))[0].id,
        QuestionId::InHouseCapabilities
    );
    context
        .answer(QuestionId::InHouseCapabilities, &json!(["CNC"]))
        .unwrap();
    context
        .answer(QuestionId::TargetMaturity, &json!("concept"))
        .unwrap();
    context.answer(QuestionId::LoadsAndUse, &json!("20 kg")).unwrap();
    assert!(required_questions(Some(&context)).is_empty());
}
