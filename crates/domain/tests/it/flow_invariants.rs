//! The invariant table (fixtures/flows/cases/invariants.yaml): every case's flow must produce
//! exactly the `{rule, phase}` pairs the table lists, and every rule is pinned both ways.

use std::collections::BTreeSet;

use metaforge_domain::flow::{Flow, FlowContext, RULES, Syntax, parse_document, validate};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Table {
    #[serde(rename = "anchors")]
    _anchors: serde_json::Value,
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    pins: String,
    #[serde(default)]
    context: Option<FlowContext>,
    flow: Flow,
    expect: Vec<Expected>,
    #[serde(default)]
    message_contains: Vec<String>,
}

#[derive(Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord, Clone)]
#[serde(deny_unknown_fields)]
struct Expected {
    rule: String,
    #[serde(default)]
    phase: Option<String>,
}

#[expect(clippy::unwrap_used, reason = "a missing or broken fixture is a test failure")]
fn table() -> Table {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/flows/cases/invariants.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    parse_document(&text, Syntax::Yaml).unwrap()
}

#[test]
fn every_case_reports_exactly_the_listed_violations() {
    let table = table();
    assert!(
        table.cases.len() >= 30,
        "the table holds {} cases",
        table.cases.len()
    );
    let mut failures = Vec::new();
    for case in &table.cases {
        let violations = validate(&case.flow, case.context.as_ref());
        let got: BTreeSet<Expected> = violations
            .iter()
            .map(|v| Expected {
                rule: v.rule.clone(),
                phase: v.phase.clone(),
            })
            .collect();
        let want: BTreeSet<Expected> = case.expect.iter().cloned().collect();
        if got != want {
            failures.push(format!("{}: expected {want:?}, got {violations:#?}", case.name));
        }
        for needle in &case.message_contains {
            if !violations.iter().any(|v| v.message.contains(needle.as_str())) {
                failures.push(format!(
                    "{}: no message contains '{needle}': {violations:#?}",
                    case.name
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_rule_is_pinned_firing_and_not_firing() {
    let table = table();
    for rule in RULES {
        let pinned: Vec<&Case> = table.cases.iter().filter(|c| c.pins == *rule).collect();
        assert!(
            pinned.iter().any(|c| c.expect.iter().any(|e| e.rule == *rule)),
            "no case where '{rule}' fires"
        );
        assert!(
            pinned.iter().any(|c| c.expect.iter().all(|e| e.rule != *rule)),
            "no case where '{rule}' must stay silent"
        );
    }
    for case in &table.cases {
        assert!(
            RULES.contains(&case.pins.as_str()),
            "{}: unknown rule {}",
            case.name,
            case.pins
        );
    }
}

#[test]
fn violations_name_rule_phase_and_message_on_the_wire() {
    let table = table();
    let case = table
        .cases
        .iter()
        .find(|c| c.name == "a decorative human gate is refused")
        .unwrap();
    let json = serde_json::to_value(validate(&case.flow, None)).unwrap();
    let first = &json[0];
    assert_eq!(first["rule"], "gates-enforce-what-they-require");
    assert_eq!(first["phase"], "design");
    assert!(first["message"].as_str().unwrap().contains("G6 Design Review"));
    assert_eq!(first.as_object().unwrap().len(), 3);
}
