//! `metaforge check <rule>`: JSON in, JSON out, exit 2 naming file and line:col on bad input.

#![expect(
    clippy::unwrap_used,
    reason = "test helper: a failure to run the binary must fail the test loudly"
)]

use assert_cmd::Command;
use serde_json::{Value, json};

fn check(rule: &str, input: &Value) -> (i32, Value) {
    let out = Command::cargo_bin("metaforge")
        .unwrap()
        .args(["check", rule])
        .write_stdin(input.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap(), value)
}

#[test]
fn grounding_flags_the_seed_fabricated_assembly() {
    let reply =
        "Assembled the available parts... Added revolute joints J1 to J6... Part Count: 6 components.";
    let (code, out) = check("grounding", &json!({"reply": reply, "steps": []}));
    assert_eq!(code, 0);
    assert_eq!(out["flagged"], true);
    assert_eq!(out["banners"], json!(["UNGROUNDED"]));
    assert_eq!(out["metric_kinds"], json!(["no_tool_call"]));
    assert!(out["text"].as_str().unwrap().ends_with(reply));
}

#[test]
fn grounding_flags_the_seed_assembly_4_node_id() {
    let input = json!({
        "reply": "The assembly was saved to the twin. Node id: assembly_4.",
        "steps": [
            {"tool": "freecad.import_step", "arguments": {"path": "/tmp/a.step"}, "result": {"object": "part_1"}, "error": null},
            {"tool": "freecad.create_assembly", "arguments": {}, "result": {"assembly": "assembly_4"}, "error": null}
        ],
        "registry": {"twin.commit_geometry": {"required_gates": ["twin_write"]}}
    });
    let (code, out) = check("grounding", &input);
    assert_eq!(code, 0);
    assert_eq!(out["banners"], json!(["NO_TWIN_COMMIT", "UNVERIFIED_NODE_ID"]));
    assert_eq!(out["unverified_ids"], json!(["assembly_4"]));
}

#[test]
fn model_family_rejects_anthropic_gpt_4o_and_names_the_model() {
    let (code, out) = check(
        "model-family",
        &json!({"provider": "anthropic", "model": "gpt-4o"}),
    );
    assert_eq!(code, 0);
    assert_eq!(out["mismatch"], true);
    assert!(out["reason"].as_str().unwrap().contains("gpt-4o"));
    let (_, out) = check(
        "model-family",
        &json!({"provider": "openrouter", "model": "anthropic/claude-opus-4-8"}),
    );
    assert_eq!(
        out,
        json!({"mismatch": false, "reason": null, "vendor": "anthropic"})
    );
}

#[test]
fn model_family_names_the_models_vendor() {
    let (code, out) = check(
        "model-family",
        &json!({"provider": "gemini", "model": "claude-3"}),
    );
    assert_eq!(code, 0);
    assert_eq!(out["mismatch"], true);
    assert_eq!(out["vendor"], "anthropic");
    assert!(
        out["reason"].as_str().unwrap().contains("vendor 'anthropic'"),
        "{out}"
    );
}

#[test]
fn route_errors_name_the_vendor_and_where_the_route_came_from() {
    let (code, out) = check(
        "route",
        &json!({"table": {}, "env": {"METAFORGE_ROUTE_CHAT": "gemini:claude-sonnet-4-5"}, "call": {"role": "chat"}}),
    );
    assert_eq!(code, 1);
    assert_eq!(out["error"], "model_mismatch");
    assert_eq!(out["location"], "env METAFORGE_ROUTE_CHAT");
    let message = out["message"].as_str().unwrap();
    assert!(
        message.contains("vendor 'anthropic'") && message.contains("METAFORGE_ROUTE_CHAT"),
        "{message}"
    );
    let (code, out) = check(
        "route",
        &json!({"table": {"projects": {"p": {"roles": {"chat": "anthropic:gpt-4o"}}}}, "call": {"role": "chat", "project_id": "p"}}),
    );
    assert_eq!(code, 1);
    assert_eq!(out["location"], "table entry projects['p'].roles['chat']");
    assert!(
        out["message"].as_str().unwrap().contains("vendor 'openai'"),
        "{out}"
    );
}

#[test]
fn route_refuses_an_env_override_for_a_role_that_does_not_exist() {
    let (code, out) = check(
        "route",
        &json!({"table": {}, "env": {"METAFORGE_ROUTE_GATE_CHECK_FAST": "anthropic:claude-haiku-4-5-20251001"},
                "default": "anthropic:claude-haiku-4-5-20251001", "call": {"role": "gate_check"}}),
    );
    assert_eq!(code, 1);
    assert_eq!(out["error"], "unknown_role");
    assert_eq!(out["location"], "env METAFORGE_ROUTE_GATE_CHECK_FAST");
}

