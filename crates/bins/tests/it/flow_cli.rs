//! `metaforge flow …` end to end: exit codes 0/1/2, `--json` shapes, and `file:line:col` on
//! unusable input.

use std::path::PathBuf;

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)
}

#[expect(clippy::unwrap_used, reason = "the binary under test is built by cargo")]
fn metaforge() -> Command {
    let mut cmd = Command::cargo_bin("metaforge").unwrap();
    cmd.current_dir(repo(""));
    cmd
}

#[expect(clippy::unwrap_used, reason = "non-JSON output is a test failure")]
fn json_of(args: &[&str], code: i32) -> Value {
    let out = metaforge()
        .args(args)
        .assert()
        .code(code)
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn every_shipped_template_validates_with_exit_0() {
    for id in ["design_v1", "mech_v1", "hardware_v1"] {
        let file = format!("fixtures/flows/{id}.yaml");
        metaforge()
            .args(["flow", "validate", &file])
            .assert()
            .code(0)
            .stdout(predicate::str::contains("valid"));
        let report = json_of(&["flow", "validate", &file, "--json"], 0);
        assert_eq!(report, serde_json::json!({"valid": true, "violations": []}));
    }
}

#[test]
fn a_decorative_gate_exits_1_naming_the_rule_and_phase() {
    metaforge()
        .args(["flow", "validate", "fixtures/examples/decorative_gate.yaml"])
        .assert()
        .code(1)
        .stdout(
            predicate::str::contains("gates-enforce-what-they-require")
                .and(predicate::str::contains("'design'")),
        );
    let report = json_of(
        &[
            "flow",
            "validate",
            "fixtures/examples/decorative_gate.yaml",
            "--json",
        ],
        1,
    );
    let keys: Vec<&String> = report.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["valid", "violations"]);
    assert_eq!(report["valid"], false);
    let violation = &report["violations"][0];
    assert_eq!(violation["rule"], "gates-enforce-what-they-require");
    assert_eq!(violation["phase"], "design");
    assert!(violation["message"].as_str().unwrap().contains("decorative"));
    assert_eq!(violation.as_object().unwrap().len(), 3);
}

#[test]
fn malformed_yaml_exits_2_naming_file_line_and_column() {
    metaforge()
        .args(["flow", "validate", "fixtures/examples/malformed.yaml"])
        .assert()
        .code(2)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("fixtures/examples/malformed.yaml:7:12:"));
}

#[test]
fn malformed_json_and_unknown_fields_exit_2_with_their_position() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("flow.json");
    std::fs::write(&json, "{\"id\": \"x\",\n \"phases\": [}\n").unwrap();
    metaforge()
        .args(["flow", "validate", json.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("flow.json:2:13:"));
    let yaml = dir.path().join("typo.yaml");
    std::fs::write(
        &yaml,
        "id: x\nversion: \"1\"\ntitle: T\nphases:\n  - id: a\n    title: A\n    enforce_deliverable: false\n",
    )
    .unwrap();
    metaforge()
        .args(["flow", "hash", yaml.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("typo.yaml:7:5:").and(predicate::str::contains("enforce_deliverable")),
        );
}

#[test]
fn a_missing_file_or_unknown_template_exits_2() {
    metaforge()
        .args(["flow", "validate", "no/such/flow.yaml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no/such/flow.yaml"));
    metaforge()
        .args(["flow", "show", "nope_v1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nope_v1"));
}

#[test]
fn list_shows_every_flow_with_its_summary() {
    metaforge().args(["flow", "list"]).assert().code(0).stdout(
        predicate::str::contains("design_v1")
            .and(predicate::str::contains("Release Gate G8"))
            .and(predicate::str::contains("startable"))
            .and(predicate::str::contains("deliverables:"))
            .and(predicate::str::contains("disciplines:")),
    );
    let entries = json_of(&["flow", "list", "--json"], 0);
    let ids: Vec<&str> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["design_v1", "mech_v1", "hardware_v1"]);
    assert!(entries.as_array().unwrap().iter().all(|e| e["startable"] == true));
}

