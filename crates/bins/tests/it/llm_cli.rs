//! `metaforge providers list` and `metaforge llm complete` from the outside: base URL sources,
//! configuration errors exit 2 naming the problem, a world-readable credentials file is refused.
#![expect(clippy::disallowed_methods, reason = "the test reads its own environment")]
#![expect(clippy::unwrap_used, reason = "test helper outside #[test] fns")]

use std::os::unix::fs::PermissionsExt;

use assert_cmd::Command;
use predicates::prelude::*;

fn metaforge(home: &std::path::Path) -> Command {
    let mut cmd = Command::cargo_bin("metaforge").unwrap();
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    cmd
}

#[test]
fn providers_list_reports_family_configuration_and_base_url_source() {
    let home = tempfile::tempdir().unwrap();
    let output = metaforge(home.path())
        .args(["providers", "list", "--json"])
        .env("HARNESS_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        .env("HARNESS_VLLM_BASE_URL", "http://127.0.0.1:8000/v1")
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let row = |id: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(row("openai")["base_url_source"], "explicit (env override)");
    assert_eq!(row("openai")["base_url"], "http://127.0.0.1:9/v1");
    assert_eq!(row("openai")["configured"], false);
    assert!(
        row("openai")["configured_reason"]
            .as_str()
            .unwrap()
            .contains("set OPENAI_API_KEY"),
        "an unconfigured provider names the variable that configures it"
    );
    assert_eq!(row("anthropic")["configured"], true);
    assert_eq!(row("anthropic")["base_url_source"], "fixed");
    assert_eq!(
        row("vllm")["configured"],
        true,
        "local runtime with a base URL needs no key"
    );
    assert_eq!(row("vllm")["base_url_source"], "env");
    assert_eq!(row("bedrock")["family"], "bedrock");
    assert!(
        row("bedrock")["base_url_source"]
            .as_str()
            .unwrap()
            .contains("HARNESS_BEDROCK_BASE_URL")
    );
    assert_eq!(rows.as_array().unwrap().len(), 35);
}

#[test]
fn a_provider_model_pair_the_family_cannot_serve_exits_2_naming_the_model() {
    let home = tempfile::tempdir().unwrap();
    metaforge(home.path())
        .args([
            "llm",
            "complete",
            "--provider",
            "anthropic",
            "--model",
            "gpt-4o",
            "hi",
        ])
        .env("HARNESS_ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("gpt-4o").and(predicate::str::contains("anthropic")));
}

#[test]
fn a_role_without_a_route_exits_2_naming_the_variable() {
    let home = tempfile::tempdir().unwrap();
    metaforge(home.path())
        .args(["llm", "complete", "--role", "phase_brain:mechanical", "hi"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("METAFORGE_ROUTE_PHASE_BRAIN_MECHANICAL"));
}

#[test]
fn a_world_readable_credentials_file_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("credentials.json");
    std::fs::write(&path, r#"{"providers":{}}"#).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    metaforge(home.path())
        .args([
            "llm",
            "complete",
            "--provider",
            "openai",
            "--model",
            "gpt-4o",
            "hi",
        ])
        .env("METAFORGE_CREDENTIALS_PATH", &path)
        .env("HARNESS_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("chmod 600"));
}

#[test]
fn an_unreachable_provider_exits_1_listing_every_attempt() {
    let home = tempfile::tempdir().unwrap();
    let port = metaforge_test_support::net::unused_port();
    metaforge(home.path())
        .args([
            "llm",
            "complete",
            "--provider",
            "openai",
            "--model",
            "gpt-4o",
            "hi",
        ])
        .env("HARNESS_OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1"))
        .env("OPENAI_API_KEY", "sk-test")
        .assert()
        .code(1)
        .stderr(
            predicate::str::contains("all providers failed for openai:gpt-4o:")
                .and(predicate::str::contains("openai:gpt-4o #3"))
                .and(predicate::str::contains("role 'chat'").not()),
        );
}

#[test]
fn a_silent_upstream_is_given_up_at_the_timeout_naming_the_flag_and_piped_stderr_shows_no_progress() {
    let home = tempfile::tempdir().unwrap();
    // Accepts connections and never answers: the adapter alone would wait minutes per attempt.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let started = std::time::Instant::now();
    let output = metaforge(home.path())
        .args([
            "llm",
            "complete",
            "--provider",
            "openai",
            "--model",
            "gpt-4o-mini",
            "--timeout",
            "1.5",
            "hi",
        ])
        .env("HARNESS_OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1"))
        .env("OPENAI_API_KEY", "sk-test")
        .output()
        .unwrap();
    let waited = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no answer within 1.5 s (--timeout)"), "{stderr}");
    assert!(
        !stderr.contains("waiting on"),
        "progress is for terminals only: {stderr}"
    );
    assert!(
        waited < std::time::Duration::from_secs(20),
        "gave up after {waited:?}"
    );
    drop(silent);
}

#[test]
fn a_timeout_that_is_not_a_positive_number_exits_2_naming_the_flag() {
    let home = tempfile::tempdir().unwrap();
    metaforge(home.path())
        .args(["llm", "complete", "--role", "chat", "--timeout", "0", "hi"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--timeout").and(predicate::str::contains("positive")));
}

#[test]
fn the_serving_commands_help_names_the_variables_people_set_first_and_where_the_rest_are() {
    let home = tempfile::tempdir().unwrap();
    for command in ["up", "gateway", "mcp"] {
        let output = metaforge(home.path()).args([command, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{command}: {help}");
        for needle in [
            "METAFORGE_HOME",
            "METAFORGE_GATEWAY_API_KEY",
            "OPENAI_API_KEY",
            "METAFORGE_ROUTE_<ROLE>",
            "README.md, section Configuration",
        ] {
            assert!(help.contains(needle), "{command} --help lacks {needle}:\n{help}");
        }
    }
}
