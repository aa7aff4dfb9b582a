//! The one provider composition every command shares (`metaforge llm`, `metaforge providers list`,
//! `metaforge gateway`): base URL resolution, credential layering, one adapter per family, the
//! providers view's rows, the credentialed set, and a `ProviderPipeline` over role chains.
//!
//! Reading the environment lives here because only the binary may; everything this module decides
//! is handed to the app as plain data, so the CLI and the gateway cannot disagree about a provider.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_adapters_llm::{
    AnthropicProvider, BedrockProvider, CodexProvider, FileCredentialStore, GeminiProvider, HttpSettings,
    OpenAiCompatibleProvider, read_codex_auth_file,
};
use metaforge_app::pipeline::{
    Candidate, CredentialRotor, FallbackAlarm, ProviderEntry, ProviderPipeline, RetryPolicy, RoleModelSlots,
    UsageSink,
};
use metaforge_domain::providers::{
    PROVIDERS, ProviderInfo, base_url_env_var, parse_route, resolve_base_url, resolve_provider,
};
use metaforge_domain::usage::PriceTable;
use metaforge_gateway::providers::ProviderRow;
use metaforge_ports::{
    ApiFamily, Billing, Credential, CredentialSecret, CredentialStore, LlmProvider, PortError,
    StoredCredential,
};

use crate::settings::{FALLBACKS_ENV, Settings};

/// Local runtimes that need no credential.
const KEYLESS: &[&str] = &["ollama", "vllm", "sglang", "llama-cpp", "lmstudio"];

fn home(settings: &Settings) -> PathBuf {
    settings.user_home.clone().unwrap_or_else(|| PathBuf::from("."))
}

/// Where a provider's base URL comes from, as the providers view reports it.
pub(crate) struct BaseUrl {
    /// The URL calls go to.
    pub(crate) url: String,
    /// `env`, `explicit (env override)` or `fixed`.
    pub(crate) source: &'static str,
}

