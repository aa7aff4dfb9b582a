//! The configuration through the real binary (issue 11): the environment is read once, a bad
//! variable refuses every command that reads it (exit 2, each problem named, nothing opened),
//! `metaforge config check` prints what the environment selects without a secret, and
//! `metaforge config variables` prints the README's table.

#![expect(
    clippy::expect_used,
    reason = "test helper outside #[test] fns: a binary that cannot run fails the test"
)]

use std::path::Path;
use std::process::Command;

/// `metaforge ARGS` with exactly `vars` (plus a scratch HOME) as its environment.
fn metaforge(home: &Path, vars: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_metaforge"));
    command.env_clear().env("HOME", home).args(args);
    for (name, value) in vars {
        command.env(name, value);
    }
    let out = command.output().expect("run metaforge");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_variables_refuse_a_serving_command_all_named_at_once_and_nothing_is_written() {
    let home = tempfile::tempdir().unwrap();
    let mf_home = home.path().join("mf");
    let mf = mf_home.to_str().unwrap();
    let (code, _, stderr) = metaforge(
        home.path(),
        &[
            ("METAFORGE_HOME", mf),
            ("METAFORGE_FLOW_ENGINE", "cloud"),
            ("METAFORGE_HTTP_MAX_CONNECTIONS", "0"),
            ("METAFORGE_CHAT_TWIN_WRITES", "perhaps"),
        ],
        &["gateway", "--bind", "127.0.0.1:0"],
    );
    assert_eq!(code, 2, "{stderr}");
    for variable in [
        "METAFORGE_FLOW_ENGINE",
        "METAFORGE_HTTP_MAX_CONNECTIONS",
        "METAFORGE_CHAT_TWIN_WRITES",
    ] {
        assert!(stderr.contains(variable), "{variable} not named: {stderr}");
    }
    assert!(
        !mf_home.exists(),
        "nothing may be created before the configuration is good"
    );
}

#[test]
fn a_bad_serving_variable_does_not_stop_a_pipeline_validating_flows() {
    let home = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = metaforge(
        home.path(),
        &[("METAFORGE_FLOW_ENGINE", "cloud")],
        &["flow", "list"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("mech_v1"), "{stdout}");
}

#[test]
fn config_check_prints_what_the_environment_selects_without_a_secret() {
    let home = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = metaforge(
        home.path(),
        &[
            (
                "METAFORGE_GATEWAY_API_KEY",
                "alice:sk-alice-secret,bob:sk-bob-secret",
            ),
            ("METAFORGE_ROUTE_CHAT", "openai:gpt-4o-mini"),
            ("METAFORGE_FLOW_ENGINE", "temporal"),
            ("METAFORGE_FLOW_ENGIN", "typo"),
        ],
        &["config", "check"],
    );
    assert_eq!(code, 0, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["gateway_api_keys"], 2);
    assert_eq!(report["runs"]["engine"], "temporal");
    assert_eq!(
        report["routing"]["overrides"]["METAFORGE_ROUTE_CHAT"],
        "openai:gpt-4o-mini"
    );
    assert_eq!(
        report["unknown_variables"],
        serde_json::json!(["METAFORGE_FLOW_ENGIN"])
    );
    assert!(!stdout.contains("secret"), "no key is printed: {stdout}");

    let (code, _, stderr) = metaforge(
        home.path(),
        &[("METAFORGE_GATE_TIMEOUT_SECONDS", "0")],
        &["config", "check"],
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("METAFORGE_GATE_TIMEOUT_SECONDS"), "{stderr}");
}

#[test]
fn config_variables_prints_the_readme_table() {
    let home = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = metaforge(home.path(), &[], &["config", "variables"]);
    assert_eq!(code, 0, "{stderr}");
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap();
    assert!(
        stdout.starts_with("| Variable | Default | What it does |"),
        "{stdout}"
    );
    assert!(
        readme.contains(&stdout),
        "README's table is the one the binary prints"
    );
    assert!(stdout.contains("`METAFORGE_FLOW_ENGINE`"));
}
