//! `metaforge llm complete` and `metaforge providers list`: the provider pipeline from the shell.
//!
//! This is the composition point: it reads the environment (base URLs, credentials, routes),
//! builds one adapter per provider family and hands them to the app's `ProviderPipeline`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use clap::{Args, Subcommand};
use futures::StreamExt;
use metaforge_adapters_llm::{
    AnthropicProvider, BedrockProvider, CodexProvider, FileCredentialStore, GeminiProvider, HttpSettings,
    OpenAiCompatibleProvider, read_codex_auth_file,
};
use metaforge_app::pipeline::{
    CallSpec, CallUsage, Candidate, CredentialRotor, FallbackAlarm, PipelineError, ProviderEntry,
    ProviderPipeline, RetryPolicy, RoleModelSlots, UsageSink,
};
use metaforge_domain::providers::{
    PROVIDERS, ProviderInfo, base_url_env_var, parse_route, resolve_base_url, resolve_provider,
};
use metaforge_domain::routing::{
    MODEL_ROUTES_PATH_ENV, ROUTE_ENV_PREFIX, RouteCall, RoutingInputs, RoutingTable, env_var_for_role,
    resolve_route,
};
use metaforge_domain::usage::PriceTable;
use metaforge_ports::{
    ApiFamily, Billing, Credential, CredentialSecret, CredentialStore, LlmMessage, LlmProvider, LlmRequest,
    PortError, StoredCredential, StreamEvent,
};

/// `metaforge llm …`
#[derive(Debug, Subcommand)]
pub(crate) enum LlmCommand {
    /// One completion through the pipeline (retries, credential rotation, fallbacks).
    Complete(CompleteArgs),
}

/// Arguments of `metaforge llm complete`.
#[derive(Debug, Args)]
pub(crate) struct CompleteArgs {
    /// Routing role, resolved by the routing rules (`METAFORGE_ROUTE_<ROLE>`, the routes file at
    /// `METAFORGE_MODEL_ROUTES_PATH`); `METAFORGE_FALLBACK_PROVIDERS` follows it.
    #[arg(long, conflicts_with_all = ["provider", "model"])]
    role: Option<String>,
    /// Provider id or alias (with --model).
    #[arg(long, requires = "model")]
    provider: Option<String>,
    /// Model name (with --provider).
    #[arg(long, requires = "provider")]
    model: Option<String>,
    /// Stream the answer as it is generated.
    #[arg(long)]
    stream: bool,
    /// Session id for credential pinning.
    #[arg(long, default_value = "cli")]
    session: String,
    /// Output cap.
    #[arg(long)]
    max_tokens: Option<u32>,
    /// The prompt.
    prompt: String,
}

