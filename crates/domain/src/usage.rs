//! Token and cost accounting (FORGE-476/486): one usage event per model call, normalised per API
//! family, priced from the model price table, and summed into totals.
//!
//! The rule that shapes everything here: unknown is never 0. A call whose usage the provider did
//! not report has `None` tokens; a model missing from the price table has cost `None`; a total
//! with no priced call has cost `None`; subscription-billed calls are counted apart, never priced
//! at zero. A zero reads as "free" in a live view and slips under every budget check.

use std::collections::{BTreeMap, BTreeSet};

use metaforge_ports::{ApiFamily, Billing, UsageEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::providers::resolve_provider;

/// The price table shipped with MetaForge (`fixtures/model_prices.json`).
pub const SHIPPED_PRICES_JSON: &str = include_str!("../../../fixtures/model_prices.json");

/// The spend threshold per run when `METAFORGE_RUN_SPEND_ALERT_USD` is unset (FORGE-476).
pub const DEFAULT_RUN_SPEND_ALERT_USD: f64 = 5.0;

/// The environment variable that sets the per-run spend threshold.
pub const RUN_SPEND_ALERT_ENV: &str = "METAFORGE_RUN_SPEND_ALERT_USD";

/// One call's token counts in MetaForge's terms, whatever the provider called them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NormalizedUsage {
    /// Full prompt, including cache reads and cache writes.
    pub prompt_tokens: Option<u64>,
    /// Completion, including reasoning where the provider bills it as output.
    pub completion_tokens: Option<u64>,
    /// Prompt tokens served from the provider's cache.
    pub cached_input_tokens: Option<u64>,
    /// Prompt tokens written to the provider's cache.
    pub cache_write_tokens: Option<u64>,
    /// Reasoning ("thinking") tokens, a part of completion.
    pub reasoning_tokens: Option<u64>,
}

impl NormalizedUsage {
    /// True when the provider reported neither prompt nor completion tokens.
    pub fn is_unknown(&self) -> bool {
        self.prompt_tokens.is_none() && self.completion_tokens.is_none()
    }

    /// Writes these counts onto `event` (every count, unknown ones as `None`): the one way a
    /// recorded call (the pipeline) and a replayed one (`metaforge check usage`) get their tokens.
    pub fn apply_to(&self, event: &mut UsageEvent) {
        event.prompt_tokens = self.prompt_tokens;
        event.completion_tokens = self.completion_tokens;
        event.cached_input_tokens = self.cached_input_tokens;
        event.cache_write_tokens = self.cache_write_tokens;
        event.reasoning_tokens = self.reasoning_tokens;
    }
}

fn count(raw: &Value, pointer: &str) -> Option<u64> {
    raw.pointer(pointer).and_then(Value::as_u64)
}

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

/// Where a family that reports cache reads and writes beside the input (Anthropic, Bedrock) puts
/// its counts.
struct CachedInputKeys {
    input: &'static str,
    reads: &'static str,
    writes: &'static str,
    output: &'static str,
}

/// Such a family's input excludes the cached tokens, so the prompt is input + reads + writes.
fn cached_input_usage(raw: &Value, keys: CachedInputKeys) -> NormalizedUsage {
    let reads = count(raw, keys.reads);
    let writes = count(raw, keys.writes);
    NormalizedUsage {
        prompt_tokens: count(raw, keys.input).map(|i| {
            i.saturating_add(reads.unwrap_or(0))
                .saturating_add(writes.unwrap_or(0))
        }),
        completion_tokens: count(raw, keys.output),
        cached_input_tokens: reads,
        cache_write_tokens: writes,
        reasoning_tokens: None,
    }
}