/// `HARNESS_<ID>_BASE_URL` wins as an explicit operator override; else the registry's rule.
pub(crate) fn base_url(info: &ProviderInfo, settings: &Settings) -> anyhow::Result<BaseUrl> {
    let env = |name: &str| settings.env().get(name);
    let var = base_url_env_var(info.id);
    if let Some(url) = env(&var) {
        let resolved = resolve_base_url(info, Some(&url), |_| None)?;
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
    let resolved = resolve_base_url(info, None, env)?;
    Ok(BaseUrl {
        url: resolved.url,
        source: "fixed",
    })
}

/// The environment variable holding an API-key provider's key (`OPENAI_API_KEY`, …).
fn api_key_variable(info: &ProviderInfo) -> String {
    match info.id {
        "gemini" => "GEMINI_API_KEY".to_owned(),
        id => format!("{}_API_KEY", id.to_ascii_uppercase().replace('-', "_")),
    }
}

/// What a person sets to make `info` callable, named by variable (for `providers list` and
/// every "no provider" error).
fn configure_hint(info: &ProviderInfo) -> String {
    if KEYLESS.contains(&info.id) {
        let upper = info.id.to_ascii_uppercase().replace('-', "_");
        return format!("set HARNESS_{upper}_BASE_URL to the local server (no key needed)");
    }
    let from_env = match info.family {
        ApiFamily::Bedrock => {
            "set AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION, or AWS_BEARER_TOKEN_BEDROCK"
                .to_owned()
        }
        ApiFamily::OpenaiCodex => "run `codex login` (reads $CODEX_HOME/auth.json)".to_owned(),
        ApiFamily::OpenaiCompatible | ApiFamily::Anthropic | ApiFamily::Gemini => {
            format!("set {}", api_key_variable(info))
        }
    };
    format!("{from_env}, or add a credential to METAFORGE_CREDENTIALS_PATH (~/.metaforge/credentials.json)")
}

/// Credentials from the environment, used for a provider only when the file store has none.
fn env_credentials(info: &ProviderInfo, settings: &Settings) -> Vec<Credential> {
    let env = |name: &str| settings.env().get(name);
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
            let dir = env("CODEX_HOME").map_or_else(|| home(settings).join(".codex"), PathBuf::from);
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
        ApiFamily::OpenaiCompatible | ApiFamily::Anthropic | ApiFamily::Gemini => {
            let key_var = api_key_variable(info);
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

fn adapter_for(info: &ProviderInfo, url: &str) -> anyhow::Result<Arc<dyn LlmProvider>> {
    let settings = HttpSettings::default();
    let adapter: Arc<dyn LlmProvider> = match info.family {
        ApiFamily::Anthropic => Arc::new(AnthropicProvider::new(url, settings)?),
        ApiFamily::Gemini => Arc::new(GeminiProvider::new(url, settings)?),
        ApiFamily::Bedrock => Arc::new(BedrockProvider::new(url, settings)?),
        ApiFamily::OpenaiCodex => Arc::new(CodexProvider::new(url, settings)?),
        ApiFamily::OpenaiCompatible => {
            let cache_key = matches!(info.id, "openai" | "openrouter");
            Arc::new(OpenAiCompatibleProvider::new(url, settings, cache_key)?)
        }
    };
    Ok(adapter)
}

/// The ordered fallback candidates of `METAFORGE_FALLBACK_PROVIDERS` (empty when unset).
pub(crate) fn parse_fallbacks(value: Option<&str>) -> anyhow::Result<Vec<Candidate>> {
    let mut fallbacks = Vec::new();
    if let Some(list) = value {
        for route in list.split(',').filter(|r| !r.trim().is_empty()) {
            let parsed = parse_route(route).map_err(|e| anyhow::anyhow!("{FALLBACKS_ENV}: {e}"))?;
            fallbacks.push(Candidate {
                provider: parsed.provider,
                model: parsed.model,
            });
        }
    }
    Ok(fallbacks)
}

/// Every provider's row in the providers view: family, configured (and why), base URL and source.
pub(crate) async fn provider_rows(settings: &Settings) -> Result<Vec<ProviderRow>, PortError> {
    let store = FileCredentialStore::new(settings.credentials_path.clone());
    let mut rows = Vec::new();
    for info in PROVIDERS {
        let url = base_url(info, settings);
        let stored = store.healthy(info.id).await?.len();
        let from_env = env_credentials(info, settings).len();
        let (configured, why) = if stored > 0 {
            (true, format!("{stored} credential(s) in store"))
        } else if from_env > 0 {
            (true, "credential from environment".to_owned())
        } else if KEYLESS.contains(&info.id) && url.is_ok() {
            (true, "local runtime (no key needed)".to_owned())
        } else {
            (false, format!("no credential: {}", configure_hint(info)))
        };
        let (base, source) = match &url {
            Ok(u) => (u.url.clone(), u.source.to_owned()),
            Err(err) => (String::new(), format!("missing: {err}")),
        };
        rows.push(ProviderRow {
            id: info.id.to_owned(),
            family: info.family.as_str().to_owned(),
            configured,
            configured_reason: why,
            base_url: base,
            base_url_source: source,
        });
    }
    Ok(rows)
}

/// Providers that can be called on this deployment: a healthy stored credential, an environment
/// credential, or a keyless local runtime with a base URL. The routing rules refuse routes to
/// any other provider.
pub(crate) fn credentialed(rows: &[ProviderRow]) -> BTreeSet<String> {
    rows.iter()
        .filter(|r| r.configured)
        .map(|r| r.id.clone())
        .collect()
}

/// Why a pipeline could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BuildError {
    /// Configuration is wrong (bad base URL, bad chain): nothing was called; exit 2.
    #[error("{0}")]
    Config(anyhow::Error),
    /// An adapter or the shipped price table failed to load; exit 1.
    #[error("{0}")]
    Runtime(anyhow::Error),
}

/// Builds the pipeline for `chains` (role → ordered candidates). Every provider a chain or
/// `required` names is wired (a bad base URL is a configuration error); `optional` providers are
/// wired too when their base URL resolves, so explicit `provider:model` calls can reach them.
pub(crate) fn build_pipeline(
    chains: BTreeMap<String, Vec<Candidate>>,
    required: &[Candidate],
    optional: &[String],
    usage: Arc<dyn UsageSink>,
    settings: &Settings,
) -> Result<ProviderPipeline, BuildError> {
    let mut wanted: Vec<(&str, bool)> = chains
        .values()
        .flatten()
        .chain(required.iter())
        .map(|c| (c.provider.as_str(), true))
        .collect();
    wanted.extend(optional.iter().map(|p| (p.as_str(), false)));
    let mut entries: Vec<ProviderEntry> = Vec::new();
    let mut env_creds = BTreeMap::new();
    for (provider, strict) in wanted {
        let Ok(info) = resolve_provider(provider) else {
            continue;
        };
        if entries.iter().any(|e| e.id == info.id) {
            continue;
        }
        let url = match base_url(info, settings) {
            Ok(url) => url,
            Err(err) if strict => return Err(BuildError::Config(err)),
            Err(err) => {
                tracing::warn!(event = "provider_not_wired", provider = info.id, error = %err, "base URL does not resolve");
                continue;
            }
        };
        let adapter = adapter_for(info, &url.url)
            .map_err(|err| BuildError::Runtime(anyhow::anyhow!("{}: {err}", info.id)))?;
        env_creds.insert(
            info.id.to_owned(),
            env_credentials(info, settings)
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
    let chains: BTreeMap<String, Vec<Candidate>> =
        chains.into_iter().filter(|(_, c)| !c.is_empty()).collect();
    let slots = RoleModelSlots::new(chains).map_err(|e| BuildError::Config(e.into()))?;
    let store = LayeredCredentialStore {
        file: FileCredentialStore::new(settings.credentials_path.clone()),
        env: std::sync::Mutex::new(env_creds),
    };
    let prices = PriceTable::shipped()
        .map_err(|e| BuildError::Runtime(anyhow::anyhow!("shipped price table: {e}")))?;
    ProviderPipeline::new(
        entries,
        slots,
        RetryPolicy::default(),
        CredentialRotor::new(Some(Arc::new(store))),
        Arc::new(FallbackAlarm::new()),
        usage,
    )
    .map(|p| p.with_price_table(prices))
    .map_err(|e| BuildError::Config(e.into()))
}