/// `metaforge providers …`
#[derive(Debug, Subcommand)]
pub(crate) enum ProvidersCommand {
    /// Every provider: family, configured or not, base URL and where it comes from.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Local runtimes that need no credential.
const KEYLESS: &[&str] = &["ollama", "vllm", "sglang", "llama-cpp", "lmstudio"];

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn home() -> PathBuf {
    env("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from)
}

/// Where a provider's base URL comes from, as the providers view reports it.
struct BaseUrl {
    url: String,
    source: &'static str,
}

/// `HARNESS_<ID>_BASE_URL` wins as an explicit operator override; else the registry's rule.
fn base_url(info: &ProviderInfo) -> Result<BaseUrl, String> {
    let var = base_url_env_var(info.id);
    if let Some(url) = env(&var) {
        let resolved = resolve_base_url(info, Some(&url), |_| None).map_err(|e| e.to_string())?;
        let source = if info.fixed_base_url.is_some() {
            "explicit (env override)"
        } else {
            "env"
        };
        return Ok(BaseUrl {
            url: resolved.url,
            source,
        });
    }
    let resolved = resolve_base_url(info, None, env).map_err(|e| e.to_string())?;
    Ok(BaseUrl {
        url: resolved.url,
        source: "fixed",
    })
}

fn credentials_path() -> PathBuf {
    env("METAFORGE_CREDENTIALS_PATH").map_or_else(
        || home().join(".metaforge").join("credentials.json"),
        PathBuf::from,
    )
}

/// Credentials from the environment, used for a provider only when the file store has none.
fn env_credentials(info: &ProviderInfo) -> Vec<Credential> {
    let upper = info.id.to_ascii_uppercase().replace('-', "_");
    match info.family {
        ApiFamily::Bedrock => {
            let region = env("AWS_REGION").or_else(|| env("AWS_DEFAULT_REGION"));
            match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"), region) {
                (Some(access_key_id), Some(secret_access_key), Some(region)) => vec![Credential {
                    id: "env".into(),
                    secret: CredentialSecret::Aws {
                        access_key_id,
                        secret_access_key,
                        session_token: env("AWS_SESSION_TOKEN"),
                        region,
                    },
                }],
                _ => env("AWS_BEARER_TOKEN_BEDROCK")
                    .map(|api_key| Credential {
                        id: "env".into(),
                        secret: CredentialSecret::ApiKey { api_key },
                    })
                    .into_iter()
                    .collect(),
            }
        }
        ApiFamily::OpenaiCodex => {
            let dir = env("CODEX_HOME").map_or_else(|| home().join(".codex"), PathBuf::from);
            let path = dir.join("auth.json");
            if !path.exists() {
                return Vec::new();
            }
            match read_codex_auth_file(&path) {
                Ok(credential) => vec![credential],
                Err(err) => {
                    eprintln!("metaforge: {err}");
                    Vec::new()
                }
            }
        }
        _ => {
            let key_var = match info.id {
                "gemini" => "GEMINI_API_KEY".to_owned(),
                _ => format!("{upper}_API_KEY"),
            };
            env(&key_var)
                .map(|api_key| Credential {
                    id: "env".into(),
                    secret: CredentialSecret::ApiKey { api_key },
                })
                .into_iter()
                .collect()
        }
    }
}

/// The file store first; a provider with nothing in the file uses its environment credential.
/// Marking an environment credential dead lasts for this process only (there is no file entry).
struct LayeredCredentialStore {
    file: FileCredentialStore,
    env: std::sync::Mutex<BTreeMap<String, Vec<StoredCredential>>>,
}

#[async_trait]
impl CredentialStore for LayeredCredentialStore {
    async fn list(&self, provider: &str) -> Result<Vec<StoredCredential>, PortError> {
        let stored = self.file.list(provider).await?;
        if !stored.is_empty() {
            return Ok(stored);
        }
        Ok(self
            .env
            .lock()
            .ok()
            .and_then(|m| m.get(provider).cloned())
            .unwrap_or_default())
    }

    async fn add(&self, provider: &str, credential: Credential) -> Result<(), PortError> {
        self.file.add(provider, credential).await
    }

    async fn mark_dead(&self, provider: &str, id: &str, reason: &str) -> Result<(), PortError> {
        if !self.file.list(provider).await?.is_empty() {
            return self.file.mark_dead(provider, id, reason).await;
        }
        if let Ok(mut map) = self.env.lock() {
            for c in map.get_mut(provider).into_iter().flatten() {
                if c.credential.id == id {
                    c.dead = true;
                    c.dead_reason = Some(reason.to_owned());
                }
            }
        }
        Ok(())
    }

