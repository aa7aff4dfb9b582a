//! The binary's configuration, parsed once at start from one snapshot of the environment: every
//! variable of [`variables::VARIABLES`] with a fixed name becomes a typed field here, and a bad
//! value is a problem naming its variable. All problems are reported together (exit 2), so an
//! operator fixes a deployment in one pass instead of one variable per restart.
//!
//! The names a provider family derives at call time (`<PROVIDER>_API_KEY`,
//! `HARNESS_<PROVIDER>_BASE_URL`, the AWS pair) are read from the same snapshot through
//! [`Settings::env`]; nothing in the binary reads the process environment again.

pub(crate) mod variables;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use metaforge_adapters_store::StorePaths;
use metaforge_app::chat::{ChatSettings, DEFAULT_CHAT_SYSTEM_PROMPT};
use metaforge_app::pipeline::Candidate;
use metaforge_domain::approvals::{ApproverPolicy, SEPARATE_APPROVER_ENV};
use metaforge_domain::grounding::{GATE_PROJECT_WRITE, GATE_TWIN_WRITE};
use metaforge_domain::routing::{MODEL_ROUTES_PATH_ENV, ROUTE_ENV_PREFIX};
use metaforge_domain::usage::RUN_SPEND_ALERT_ENV;
use metaforge_ports::{FlowEngineKind, IntelligenceMode};

use metaforge_gateway::listen::Limits;

/// The process environment as it was when the binary started (names to values, as set).
#[derive(Debug, Clone, Default)]
pub(crate) struct Environment {
    vars: BTreeMap<String, String>,
}

