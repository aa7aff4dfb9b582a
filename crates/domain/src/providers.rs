//! The provider registry: every provider id MetaForge knows, its API family, its aliases, where
//! its base URL comes from, and which models its family can serve.
//!
//! The family check is deliberately conservative: it rejects only pairs a first-party API can
//! never serve, and never judges a multi-vendor gateway. A pair caught here is a configuration
//! error found at resolve time instead of a 400 on every call.

use metaforge_ports::ApiFamily;

/// One provider the registry knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderInfo {
    /// Canonical id, as used in routes (`provider:model`) and in `HARNESS_<ID>_BASE_URL`.
    pub id: &'static str,
    /// The wire API the provider speaks.
    pub family: ApiFamily,
    /// Other names that resolve to this provider.
    pub aliases: &'static [&'static str],
    /// The provider's fixed public endpoint; `None` when it is account-, region- or host-specific.
    pub fixed_base_url: Option<&'static str>,
    /// True for providers that route to many vendors' models (never judged by the family check).
    pub multi_vendor: bool,
    /// True when calls are covered by a subscription rather than priced per token.
    pub subscription_billed: bool,
}

const fn oa(id: &'static str, aliases: &'static [&'static str], url: Option<&'static str>) -> ProviderInfo {
    ProviderInfo {
        id,
        family: ApiFamily::OpenaiCompatible,
        aliases,
        fixed_base_url: url,
        multi_vendor: true,
        subscription_billed: false,
    }
}

/// Every provider id of the seed's provider surface (FORGE-468, MET-549).
pub const PROVIDERS: &[ProviderInfo] = &[
    oa("openrouter", &[], Some("https://openrouter.ai/api/v1")),
    oa(
        "openai",
        &["gpt", "chatgpt-api"],
        Some("https://api.openai.com/v1"),
    ),
    oa("deepseek", &[], Some("https://api.deepseek.com/v1")),
    oa("xai", &["grok", "x-ai"], Some("https://api.x.ai/v1")),
    oa("novita", &[], Some("https://api.novita.ai/v3/openai")),
    oa(
        "kimi",
        &["moonshot", "kimi-coding"],
        Some("https://api.moonshot.ai/v1"),
    ),
    oa(
        "kimi-cn",
        &["moonshot-cn", "kimi-coding-cn"],
        Some("https://api.moonshot.cn/v1"),
    ),
    oa(
        "zai",
        &["glm", "z-ai", "zhipu"],
        Some("https://api.z.ai/api/paas/v4"),
    ),
    oa("alibaba", &["dashscope", "qwen"], None),
    oa("alibaba-coding-plan", &["dashscope-coding-plan"], None),
    oa("minimax", &[], None),
    oa("minimax-cn", &[], None),
    oa("huggingface", &["hf"], Some("https://router.huggingface.co/v1")),
    oa("nvidia", &["nim"], Some("https://integrate.api.nvidia.com/v1")),
    oa("arcee", &[], None),
    oa("gmi", &[], None),
    oa("xiaomi", &["mimo"], None),
    oa("tencent-tokenhub", &["tencent"], None),
    oa("opencode-zen", &[], None),
    oa("opencode-go", &[], None),
    oa("kilocode", &["kilo"], None),
    oa("stepfun", &[], None),
    oa("azure-foundry", &["azure", "azure-openai"], None),
    oa("ollama", &[], None),
    oa("vllm", &[], None),
    oa("sglang", &[], None),
    oa("llama-cpp", &["llama.cpp", "llamacpp"], None),
    oa("lmstudio", &["lm-studio"], None),
    oa("litellm", &[], None),
    oa("clawrouter", &[], None),
    oa("custom", &[], None),
    ProviderInfo {
        id: "anthropic",
        family: ApiFamily::Anthropic,
        aliases: &["claude"],
        fixed_base_url: Some("https://api.anthropic.com"),
        multi_vendor: false,
        subscription_billed: false,
    },
    ProviderInfo {
        id: "gemini",
        family: ApiFamily::Gemini,
        aliases: &["google", "google-genai"],
        fixed_base_url: Some("https://generativelanguage.googleapis.com"),
        multi_vendor: false,
        subscription_billed: false,
    },
    ProviderInfo {
        id: "bedrock",
        family: ApiFamily::Bedrock,
        aliases: &["aws-bedrock", "aws"],
        fixed_base_url: None,
        multi_vendor: true,
        subscription_billed: false,
    },
    ProviderInfo {
        id: "openai-codex",
        family: ApiFamily::OpenaiCodex,
        aliases: &["codex"],
        fixed_base_url: Some("https://chatgpt.com/backend-api/codex"),
        multi_vendor: false,
        subscription_billed: true,
    },
];

/// Errors of the provider rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderRuleError {
    /// The name is neither a provider id nor an alias.
    #[error("unknown provider '{0}'")]
    UnknownProvider(String),
    /// A route is not of the form `provider:model`.
    #[error("route '{0}' is not of the form provider:model")]
    MalformedRoute(String),
    /// No base URL could be found for a provider without a fixed endpoint.
    #[error("provider '{provider}' has no fixed base URL: set {env_var}")]
    MissingBaseUrl {
        /// Canonical provider id.
        provider: String,
        /// The environment variable that would supply it.
        env_var: String,
    },
}

