//! Table: per-role model routing (FORGE-477), from `fixtures/rules/routing.json`.

use std::collections::{BTreeMap, BTreeSet};

use metaforge_domain::routing::{RouteCall, RoutingInputs, RoutingTable, resolve_route, validate_table};
use serde_json::Value;

fn table() -> Vec<Value> {
    metaforge_test_support::cases("routing")
}

#[test]
fn every_routing_case_holds() {
    let cases = table();
    assert!(cases.len() >= 20, "need at least 20 cases, have {}", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let routes: RoutingTable = serde_json::from_value(case["table"].clone()).unwrap();
        let env: BTreeMap<String, String> =
            serde_json::from_value(case.get("env").cloned().unwrap_or(Value::Null)).unwrap_or_default();
        let credentials: Option<BTreeSet<String>> = case
            .get("credentials")
            .map(|c| serde_json::from_value(c.clone()).unwrap());
        let call: RouteCall = serde_json::from_value(case["call"].clone()).unwrap();
        let inputs = RoutingInputs {
            table: &routes,
            env: &env,
            credentialed: credentials.as_ref(),
            selection: case.get("selection").and_then(Value::as_str),
            default: case.get("default").and_then(Value::as_str),
        };
        let expect = &case["expect"];
        match (
            resolve_route(&inputs, &call),
            expect.get("error").and_then(Value::as_str),
        ) {
            (Ok(got), None) => {
                let got = serde_json::to_value(&got).unwrap();
                if &got != expect {
                    failures.push(format!("{name}: got {got}, expected {expect}"));
                }
            }
            (Ok(got), Some(code)) => failures.push(format!("{name}: got {got:?}, expected error {code}")),
            (Err(e), None) => failures.push(format!("{name}: unexpected error {e}")),
            (Err(e), Some(code)) => {
                if e.code() != code {
                    failures.push(format!("{name}: error {} ({e}), expected {code}", e.code()));
                }
                // One needle or a list of them.
                let needles: Vec<&str> = match expect.get("message_contains") {
                    Some(Value::String(one)) => vec![one.as_str()],
                    Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
                    _ => Vec::new(),
                };
                for needle in needles {
                    if !e.to_string().contains(needle) {
                        failures.push(format!("{name}: message '{e}' lacks '{needle}'"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn validate_table_lists_every_problem_with_role_route_and_provider() {
    let routes: RoutingTable = serde_json::from_value(serde_json::json!({
        "roles": {"chat": "anthropic:gpt-4o", "oracle": "openai:gpt-4o", "gate_check": "acme:x", "classification": "gpt-4o"},
        "projects": {"p1": {"roles": {"phase_brain:mechanical": "gemini:claude-opus-4-8"}}}
    }))
    .unwrap();
    let env = BTreeMap::from([
        (
            "METAFORGE_ROUTE_SUMMARISATION".to_owned(),
            "openai-codex:openai/gpt-5".to_owned(),
        ),
        ("METAFORGE_ROUTE_ORACLE".to_owned(), "openai:gpt-4o".to_owned()),
        ("METAFORGE_ROUTE_CHAT".to_owned(), "openai:gpt-4o".to_owned()),
    ]);
    let creds = BTreeSet::from(["anthropic".to_owned()]);
    let problems = validate_table(&routes, &env, Some(&creds));
    let codes: Vec<&str> = problems.iter().map(|p| p.code()).collect();
    assert_eq!(
        codes,
        vec![
            "model_mismatch",
            "malformed_route",
            "unknown_provider",
            "unknown_role",
            "model_mismatch",
            "provider_unconfigured",
            "unknown_role",
            "model_mismatch"
        ],
        "{problems:#?}"
    );
    let mismatch = problems[0].to_string();
    assert!(
        mismatch.contains("chat") && mismatch.contains("anthropic:gpt-4o") && mismatch.contains("anthropic")
    );
}

#[test]
fn a_malformed_table_names_line_and_column() {
    let err = RoutingTable::from_json("{\n  \"roles\": {\"chat\": }\n}").unwrap_err();
    assert!(err.to_string().contains("line 2"), "{err}");
    let err = RoutingTable::from_json(r#"{"rolez": {}}"#).unwrap_err();
    assert!(err.to_string().contains("rolez"), "{err}");
}

#[test]
fn only_an_unconfigured_provider_lets_the_gateway_start() {
    let routes: RoutingTable = serde_json::from_value(
        serde_json::json!({"roles": {"chat": "openai:gpt-4o", "gate_check": "anthropic:gpt-4o"}}),
    )
    .unwrap();
    let creds = BTreeSet::from(["anthropic".to_owned()]);
    let problems = validate_table(&routes, &BTreeMap::new(), Some(&creds));
    let blocking: Vec<(&str, bool)> = problems.iter().map(|p| (p.code(), p.blocks_start())).collect();
    assert_eq!(
        blocking,
        vec![("provider_unconfigured", false), ("model_mismatch", true)]
    );
}

#[test]
fn only_a_by_design_capability_fallback_is_not_an_alarm() {
    use metaforge_domain::routing::FallbackReason;
    let labels: Vec<(&str, bool)> = [
        FallbackReason::CallFailed,
        FallbackReason::ModelMismatch,
        FallbackReason::CapabilityUnsupported,
    ]
    .iter()
    .map(|r| (r.as_str(), r.is_alarm()))
    .collect();
    assert_eq!(
        labels,
        vec![
            ("call_failed", true),
            ("model_mismatch", true),
            ("capability_unsupported", false)
        ]
    );
}

#[test]
fn an_env_override_for_a_role_that_does_not_exist_blocks_start_naming_the_variable() {
    let env = BTreeMap::from([(
        "METAFORGE_ROUTE_GATE_CHECK_FAST".to_owned(),
        "anthropic:claude-haiku-4-5-20251001".to_owned(),
    )]);
    let problems = validate_table(&RoutingTable::default(), &env, None);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].code(), "unknown_role");
    assert!(problems[0].blocks_start());
    let text = problems[0].to_string();
    assert!(
        text.contains("gate_check_fast") && text.contains("env METAFORGE_ROUTE_GATE_CHECK_FAST"),
        "{text}"
    );
    assert!(
        text.contains("gate_check"),
        "the message lists the routable roles: {text}"
    );
}

#[test]
fn every_table_problem_names_where_the_route_came_from() {
    let routes: RoutingTable = serde_json::from_value(serde_json::json!({
        "roles": {"chat": "gemini:claude-sonnet-4-5"},
        "projects": {"p": {"roles": {"gate_check": "anthropic:gpt-4o"}}}
    }))
    .unwrap();
    let env = BTreeMap::from([("METAFORGE_ROUTE_CHAT".to_owned(), "anthropic:o3".to_owned())]);
    let text: Vec<String> = validate_table(&routes, &env, None)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(text.len(), 3, "{text:#?}");
    assert!(text[0].contains("table entry roles['chat']") && text[0].contains("vendor 'anthropic'"));
    assert!(text[1].contains("projects['p'].roles['gate_check']") && text[1].contains("vendor 'openai'"));
    assert!(text[2].contains("env METAFORGE_ROUTE_CHAT") && text[2].contains("vendor 'openai'"));
}
