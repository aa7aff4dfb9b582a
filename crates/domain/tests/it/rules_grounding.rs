//! Table: the post-turn grounding guard (FORGE-98/520), from `fixtures/rules/grounding.json`.

use metaforge_domain::grounding::{
    GroundingInput, MetricKind, NO_TWIN_COMMIT_BANNER, UNGROUNDED_BANNER, UNVERIFIED_NODE_ID_BANNER,
    check_grounding,
};
use serde_json::Value;

fn table() -> Vec<Value> {
    metaforge_test_support::cases("grounding")
}

#[test]
fn every_grounding_case_holds() {
    let cases = table();
    assert!(cases.len() >= 20, "need at least 20 cases, have {}", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let mut input_json = case.clone();
        input_json
            .as_object_mut()
            .unwrap()
            .retain(|k, _| k != "name" && k != "expect");
        let input: GroundingInput = serde_json::from_value(input_json).unwrap();
        let report = check_grounding(&input);
        let got = serde_json::to_value(&report).unwrap();
        if got["banners"] != case["expect"]["banners"]
            || got["unverified_ids"] != case["expect"]["unverified_ids"]
        {
            failures.push(format!(
                "{name}: got {} {}, expected {}",
                got["banners"], got["unverified_ids"], case["expect"]
            ));
        }
        if report.flagged == report.banners.is_empty() || report.metric_kinds.len() != report.banners.len() {
            failures.push(format!("{name}: inconsistent report {report:?}"));
        }
        if !report.text.ends_with(&input.reply) {
            failures.push(format!("{name}: text does not end with the reply"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_ungrounded_reply_gets_only_its_banner_and_marks_the_phase() {
    let input: GroundingInput = serde_json::from_value(serde_json::json!({
        "reply": "Assembled the available parts... Added revolute joints J1 to J6... Part Count: 6 components.",
        "steps": []
    }))
    .unwrap();
    let report = check_grounding(&input);
    assert!(report.is_ungrounded());
    assert_eq!(report.metric_kinds, vec![MetricKind::NoToolCall]);
    assert!(report.text.starts_with(UNGROUNDED_BANNER));
}

#[test]
fn claim_banners_are_chat_only_and_name_the_ids() {
    let input: GroundingInput = serde_json::from_value(serde_json::json!({
        "reply": "The assembly was saved to the twin. Node id: assembly_4.",
        "steps": [{"tool": "freecad.create_assembly", "arguments": {}, "result": {"assembly": "assembly_4"}, "error": null}]
    }))
    .unwrap();
    let report = check_grounding(&input);
    assert!(!report.is_ungrounded());
    assert_eq!(
        report.metric_kinds,
        vec![MetricKind::TwinWrite, MetricKind::NodeId]
    );
    assert!(report.text.starts_with(NO_TWIN_COMMIT_BANNER));
    assert!(
        report
            .text
            .contains(&format!("{UNVERIFIED_NODE_ID_BANNER}: assembly_4"))
    );
    assert_eq!(
        report.metric_kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
        vec!["twin_write", "node_id"]
    );
}