/// Normalises a provider's raw usage object for its API family.
///
/// * OpenAI-compatible `usage`: `prompt_tokens` already includes `prompt_tokens_details.cached_tokens`.
/// * Anthropic `usage` (message_start merged with message_delta): `input_tokens` excludes cache
///   reads and writes, so prompt = input + `cache_read_input_tokens` + `cache_creation_input_tokens`.
/// * Gemini `usageMetadata`: `promptTokenCount` includes `cachedContentTokenCount`; completion is
///   `candidatesTokenCount` plus `thoughtsTokenCount` (thinking is billed as output).
/// * Bedrock Converse `usage`: `inputTokens` excludes `cacheReadInputTokens` and
///   `cacheWriteInputTokens`, which are added back.
/// * Codex: `response.completed`'s `response.usage` (the whole event is accepted too):
///   `input_tokens` includes `input_tokens_details.cached_tokens`.
///
/// A field the provider did not send stays `None`; a `null` or non-object input is all `None`.
pub fn normalize_usage(family: ApiFamily, raw: &Value) -> NormalizedUsage {
    match family {
        ApiFamily::OpenaiCompatible => NormalizedUsage {
            prompt_tokens: count(raw, "/prompt_tokens"),
            completion_tokens: count(raw, "/completion_tokens"),
            cached_input_tokens: count(raw, "/prompt_tokens_details/cached_tokens"),
            cache_write_tokens: None,
            reasoning_tokens: count(raw, "/completion_tokens_details/reasoning_tokens"),
        },
        ApiFamily::Anthropic => cached_input_usage(
            raw,
            CachedInputKeys {
                input: "/input_tokens",
                reads: "/cache_read_input_tokens",
                writes: "/cache_creation_input_tokens",
                output: "/output_tokens",
            },
        ),
        ApiFamily::Gemini => {
            let thoughts = count(raw, "/thoughtsTokenCount");
            let candidates = count(raw, "/candidatesTokenCount");
            NormalizedUsage {
                prompt_tokens: count(raw, "/promptTokenCount"),
                completion_tokens: candidates.map(|c| c.saturating_add(thoughts.unwrap_or(0))),
                cached_input_tokens: count(raw, "/cachedContentTokenCount"),
                cache_write_tokens: None,
                reasoning_tokens: thoughts,
            }
        }
        ApiFamily::Bedrock => cached_input_usage(
            raw,
            CachedInputKeys {
                input: "/inputTokens",
                reads: "/cacheReadInputTokens",
                writes: "/cacheWriteInputTokens",
                output: "/outputTokens",
            },
        ),
        ApiFamily::OpenaiCodex => {
            let usage = raw
                .pointer("/response/usage")
                .or_else(|| raw.get("usage"))
                .unwrap_or(raw);
            NormalizedUsage {
                prompt_tokens: count(usage, "/input_tokens"),
                completion_tokens: count(usage, "/output_tokens"),
                cached_input_tokens: count(usage, "/input_tokens_details/cached_tokens"),
                cache_write_tokens: None,
                reasoning_tokens: count(usage, "/output_tokens_details/reasoning_tokens"),
            }
        }
    }
}

/// One model's prices in USD per 1M tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Uncached prompt tokens.
    pub input: f64,
    /// Completion tokens (reasoning included).
    pub output: f64,
    /// Prompt tokens read from cache; the input rate applies when absent.
    #[serde(default)]
    pub cached_input: Option<f64>,
    /// Prompt tokens written to cache; the input rate applies when absent.
    #[serde(default)]
    pub cache_write: Option<f64>,
}

/// Errors reading a price table.
#[derive(Debug, thiserror::Error)]
pub enum PriceTableError {
    /// The text is not JSON of the price table's shape.
    #[error("price table is not valid JSON at line {line}, column {column}: {message}")]
    Malformed {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde found.
        message: String,
    },
    /// A price is negative or not finite, which would make every total wrong.
    #[error("price table: model '{model}' has an invalid {field} price {value}")]
    InvalidPrice {
        /// The model.
        model: String,
        /// Which rate.
        field: &'static str,
        /// The value found.
        value: f64,
    },
}

#[derive(Deserialize)]
struct PriceFile {
    models: BTreeMap<String, ModelPrice>,
}