    async fn mark_healthy(&self, provider: &str, id: &str) -> Result<(), PortError> {
        self.file.mark_healthy(provider, id).await
    }
}

fn adapter_for(info: &ProviderInfo, url: &str) -> Result<Arc<dyn LlmProvider>, String> {
    let settings = HttpSettings::default();
    let adapter: Arc<dyn LlmProvider> = match info.family {
        ApiFamily::Anthropic => Arc::new(AnthropicProvider::new(url, settings).map_err(|e| e.to_string())?),
        ApiFamily::Gemini => Arc::new(GeminiProvider::new(url, settings).map_err(|e| e.to_string())?),
        ApiFamily::Bedrock => Arc::new(BedrockProvider::new(url, settings).map_err(|e| e.to_string())?),
        ApiFamily::OpenaiCodex => Arc::new(CodexProvider::new(url, settings).map_err(|e| e.to_string())?),
        _ => {
            let cache_key = matches!(info.id, "openai" | "openrouter");
            Arc::new(OpenAiCompatibleProvider::new(url, settings, cache_key).map_err(|e| e.to_string())?)
        }
    };
    Ok(adapter)
}

/// Prints each usage record to stderr as one JSON line (raw usage attached).
struct StderrUsage;

impl UsageSink for StderrUsage {
    fn record(&self, usage: CallUsage) {
        let line = serde_json::json!({"usage_event": usage.event, "raw_usage": usage.raw});
        eprintln!("{line}");
    }
}

/// The ordered fallbacks behind a routed primary (`METAFORGE_FALLBACK_PROVIDERS`, comma-separated
/// `provider:model`, Hermes's ordered `fallback_providers`).
const FALLBACKS_ENV: &str = "METAFORGE_FALLBACK_PROVIDERS";

fn chain_from_args(args: &CompleteArgs) -> Result<(String, Vec<Candidate>, Option<Candidate>), String> {
    let role = args.role.clone().unwrap_or_else(|| "chat".to_owned());
    let mut fallbacks = Vec::new();
    if let Some(list) = env(FALLBACKS_ENV) {
        for route in list.split(',').filter(|r| !r.trim().is_empty()) {
            let parsed = parse_route(route).map_err(|e| format!("{FALLBACKS_ENV}: {e}"))?;
            fallbacks.push(Candidate {
                provider: parsed.provider,
                model: parsed.model,
            });
        }
    }
    if let (Some(provider), Some(model)) = (&args.provider, &args.model) {
        let info = resolve_provider(provider).map_err(|e| e.to_string())?;
        let explicit = Candidate {
            provider: info.id.to_owned(),
            model: model.clone(),
        };
        return Ok((role, fallbacks, Some(explicit)));
    }
    let table = match env(MODEL_ROUTES_PATH_ENV) {
        Some(path) => {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{MODEL_ROUTES_PATH_ENV}={path}: {e}"))?;
            RoutingTable::from_json(&text).map_err(|e| format!("{path}: {e}"))?
        }
        None => RoutingTable::default(),
    };
    let routes: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with(ROUTE_ENV_PREFIX))
        .collect();
    let inputs = RoutingInputs {
        table: &table,
        env: &routes,
        credentialed: None,
        selection: None,
        default: None,
    };
    let call = RouteCall {
        role: role.clone(),
        ..RouteCall::default()
    };
    let resolved = resolve_route(&inputs, &call).map_err(|e| {
        format!(
            "{e} (set {}=provider:model or point {MODEL_ROUTES_PATH_ENV} at a routes file)",
            env_var_for_role(&role)
        )
    })?;
    tracing::info!(
        role = role.as_str(),
        source = ?resolved.source,
        provider = resolved.provider.as_str(),
        model = resolved.model.as_str(),
        "llm_route_resolved"
    );
    let mut chain = vec![Candidate {
        provider: resolved.provider,
        model: resolved.model,
    }];
    chain.extend(fallbacks);
    Ok((role, chain, None))
}