/// Looks a provider up by id or alias, case-insensitively; `_` and `-` are interchangeable.
pub fn resolve_provider(name: &str) -> Result<&'static ProviderInfo, ProviderRuleError> {
    let wanted = name.trim().to_ascii_lowercase().replace('_', "-");
    PROVIDERS
        .iter()
        .find(|p| p.id == wanted || p.aliases.iter().any(|a| *a == wanted))
        .ok_or_else(|| ProviderRuleError::UnknownProvider(name.to_owned()))
}

/// A `provider:model` route split into its parts (the model may itself contain `:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The provider as written (resolve it with [`resolve_provider`]).
    pub provider: String,
    /// The model name.
    pub model: String,
}

/// Splits `provider:model` at the first colon; both halves must be non-empty.
pub fn parse_route(route: &str) -> Result<Route, ProviderRuleError> {
    match route.trim().split_once(':') {
        Some((provider, model)) if !provider.trim().is_empty() && !model.trim().is_empty() => Ok(Route {
            provider: provider.trim().to_owned(),
            model: model.trim().to_owned(),
        }),
        _ => Err(ProviderRuleError::MalformedRoute(route.to_owned())),
    }
}

/// The environment variable naming a provider's base URL: `HARNESS_<ID>_BASE_URL`, upper-cased,
/// with every non-alphanumeric character as `_`.
pub fn base_url_env_var(provider_id: &str) -> String {
    let id: String = provider_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("HARNESS_{id}_BASE_URL")
}

/// Where a resolved base URL came from (shown by the providers view).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BaseUrlSource {
    /// Passed explicitly by configuration.
    Explicit,
    /// The provider's fixed public endpoint.
    Fixed,
    /// Read from `HARNESS_<ID>_BASE_URL`.
    Env,
}

/// A base URL and its provenance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedBaseUrl {
    /// The URL, without a trailing slash.
    pub url: String,
    /// Where it came from.
    pub source: BaseUrlSource,
}

