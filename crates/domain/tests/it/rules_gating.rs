//! Table: tool gating by caller class with schema pre-validation (MET-569, FORGE-222/487/584),
//! from `fixtures/rules/gating.json`.

#![expect(
    clippy::unwrap_used,
    reason = "fixture helpers: a malformed fixture must fail the test loudly"
)]

use metaforge_domain::tool_gating::{Caller, CallerClass, ToolSpec, decide, validate_arguments};
use serde_json::{Value, json};

fn table() -> Vec<Value> {
    metaforge_test_support::cases("gating")
}

fn caller(v: &Value) -> Caller {
    match v {
        Value::String(_) => Caller::from(serde_json::from_value::<CallerClass>(v.clone()).unwrap()),
        other => serde_json::from_value(other.clone()).unwrap(),
    }
}

#[test]
fn every_gating_case_holds() {
    let mut failures = Vec::new();
    for case in table() {
        let name = case["name"].as_str().unwrap();
        let tool: ToolSpec = serde_json::from_value(case["tool"].clone()).unwrap();
        let verdict = decide(&tool, &caller(&case["caller"]), &case["arguments"]);
        let got = serde_json::to_value(&verdict).unwrap();
        let expect = &case["expect"];
        if got["decision"] != expect["decision"] {
            failures.push(format!(
                "{name}: decision {} ({}), expected {}",
                got["decision"], verdict.reason, expect["decision"]
            ));
        }
        if verdict.validation_errors.len() as u64 != expect["validation_errors"].as_u64().unwrap() {
            failures.push(format!(
                "{name}: {} validation errors {:?}",
                verdict.validation_errors.len(),
                verdict.validation_errors
            ));
        }
        if let Some(needle) = expect.get("reason_contains").and_then(Value::as_str)
            && !verdict.reason.contains(needle)
        {
            failures.push(format!("{name}: reason '{}' lacks '{needle}'", verdict.reason));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn validation_errors_name_the_path_and_keyword() {
    let schema = json!({"type": "object", "required": ["path"], "properties": {"n": {"type": "integer"}, "f": {"enum": ["a"]}}});
    let mut errors = validate_arguments(Some(&schema), &json!({"n": "x", "f": "b"}));
    errors.sort_by(|a, b| a.keyword.cmp(&b.keyword));
    let got: Vec<(String, String)> = errors
        .iter()
        .map(|e| (e.keyword.clone(), e.path.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("enum".into(), "/f".into()),
            ("required".into(), String::new()),
            ("type".into(), "/n".into())
        ]
    );
}

#[test]
fn every_gating_case_decides_the_same_with_the_schema_compiled_once() {
    use metaforge_domain::tool_gating::{ArgumentSchema, decide_with_schema};
    for case in table() {
        let tool: ToolSpec = serde_json::from_value(case["tool"].clone()).unwrap();
        let compiled = ArgumentSchema::compile(tool.input_schema.as_ref());
        let caller = caller(&case["caller"]);
        // Twice with one compiled schema: a check leaves nothing behind for the next call.
        for _ in 0..2 {
            assert_eq!(
                decide_with_schema(&tool, &compiled, &caller, &case["arguments"]),
                decide(&tool, &caller, &case["arguments"]),
                "{}",
                case["name"]
            );
        }
    }
}

#[test]
fn an_invalid_declared_schema_fails_closed() {
    let errors = validate_arguments(Some(&json!({"type": "not-a-type"})), &json!({}));
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].keyword, "schema");
    let compiled =
        metaforge_domain::tool_gating::ArgumentSchema::compile(Some(&json!({"type": "not-a-type"})));
    for arguments in [json!({}), json!({"any": 1})] {
        assert_eq!(
            compiled.check(&arguments).len(),
            1,
            "refused every time: {arguments}"
        );
    }
}

#[test]
fn the_invalid_arguments_envelope_says_the_call_was_not_executed() {
    use metaforge_domain::tool_gating::invalid_arguments_envelope;
    let schema = json!({"type": "object", "required": ["path"]});
    let errors = validate_arguments(Some(&schema), &json!({}));
    let envelope = invalid_arguments_envelope("twin.commit_geometry", &errors);
    assert_eq!(envelope["status"], "error");
    assert_eq!(envelope["error"], "invalid_arguments");
    assert_eq!(envelope["validation_errors"][0]["keyword"], "required");
    assert!(envelope["hint"].as_str().unwrap().contains("NOT executed"));
}

#[test]
fn duplicate_guard_keys_ignore_object_key_order_but_not_values() {
    use metaforge_domain::tool_gating::canonical_call_key;
    let a = canonical_call_key(
        "twin.query",
        &json!({"a": 1, "b": {"y": 2, "x": [1, {"q": 1, "p": 2}]}}),
    );
    let b = canonical_call_key(
        "twin.query",
        &json!({"b": {"x": [1, {"p": 2, "q": 1}], "y": 2}, "a": 1}),
    );
    assert_eq!(a, b);
    assert_ne!(
        a,
        canonical_call_key("twin.query", &json!({"a": 2, "b": {"y": 2, "x": [1]}}))
    );
    assert_ne!(
        a,
        canonical_call_key(
            "twin.other",
            &json!({"a": 1, "b": {"y": 2, "x": [1, {"q": 1, "p": 2}]}})
        )
    );
}