/// Runs `metaforge llm …`.
pub(crate) fn run_llm(command: LlmCommand) -> ExitCode {
    let LlmCommand::Complete(args) = command;
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("metaforge: cannot start runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(complete(args))
}

async fn complete(args: CompleteArgs) -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("METAFORGE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .try_init();
    let (role, chain, explicit) = match chain_from_args(&args) {
        Ok(parts) => parts,
        Err(err) => {
            eprintln!("metaforge: {err}");
            return ExitCode::from(2);
        }
    };
    let mut wanted: Vec<&Candidate> = chain.iter().collect();
    wanted.extend(explicit.iter());
    let mut entries = Vec::new();
    let mut env_creds = BTreeMap::new();
    for candidate in wanted {
        let Ok(info) = resolve_provider(&candidate.provider) else {
            continue;
        };
        if entries.iter().any(|e: &ProviderEntry| e.id == info.id) {
            continue;
        }
        let url = match base_url(info) {
            Ok(url) => url,
            Err(err) => {
                eprintln!("metaforge: {err}");
                return ExitCode::from(2);
            }
        };
        let adapter = match adapter_for(info, &url.url) {
            Ok(adapter) => adapter,
            Err(err) => {
                eprintln!("metaforge: {}: {err}", info.id);
                return ExitCode::FAILURE;
            }
        };
        env_creds.insert(
            info.id.to_owned(),
            env_credentials(info)
                .into_iter()
                .map(|credential| StoredCredential {
                    credential,
                    dead: false,
                    dead_reason: None,
                })
                .collect::<Vec<_>>(),
        );
        entries.push(ProviderEntry {
            id: info.id.to_owned(),
            adapter,
            billing: if info.subscription_billed {
                Billing::Subscription
            } else {
                Billing::Metered
            },
        });
    }
    let mut slots_config = BTreeMap::new();
    if !chain.is_empty() {
        slots_config.insert(role.clone(), chain);
    }
    let slots = match RoleModelSlots::new(slots_config) {
        Ok(slots) => slots,
        Err(err) => {
            eprintln!("metaforge: {err}");
            return ExitCode::from(2);
        }
    };
    let store = LayeredCredentialStore {
        file: FileCredentialStore::new(credentials_path()),
        env: std::sync::Mutex::new(env_creds),
    };
    let prices = match PriceTable::shipped() {
        Ok(prices) => prices,
        Err(err) => {
            eprintln!("metaforge: shipped price table: {err}");
            return ExitCode::FAILURE;
        }
    };
    let pipeline = match ProviderPipeline::new(
        entries,
        slots,
        RetryPolicy::default(),
        CredentialRotor::new(Some(Arc::new(store))),
        Arc::new(FallbackAlarm::new()),
        Arc::new(StderrUsage),
    ) {
        Ok(p) => p.with_price_table(prices),
        Err(err) => {
            eprintln!("metaforge: {err}");
            return ExitCode::from(2);
        }
    };
    let spec = CallSpec {
        role,
        explicit,
        session_id: args.session.clone(),
    };
    let request = LlmRequest {
        messages: vec![LlmMessage::user_text(args.prompt.clone())],
        max_tokens: args.max_tokens,
        ..LlmRequest::default()
    };
    let mut out = std::io::stdout();
    if args.stream {
        let served = match pipeline.stream(&spec, request).await {
            Ok(s) => s,
            Err(err) => return pipeline_failure(&err),
        };
        let mut events = served.value;
        let mut failed = false;
        let mut line_open = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(StreamEvent::TextDelta { text }) => {
                    let _ = write!(out, "{text}");
                    let _ = out.flush();
                    line_open = true;
                }
                Ok(StreamEvent::Finish { .. }) if line_open => {
                    let _ = writeln!(out);
                    let _ = out.flush();
                    line_open = false;
                }
                Ok(StreamEvent::ToolCallStart { name, .. }) => {
                    let sep = if line_open { "\n" } else { "" };
                    let _ = write!(out, "{sep}[tool call {name} ");
                }
                Ok(StreamEvent::ToolCallArgumentsDelta { delta, .. }) => {
                    let _ = write!(out, "{delta}");
                }
                Ok(StreamEvent::ToolCallEnd { .. }) => {
                    let _ = write!(out, "]");
                    line_open = true;
                }
                Ok(_) => {}
                Err(err) => {
                    eprintln!("\nmetaforge: stream failed: {err}");
                    failed = true;
                }
            }
        }
        if line_open {
            let _ = writeln!(out);
        }
        drop(events);
        eprintln!("served-by: {}:{}", served.provider, served.model);
        if failed {
            return ExitCode::FAILURE;
        }
    } else {
        let served = match pipeline.complete(&spec, request).await {
            Ok(s) => s,
            Err(err) => return pipeline_failure(&err),
        };
        let _ = writeln!(out, "{}", served.value.text);
        for call in &served.value.tool_calls {
            let _ = writeln!(out, "[tool call {} {}]", call.name, call.arguments);
        }
        eprintln!("served-by: {}:{}", served.provider, served.model);
    }
    ExitCode::SUCCESS
}

