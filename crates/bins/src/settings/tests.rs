use metaforge_agent::LoopMode;
use metaforge_ports::{FlowEngineKind, IntelligenceMode};

use super::*;

fn from(pairs: &[(&str, &str)]) -> Result<Settings, SettingsError> {
    Settings::from_env(Environment::from_pairs(
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    ))
}

fn problems(pairs: &[(&str, &str)]) -> Vec<String> {
    match from(pairs) {
        Ok(_) => Vec::new(),
        Err(err) => err.problems,
    }
}

#[test]
fn an_empty_environment_gives_every_default() {
    let settings = from(&[("HOME", "/home/ana")]).unwrap();
    let store = settings.store().unwrap();
    assert_eq!(store.home, PathBuf::from("/home/ana/.metaforge"));
    assert_eq!(
        settings.credentials_path,
        PathBuf::from("/home/ana/.metaforge/credentials.json")
    );
    assert_eq!(settings.chat.max_iterations, 12);
    assert_eq!(settings.chat.history_tokens, 12_000);
    assert!(settings.chat.token_budget.is_none());
    assert!(settings.chat.disabled_gates.is_empty());
    assert_eq!(settings.chat.loop_mode, LoopMode::Auto);
    assert_eq!(settings.runs.engine, FlowEngineKind::Embedded);
    assert_eq!(settings.runs.intelligence, IntelligenceMode::Server);
    assert_eq!(settings.runs.gate_timeout_seconds, None);
    assert!((settings.runs.spend_alert_usd - 5.0).abs() < f64::EPSILON);
    assert_eq!(settings.http.max_connections, 1024);
    assert_eq!(settings.approver_policy, ApproverPolicy::Any);
    assert!(!settings.mcp.client_task_writes);
    assert!(settings.routing.overrides.is_empty() && settings.routing.fallbacks.is_empty());
}

#[test]
fn no_home_at_all_is_not_a_bad_variable_but_the_ledger_commands_say_so() {
    let settings = from(&[]).unwrap();
    let err = settings.store().unwrap_err();
    assert!(err.to_string().contains("METAFORGE_HOME"), "{err}");
}

#[test]
fn every_bad_variable_is_named_at_once() {
    let found = problems(&[
        ("METAFORGE_FLOW_ENGINE", "cloud"),
        ("METAFORGE_HTTP_MAX_CONNECTIONS", "0"),
        ("METAFORGE_CHAT_MAX_ITERATIONS", "many"),
        ("METAFORGE_CLIENT_TASK_WRITES", "yes"),
        ("METAFORGE_RUN_SPEND_ALERT_USD", "lots"),
        ("METAFORGE_FALLBACK_PROVIDERS", "nocolon"),
        ("METAFORGE_GATEWAY_API_KEY", "alice:"),
        ("METAFORGE_HOME", ""),
    ]);
    for variable in [
        "METAFORGE_FLOW_ENGINE",
        "METAFORGE_HTTP_MAX_CONNECTIONS",
        "METAFORGE_CHAT_MAX_ITERATIONS",
        "METAFORGE_CLIENT_TASK_WRITES=yes",
        "METAFORGE_RUN_SPEND_ALERT_USD",
        "METAFORGE_FALLBACK_PROVIDERS",
        "METAFORGE_GATEWAY_API_KEY",
        "METAFORGE_HOME",
    ] {
        assert!(
            found.iter().any(|p| p.contains(variable)),
            "{variable} not named in {found:#?}"
        );
    }
    assert_eq!(found.len(), 8, "{found:#?}");
}

#[test]
fn chat_switches_turn_off_their_gate_and_a_typo_is_refused() {
    let settings = from(&[
        ("METAFORGE_CHAT_TWIN_WRITES", "0"),
        ("METAFORGE_CHAT_PROJECT_WRITES", "off"),
    ])
    .unwrap();
    assert_eq!(settings.chat.disabled_gates, ["twin_write", "project_write"]);
    let found = problems(&[("METAFORGE_CHAT_TWIN_WRITES", "nope")]);
    assert!(found[0].contains("METAFORGE_CHAT_TWIN_WRITES=nope"), "{found:?}");
    let found = problems(&[("METAFORGE_AGENT_LOOP", "fast")]);
    assert!(found[0].contains("METAFORGE_AGENT_LOOP"), "{found:?}");
}

#[test]
fn a_chat_prompt_file_that_cannot_be_read_names_the_variable_and_the_path() {
    let found = problems(&[("METAFORGE_CHAT_SYSTEM_PROMPT_PATH", "/nonexistent/prompt.md")]);
    assert!(
        found[0].contains("METAFORGE_CHAT_SYSTEM_PROMPT_PATH=/nonexistent/prompt.md"),
        "{found:?}"
    );
}

#[test]
fn client_task_writes_are_on_only_when_the_owner_says_on() {
    for (raw, want) in [("", false), ("off", false), ("ON", true), (" on ", true)] {
        let settings = from(&[("METAFORGE_CLIENT_TASK_WRITES", raw)]).unwrap();
        assert_eq!(settings.mcp.client_task_writes, want, "{raw:?}");
    }
}