/// Resolves a provider's base URL: explicit, then the fixed URL, then `HARNESS_<ID>_BASE_URL`
/// (read through `env`, so this stays pure), else an error naming that variable.
pub fn resolve_base_url(
    provider: &ProviderInfo,
    explicit: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ResolvedBaseUrl, ProviderRuleError> {
    let clean = |u: &str| u.trim().trim_end_matches('/').to_owned();
    if let Some(url) = explicit.filter(|u| !u.trim().is_empty()) {
        return Ok(ResolvedBaseUrl {
            url: clean(url),
            source: BaseUrlSource::Explicit,
        });
    }
    if let Some(url) = provider.fixed_base_url {
        return Ok(ResolvedBaseUrl {
            url: clean(url),
            source: BaseUrlSource::Fixed,
        });
    }
    let env_var = base_url_env_var(provider.id);
    match env(&env_var).filter(|u| !u.trim().is_empty()) {
        Some(url) => Ok(ResolvedBaseUrl {
            url: clean(&url),
            source: BaseUrlSource::Env,
        }),
        None => Err(ProviderRuleError::MissingBaseUrl {
            provider: provider.id.to_owned(),
            env_var,
        }),
    }
}

/// The most tools one request may carry for this provider's family (OpenAI-compatible: 128).
pub fn max_tools_for(provider: &ProviderInfo) -> Option<usize> {
    match provider.family {
        ApiFamily::OpenaiCompatible => Some(128),
        ApiFamily::Anthropic | ApiFamily::Gemini | ApiFamily::Bedrock | ApiFamily::OpenaiCodex => None,
    }
}

/// What the agent loop reads about the model serving a turn before it shapes the turn's
/// requests: which loop to speak, when to fold, how many tools to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ModelCapability {
    /// The family's adapter parses native tool calls and the model takes them
    /// ([`native_tools_enabled`]); without it the loop speaks JSON-ReAct.
    pub native_tools: bool,
    /// The model's context window in tokens ([`context_window_tokens`]); the loop folds a turn's
    /// older tool exchanges past ~60 % of it.
    pub context_window_tokens: usize,
    /// The provider's tool-array cap ([`max_tools_for`]).
    pub max_tools: Option<usize>,
}

/// The context window assumed for a model the table does not know: small enough that a local
/// model served with a modest context is not overrun before the loop folds.
pub const DEFAULT_CONTEXT_WINDOW_TOKENS: usize = 8_192;

/// Models (by prefix of [`model_key`]) that take no native tool calls whatever adapter serves
/// them: completion-only and embedding models, reasoning models shipped without function calling,
/// and open models whose chat templates carry no tools. The loop speaks JSON-ReAct to them.
const NO_NATIVE_TOOLS: &[&str] = &[
    "o1-mini",
    "o1-preview",
    "gpt-3.5-turbo-instruct",
    "text-",
    "davinci",
    "babbage",
    "embed",
    "gemma",
    "titan-text",
    "titan-embed",
    "j2-",
    "command-text",
    "command-light",
    "llama2",
    "llama-2",
    "deepseek-r1",
    "deepseek.r1",
    "deepseek-reasoner",
    "phi-2",
    "phi2",
    "phi-3",
    "phi3",
    "tinyllama",
];