/// Configuration problems exit 2 (nothing was called); provider failures exit 1.
fn pipeline_failure(err: &PipelineError) -> ExitCode {
    eprintln!("metaforge: {err}");
    match err {
        PipelineError::AllProvidersFailed { .. } => ExitCode::FAILURE,
        _ => ExitCode::from(2),
    }
}

/// Providers that can be called on this deployment: a healthy stored credential, an environment
/// credential, or a keyless local runtime with a base URL. The routing rules refuse routes to
/// any other provider.
pub(crate) async fn credentialed_providers() -> Result<std::collections::BTreeSet<String>, PortError> {
    let store = FileCredentialStore::new(credentials_path());
    let mut out = std::collections::BTreeSet::new();
    for info in PROVIDERS {
        let stored = store.healthy(info.id).await?.len();
        let keyless = KEYLESS.contains(&info.id) && base_url(info).is_ok();
        if stored > 0 || !env_credentials(info).is_empty() || keyless {
            out.insert(info.id.to_owned());
        }
    }
    Ok(out)
}

/// Runs `metaforge providers …`.
pub(crate) fn run_providers(command: ProvidersCommand) -> ExitCode {
    let ProvidersCommand::List { json } = command;
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("metaforge: cannot start runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let store = FileCredentialStore::new(credentials_path());
    let mut rows = Vec::new();
    for info in PROVIDERS {
        let url = base_url(info);
        let stored = match runtime.block_on(store.healthy(info.id)) {
            Ok(list) => list.len(),
            Err(err) => {
                eprintln!("metaforge: {err}");
                return ExitCode::from(2);
            }
        };
        let from_env = env_credentials(info).len();
        let (configured, why) = if stored > 0 {
            (true, format!("{stored} credential(s) in store"))
        } else if from_env > 0 {
            (true, "credential from environment".to_owned())
        } else if KEYLESS.contains(&info.id) && url.is_ok() {
            (true, "local runtime (no key needed)".to_owned())
        } else {
            (false, "no credential".to_owned())
        };
        let (base, source) = match &url {
            Ok(u) => (u.url.clone(), u.source.to_owned()),
            Err(err) => (String::new(), format!("missing: {err}")),
        };
        rows.push(serde_json::json!({
            "id": info.id, "family": info.family.as_str(), "configured": configured,
            "configured_reason": why, "base_url": base, "base_url_source": source,
        }));
    }
    let mut out = std::io::stdout();
    if json {
        let _ = writeln!(out, "{}", serde_json::Value::Array(rows));
        return ExitCode::SUCCESS;
    }
    let _ = writeln!(
        out,
        "{:<22} {:<18} {:<11} {:<45} SOURCE",
        "PROVIDER", "FAMILY", "CONFIGURED", "BASE URL"
    );
    for row in rows {
        let text = |k: &str| row.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        let configured = row.get("configured").and_then(serde_json::Value::as_bool) == Some(true);
        let _ = writeln!(
            out,
            "{:<22} {:<18} {:<11} {:<45} {}",
            text("id"),
            text("family"),
            if configured { "yes" } else { "no" },
            text("base_url"),
            text("base_url_source"),
        );
    }
    ExitCode::SUCCESS
}
