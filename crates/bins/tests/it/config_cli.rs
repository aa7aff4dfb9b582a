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

/// `metaforge ARGS` as [`metaforge`] does, ended after 30 s if it is still running (a start
/// that should have been refused serves instead): the exit code, or `None`, and stderr.
fn refused_within(home: &Path, vars: &[(&str, &str)], args: &[&str]) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_metaforge"));
    command
        .env_clear()
        .env("HOME", home)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for (name, value) in vars {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("run metaforge");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if std::time::Instant::now() >= deadline {
            child.kill().expect("kill");
            child.wait().expect("reap");
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        std::io::Read::read_to_string(&mut pipe, &mut stderr).expect("stderr");
    }
    (code, stderr)
}

#[test]
fn config_check_refuses_what_gateway_refuses_naming_the_same_setting() {
    let home = tempfile::tempdir().unwrap();
    let malformed = home.path().join("servers.json");
    std::fs::write(&malformed, "{\"mcpServers\": {\"x\": {\"url\": \"ftp://nope\"}}}").unwrap();
    let missing = home.path().join("missing.json");
    let (malformed, missing) = (malformed.to_str().unwrap(), missing.to_str().unwrap());
    let keys = ("METAFORGE_GATEWAY_API_KEY", "ops:sk-ops-000001");
    let table: &[(&[(&str, &str)], &str)] = &[
        (
            &[("METAFORGE_ROUTE_CHATT", "openai:gpt-4o-mini")],
            "METAFORGE_ROUTE_CHATT",
        ),
        (&[("METAFORGE_ROUTE_CHAT", "gpt-4o-mini")], "METAFORGE_ROUTE_CHAT"),
        (&[("METAFORGE_GATEWAY_BIND", "0.0.0.0:8787")], "0.0.0.0:8787"),
        (
            &[("METAFORGE_APPROVALS_SEPARATE_APPROVER", "on")],
            "METAFORGE_GATEWAY_API_KEY",
        ),
        (&[("METAFORGE_MCP_SERVERS_PATH", missing), keys], "no such file"),
        (&[("METAFORGE_MCP_SERVERS_PATH", malformed), keys], "url"),
        (&[("METAFORGE_LOG_FORMAT", "jsno")], "METAFORGE_LOG_FORMAT"),
        (&[("METAFORGE_GATEWAY_API_KEY", ", ,")], "holds no key"),
    ];
    for (vars, named) in table {
        let mut with_bind: Vec<(&str, &str)> = vars.to_vec();
        if !vars.iter().any(|(k, _)| *k == "METAFORGE_GATEWAY_BIND") {
            with_bind.push(("METAFORGE_GATEWAY_BIND", "127.0.0.1:0"));
        }
        let (check, check_err) = refused_within(home.path(), &with_bind, &["config", "check"]);
        assert_eq!(check, Some(2), "config check with {vars:?}: {check_err}");
        assert!(
            check_err.contains(named),
            "config check with {vars:?} does not name {named}: {check_err}"
        );
        let (start, start_err) = refused_within(home.path(), &with_bind, &["gateway"]);
        assert_eq!(start, Some(2), "gateway with {vars:?}: {start_err}");
        assert!(
            start_err.contains(named),
            "gateway with {vars:?} does not name {named}: {start_err}"
        );
    }
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
