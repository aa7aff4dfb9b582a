//! The provider pipeline as the agent loop's model port: [`PipelineTurnModel`] implements
//! `metaforge_agent::TurnModel` over [`ProviderPipeline`] and [`RouteResolver`], so every model
//! call a turn makes (chat, phase brain, planner, generator, evaluator) is routed by the domain's
//! rules as they resolve now, retried, rotated and fallen back by the pipeline, and recorded by
//! the pipeline's usage sink attributed to the turn's run, phase, role and caller.
//!
//! What the loop reads about a model (native tool calls, context window, tool cap) is the
//! domain's `providers::model_capability` through `ModelProfile::for_model`, unless the
//! deployment forces the loop (`METAFORGE_AGENT_LOOP`, given as a [`LoopMode`]).

use std::sync::Arc;

use async_trait::async_trait;
use metaforge_agent::{LoopMode, ModelAnswer, ModelCall, ModelError, ModelProfile, TurnModel};
use metaforge_domain::providers::{base_url_env_var, model_family_mismatch, parse_route, resolve_provider};
use metaforge_domain::routing::{MODEL_ROUTES_PATH_ENV, env_var_for_role};
use metaforge_ports::LlmRequest;

use crate::pipeline::{
    CallSpec, Candidate, PipelineError, ProviderPipeline, UsageScope, no_pipeline_reason, with_usage_scope,
};
use crate::routing::{RouteFailure, RouteResolver};

/// The session id used to resolve a profile or a role's providers (no call is made with it, so
/// no credential is pinned to it).
const PROFILE_SESSION: &str = "turn-model-profile";

/// `metaforge_agent::TurnModel` over the provider pipeline and the routing resolver.
///
/// - A call with no explicit provider takes the role's route as the routing rules resolve it
///   now (`RouteResolver::role_call`), the role's fallback chain behind it.
/// - An explicit `ModelCall::provider` is honoured: `provider:model` as written, or a bare
///   provider id served with the model the role's chain gives that provider; either is checked
///   against the provider's family (`model_family_mismatch`) before anything is sent.
/// - Every call runs inside the pipeline's usage scope built from `ModelCall::scope`, so the
///   pipeline's sink records it attributed; the returned answer carries the same record.
/// - No pipeline, no route, an unknown or unwired provider → `ModelError::NotConfigured` naming
///   what to set; every candidate failing → `ModelError::Failed` listing every attempt.
pub struct PipelineTurnModel {
    pipeline: Option<Arc<ProviderPipeline>>,
    routes: Arc<RouteResolver>,
    loop_mode: LoopMode,
}

impl std::fmt::Debug for PipelineTurnModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineTurnModel")
            .field("pipeline", &self.pipeline.is_some())
            .field("loop_mode", &self.loop_mode)
            .finish_non_exhaustive()
    }
}

impl PipelineTurnModel {
    /// The model port over `pipeline` (`None` when no provider is configured: every call then
    /// answers `NotConfigured` naming what to set, as the gateway's routes do) and `routes`.
    pub fn new(pipeline: Option<Arc<ProviderPipeline>>, routes: Arc<RouteResolver>) -> Self {
        Self {
            pipeline,
            routes,
            loop_mode: LoopMode::Auto,
        }
    }

    /// Forces the loop for every turn this model serves (the deployment's `METAFORGE_AGENT_LOOP`,
    /// parsed by `LoopMode::parse_setting`): `Native` or `React` override the model's capability
    /// in every profile; `Auto` (the default) keeps the domain's rule. A turn's own
    /// `TurnConfig::mode` still wins over both.
    #[must_use]
    pub fn with_loop_mode(mut self, mode: LoopMode) -> Self {
        self.loop_mode = mode;
        self
    }

    /// The loop setting profiles are reported under.
    pub fn loop_mode(&self) -> LoopMode {
        self.loop_mode
    }

    fn pipeline(&self, role: &str, provider: Option<&str>) -> Result<&Arc<ProviderPipeline>, ModelError> {
        self.pipeline.as_ref().ok_or_else(|| ModelError::NotConfigured {
            role: role.to_owned(),
            provider: provider.map(str::to_owned),
            reason: no_pipeline_reason(role),
        })
    }