/// Context windows in tokens by prefix of [`model_key`], the longest matching prefix winning.
/// Conservative: where a vendor publishes several limits (input vs total, tiers), the smallest
/// that any deployment of the name is served with; folding early costs a synopsis, folding late
/// costs the turn.
const CONTEXT_WINDOWS: &[(&str, usize)] = &[
    ("claude", 200_000),
    ("gpt-5", 272_000),
    ("gpt-4.1", 1_000_000),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-32k", 32_768),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("o1", 200_000),
    ("o1-mini", 128_000),
    ("o1-preview", 128_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("gemini", 1_000_000),
    ("gemini-1.0", 32_000),
    ("gemini-pro", 32_000),
    ("gemma", 8_192),
    ("deepseek", 64_000),
    ("grok", 131_072),
    ("mistral", 32_000),
    ("mistral-large", 128_000),
    ("mixtral", 32_000),
    ("codestral", 32_000),
    ("command-r", 128_000),
    ("nova-", 128_000),
    ("llama2", 4_096),
    ("llama-2", 4_096),
    ("llama3", 8_192),
    ("llama-3", 8_192),
    ("llama3.1", 128_000),
    ("llama-3.1", 128_000),
    ("llama3-1", 128_000),
    ("llama3.2", 128_000),
    ("llama-3.2", 128_000),
    ("llama3-2", 128_000),
    ("llama3.3", 128_000),
    ("llama-3.3", 128_000),
    ("llama3-3", 128_000),
    ("llama4", 128_000),
    ("llama-4", 128_000),
    ("qwen", 32_000),
    ("kimi", 128_000),
    ("moonshot", 128_000),
    ("glm-4", 128_000),
    ("smollm", 2_048),
    ("tinyllama", 2_048),
];

/// Bedrock's cross-region inference prefixes (`us.anthropic.claude-…`).
const BEDROCK_REGION_PREFIXES: &[&str] = &["us.", "eu.", "apac.", "global.", "us-gov."];

/// Bedrock's vendor prefixes (`anthropic.claude-…`, `meta.llama3-1-…`). `deepseek.` is kept:
/// Bedrock's `deepseek.r1-v1:0` is named by it alone.
const BEDROCK_VENDOR_PREFIXES: &[&str] = &[
    "anthropic.",
    "meta.",
    "amazon.",
    "mistral.",
    "cohere.",
    "ai21.",
    "writer.",
    "qwen.",
    "openai.",
];

/// The part of a model name the capability tables are keyed by: lower-cased, after the last
/// `/` (`openai/gpt-4o`, `models/gemini-2.5-flash`, `meta-llama/Llama-3.1-8B`), without a Bedrock
/// region or vendor prefix (`us.anthropic.claude-…` → `claude-…`).
pub fn model_key(model: &str) -> String {
    let lowered = model.trim().to_ascii_lowercase();
    let mut key = lowered.rsplit('/').next().unwrap_or_default();
    if let Some(rest) = BEDROCK_REGION_PREFIXES.iter().find_map(|p| key.strip_prefix(p)) {
        key = rest;
    }
    if let Some(rest) = BEDROCK_VENDOR_PREFIXES.iter().find_map(|p| key.strip_prefix(p)) {
        key = rest;
    }
    key.to_owned()
}

/// Whether the loop may speak native tool calls to `model` on `provider` (the seed's
/// `native_tools_enabled()`); the loop speaks JSON-ReAct otherwise.
///
/// By family: every adapter of this workspace parses native tool calls — OpenAI-compatible
/// `tool_calls`, Anthropic `tool_use`, Gemini `functionCall`, Bedrock `toolUse`, Responses
/// `function_call` — so none is excluded (the seed's Python adapters for Gemini and Bedrock did
/// not, which is why it fell back there). By model: the names in a conservative table of models
/// that take no tools are excluded whichever family serves them.
pub fn native_tools_enabled(provider: &ProviderInfo, model: &str) -> bool {
    let family_parses_tools = match provider.family {
        ApiFamily::OpenaiCompatible
        | ApiFamily::Anthropic
        | ApiFamily::Gemini
        | ApiFamily::Bedrock
        | ApiFamily::OpenaiCodex => true,
    };
    let key = model_key(model);
    family_parses_tools && !NO_NATIVE_TOOLS.iter().any(|p| key.starts_with(p))
}

/// The context window of `model` in tokens: the longest prefix of [`model_key`] in a
/// conservative table, else [`DEFAULT_CONTEXT_WINDOW_TOKENS`].
pub fn context_window_tokens(model: &str) -> usize {
    let key = model_key(model);
    CONTEXT_WINDOWS
        .iter()
        .filter(|(prefix, _)| key.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map_or(DEFAULT_CONTEXT_WINDOW_TOKENS, |(_, tokens)| *tokens)
}

/// Everything the loop chooses from for `model` on `provider`, each part by its own rule.
pub fn model_capability(provider: &ProviderInfo, model: &str) -> ModelCapability {
    ModelCapability {
        native_tools: native_tools_enabled(provider, model),
        context_window_tokens: context_window_tokens(model),
        max_tools: max_tools_for(provider),
    }
}

/// Whether `provider` can never serve `model`; `Some(reason)` names the model, and its vendor
/// when the name makes it plain ("model 'claude-3' (vendor 'anthropic')"), when it cannot.
///
/// Rules, exactly as FORGE-468 states them: openai-codex rejects any `vendor/model` slug
/// (FORGE-93); a first-party family serves only its own vendor's models, so anthropic rejects
/// gpt-* / o1 / o3 / o4, openai-codex rejects claude-* / gemini*, and gemini rejects claude-* /
/// gpt-*. A slug whose vendor is not plain from its prefix passes, and multi-vendor gateways
/// (OpenRouter, vLLM, Bedrock and every other OpenAI-compatible provider) are never judged.
pub fn model_family_mismatch(provider: &ProviderInfo, model: &str) -> Option<String> {
    if provider.multi_vendor {
        return None;
    }
    let lowered = model.trim().to_ascii_lowercase();
    let vendor = model_vendor(&lowered);
    let reason = match provider.family {
        ApiFamily::OpenaiCodex if lowered.contains('/') => {
            Some("openai-codex takes a bare model name, not a vendor/model slug")
        }
        ApiFamily::OpenaiCodex if matches!(vendor, Some(Vendor::Anthropic | Vendor::Google)) => {
            Some("openai-codex serves only OpenAI models")
        }
        ApiFamily::Anthropic if matches!(vendor, Some(Vendor::OpenAiGpt | Vendor::OpenAiReasoning)) => {
            Some("the Anthropic API serves only Anthropic models")
        }
        ApiFamily::Gemini if matches!(vendor, Some(Vendor::Anthropic | Vendor::OpenAiGpt)) => {
            Some("the Gemini API serves only Google models")
        }
        _ => None,
    };
    reason.map(|why| {
        let vendor = vendor
            .map(|v| format!(" (vendor '{}')", v.name()))
            .unwrap_or_default();
        format!(
            "model '{model}'{vendor} cannot be served by provider '{}': {why}",
            provider.id
        )
    })
}

/// The vendor a model name belongs to (`openai`, `anthropic`, `google`), when its name or its
/// `vendor/` prefix says so; `None` for names the rules do not judge.
pub fn model_vendor_name(model: &str) -> Option<&'static str> {
    model_vendor(&model.trim().to_ascii_lowercase()).map(Vendor::name)
}

/// A vendor plain from a model name. OpenAI's gpt-* and its o-series are kept apart because the
/// seed's rules name them separately (gemini rejects gpt-* but says nothing of o1/o3/o4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vendor {
    OpenAiGpt,
    OpenAiReasoning,
    Anthropic,
    Google,
}

