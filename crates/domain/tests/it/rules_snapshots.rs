//! Snapshots of the prose the rules emit (banners, summaries, refusal reasons), so a wording
//! change is a reviewed change.

use metaforge_domain::compaction::{ChatTurn, budget_history};
use metaforge_domain::grounding::{GroundingInput, check_grounding};
use metaforge_domain::routing::{RouteCall, RoutingInputs, RoutingTable, resolve_route};
use metaforge_domain::tool_gating::{Caller, CallerClass, ToolSpec, decide};
use serde_json::json;
use std::collections::BTreeMap;

#[test]
fn grounding_banners_read_as_shipped() {
    let cases = [
        json!({"reply": "Assembled the available parts... Added revolute joints J1 to J6... Part Count: 6 components.", "steps": []}),
        json!({"reply": "The assembly was saved to the twin. Node id: assembly_4.",
               "steps": [{"tool": "freecad.create_assembly", "arguments": {}, "result": {"assembly": "assembly_4"}, "error": null}]}),
    ];
    let texts: Vec<String> = cases
        .into_iter()
        .map(|c| check_grounding(&serde_json::from_value::<GroundingInput>(c).unwrap()).text)
        .collect();
    insta::assert_snapshot!(texts.join("\n---\n"));
}

#[test]
fn history_summary_lines_are_deterministic() {
    let turns: Vec<ChatTurn> = [
        ("user", "The shelf must carry 20 kg at the front edge."),
        (
            "assistant",
            "Noted: 20 kg point load at the front edge; PLA, 3 mm walls.",
        ),
        ("user", "Use M4 screws.\nAnd keep it under 200 mm wide."),
        ("assistant", "OK."),
    ]
    .iter()
    .map(|(role, content)| ChatTurn {
        role: (*role).into(),
        content: (*content).into(),
    })
    .collect();
    let history = budget_history(&turns, 2);
    insta::assert_snapshot!(history.summary.unwrap_or_default());
}

#[test]
fn refusal_reasons_name_what_was_wrong() {
    let table: RoutingTable =
        serde_json::from_value(json!({"roles": {"gate_check": "anthropic:claude-haiku-4-5-20251001"}}))
            .unwrap();
    let env = BTreeMap::new();
    let creds = ["openai".to_owned()].into_iter().collect();
    let inputs = RoutingInputs {
        table: &table,
        env: &env,
        credentialed: Some(&creds),
        selection: None,
        default: None,
    };
    let unconfigured = resolve_route(
        &inputs,
        &RouteCall {
            role: "gate_check".into(),
            ..RouteCall::default()
        },
    )
    .unwrap_err();
    let mismatch = resolve_route(
        &inputs,
        &RouteCall {
            role: "phase_brain".into(),
            phase_model: Some("anthropic:gpt-4o".into()),
            ..RouteCall::default()
        },
    )
    .unwrap_err();
    let tool: ToolSpec =
        serde_json::from_value(json!({"name": "project.delete", "annotation": "DESTRUCTIVE"})).unwrap();
    let service = decide(&tool, &Caller::from(CallerClass::Service), &json!({}));
    let remote = decide(&tool, &Caller::from(CallerClass::Remote), &json!({}));
    insta::assert_snapshot!(
        [
            unconfigured.to_string(),
            mismatch.to_string(),
            service.reason,
            remote.reason
        ]
        .join("\n")
    );
}