impl Environment {
    /// An environment of exactly these pairs (tests, and the binary's one snapshot).
    pub(crate) fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self {
            vars: pairs.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
        }
    }

    /// The value of `name`, an empty or blank value counting as unset.
    pub(crate) fn get(&self, name: &str) -> Option<String> {
        self.raw(name).filter(|v| !v.trim().is_empty())
    }

    /// The value of `name` as set (an empty value is `Some("")`, for the rules that refuse a
    /// variable set but empty).
    pub(crate) fn raw(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }

    /// Every `METAFORGE_*` variable set that MetaForge does not know (a typo, most likely).
    pub(crate) fn unknown_variables(&self) -> Vec<String> {
        self.vars
            .keys()
            .filter(|k| variables::is_unknown(k))
            .cloned()
            .collect()
    }

    /// Every variable as set, by name (what a tool server's allowlist is taken from).
    pub(crate) fn pairs(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.vars.iter().map(|(k, v)| (k.clone(), v.clone()))
    }

    /// Every variable whose name starts with `prefix` (the `METAFORGE_ROUTE_*` overrides).
    pub(crate) fn with_prefix(&self, prefix: &str) -> BTreeMap<String, String> {
        self.vars
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Every problem found in the environment, each naming its variable.
#[derive(Debug, thiserror::Error)]
#[error("{}", .problems.join("\n"))]
pub(crate) struct SettingsError {
    /// One line per bad variable.
    pub(crate) problems: Vec<String>,
}

/// How the logs are written (`METAFORGE_LOG`, `RUST_LOG`, `METAFORGE_LOG_FORMAT`): a format
/// that is not one refuses the command like any bad variable; a bad filter is reported when
/// logging starts and the default filter is used.
#[derive(Debug, Clone)]
pub(crate) struct LogSettings {
    /// The tracing filter, when one is set.
    pub(crate) filter: Option<String>,
    /// Text lines (the default) or JSON.
    pub(crate) format: crate::system::LogFormat,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: the OTLP/HTTP collector spans are exported to; unset, none.
    pub(crate) otlp_endpoint: Option<String>,
}

/// The MCP sidecar's variables.
#[derive(Debug, Clone, Default)]
pub(crate) struct McpSettings {
    /// `METAFORGE_MCP_SERVICE_KEY`, as set (empty is refused where it is used).
    pub(crate) service_key: Option<String>,
    /// `METAFORGE_GATEWAY_URL`: remote mode of `mcp serve`.
    pub(crate) gateway_url: Option<String>,
    /// `METAFORGE_CLIENT_TASK_WRITES`.
    pub(crate) client_task_writes: bool,
    /// `METAFORGE_MCP_SERVERS_PATH`, when set.
    pub(crate) servers_path: Option<PathBuf>,
    /// `METAFORGE_ENGINEERING_TOOL_SERVERS` (default on): offer MetaForge's own engineering tool
    /// servers whose programs are installed, without a servers file.
    pub(crate) engineering_tool_servers: bool,
}

/// The routing variables: which model serves which role.
#[derive(Debug, Clone, Default)]
pub(crate) struct RoutingSettings {
    /// `METAFORGE_MODEL_ROUTES_PATH`, when set (read and validated at compose time).
    pub(crate) routes_path: Option<String>,
    /// Every `METAFORGE_ROUTE_<ROLE>` override, by variable name.
    pub(crate) overrides: BTreeMap<String, String>,
    /// `METAFORGE_LLM_PROVIDER` + `METAFORGE_LLM_MODEL` as `provider:model`.
    pub(crate) default_route: Option<String>,
    /// `METAFORGE_FALLBACK_PROVIDERS`, parsed.
    pub(crate) fallbacks: Vec<Candidate>,
}

/// The design-flow runs' variables.
#[derive(Debug, Clone)]
pub(crate) struct RunSettings {
    /// `METAFORGE_FLOW_ENGINE`.
    pub(crate) engine: FlowEngineKind,
    /// `METAFORGE_INTELLIGENCE`.
    pub(crate) intelligence: IntelligenceMode,
    /// `METAFORGE_GATE_TIMEOUT_SECONDS`.
    pub(crate) gate_timeout_seconds: Option<u64>,
    /// `KAFKA_BOOTSTRAP_SERVERS`.
    pub(crate) kafka_bootstrap: Option<String>,
    /// `TEMPORAL_HOST`, when set.
    pub(crate) temporal_host: Option<String>,
    /// `METAFORGE_RUN_SPEND_ALERT_USD`.
    pub(crate) spend_alert_usd: f64,
}

/// Every fixed-name variable, typed.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    env: Environment,
    /// Where each ledger lives; `None` when neither `METAFORGE_HOME` nor `HOME` is known (the
    /// commands that need a ledger say so).
    pub(crate) store: Option<StorePaths>,
    /// `HOME`.
    pub(crate) user_home: Option<PathBuf>,
    /// `METAFORGE_CREDENTIALS_PATH`, else `~/.metaforge/credentials.json`.
    pub(crate) credentials_path: PathBuf,
    /// The logs.
    pub(crate) log: LogSettings,
    /// `METAFORGE_HTTP_*`.
    pub(crate) http: Limits,
    /// `METAFORGE_GATEWAY_API_KEY`, as set ("" when unset; parsed by the gateway's rule where
    /// it is used, and checked here).
    pub(crate) api_keys: String,
    /// `METAFORGE_APPROVALS_SEPARATE_APPROVER`.
    pub(crate) approver_policy: ApproverPolicy,
    /// The sidecar's variables.
    pub(crate) mcp: McpSettings,
    /// The routing variables.
    pub(crate) routing: RoutingSettings,
    /// The chat runtime (`METAFORGE_CHAT_*`, `METAFORGE_HISTORY_TOKENS`, `METAFORGE_AGENT_LOOP`).
    pub(crate) chat: ChatSettings,
    /// `METAFORGE_SKILLS_DIRS`, as set.
    pub(crate) skills_dirs: Option<String>,
    /// The runs' variables.
    pub(crate) runs: RunSettings,
    /// `METAFORGE_DATABASE_URL`: the SQLite files, or one PostgreSQL server for every ledger.
    pub(crate) ledgers: crate::ledger_engine::LedgerEngine,
    /// `METAFORGE_TWIN_URL`: the embedded SQLite twin, or one FalkorDB graph for every process.
    pub(crate) twin: crate::twin_engine::TwinEngine,
}