#[test]
fn routes_and_the_default_route_come_from_their_variables() {
    let settings = from(&[
        ("METAFORGE_ROUTE_CHAT", "openai:gpt-4o-mini"),
        ("METAFORGE_LLM_PROVIDER", "anthropic"),
        ("METAFORGE_LLM_MODEL", "claude-sonnet-4-5"),
        (
            "METAFORGE_FALLBACK_PROVIDERS",
            "openai:gpt-4o,anthropic:claude-haiku-4-5",
        ),
        ("UNRELATED", "x"),
    ])
    .unwrap();
    assert_eq!(
        settings
            .routing
            .overrides
            .get("METAFORGE_ROUTE_CHAT")
            .map(String::as_str),
        Some("openai:gpt-4o-mini")
    );
    assert_eq!(settings.routing.overrides.len(), 1);
    assert_eq!(
        settings.routing.default_route.as_deref(),
        Some("anthropic:claude-sonnet-4-5")
    );
    assert_eq!(settings.routing.fallbacks.len(), 2);
}

#[test]
fn an_empty_value_counts_as_unset_except_where_set_but_empty_is_refused() {
    let settings = from(&[("HOME", "/h"), ("METAFORGE_FLOW_ENGINE", "  ")]).unwrap();
    assert_eq!(settings.runs.engine, FlowEngineKind::Embedded);
    let found = problems(&[("HOME", "/h"), ("METAFORGE_FLOW_VERSIONS_PATH", "")]);
    assert!(found[0].contains("METAFORGE_FLOW_VERSIONS_PATH"), "{found:?}");
}

/// Every fixed name the settings read — written here as a literal, or as another crate's
/// constant — is a row of the table the README is generated from.
#[test]
fn every_variable_the_settings_read_is_in_the_table() {
    let source = include_str!("../settings.rs");
    let literals: Vec<&str> = source
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.len() > 4
                && s.contains('_')
                && s.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
        .collect();
    assert!(literals.len() > 20, "the scan found the literals: {literals:?}");
    let constants = [
        MODEL_ROUTES_PATH_ENV,
        SEPARATE_APPROVER_ENV,
        RUN_SPEND_ALERT_ENV,
        metaforge_agent::AGENT_LOOP_ENV,
        metaforge_app::runs::settings::FLOW_ENGINE_ENV,
        metaforge_app::runs::settings::INTELLIGENCE_ENV,
        metaforge_app::runs::settings::GATE_TIMEOUT_ENV,
        metaforge_adapters_store::paths::ENV_METAFORGE_HOME,
        metaforge_adapters_store::paths::ENV_TOOL_APPROVALS_LEDGER_PATH,
        crate::twin_engine::TWIN_URL_ENV,
        "METAFORGE_ROUTE_PHASE_BRAIN",
    ];
    for name in literals.into_iter().chain(constants) {
        assert!(
            variables::is_listed(name),
            "{name} is read but not in variables.rs"
        );
    }
    assert!(!variables::is_listed(concat!("METAFORGE_", "NOT_A_VARIABLE")));
}

#[test]
fn the_table_has_one_line_per_row_with_three_cells() {
    let table = variables::markdown_table();
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| `")).collect();
    assert_eq!(rows.len(), variables::VARIABLES.len());
    for row in rows {
        assert_eq!(row.matches(" | ").count(), 2, "{row}");
    }
}

#[test]
fn a_metaforge_variable_that_is_not_one_is_reported_as_unknown() {
    let settings = from(&[
        (concat!("METAFORGE_", "FLOW_ENGIN"), "temporal"),
        ("METAFORGE_ROUTE_CHAT", "openai:gpt-4o-mini"),
        ("METAFORGE_REQUIRE_PEERS", "1"),
        ("METAFORGE_BENCH_REQUESTS", "10"),
        ("PATH", "/bin"),
    ])
    .unwrap();
    assert_eq!(
        settings.env().unknown_variables(),
        [concat!("METAFORGE_", "FLOW_ENGIN")]
    );
}

#[test]
fn the_twin_url_selects_the_twin_and_a_bad_one_is_a_problem_naming_it() {
    let settings = from(&[("HOME", "/h")]).unwrap();
    assert_eq!(settings.twin, crate::twin_engine::TwinEngine::Embedded);
    let found = problems(&[("HOME", "/h"), ("METAFORGE_TWIN_URL", "neo4j://db:7687")]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("METAFORGE_TWIN_URL"), "{found:?}");
    #[cfg(feature = "falkordb")]
    assert_eq!(
        from(&[
            ("HOME", "/h"),
            ("METAFORGE_TWIN_URL", "falkordb://127.0.0.1:6379")
        ])
        .unwrap()
        .twin,
        crate::twin_engine::TwinEngine::Falkor("falkordb://127.0.0.1:6379".to_owned())
    );
}
