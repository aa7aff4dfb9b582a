//! One model call's usage, as the provider pipeline records it and the usage store keeps it.

use serde::{Deserialize, Serialize};

/// How a call is paid for. Subscription calls have no per-call price and are never priced at 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Billing {
    /// Priced per token from the price table.
    #[default]
    Metered,
    /// Covered by a subscription (openai-codex via ChatGPT).
    Subscription,
}

/// The usage of one model call. Unknown counts are `None`, never 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageEvent {
    /// The design-flow run the call served, when it served one.
    #[serde(default)]
    pub run_id: Option<String>,
    /// The phase within that run.
    #[serde(default)]
    pub phase: Option<String>,
    /// The routing role (chat, phase_brain, flow_generator, …).
    #[serde(default)]
    pub role: Option<String>,
    /// Who asked (a caller class or client name).
    #[serde(default)]
    pub caller: Option<String>,
    /// Provider id that served the call.
    pub provider: String,
    /// Model that served the call.
    pub model: String,
    /// Full prompt tokens including cached reads and cache writes.
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    /// Prompt tokens read from the provider's cache.
    #[serde(default)]
    pub cached_input_tokens: Option<u64>,
    /// Prompt tokens written to the provider's cache.
    #[serde(default)]
    pub cache_write_tokens: Option<u64>,
    /// Reasoning tokens (part of completion where the provider reports them).
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
    /// Cost in USD; `None` when the model has no price or the call is subscription-billed.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// Metered or subscription.
    #[serde(default)]
    pub billing: Billing,
    /// When the call finished, RFC 3339; set by the recorder from the clock port.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub at: Option<crate::clock::Timestamp>,
}