/// Model prices keyed by model id (USD per 1M tokens), in `fixtures/model_prices.json`'s shape:
/// `{"models": {"<model>": {"input", "output", "cached_input"?, "cache_write"?}}}`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PriceTable {
    models: BTreeMap<String, ModelPrice>,
}

impl PriceTable {
    /// Parses a table from JSON text, rejecting negative or non-finite prices.
    pub fn from_json(text: &str) -> Result<Self, PriceTableError> {
        let file: PriceFile = serde_json::from_str(text).map_err(|e| PriceTableError::Malformed {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        Self::from_models(file.models)
    }

    /// Builds a table from a parsed JSON value of the fixture's shape.
    pub fn from_value(value: &Value) -> Result<Self, PriceTableError> {
        let file = PriceFile::deserialize(value).map_err(|e| PriceTableError::Malformed {
            line: 0,
            column: 0,
            message: e.to_string(),
        })?;
        Self::from_models(file.models)
    }

    fn from_models(models: BTreeMap<String, ModelPrice>) -> Result<Self, PriceTableError> {
        for (model, price) in &models {
            let rates = [
                ("input", Some(price.input)),
                ("output", Some(price.output)),
                ("cached_input", price.cached_input),
                ("cache_write", price.cache_write),
            ];
            for (field, rate) in rates {
                if let Some(value) = rate.filter(|v| !v.is_finite() || *v < 0.0) {
                    return Err(PriceTableError::InvalidPrice {
                        model: model.clone(),
                        field,
                        value,
                    });
                }
            }
        }
        Ok(Self { models })
    }

    /// The table shipped in the binary.
    pub fn shipped() -> Result<Self, PriceTableError> {
        Self::from_json(SHIPPED_PRICES_JSON)
    }

    /// How many models have a price.
    pub fn len(&self) -> usize {
        self.models.len()
    }

    /// True when no model has a price.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// A model's price: exact id first, then case-insensitive, then without a `vendor/` prefix
    /// (OpenRouter-style slugs). `None` when the model is not in the table.
    pub fn price_for(&self, model: &str) -> Option<&ModelPrice> {
        let trimmed = model.trim();
        if let Some(p) = self.models.get(trimmed) {
            return Some(p);
        }
        let lowered = trimmed.to_ascii_lowercase();
        let find = |name: &str| {
            self.models
                .iter()
                .find(|(k, _)| k.to_ascii_lowercase() == name)
                .map(|(_, v)| v)
        };
        find(&lowered).or_else(|| lowered.rsplit_once('/').and_then(|(_, bare)| find(bare)))
    }
}

/// The cost of one call in USD, or `None` when it cannot be known: the model has no price, or
/// prompt or completion tokens are unknown. Cached reads and cache writes are priced at their own
/// rates (the input rate when the table has none); an unknown cached count prices the whole prompt
/// at the input rate, which can only over-state the cost.
pub fn cost_usd(usage: &NormalizedUsage, price: &ModelPrice) -> Option<f64> {
    let prompt = usage.prompt_tokens?;
    let completion = usage.completion_tokens?;
    let cached = usage.cached_input_tokens.unwrap_or(0).min(prompt);
    let writes = usage.cache_write_tokens.unwrap_or(0).min(prompt - cached);
    let uncached = prompt - cached - writes;
    let per_token = |tokens: u64, rate: f64| tokens as f64 * rate / 1_000_000.0;
    Some(
        per_token(uncached, price.input)
            + per_token(cached, price.cached_input.unwrap_or(price.input))
            + per_token(writes, price.cache_write.unwrap_or(price.input))
            + per_token(completion, price.output),
    )
}

fn usage_of(event: &UsageEvent) -> NormalizedUsage {
    NormalizedUsage {
        prompt_tokens: event.prompt_tokens,
        completion_tokens: event.completion_tokens,
        cached_input_tokens: event.cached_input_tokens,
        cache_write_tokens: event.cache_write_tokens,
        reasoning_tokens: event.reasoning_tokens,
    }
}

/// True when the provider bills by subscription (openai-codex), so no call of it has a price.
pub fn is_subscription_provider(provider: &str) -> bool {
    resolve_provider(provider).is_ok_and(|p| p.subscription_billed)
}

/// Prices one event: subscription providers get `billing: subscription` and cost `None`;
/// metered calls get the table's cost, or keep a cost already recorded when the table cannot
/// price them, or `None`. Never 0 for an unknown.
pub fn price_event(event: &UsageEvent, prices: &PriceTable) -> UsageEvent {
    let mut priced = event.clone();
    if event.billing == Billing::Subscription || is_subscription_provider(&event.provider) {
        priced.billing = Billing::Subscription;
        priced.cost_usd = None;
        return priced;
    }
    priced.billing = Billing::Metered;
    let computed = prices
        .price_for(&event.model)
        .and_then(|price| cost_usd(&usage_of(event), price));
    priced.cost_usd = computed.or(event.cost_usd.filter(|c| c.is_finite() && *c >= 0.0));
    priced
}

/// How a total was paid for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TotalBilling {
    /// Every call was metered (or there were no calls).
    #[default]
    Metered,
    /// Every call was subscription-billed.
    Subscription,
    /// Both kinds.
    Mixed,
}

/// The sums of one group of calls. Token sums cover calls that reported them (`None` when none
/// did); `cost_usd` covers priced calls only (`None` when none was priced), so with
/// `calls_without_usage` or `calls_unpriced` non-zero it is a lower bound.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageBucket {
    /// Every call, with or without usage.
    pub calls: u64,
    /// Sum of prompt tokens.
    pub prompt_tokens: Option<u64>,
    /// Sum of completion tokens.
    pub completion_tokens: Option<u64>,
    /// Sum of cached input tokens.
    pub cached_input_tokens: Option<u64>,
    /// Sum of cache write tokens.
    pub cache_write_tokens: Option<u64>,
    /// Sum of reasoning tokens.
    pub reasoning_tokens: Option<u64>,
    /// Sum of priced calls' cost; `None`, never 0.0, when no call was priced.
    pub cost_usd: Option<f64>,
    /// Calls whose provider reported no usage.
    pub calls_without_usage: u64,
    /// Metered calls with no cost.
    pub calls_unpriced: u64,
    /// Subscription-billed calls (never priced).
    pub calls_subscription: u64,
    /// metered, subscription or mixed.
    pub billing: TotalBilling,
}