    /// The candidate `role` is served by now (on `provider` when named), checked as wired.
    async fn candidate(
        &self,
        pipeline: &ProviderPipeline,
        role: &str,
        provider: Option<&str>,
        session_id: &str,
    ) -> Result<Candidate, ModelError> {
        let candidate = match provider {
            None => self.routed(role, session_id).await?,
            Some(asked) => self.explicit(pipeline, role, asked, session_id).await?,
        };
        if pipeline.provider(&candidate.provider).is_none() {
            return Err(ModelError::NotConfigured {
                role: role.to_owned(),
                provider: Some(candidate.provider.clone()),
                reason: unwired_reason(&candidate.provider),
            });
        }
        Ok(candidate)
    }

    /// The role's route as the routing rules resolve it now.
    async fn routed(&self, role: &str, session_id: &str) -> Result<Candidate, ModelError> {
        let spec = self
            .routes
            .role_call(role, session_id.to_owned())
            .await
            .map_err(|e| route_error(role, e))?;
        spec.explicit.ok_or_else(|| ModelError::NotConfigured {
            role: role.to_owned(),
            provider: None,
            reason: format!("the routing rules gave no provider:model; {}", route_hint(role)),
        })
    }

    /// An explicit provider: `provider:model`, or a bare provider id served with the model the
    /// role's chain gives it; family-checked either way.
    async fn explicit(
        &self,
        pipeline: &ProviderPipeline,
        role: &str,
        asked: &str,
        session_id: &str,
    ) -> Result<Candidate, ModelError> {
        let not_configured = |reason: String| ModelError::NotConfigured {
            role: role.to_owned(),
            provider: Some(asked.to_owned()),
            reason,
        };
        let (provider_name, model) = if asked.contains(':') {
            let route = parse_route(asked).map_err(|e| not_configured(e.to_string()))?;
            (route.provider, Some(route.model))
        } else {
            (asked.trim().to_owned(), None)
        };
        let info = resolve_provider(&provider_name).map_err(|e| {
            not_configured(format!(
                "{e}; name a provider id or alias of the registry (`metaforge providers list`)"
            ))
        })?;
        let model = match model {
            Some(model) => model,
            None => {
                let chain = self.chain(pipeline, role, session_id).await;
                match chain.iter().find(|c| c.provider == info.id) {
                    Some(candidate) => candidate.model.clone(),
                    None => {
                        return Err(not_configured(format!(
                            "provider '{}' is not in role '{role}''s chain ({}); name it as provider:model, or \
                             add it behind the role's route (METAFORGE_FALLBACK_PROVIDERS)",
                            info.id,
                            chain
                                .iter()
                                .map(ToString::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        )));
                    }
                }
            }
        };
        if let Some(reason) = model_family_mismatch(info, &model) {
            return Err(not_configured(reason));
        }
        Ok(Candidate {
            provider: info.id.to_owned(),
            model,
        })
    }

    /// Every candidate of `role` in order: the route resolved now, then the role's chain behind
    /// it (the role's configured chain alone when the route does not resolve).
    async fn chain(&self, pipeline: &ProviderPipeline, role: &str, session_id: &str) -> Vec<Candidate> {
        let routed = self.routes.role_call(role, session_id.to_owned()).await;
        let spec = match routed {
            Ok(spec) => spec,
            Err(error) => {
                tracing::debug!(role, error = %error, "role has no route now; listing its configured chain");
                CallSpec {
                    role: role.to_owned(),
                    explicit: None,
                    session_id: session_id.to_owned(),
                }
            }
        };
        pipeline
            .chain(&spec)
            .map(|chain| chain.candidates)
            .unwrap_or_default()
    }

    fn profile_of(&self, candidate: &Candidate) -> Result<ModelProfile, String> {
        let info = resolve_provider(&candidate.provider).map_err(|e| e.to_string())?;
        let mut profile = ModelProfile::for_model(info, &candidate.model);
        match self.loop_mode {
            LoopMode::Auto => {}
            LoopMode::Native => profile.native_tools = true,
            LoopMode::React => profile.native_tools = false,
        }
        Ok(profile)
    }
}

#[async_trait]
impl TurnModel for PipelineTurnModel {
    async fn profile(&self, role: &str, provider: Option<&str>) -> Result<ModelProfile, ModelError> {
        let pipeline = self.pipeline(role, provider)?;
        let candidate = self.candidate(pipeline, role, provider, PROFILE_SESSION).await?;
        self.profile_of(&candidate)
            .map_err(|reason| ModelError::NotConfigured {
                role: role.to_owned(),
                provider: Some(candidate.provider.clone()),
                reason,
            })
    }