#[test]
fn route_keeps_a_phase_model_to_the_phase_brain() {
    let table: Value =
        serde_json::from_str(include_str!("../../../../fixtures/model_routes.example.json")).unwrap();
    let (code, out) = check(
        "route",
        &json!({"table": table, "call": {"role": "gate_check", "phase_model": "openai:gpt-5"}}),
    );
    assert_eq!(code, 0);
    assert_eq!(out["source"], "table");
    assert_eq!(out["matched_role"], "gate_check");
}

#[test]
fn model_family_with_an_unknown_provider_exits_2() {
    let out = Command::cargo_bin("metaforge")
        .unwrap()
        .args(["check", "model-family"])
        .write_stdin(r#"{"provider": "nope", "model": "x"}"#)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown provider 'nope'"));
    assert!(out.stdout.is_empty());
}

#[test]
fn route_resolves_the_seed_split_and_refuses_a_mismatched_phase_model() {
    let table: Value =
        serde_json::from_str(include_str!("../../../../fixtures/model_routes.example.json")).unwrap();
    let (code, out) = check(
        "route",
        &json!({"table": table, "call": {"role": "phase_brain", "disciplines": ["mechanical"]}}),
    );
    assert_eq!(code, 0);
    assert_eq!(
        out,
        json!({"provider": "anthropic", "model": "claude-opus-4-8", "matched_role": "phase_brain:mechanical", "source": "table"})
    );
    let (code, out) = check(
        "route",
        &json!({"table": table, "call": {"role": "phase_brain", "phase_model": "anthropic:gpt-4o"}}),
    );
    assert_eq!(code, 1);
    assert_eq!(out["error"], "model_mismatch");
    assert!(out["message"].as_str().unwrap().contains("gpt-4o"));
}

#[test]
fn usage_totals_keep_unknown_cost_null_and_count_subscription_calls() {
    let input = json!({"events": [
        {"provider": "anthropic", "model": "claude-haiku-4-5-20251001", "role": "flow_generator", "prompt_tokens": 1000, "completion_tokens": 100},
        {"provider": "openai-codex", "model": "gpt-5", "role": "chat", "prompt_tokens": 10, "completion_tokens": 2},
        {"provider": "openai", "model": "unknown-model", "role": "chat"}
    ]});
    let (code, out) = check("usage", &input);
    assert_eq!(code, 0);
    assert_eq!(out["calls"], 3);
    assert!((out["cost_usd"].as_f64().unwrap() - 0.0015).abs() < 1e-12);
    assert_eq!(out["calls_subscription"], 1);
    assert_eq!(out["calls_unpriced"], 1);
    assert_eq!(out["calls_without_usage"], 1);
    assert_eq!(out["billing"], "mixed");
    assert_eq!(out["by_role"]["chat"]["calls"], 2);
    let (_, out) = check(
        "usage",
        &json!({"events": [{"provider": "anthropic", "model": "claude-haiku-4-5-20251001", "prompt_tokens": 1, "completion_tokens": 1}],
                "prices": {"models": {}}}),
    );
    assert_eq!(
        out["cost_usd"],
        Value::Null,
        "an override table without the model leaves it unpriced"
    );
}

/// Whether every field of `expect` is in `got` with the same value (floats to 1e-12).
fn holds(expect: &Value, got: &Value) -> bool {
    match (expect, got) {
        (Value::Object(e), Value::Object(g)) => {
            e.iter().all(|(k, v)| holds(v, g.get(k).unwrap_or(&Value::Null)))
        }
        (Value::Number(e), Value::Number(g)) if e.is_f64() || g.is_f64() => {
            (e.as_f64().unwrap() - g.as_f64().unwrap()).abs() < 1e-12
        }
        _ => expect == got,
    }
}

#[test]
fn usage_normalises_raw_provider_usage_by_family_for_every_table_case() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/rules/usage.json"
    ))
    .unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let cases = doc["raw_events"].as_array().unwrap();
    assert!(cases.len() >= 7, "one case per family, unknown, and a mix");
    let mut failures = Vec::new();
    for case in cases {
        let (code, out) = check("usage", &json!({"events": case["events"]}));
        if code != 0 || !holds(&case["expect"], &out) {
            failures.push(format!("{}: exit {code}, got {out}", case["name"]));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn raw_usage_with_an_unknown_provider_or_field_exits_2_naming_the_event() {
    for (events, named) in [
        (
            json!([{"provider": "openai", "model": "m", "prompt_tokens": 1},
                   {"provider": "nosuch", "model": "m", "usage": {}}]),
            "events[1].provider",
        ),
        (
            json!([{"provider": "openai", "model": "m", "usage": {}, "tokens": 3}]),
            "events[0]",
        ),
    ] {
        let out = Command::cargo_bin("metaforge")
            .unwrap()
            .args(["check", "usage"])
            .write_stdin(json!({"events": events}).to_string())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(named), "{named} not in {stderr}");
        assert!(out.stdout.is_empty(), "nothing printed on bad input");
    }
}

#[test]
fn check_help_names_no_ticket_ids_and_every_rules_example_runs() {
    let out = Command::cargo_bin("metaforge")
        .unwrap()
        .args(["check", "--help"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    for ticket in ["FORGE-", "MET-"] {
        assert!(
            !help.contains(ticket),
            "internal ticket id {ticket} in help:\n{help}"
        );
    }
    let examples: Vec<(String, String)> = help
        .lines()
        .filter_map(|l| l.trim().strip_prefix("echo '"))
        .filter_map(|l| l.split_once("' | metaforge check "))
        .map(|(input, rule)| (input.to_owned(), rule.trim().to_owned()))
        .collect();
    for rule in [
        "grounding",
        "model-family",
        "route",
        "usage",
        "select-tools",
        "gate",
        "truncate",
    ] {
        assert!(
            examples.iter().any(|(_, r)| r == rule),
            "no example for {rule}:\n{help}"
        );
    }
    for (input, rule) in examples {
        let input: Value = serde_json::from_str(&input).unwrap();
        let (code, out) = check(&rule, &input);
        assert_eq!(code, 0, "the {rule} example fails: {input} → {out}");
        assert!(out.is_object(), "{rule}: {out}");
    }
}

#[test]
fn select_tools_caps_openai_at_128_without_a_tail_slice() {
    let mut tools = vec![json!({"name": "chat.set_project_scope", "origin": "native"})];
    tools.extend((0..70).map(|i| json!({"name": format!("kicad.t{i:02}"), "origin": "mcp:kicad"})));
    tools.extend((0..70).map(|i| json!({"name": format!("twin.t{i:02}"), "origin": "mcp:twin"})));
    let (code, out) = check("select-tools", &json!({"provider": "openai", "tools": tools}));
    assert_eq!(code, 0);
    assert_eq!(out["cap"], 128);
    assert_eq!(out["kept"].as_array().unwrap().len(), 128);
    assert_eq!(out["dropped"].as_array().unwrap().len(), 13);
    assert!(out["kept"].as_array().unwrap().contains(&json!("twin.t00")));
    assert_eq!(out["protected_exceeds_cap"], false);
}

#[test]
fn gate_refuses_invalid_arguments_before_the_approval_hold() {
    let tool = json!({"name": "twin.commit_geometry", "origin": "mcp:twin", "requires_approval": true,
        "required_gates": ["twin_write"], "annotation": "ADDITIVE",
        "input_schema": {"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}}});
    let (code, out) = check("gate", &json!({"tool": tool, "caller": "local", "arguments": {}}));
    assert_eq!(code, 0);
    assert_eq!(out["decision"], "refuse");
    assert_eq!(out["validation_errors"][0]["keyword"], "required");
    let (_, out) = check(
        "gate",
        &json!({"tool": tool, "caller": "local", "arguments": {"path": "/tmp/a.step"}}),
    );
    assert_eq!(out["decision"], "hold");
    let (_, out) = check(
        "gate",
        &json!({"tool": tool, "caller": {"class": "service", "project_id": "p1"}, "arguments": {"path": "/x", "project_id": "p1"}}),
    );
    assert_eq!(out["decision"], "run");
}

#[test]
fn truncate_is_loud() {
    let (code, out) = check(
        "truncate",
        &json!({"op": "text", "text": "abcdefghij", "max_chars": 4}),
    );
    assert_eq!(code, 0);
    assert_eq!(out, json!({"text": "abcd…[truncated 6 chars]"}));
    let (_, out) = check(
        "truncate",
        &json!({"op": "value", "value": {"total": 3, "items": [1, 2, 3]}, "max_items": 1, "max_string_chars": 10}),
    );
    assert_eq!(
        out,
        json!({"value": {"total": 3, "items": [1], "items_omitted_count": 2}})
    );
}

#[test]
fn bad_json_in_a_file_exits_2_naming_the_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    std::fs::write(&path, "{\n  \"reply\": \"x\",\n  \"steps\": [,]\n}").unwrap();
    let out = Command::cargo_bin("metaforge")
        .unwrap()
        .args(["check", "grounding", "--input", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{}:3:13", path.display())), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_wrong_shape_exits_2_naming_the_field() {
    let out = Command::cargo_bin("metaforge")
        .unwrap()
        .args(["check", "route"])
        .write_stdin(r#"{"table": {}, "call": {"rol": "chat"}}"#)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("<stdin>:1:") && stderr.contains("rol"),
        "{stderr}"
    );
}

#[test]
fn a_missing_input_file_exits_2() {
    let out = Command::cargo_bin("metaforge")
        .unwrap()
        .args(["check", "usage", "--input", "/nonexistent/usage.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/usage.json"));
}