impl UsageBucket {
    /// Adds one event to the bucket.
    pub fn add(&mut self, event: &UsageEvent) {
        self.calls += 1;
        self.prompt_tokens = add(self.prompt_tokens, event.prompt_tokens);
        self.completion_tokens = add(self.completion_tokens, event.completion_tokens);
        self.cached_input_tokens = add(self.cached_input_tokens, event.cached_input_tokens);
        self.cache_write_tokens = add(self.cache_write_tokens, event.cache_write_tokens);
        self.reasoning_tokens = add(self.reasoning_tokens, event.reasoning_tokens);
        if usage_of(event).is_unknown() {
            self.calls_without_usage += 1;
        }
        if event.billing == Billing::Subscription {
            self.calls_subscription += 1;
        } else {
            match event.cost_usd.filter(|c| c.is_finite()) {
                Some(cost) => self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + cost),
                None => self.calls_unpriced += 1,
            }
        }
        self.billing = match (self.calls_subscription, self.calls - self.calls_subscription) {
            (0, _) => TotalBilling::Metered,
            (_, 0) => TotalBilling::Subscription,
            _ => TotalBilling::Mixed,
        };
    }
}

/// The key used for calls with no phase or role in the breakdowns, so no call is dropped.
pub const UNATTRIBUTED: &str = "unattributed";

/// Totals over a set of usage events, with breakdowns by phase, role and `provider:model`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageTotals {
    /// The sums over every event.
    #[serde(flatten)]
    pub total: UsageBucket,
    /// Per phase (calls without a phase under `unattributed`).
    pub by_phase: BTreeMap<String, UsageBucket>,
    /// Per role (calls without a role under `unattributed`).
    pub by_role: BTreeMap<String, UsageBucket>,
    /// Per `provider:model`.
    pub by_model: BTreeMap<String, UsageBucket>,
}