impl Settings {
    /// Parses every variable of `env`; every bad one is named in the error.
    pub(crate) fn from_env(env: Environment) -> Result<Self, SettingsError> {
        let mut problems = Vec::new();
        let mut report = |problem: &dyn std::fmt::Display| problems.push(problem.to_string());
        let user_home = env.get("HOME").map(PathBuf::from);
        let store = match StorePaths::resolve(|name| env.raw(name), user_home.clone()) {
            Ok(paths) => Some(paths),
            Err(metaforge_adapters_store::StorePathsError::NoHome) => None,
            Err(other) => {
                report(&other.to_string());
                None
            }
        };
        let credentials_path = env.get("METAFORGE_CREDENTIALS_PATH").map_or_else(
            || {
                user_home
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("."))
                    .join(".metaforge")
                    .join("credentials.json")
            },
            PathBuf::from,
        );
        let log = LogSettings {
            filter: env.get("METAFORGE_LOG").or_else(|| env.get("RUST_LOG")),
            format: crate::system::LogFormat::parse(env.get("METAFORGE_LOG_FORMAT").as_deref())
                .unwrap_or_else(|problem| {
                    report(&problem);
                    crate::system::LogFormat::Text
                }),
            otlp_endpoint: env.get("OTEL_EXPORTER_OTLP_ENDPOINT"),
        };
        let http = crate::http_limits::http_limits(&env).unwrap_or_else(|problem| {
            report(&problem);
            Limits::default()
        });
        let api_keys = env.raw("METAFORGE_GATEWAY_API_KEY").unwrap_or_default();
        if let Err(e) = metaforge_gateway::parse_api_keys(&api_keys) {
            report(&format!("METAFORGE_GATEWAY_API_KEY: {e}"));
        }
        let approver_policy = ApproverPolicy::from_setting(env.get(SEPARATE_APPROVER_ENV).as_deref())
            .unwrap_or_else(|problem| {
                report(&problem);
                ApproverPolicy::Any
            });
        // Without keys every caller is `local`: four eyes could never let anyone decide.
        if approver_policy == ApproverPolicy::Separate
            && metaforge_gateway::parse_api_keys(&api_keys).is_ok_and(|keys| keys.is_empty())
        {
            report(&format!(
                "{SEPARATE_APPROVER_ENV}=on needs identities to tell requester and approver apart: set METAFORGE_GATEWAY_API_KEY"
            ));
        }
        let mcp = McpSettings {
            service_key: env.raw("METAFORGE_MCP_SERVICE_KEY"),
            gateway_url: env.get("METAFORGE_GATEWAY_URL"),
            client_task_writes: on_off(&env, "METAFORGE_CLIENT_TASK_WRITES").unwrap_or_else(|problem| {
                report(&problem);
                false
            }),
            servers_path: env.get("METAFORGE_MCP_SERVERS_PATH").map(PathBuf::from),
            engineering_tool_servers: match env.get("METAFORGE_ENGINEERING_TOOL_SERVERS") {
                None => true,
                Some(_) => on_off(&env, "METAFORGE_ENGINEERING_TOOL_SERVERS").unwrap_or_else(|problem| {
                    report(&problem);
                    false
                }),
            },
        };
        let overrides = env.with_prefix(ROUTE_ENV_PREFIX);
        // The overrides on their own (an unknown role, a route that is not `provider:model`, an
        // unknown provider); the table file and the credentials are checked where they are read.
        for problem in metaforge_domain::routing::validate_table(
            &metaforge_domain::routing::RoutingTable::default(),
            &overrides,
            None,
        ) {
            if problem.blocks_start() {
                report(&format!("routing: {problem}"));
            }
        }
        let routing = RoutingSettings {
            routes_path: env.get(MODEL_ROUTES_PATH_ENV),
            overrides,
            default_route: match (env.get("METAFORGE_LLM_PROVIDER"), env.get("METAFORGE_LLM_MODEL")) {
                (Some(provider), Some(model)) => Some(format!("{provider}:{model}")),
                _ => None,
            },
            fallbacks: crate::providers_config::parse_fallbacks(env.get(FALLBACKS_ENV).as_deref())
                .unwrap_or_else(|problem| {
                    report(&problem);
                    Vec::new()
                }),
        };
        let chat = chat_settings(&env).unwrap_or_else(|problem| {
            report(&problem);
            ChatSettings::default()
        });
        let runs = RunSettings {
            engine: metaforge_app::runs::parse_flow_engine(
                env.get(metaforge_app::runs::settings::FLOW_ENGINE_ENV).as_deref(),
            )
            .unwrap_or_else(|problem| {
                report(&problem.to_string());
                FlowEngineKind::Embedded
            }),
            intelligence: metaforge_app::runs::parse_intelligence(
                env.get(metaforge_app::runs::settings::INTELLIGENCE_ENV)
                    .as_deref(),
            )
            .unwrap_or_else(|problem| {
                report(&problem.to_string());
                IntelligenceMode::Server
            }),
            gate_timeout_seconds: metaforge_app::runs::parse_gate_timeout(
                env.get(metaforge_app::runs::settings::GATE_TIMEOUT_ENV)
                    .as_deref(),
            )
            .unwrap_or_else(|problem| {
                report(&problem.to_string());
                None
            }),
            kafka_bootstrap: env.get(KAFKA_BOOTSTRAP_SERVERS_ENV),
            temporal_host: env.get("TEMPORAL_HOST"),
            spend_alert_usd: metaforge_domain::usage::spend_threshold_from_env(
                &env.raw(RUN_SPEND_ALERT_ENV)
                    .map(|value| (RUN_SPEND_ALERT_ENV.to_owned(), value))
                    .into_iter()
                    .collect(),
            )
            .unwrap_or_else(|problem| {
                report(&problem);
                metaforge_domain::usage::DEFAULT_RUN_SPEND_ALERT_USD
            }),
        };
        let ledgers = crate::ledger_engine::LedgerEngine::from_setting(
            env.raw(crate::ledger_engine::DATABASE_URL_ENV).as_deref(),
        )
        .unwrap_or_else(|problem| {
            report(&problem);
            crate::ledger_engine::LedgerEngine::Files
        });
        let twin = crate::twin_engine::TwinEngine::from_setting(
            env.raw(crate::twin_engine::TWIN_URL_ENV).as_deref(),
        )
        .unwrap_or_else(|problem| {
            report(&problem);
            crate::twin_engine::TwinEngine::Embedded
        });
        let settings = Self {
            ledgers,
            twin,
            store,
            user_home,
            credentials_path,
            log,
            http,
            api_keys,
            approver_policy,
            mcp,
            routing,
            chat,
            skills_dirs: env.get("METAFORGE_SKILLS_DIRS"),
            runs,
            env,
        };
        if problems.is_empty() {
            Ok(settings)
        } else {
            Err(SettingsError { problems })
        }
    }

    /// The snapshot, for the names a provider family derives at call time.
    pub(crate) fn env(&self) -> &Environment {
        &self.env
    }

    /// The ledgers' paths, or why there are none.
    pub(crate) fn store(&self) -> anyhow::Result<&StorePaths> {
        self.store
            .as_ref()
            .ok_or_else(|| anyhow::Error::new(metaforge_adapters_store::StorePathsError::NoHome))
    }
}