    async fn providers(&self, role: &str) -> Vec<String> {
        let Some(pipeline) = self.pipeline.as_ref() else {
            return Vec::new();
        };
        let mut providers: Vec<String> = Vec::new();
        for candidate in self.chain(pipeline, role, PROFILE_SESSION).await {
            if !providers.contains(&candidate.provider) {
                providers.push(candidate.provider);
            }
        }
        providers
    }

    async fn complete(&self, call: &ModelCall, request: LlmRequest) -> Result<ModelAnswer, ModelError> {
        let asked = call.provider.as_deref();
        let pipeline = self.pipeline(&call.role, asked)?;
        let candidate = self
            .candidate(pipeline, &call.role, asked, &call.session_id)
            .await?;
        let spec = CallSpec {
            role: call.role.clone(),
            explicit: Some(candidate),
            session_id: call.session_id.clone(),
        };
        let scope = UsageScope {
            role: call.scope.role.clone().or_else(|| Some(call.role.clone())),
            ..call.scope.clone()
        };
        let (served, usage) = with_usage_scope(scope, pipeline.complete_accounted(&spec, request))
            .await
            .map_err(|e| pipeline_error(&call.role, asked, e))?;
        Ok(ModelAnswer {
            response: served.value,
            provider: served.provider,
            model: served.model,
            usage: usage.event,
        })
    }
}

/// What a person sets to give `role` a route.
fn route_hint(role: &str) -> String {
    format!(
        "set {}=provider:model, a route for '{role}' in the file {MODEL_ROUTES_PATH_ENV} names, or a default \
         (METAFORGE_LLM_PROVIDER and METAFORGE_LLM_MODEL)",
        env_var_for_role(role)
    )
}

/// Why `provider` cannot be called from this process, naming what to set.
fn unwired_reason(provider: &str) -> String {
    format!(
        "provider '{provider}' is not configured in this process: set its key (`metaforge providers list` names \
         it; a local runtime needs {}) and restart",
        base_url_env_var(provider)
    )
}

fn route_error(role: &str, error: RouteFailure) -> ModelError {
    match error {
        RouteFailure::NoRoute { reason, .. } => ModelError::NotConfigured {
            role: role.to_owned(),
            provider: None,
            reason: format!("{reason}; {}", route_hint(role)),
        },
        RouteFailure::Store(e) => ModelError::Failed {
            role: role.to_owned(),
            message: format!("the durable harness selection could not be read: {e}"),
        },
    }
}

fn pipeline_error(role: &str, asked: Option<&str>, error: PipelineError) -> ModelError {
    match error {
        PipelineError::Config(e) => ModelError::NotConfigured {
            role: role.to_owned(),
            provider: asked.map(str::to_owned),
            reason: format!("{e}; {}", route_hint(role)),
        },
        PipelineError::ProviderNotWired(provider) => ModelError::NotConfigured {
            role: role.to_owned(),
            reason: unwired_reason(&provider),
            provider: Some(provider),
        },
        PipelineError::Credentials(message) => ModelError::Failed {
            role: role.to_owned(),
            message: format!("the credential store failed: {message}"),
        },
        failed @ PipelineError::AllProvidersFailed { .. } => ModelError::Failed {
            role: role.to_owned(),
            message: failed.to_string(),
        },
    }
}