impl UsageTotals {
    /// Sums events as recorded (price them first with [`price_event`]).
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a UsageEvent>) -> Self {
        let mut totals = Self::default();
        for event in events {
            totals.total.add(event);
            let key = |v: &Option<String>| v.clone().unwrap_or_else(|| UNATTRIBUTED.to_owned());
            totals.by_phase.entry(key(&event.phase)).or_default().add(event);
            totals.by_role.entry(key(&event.role)).or_default().add(event);
            totals
                .by_model
                .entry(format!("{}:{}", event.provider, event.model))
                .or_default()
                .add(event);
        }
        totals
    }
}

/// Reads the per-run spend threshold from an env map; unset means the default, a value that is
/// not a positive finite number is an error naming the variable.
pub fn spend_threshold_from_env(env: &BTreeMap<String, String>) -> Result<f64, String> {
    match env.get(RUN_SPEND_ALERT_ENV) {
        None => Ok(DEFAULT_RUN_SPEND_ALERT_USD),
        Some(raw) => raw
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v > 0.0)
            .ok_or_else(|| format!("{RUN_SPEND_ALERT_ENV} must be a positive number of USD, got '{raw}'")),
    }
}

/// A run's priced spend crossed the threshold (metric `metaforge_llm_run_spend_exceeded_total`,
/// log `llm_run_spend_exceeded`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SpendCrossing {
    /// The run.
    pub run_id: String,
    /// The role of the call that crossed it (the metric's label).
    pub role: Option<String>,
    /// The run's priced spend after that call.
    pub spend_usd: f64,
    /// The threshold crossed.
    pub threshold_usd: f64,
}

/// Tracks priced spend per run and fires once per run when it passes the threshold. Only priced
/// cost counts; a run with no priced call has an unknown total, which is neither zero nor over.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunSpendTracker {
    threshold_usd: f64,
    spend: BTreeMap<String, f64>,
    fired: BTreeSet<String>,
}

impl RunSpendTracker {
    /// A tracker with the given threshold in USD.
    pub fn new(threshold_usd: f64) -> Self {
        Self {
            threshold_usd,
            spend: BTreeMap::new(),
            fired: BTreeSet::new(),
        }
    }

    /// The run's priced spend so far; `None` when no call of it was priced.
    pub fn spend(&self, run_id: &str) -> Option<f64> {
        self.spend.get(run_id).copied()
    }

    /// Records one (priced) event; returns the crossing the first time the run passes the threshold.
    pub fn record(&mut self, event: &UsageEvent) -> Option<SpendCrossing> {
        let run_id = event.run_id.as_ref()?;
        if event.billing == Billing::Subscription {
            return None;
        }
        let cost = event.cost_usd.filter(|c| c.is_finite())?;
        let spend = self.spend.entry(run_id.clone()).or_insert(0.0);
        *spend += cost;
        let spend_usd = *spend;
        if spend_usd > self.threshold_usd && self.fired.insert(run_id.clone()) {
            return Some(SpendCrossing {
                run_id: run_id.clone(),
                role: event.role.clone(),
                spend_usd,
                threshold_usd: self.threshold_usd,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_price_table_parses_and_prices_the_seed_models() {
        let table = PriceTable::shipped().unwrap();
        for model in [
            "claude-haiku-4-5-20251001",
            "claude-opus-4-8",
            "claude-sonnet-4-5",
            "gpt-4o",
            "gpt-4o-mini",
            "gpt-5",
            "gemini-2.5-pro",
            "gemini-2.5-flash",
        ] {
            assert!(table.price_for(model).is_some(), "{model} has no price");
        }
        assert!(table.price_for("openai/gpt-4o").is_some());
        assert!(table.price_for("no-such-model").is_none());
    }
}