impl Vendor {
    /// The vendor's name as errors print it.
    fn name(self) -> &'static str {
        match self {
            Self::OpenAiGpt | Self::OpenAiReasoning => "openai",
            Self::Anthropic => "anthropic",
            Self::Google => "google",
        }
    }
}

/// The vendor plain from a model name's prefix (after an optional `vendor/` segment), if any.
/// An explicit `vendor/` prefix decides on its own; otherwise the bare name's prefix does.
fn model_vendor(lowered: &str) -> Option<Vendor> {
    let (prefix_vendor, name) = match lowered.split_once('/') {
        Some((vendor, rest)) => (Some(vendor), rest),
        None => (None, lowered),
    };
    let is_o_series = ["o1", "o3", "o4"]
        .iter()
        .any(|o| name == *o || name.strip_prefix(o).is_some_and(|rest| rest.starts_with('-')));
    let by_name = if name.starts_with("gpt-") || name == "gpt" {
        Some(Vendor::OpenAiGpt)
    } else if is_o_series {
        Some(Vendor::OpenAiReasoning)
    } else if name.starts_with("claude") {
        Some(Vendor::Anthropic)
    } else if name.starts_with("gemini") {
        Some(Vendor::Google)
    } else {
        None
    };
    match prefix_vendor {
        Some("openai") => Some(
            by_name
                .filter(|v| *v == Vendor::OpenAiReasoning)
                .unwrap_or(Vendor::OpenAiGpt),
        ),
        Some("anthropic") => Some(Vendor::Anthropic),
        Some("google") => Some(Vendor::Google),
        Some(_) => None,
        None => by_name,
    }
}

/// The first-party provider whose API serves `model` (gpt-* and o-series: `openai`; claude*:
/// `anthropic`; gemini*: `gemini`), read from its name or its `vendor/` prefix; `None` when the
/// name does not make its vendor plain. This is how a bare model name an OpenAI SDK sends finds a
/// provider when no route or prefix names one.
pub fn first_party_provider(model: &str) -> Option<&'static ProviderInfo> {
    let id = match model_vendor(&model.trim().to_ascii_lowercase())? {
        Vendor::OpenAiGpt | Vendor::OpenAiReasoning => "openai",
        Vendor::Anthropic => "anthropic",
        Vendor::Google => "gemini",
    };
    PROVIDERS.iter().find(|p| p.id == id)
}