/// The variable naming Kafka's brokers (the seed's name, shared with every Kafka client).
pub(crate) const KAFKA_BOOTSTRAP_SERVERS_ENV: &str = "KAFKA_BOOTSTRAP_SERVERS";

/// The ordered fallbacks behind a routed primary (comma-separated `provider:model`, Hermes's
/// ordered `fallback_providers`).
pub(crate) const FALLBACKS_ENV: &str = "METAFORGE_FALLBACK_PROVIDERS";

/// `on`, `off` or unset (off); anything else names the variable.
fn on_off(env: &Environment, name: &str) -> anyhow::Result<bool> {
    match env.get(name).as_deref().map(str::trim) {
        None => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("on") => Ok(true),
        Some(v) if v.eq_ignore_ascii_case("off") => Ok(false),
        Some(other) => anyhow::bail!("{name}={other}: expected on or off"),
    }
}

/// The chat settings: each variable parsed strictly, so a typo refuses start instead of
/// running with a default nobody chose.
fn chat_settings(env: &Environment) -> anyhow::Result<ChatSettings> {
    let defaults = ChatSettings::default();
    let mut disabled_gates = Vec::new();
    if !switch(env, "METAFORGE_CHAT_TWIN_WRITES")? {
        disabled_gates.push(GATE_TWIN_WRITE.to_owned());
    }
    if !switch(env, "METAFORGE_CHAT_PROJECT_WRITES")? {
        disabled_gates.push(GATE_PROJECT_WRITE.to_owned());
    }
    let loop_mode =
        metaforge_agent::LoopMode::parse_setting(env.get(metaforge_agent::AGENT_LOOP_ENV).as_deref())?;
    let prompt_variable = "METAFORGE_CHAT_SYSTEM_PROMPT_PATH";
    let system_prompt = match env.get(prompt_variable) {
        Some(path) => {
            std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("{prompt_variable}={path}: {e}"))?
        }
        None => DEFAULT_CHAT_SYSTEM_PROMPT.to_owned(),
    };
    Ok(ChatSettings {
        system_prompt,
        max_iterations: positive(env, "METAFORGE_CHAT_MAX_ITERATIONS")?
            .map_or(defaults.max_iterations, |n| n as usize),
        token_budget: positive(env, "METAFORGE_CHAT_TOKEN_BUDGET")?,
        history_tokens: positive(env, "METAFORGE_HISTORY_TOKENS")?
            .map_or(defaults.history_tokens, |n| n as usize),
        approval_timeout: positive(env, "METAFORGE_CHAT_APPROVAL_TIMEOUT_SECONDS")?
            .map_or(defaults.approval_timeout, Duration::from_secs),
        loop_mode,
        disabled_gates,
    })
}

/// An on/off switch that defaults to on: `1|on|true` or `0|off|false`.
fn switch(env: &Environment, name: &str) -> anyhow::Result<bool> {
    match env.get(name).as_deref().map(str::trim) {
        None => Ok(true),
        Some(v) if ["1", "on", "true"].contains(&v.to_ascii_lowercase().as_str()) => Ok(true),
        Some(v) if ["0", "off", "false"].contains(&v.to_ascii_lowercase().as_str()) => Ok(false),
        Some(v) => anyhow::bail!("{name}={v}: expected 1, 0, on, off, true or false"),
    }
}

/// A positive whole number, when set.
fn positive(env: &Environment, name: &str) -> anyhow::Result<Option<u64>> {
    match env.get(name).as_deref().map(str::trim) {
        None => Ok(None),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => anyhow::bail!("{name}={v}: expected a positive whole number"),
        },
    }
}

#[cfg(test)]
mod tests;