#[test]
fn show_prints_the_shipped_yaml_or_json() {
    let source = std::fs::read_to_string(repo("fixtures/flows/mech_v1.yaml")).unwrap();
    metaforge()
        .args(["flow", "show", "mech_v1"])
        .assert()
        .code(0)
        .stdout(source);
    assert_eq!(
        json_of(&["flow", "show", "mech_v1", "--json"], 0)["id"],
        "mech_v1"
    );
}

#[test]
fn hash_matches_the_golden_template_hash_whatever_the_syntax() {
    let golden = "fc42ec3b6c88d715278abcd7690136d08bd924ab992cb6bd342edef2515e8da5\n";
    metaforge()
        .args(["flow", "hash", "fixtures/flows/mech_v1.yaml"])
        .assert()
        .code(0)
        .stdout(golden);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("mech.json");
    let shown = metaforge()
        .args(["flow", "show", "mech_v1", "--json"])
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    std::fs::write(&json, shown).unwrap();
    metaforge()
        .args(["flow", "hash", json.to_str().unwrap()])
        .assert()
        .code(0)
        .stdout(golden);
}

#[test]
fn diff_against_a_template_id_shouts_relaxations() {
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(repo("fixtures/flows/mech_v1.yaml")).unwrap();
    let lax = source.replace(
        "required_deliverables: [cad_model, drawing]",
        "required_deliverables: [cad_model]",
    );
    let file = dir.path().join("lax.yaml");
    std::fs::write(&file, lax).unwrap();
    metaforge()
        .args(["flow", "diff", "mech_v1", file.to_str().unwrap()])
        .assert()
        .code(0)
        .stdout("phase 'design' NO LONGER requires 'drawing'\n");
    metaforge()
        .args([
            "flow",
            "diff",
            "fixtures/flows/mech_v1.yaml",
            "fixtures/flows/mech_v1.yaml",
        ])
        .assert()
        .code(0)
        .stdout("no changes\n");
}

