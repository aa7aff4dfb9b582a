//! The model port the loop owns: one call with its role and usage scope, and what the serving
//! model can do (native tools, context window, tool cap).
//!
//! The provider pipeline (routing, retries, fallbacks, credential rotation, usage recording)
//! implements [`TurnModel`] in the composition; [`ProviderModels`] is the plain implementation
//! over `metaforge_ports::LlmProvider` adapters (no retry, no fallback), for a deployment or a
//! test that wires providers directly.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_domain::providers::{ProviderInfo, model_capability};
use metaforge_domain::usage::{PriceTable, normalize_usage, price_event};
use metaforge_ports::{
    ApiFamily, Billing, Clock, LlmProvider, LlmRequest, LlmResponse, ProviderError, UsageEvent, UsageStore,
};
use serde::{Deserialize, Serialize};

/// Who a model call is attributed to (FORGE-476): every call the loop makes carries one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageScope {
    /// The design-flow run the call serves, when it serves one.
    pub run_id: Option<String>,
    /// The phase within that run.
    pub phase: Option<String>,
    /// The routing role (chat, planner, generator, evaluator, phase_brain, …).
    pub role: Option<String>,
    /// Who asked (the caller class or client name).
    pub caller: Option<String>,
}

/// One model call as the loop asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCall {
    /// The routing role whose chain serves the call.
    pub role: String,
    /// An explicit provider to serve it (the evaluator on a provider other than the
    /// generator's); `None` = the role's primary.
    pub provider: Option<String>,
    /// The attribution of the call's usage.
    pub scope: UsageScope,
    /// The chat thread or run the call belongs to (credential pinning, prompt caching).
    pub session_id: String,
}

/// What the model serving a role can do, read before the call so the loop can shape it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelProfile {
    /// Provider id.
    pub provider: String,
    /// Model name.
    pub model: String,
    /// The provider's API family.
    pub family: ApiFamily,
    /// The adapter parses native tool calls; without it the loop speaks JSON-ReAct.
    pub native_tools: bool,
    /// The model's context window in tokens (within-turn folding starts at 60 % of it).
    pub context_window_tokens: usize,
    /// The provider's tool-array cap (`metaforge_domain::providers::max_tools_for`).
    pub max_tools: Option<usize>,
}

impl ModelProfile {
    /// The profile of `model` on `provider` by the domain's capability rules
    /// (`metaforge_domain::providers::model_capability`: native tool calls, context window, tool
    /// cap), so every implementation of [`TurnModel`] describes a model the same way.
    pub fn for_model(provider: &ProviderInfo, model: &str) -> Self {
        let capability = model_capability(provider, model);
        Self {
            provider: provider.id.to_owned(),
            model: model.to_owned(),
            family: provider.family,
            native_tools: capability.native_tools,
            context_window_tokens: capability.context_window_tokens,
            max_tools: capability.max_tools,
        }
    }
}

/// A served answer with its provenance and its usage (unknown counts `None`, never 0).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelAnswer {
    /// The answer.
    pub response: LlmResponse,
    /// Provider that served it.
    pub provider: String,
    /// Model that served it.
    pub model: String,
    /// The call's usage event, attributed to the call's scope.
    pub usage: UsageEvent,
}

/// Why a model call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// No provider is configured for the role (or the named provider is not wired).
    #[error("no model serves role '{role}'{}: {reason}", provider.as_ref().map(|p| format!(" on provider '{p}'")).unwrap_or_default())]
    NotConfigured {
        /// The role.
        role: String,
        /// The provider asked for, when one was.
        provider: Option<String>,
        /// Why, naming what a person sets to fix it.
        reason: String,
    },
    /// The provider (or every provider of the chain) failed.
    #[error("model call for role '{role}' failed: {message}")]
    Failed {
        /// The role.
        role: String,
        /// What went wrong, in the provider's words.
        message: String,
    },
}

/// The model port of the loop.
///
/// `profile` and `providers` are async because the route a role takes is resolved when it is
/// asked (a durable selection stored a second ago is honoured), which reads a store.
#[async_trait]
pub trait TurnModel: Send + Sync {
    /// The profile of the model that serves `role` (on `provider` when named).
    async fn profile(&self, role: &str, provider: Option<&str>) -> Result<ModelProfile, ModelError>;

    /// Every provider able to serve `role`, primary first (the evaluator picks one other than the
    /// generator's from here).
    async fn providers(&self, role: &str) -> Vec<String>;

    /// One complete answer, its usage attributed to `call.scope`.
    async fn complete(&self, call: &ModelCall, request: LlmRequest) -> Result<ModelAnswer, ModelError>;
}