/// Whether `provider` is a vendor's own API (OpenAI, Anthropic, Google, openai-codex) rather than
/// a gateway or runtime that serves many vendors' models. A bare model name of one vendor is never
/// sent to another vendor's own API.
pub fn is_first_party(provider: &ProviderInfo) -> bool {
    matches!(provider.id, "openai" | "anthropic" | "gemini" | "openai-codex")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str) -> &'static ProviderInfo {
        resolve_provider(name).unwrap()
    }

    #[test]
    fn aliases_resolve_to_their_canonical_provider() {
        assert_eq!(p("claude").id, "anthropic");
        assert_eq!(p("Codex").id, "openai-codex");
        assert_eq!(p("google").id, "gemini");
        assert_eq!(p("grok").id, "xai");
        assert_eq!(p("llama.cpp").id, "llama-cpp");
        assert_eq!(p("openai_codex").id, "openai-codex");
        assert!(resolve_provider("nope").is_err());
    }

    #[test]
    fn anthropic_rejects_openai_models_and_names_the_model() {
        let reason = model_family_mismatch(p("anthropic"), "gpt-4o").unwrap();
        assert!(reason.contains("gpt-4o"));
        assert!(model_family_mismatch(p("anthropic"), "o3").is_some());
        assert!(model_family_mismatch(p("anthropic"), "o4-mini").is_some());
        assert!(model_family_mismatch(p("anthropic"), "claude-opus-4-8").is_none());
    }

    #[test]
    fn multi_vendor_gateways_are_never_judged() {
        assert!(model_family_mismatch(p("openrouter"), "anthropic/claude-3.5-sonnet").is_none());
        assert!(model_family_mismatch(p("bedrock"), "anthropic.claude-3").is_none());
        assert!(model_family_mismatch(p("openai"), "claude-3").is_none());
    }

    #[test]
    fn a_model_name_finds_its_vendors_first_party_provider() {
        let id = |m: &str| first_party_provider(m).map(|p| p.id);
        assert_eq!(id("gpt-4o-mini"), Some("openai"));
        assert_eq!(id("o4-mini"), Some("openai"));
        assert_eq!(id("openai/gpt-4o-mini"), Some("openai"));
        assert_eq!(id("claude-haiku-4-5"), Some("anthropic"));
        assert_eq!(id("gemini-2.5-flash"), Some("gemini"));
        assert_eq!(id("llama3.2"), None);
        assert_eq!(id("meta-llama/llama-3-70b"), None);
        assert!(is_first_party(p("openai")) && is_first_party(p("claude")));
        assert!(!is_first_party(p("openrouter")) && !is_first_party(p("bedrock")));
    }

    #[test]
    fn codex_rejects_vendor_slugs() {
        assert!(model_family_mismatch(p("openai-codex"), "openai/gpt-5").is_some());
        assert!(model_family_mismatch(p("openai-codex"), "gpt-5-codex").is_none());
    }

    #[test]
    fn base_url_falls_back_to_the_env_var_and_names_it_when_missing() {
        let vllm = p("vllm");
        let err = resolve_base_url(vllm, None, |_| None).unwrap_err();
        assert_eq!(
            err,
            ProviderRuleError::MissingBaseUrl {
                provider: "vllm".into(),
                env_var: "HARNESS_VLLM_BASE_URL".into()
            }
        );
        let ok = resolve_base_url(vllm, None, |k| {
            (k == "HARNESS_VLLM_BASE_URL").then(|| "http://x/v1/".into())
        })
        .unwrap();
        assert_eq!(ok.url, "http://x/v1");
        assert_eq!(ok.source, BaseUrlSource::Env);
        assert_eq!(base_url_env_var("llama-cpp"), "HARNESS_LLAMA_CPP_BASE_URL");
    }
}