#[test]
fn tailor_with_an_undecided_route_inserts_route_selection_and_shouts_the_drop() {
    let result = json_of(
        &[
            "flow",
            "tailor",
            "--template",
            "mech_v1",
            "--ops",
            "fixtures/examples/ops.json",
            "--context",
            "fixtures/examples/ctx_undecided.json",
            "--json",
        ],
        0,
    );
    assert_eq!(result["status"], "proposed");
    let phases: Vec<&str> = result["flow"]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    let route = phases.iter().position(|p| *p == "route_selection").unwrap();
    assert_eq!(phases[route + 1], "design");
    assert_eq!(result["flow"]["phases"][route]["gate"]["auto_approve"], false);
    let diff: Vec<&str> = result["diff"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(diff.contains(&"phase 'feasibility' DROPPED"), "{diff:?}");
    assert_eq!(result["content_hash"].as_str().unwrap().len(), 64);
    for key in ["applied", "skipped", "violations", "questions"] {
        assert!(result[key].is_array(), "{key}");
    }
}

#[test]
fn tailor_without_context_needs_input_and_exits_1() {
    let result = json_of(
        &[
            "flow",
            "tailor",
            "--template",
            "mech_v1",
            "--ops",
            "fixtures/examples/ops.json",
            "--json",
        ],
        1,
    );
    assert_eq!(result["status"], "needs_input");
    let ids: Vec<&str> = result["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["manufacturing_route", "target_maturity", "loads_and_use"]);
    assert_eq!(result["flow"], Value::Null);
}

#[test]
fn strict_tailoring_refuses_bad_operations_and_lenient_skips_them() {
    let args = |strict: bool| {
        let mut a = vec![
            "flow",
            "tailor",
            "--template",
            "mech_v1",
            "--ops",
            "fixtures/examples/ops_lax.json",
            "--context",
            "fixtures/examples/ctx_undecided.json",
            "--json",
        ];
        if strict {
            a.push("--strict");
        }
        a
    };
    let strict = json_of(&args(true), 1);
    assert_eq!(strict["status"], "invalid");
    assert_eq!(strict["refused"].as_array().unwrap().len(), 3);
    assert!(strict["applied"].as_array().unwrap().is_empty());
    // Lenient: the three bad operations are skipped; what remains (simulation dropped, a test
    // plan at the G6 gate, loads known) is the wall-shelf story, and mech_v1 keeps its release
    // gate on a phase of its own, so the result is a valid proposal.
    let lenient = json_of(&args(false), 0);
    assert_eq!(lenient["status"], "proposed", "{lenient:#}");
    assert_eq!(lenient["skipped"].as_array().unwrap().len(), 3);
    assert_eq!(lenient["violations"], serde_json::json!([]));
    assert!(
        lenient["diff"]
            .as_array()
            .unwrap()
            .contains(&Value::from("phase 'simulation' DROPPED"))
    );
}

#[test]
fn unreadable_ops_exit_2() {
    metaforge()
        .args([
            "flow",
            "tailor",
            "--template",
            "mech_v1",
            "--ops",
            "fixtures/examples/malformed.yaml",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("malformed.yaml:7:12"));
}

/// Runs `metaforge flow tailor --template T --ops O --context C` (text and `--json`) and returns
/// the JSON result; both must exit 0.
fn tailored_story(template: &str, ops: &str, context: &str) -> Value {
    metaforge()
        .args([
            "flow",
            "tailor",
            "--template",
            template,
            "--ops",
            ops,
            "--context",
            context,
        ])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("status: proposed"));
    json_of(
        &[
            "flow",
            "tailor",
            "--template",
            template,
            "--ops",
            ops,
            "--context",
            context,
            "--json",
        ],
        0,
    )
}

#[expect(clippy::unwrap_used, reason = "a result without phases is a test failure")]
fn phase_ids(result: &Value) -> Vec<String> {
    result["flow"]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_wall_shelf_story_tailors_mech_v1_without_simulation_into_a_valid_flow() {
    let result = tailored_story(
        "mech_v1",
        "fixtures/examples/shelf_ops.json",
        "fixtures/examples/shelf_ctx.json",
    );
    assert_eq!(result["status"], "proposed");
    assert_eq!(result["violations"], serde_json::json!([]));
    let ids = phase_ids(&result);
    assert!(!ids.contains(&"simulation".to_owned()), "{ids:?}");
    let release = result["flow"]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "release")
        .unwrap();
    assert_eq!(release["gate"]["name"], "G8 Release Gate");
    assert!(
        release["required_deliverables"]
            .as_array()
            .unwrap()
            .contains(&Value::from("test_plan"))
    );
    assert!(
        result["diff"]
            .as_array()
            .unwrap()
            .contains(&Value::from("phase 'simulation' DROPPED"))
    );
    assert_eq!(result["content_hash"].as_str().unwrap().len(), 64);
}

#[test]
fn the_kitchen_cabinet_story_tailors_hardware_v1_without_electronics_and_firmware() {
    let result = tailored_story(
        "hardware_v1",
        "fixtures/examples/cabinet_ops.json",
        "fixtures/examples/cabinet_ctx.json",
    );
    assert_eq!(result["status"], "proposed");
    assert_eq!(result["violations"], serde_json::json!([]));
    let ids = phase_ids(&result);
    for gone in ["electronics", "firmware"] {
        assert!(!ids.contains(&gone.to_owned()), "{ids:?}");
    }
    assert!(ids.contains(&"manufacturing".to_owned()));
    assert_eq!(result["applied"].as_array().unwrap().len(), 6);
}

#[test]
fn a_flow_over_max_phases_exits_2_naming_the_limit() {
    use metaforge_domain::flow::MAX_PHASES;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.json");
    let phases: Vec<Value> = (0..=MAX_PHASES)
        .map(|i| serde_json::json!({"id": format!("p{i}"), "title": "P", "expected_artifacts": ["a"]}))
        .collect();
    let flow = serde_json::json!({"id": "big", "version": "1", "title": "Big", "phases": phases});
    std::fs::write(&path, flow.to_string()).unwrap();
    metaforge()
        .args(["flow", "validate", path.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("MAX_PHASES").and(predicate::str::contains("big.json")));
}