/// One provider and model wired for a role.
#[derive(Clone)]
pub struct ModelTarget {
    /// What it can do.
    pub profile: ModelProfile,
    /// The family adapter.
    pub adapter: Arc<dyn LlmProvider>,
    /// Subscription-billed providers are never priced per call.
    pub billing: Billing,
}

impl std::fmt::Debug for ModelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelTarget")
            .field("profile", &self.profile)
            .field("billing", &self.billing)
            .finish_non_exhaustive()
    }
}

/// [`TurnModel`] over provider adapters: each role has an ordered list of targets; a call goes
/// to the named provider or the first target, with no retry and no fallback (the pipeline's
/// job). Usage is normalised by the domain's rule, priced when a price table is set, and
/// recorded into the usage store when one is set.
pub struct ProviderModels {
    roles: BTreeMap<String, Vec<ModelTarget>>,
    usage: Option<(Arc<dyn UsageStore>, Arc<dyn Clock>)>,
    prices: Option<PriceTable>,
}

impl std::fmt::Debug for ProviderModels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderModels")
            .field("roles", &self.roles)
            .finish_non_exhaustive()
    }
}

impl ProviderModels {
    /// Targets per role, primary first.
    pub fn new(roles: BTreeMap<String, Vec<ModelTarget>>) -> Self {
        Self {
            roles,
            usage: None,
            prices: None,
        }
    }

    /// Records every call's usage event into `store`, stamped from `clock`.
    pub fn with_usage_store(mut self, store: Arc<dyn UsageStore>, clock: Arc<dyn Clock>) -> Self {
        self.usage = Some((store, clock));
        self
    }

    /// Prices every usage event from `prices`.
    pub fn with_price_table(mut self, prices: PriceTable) -> Self {
        self.prices = Some(prices);
        self
    }

    fn target(&self, role: &str, provider: Option<&str>) -> Result<&ModelTarget, ModelError> {
        let not_configured = |reason: String| ModelError::NotConfigured {
            role: role.to_owned(),
            provider: provider.map(str::to_owned),
            reason,
        };
        let unwired = || {
            not_configured(format!(
                "no target is wired for role '{role}': add one to the role's list given to ProviderModels::new"
            ))
        };
        let targets = self.roles.get(role).ok_or_else(unwired)?;
        match provider {
            None => targets.first().ok_or_else(unwired),
            Some(p) => targets.iter().find(|t| t.profile.provider == p).ok_or_else(|| {
                not_configured(format!(
                    "provider '{p}' is not among the role's targets ({})",
                    targets
                        .iter()
                        .map(|t| t.profile.provider.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }),
        }
    }
}

#[async_trait]
impl TurnModel for ProviderModels {
    async fn profile(&self, role: &str, provider: Option<&str>) -> Result<ModelProfile, ModelError> {
        self.target(role, provider).map(|t| t.profile.clone())
    }

    async fn providers(&self, role: &str) -> Vec<String> {
        self.roles
            .get(role)
            .map(|ts| ts.iter().map(|t| t.profile.provider.clone()).collect())
            .unwrap_or_default()
    }

    async fn complete(&self, call: &ModelCall, mut request: LlmRequest) -> Result<ModelAnswer, ModelError> {
        let target = self.target(&call.role, call.provider.as_deref())?;
        request.model.clone_from(&target.profile.model);
        let response = target
            .adapter
            .complete(&request, None)
            .await
            .map_err(|e: ProviderError| ModelError::Failed {
                role: call.role.clone(),
                message: e.to_string(),
            })?;
        let mut event = UsageEvent {
            run_id: call.scope.run_id.clone(),
            phase: call.scope.phase.clone(),
            role: call.scope.role.clone().or_else(|| Some(call.role.clone())),
            caller: call.scope.caller.clone(),
            provider: target.profile.provider.clone(),
            model: response
                .model
                .clone()
                .unwrap_or_else(|| target.profile.model.clone()),
            billing: target.billing,
            ..UsageEvent::default()
        };
        if let Some(raw) = &response.usage {
            normalize_usage(raw.family, &raw.raw).apply_to(&mut event);
        }
        if let Some(prices) = &self.prices {
            event = price_event(&event, prices);
        }
        if let Some((store, clock)) = &self.usage {
            let mut stamped = event.clone();
            stamped.at = Some(clock.now());
            if let Err(e) = store.record(stamped).await {
                tracing::warn!(event = "usage_record_failed", error = %e, "could not record a model call's usage");
            }
        }
        Ok(ModelAnswer {
            provider: target.profile.provider.clone(),
            model: event.model.clone(),
            response,
            usage: event,
        })
    }
}
