//! `metaforge config`: the variables MetaForge reads, and this environment checked by the same
//! parse every command runs at start and the same rules `up` and `gateway` apply to the files and
//! addresses it names (`compose::preflight`) — so an operator can check a deployment before
//! starting anything.

use std::io::Write as _;
use std::process::ExitCode;

use clap::Subcommand;

use crate::settings::Settings;

/// The `config` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print every variable, its default and effect, as the README's markdown table.
    Variables,
    /// Check this environment (exit 2 naming every bad variable) and print what it selects as
    /// JSON; keys and secrets are counted, never printed.
    Check,
}

/// Prints the table of variables.
pub(crate) fn variables() -> ExitCode {
    let _ = write!(
        std::io::stdout(),
        "{}",
        crate::settings::variables::markdown_table()
    );
    ExitCode::SUCCESS
}

/// Runs `metaforge config check` (the other subcommand runs before settings are read).
pub(crate) fn run(command: &ConfigCommand, settings: &Settings) -> ExitCode {
    match command {
        ConfigCommand::Variables => variables(),
        ConfigCommand::Check => {
            let problems = crate::compose::preflight(settings);
            if !problems.is_empty() {
                for problem in &problems {
                    let _ = writeln!(std::io::stderr(), "metaforge: configuration: {problem}");
                }
                return ExitCode::from(2);
            }
            let _ = writeln!(std::io::stdout(), "{}", summary(settings));
            ExitCode::SUCCESS
        }
    }
}

/// What the environment selects, without any secret.
fn summary(settings: &Settings) -> serde_json::Value {
    let keys = metaforge_gateway::parse_api_keys(&settings.api_keys).map_or(0, |keys| keys.len());
    serde_json::json!({
        "ok": true,
        "unknown_variables": settings.env().unknown_variables(),
        "home": settings.store.as_ref().map(|p| p.home.display().to_string()),
        "ledgers_durable": settings.store.as_ref().is_some_and(|p| p.tool_approvals.is_some()),
        "credentials_path": settings.credentials_path.display().to_string(),
        "gateway_api_keys": keys,
        "approver_policy": format!("{:?}", settings.approver_policy).to_ascii_lowercase(),
        "http": {
            "header_timeout_secs": settings.http.header_read.as_secs_f64(),
            "body_timeout_secs": settings.http.body_idle.as_secs_f64(),
            "request_timeout_secs": settings.http.request_read.as_secs_f64(),
            "max_connections": settings.http.max_connections,
        },
        "mcp": {
            "service_key": settings.mcp.service_key.is_some(),
            "gateway_url": settings.mcp.gateway_url,
            "client_task_writes": settings.mcp.client_task_writes,
            "servers_path": settings.mcp.servers_path.as_ref().map(|p| p.display().to_string()),
        },
        "routing": {
            "routes_path": settings.routing.routes_path,
            "overrides": settings.routing.overrides,
            "default_route": settings.routing.default_route,
            "fallbacks": settings.routing.fallbacks.iter().map(|c| format!("{}:{}", c.provider, c.model)).collect::<Vec<_>>(),
        },
        "chat": {
            "max_iterations": settings.chat.max_iterations,
            "token_budget": settings.chat.token_budget,
            "history_tokens": settings.chat.history_tokens,
            "approval_timeout_secs": settings.chat.approval_timeout.as_secs(),
            "loop_mode": format!("{:?}", settings.chat.loop_mode).to_ascii_lowercase(),
            "disabled_gates": settings.chat.disabled_gates,
        },
        "skills_dirs": settings.skills_dirs,
        "runs": {
            "engine": format!("{:?}", settings.runs.engine).to_ascii_lowercase(),
            "intelligence": format!("{:?}", settings.runs.intelligence).to_ascii_lowercase(),
            "gate_timeout_seconds": settings.runs.gate_timeout_seconds,
            "kafka_bootstrap_servers": settings.runs.kafka_bootstrap,
            "temporal_host": settings.runs.temporal_host,
            "spend_alert_usd": settings.runs.spend_alert_usd,
        },
    })
}
