//! The provider pipeline (Phase 1, FORGE-468, MET-551, FORGE-476, FORGE-478): resolves a role's
//! ordered candidates, retries each under a [`RetryPolicy`], rotates credentials per session,
//! falls through to the next candidate, raises the fallback alarm, records one usage event per
//! call and returns served-by provenance with every answer.
//!
//! Streams retry or fall back only before the first event reached the caller; after that a cut
//! stream ends with the adapter's typed error, because the caller has already acted on output.

pub mod alarm;
pub mod caching;
pub mod retry;
pub mod rotation;
pub mod slots;
pub mod store_sink;
pub mod usage;

use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use metaforge_domain::usage::{PriceTable, normalize_usage, price_event};
use metaforge_ports::{
    Billing, Credential, LlmEventStream, LlmProvider, LlmRequest, LlmResponse, ProviderError,
    ProviderErrorKind, RawUsage, StreamEvent, UsageEvent,
};

pub use alarm::{FallbackAlarm, FallbackReason, FallbackRecord};
pub use caching::layout_for_caching;
pub use retry::RetryPolicy;
pub use rotation::CredentialRotor;
pub use slots::{Candidate, DroppedCandidate, ResolvedChain, RoleModelSlots, SlotError, resolve_chain};
pub use store_sink::{StoreSink, USAGE_BATCH_MAX, USAGE_COMMIT_WINDOW};
pub use usage::{CallUsage, UsageScope, UsageSink, current_usage_scope, spawn_in_scope, with_usage_scope};

/// Why nothing can serve `role` when no pipeline runs, naming what a person sets to fix it.
pub fn no_pipeline_reason(role: &str) -> String {
    format!(
        "no provider pipeline runs in this process: set a provider's key (for example OPENAI_API_KEY or \
         ANTHROPIC_API_KEY; `metaforge providers list` names each provider's) and {}=provider:model (or a \
         routes file at {}), then restart",
        metaforge_domain::routing::env_var_for_role(role),
        metaforge_domain::routing::MODEL_ROUTES_PATH_ENV,
    )
}

/// A provider the pipeline can call: its canonical id, adapter and billing.
#[derive(Clone)]
pub struct ProviderEntry {
    /// Canonical provider id (as in routes).
    pub id: String,
    /// The family adapter bound to this provider's base URL.
    pub adapter: Arc<dyn LlmProvider>,
    /// Subscription-billed providers are never priced per call.
    pub billing: Billing,
}

impl std::fmt::Debug for ProviderEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderEntry")
            .field("id", &self.id)
            .field("family", &self.adapter.family())
            .field("billing", &self.billing)
            .finish()
    }
}

/// What one call asks for: a role, optionally an explicit provider/model, and the session whose
/// pinned credentials it uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSpec {
    /// Routing role (chat, phase_brain, flow_generator, …).
    pub role: String,
    /// An explicit per-call provider/model; it goes first, the role's chain stays behind it.
    pub explicit: Option<Candidate>,
    /// Session id for credential pinning.
    pub session_id: String,
}

/// One failed attempt, kept for `AllProvidersFailed` and provenance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Provider id.
    pub provider: String,
    /// Model.
    pub model: String,
    /// 1-based attempt number at this provider.
    pub attempt: u32,
    /// Credential id used, when one was.
    pub credential: Option<String>,
    /// What failed.
    pub error: ProviderError,
}

impl std::fmt::Display for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} #{}", self.provider, self.model, self.attempt)?;
        if let Some(c) = &self.credential {
            write!(f, " [credential {c}]")?;
        }
        write!(f, " → {}", self.error)
    }
}

/// Why a pipeline call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    /// The role or the explicit candidate cannot be served by configuration.
    #[error(transparent)]
    Config(#[from] SlotError),
    /// A candidate names a provider with no adapter wired in.
    #[error("provider '{0}' is not configured in this process")]
    ProviderNotWired(String),
    /// The credential store could not be read or written (fail closed).
    #[error("credential store: {0}")]
    Credentials(String),
    /// Every candidate failed; every attempt is listed.
    #[error("all providers failed for {asked}: {}", .attempts.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    AllProvidersFailed {
        /// The role.
        role: String,
        /// What the caller asked for, in its own words: `provider:model` when it named one
        /// explicitly, `role 'chat'` when it named a role, so the error never names a role the
        /// user did not ask for.
        asked: String,
        /// Every attempt, in order.
        attempts: Vec<Attempt>,
    },
}

/// An answer with its provenance: who served it, with which credential, after which failures.
#[derive(Debug)]
pub struct Served<T> {
    /// The answer.
    pub value: T,
    /// Provider that served.
    pub provider: String,
    /// Model that served.
    pub model: String,
    /// Credential id used.
    pub credential: Option<String>,
    /// Failed attempts before the serving one.
    pub failed_attempts: Vec<Attempt>,
    /// Set when a fallback served the role.
    pub fallback: Option<FallbackRecord>,
}

/// Which call the pipeline is waiting on, for a caller that shows progress on long waits (the
/// CLI on a terminal). Published before every attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallProgress {
    /// Provider being called.
    pub provider: String,
    /// Model being called.
    pub model: String,
    /// 1-based attempt at this provider.
    pub attempt: u32,
    /// Most attempts this provider gets (retries included; credential rotations may add more).
    pub max_attempts: u32,
    /// 1-based position of this provider in the chain.
    pub candidate: usize,
    /// Providers in the chain.
    pub candidates: usize,
}

/// The pipeline.
pub struct ProviderPipeline {
    providers: BTreeMap<String, ProviderEntry>,
    slots: RoleModelSlots,
    policy: RetryPolicy,
    rotor: CredentialRotor,
    alarm: Arc<FallbackAlarm>,
    usage: Arc<dyn UsageSink>,
    prices: Option<Arc<PriceTable>>,
    progress: Option<tokio::sync::watch::Sender<Option<CallProgress>>>,
}

impl std::fmt::Debug for ProviderPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderPipeline")
            .field("providers", &self.providers.keys().collect::<Vec<_>>())
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

type FirstEvent = (Result<StreamEvent, ProviderError>, LlmEventStream);

impl ProviderPipeline {
    /// A pipeline over wired providers and resolved role slots. Every candidate of every role
    /// must name a wired provider, so a missing adapter is a configuration error, not a 3am page.
    pub fn new(
        providers: Vec<ProviderEntry>,
        slots: RoleModelSlots,
        policy: RetryPolicy,
        rotor: CredentialRotor,
        alarm: Arc<FallbackAlarm>,
        usage: Arc<dyn UsageSink>,
    ) -> Result<Self, PipelineError> {
        let providers: BTreeMap<String, ProviderEntry> =
            providers.into_iter().map(|p| (p.id.clone(), p)).collect();
        if let Some(missing) = slots
            .roles()
            .flat_map(|(_, chain)| chain.candidates.iter())
            .find(|c| !providers.contains_key(&c.provider))
        {
            return Err(PipelineError::ProviderNotWired(missing.provider.clone()));
        }
        Ok(Self {
            providers,
            slots,
            policy,
            rotor,
            alarm,
            usage,
            prices: None,
            progress: None,
        })
    }

    /// Publishes every attempt to `progress` (the CLI's "waiting on …" line).
    pub fn with_progress(mut self, progress: tokio::sync::watch::Sender<Option<CallProgress>>) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Prices every usage event from `prices` (models missing from it get cost `None`).
    pub fn with_price_table(mut self, prices: PriceTable) -> Self {
        self.prices = Some(Arc::new(prices));
        self
    }

    /// The fallback alarm (for the providers view: `last_fallback`, `fallback_count`).
    pub fn alarm(&self) -> &Arc<FallbackAlarm> {
        &self.alarm
    }

    /// The wired provider `id` (canonical), if this pipeline can call it.
    pub fn provider(&self, id: &str) -> Option<&ProviderEntry> {
        self.providers.get(id)
    }

    /// The candidates a call along `spec` would try, in order (the explicit one first, the role's
    /// chain behind it), checked as a call checks them: the agent loop lists a role's providers
    /// from here so the evaluator can pick one other than the generator's.
    pub fn chain(&self, spec: &CallSpec) -> Result<ResolvedChain, PipelineError> {
        self.chain_for(spec)
    }

    fn chain_for(&self, spec: &CallSpec) -> Result<ResolvedChain, PipelineError> {
        let role_chain = self.slots.chain(&spec.role).cloned();
        let chain = match (&spec.explicit, role_chain) {
            (None, Some(chain)) => chain,
            (None, None) => return Err(SlotError::EmptyRole(spec.role.clone()).into()),
            (Some(explicit), role_chain) => {
                let checked = resolve_chain(&spec.role, std::slice::from_ref(explicit))?;
                let mut candidates = checked.candidates;
                let mut dropped = checked.dropped;
                if let Some(chain) = role_chain {
                    for c in chain.candidates {
                        if !candidates.contains(&c) {
                            candidates.push(c);
                        }
                    }
                    dropped.extend(chain.dropped);
                }
                ResolvedChain {
                    configured_primary: checked.configured_primary,
                    candidates,
                    dropped,
                }
            }
        };
        if let Some(missing) = chain
            .candidates
            .iter()
            .find(|c| !self.providers.contains_key(&c.provider))
        {
            return Err(PipelineError::ProviderNotWired(missing.provider.clone()));
        }
        Ok(chain)
    }

    /// One complete answer for `spec`, laid out for prompt caching.
    pub async fn complete(
        &self,
        spec: &CallSpec,
        request: LlmRequest,
    ) -> Result<Served<LlmResponse>, PipelineError> {
        self.complete_accounted(spec, request)
            .await
            .map(|(served, _)| served)
    }

    /// [`Self::complete`], also returning the usage record the sink received for the call (the
    /// agent loop counts its token budget and reports a turn's usage from the same record).
    pub async fn complete_accounted(
        &self,
        spec: &CallSpec,
        request: LlmRequest,
    ) -> Result<(Served<LlmResponse>, CallUsage), PipelineError> {
        let request = layout_for_caching(request);
        let served = self
            .run_chain(spec, &request, |adapter, request, credential| {
                async move { adapter.complete(&request, credential.as_ref()).await }.boxed()
            })
            .await?;
        let base = self.usage_event(spec, &served.provider, &served.model);
        let usage = account(base, served.value.usage.clone(), self.prices.as_deref());
        self.usage.record(usage.clone());
        Ok((served, usage))
    }

    /// A stream of events for `spec`. Retries and fallbacks happen only until the first event.
    pub async fn stream(
        &self,
        spec: &CallSpec,
        request: LlmRequest,
    ) -> Result<Served<LlmEventStream>, PipelineError> {
        let request = layout_for_caching(request);
        let served = self
            .run_chain(spec, &request, |adapter, request, credential| {
                async move {
                    let mut events = adapter.stream(&request, credential.as_ref()).await?;
                    match events.next().await {
                        Some(Ok(first)) => Ok::<FirstEvent, ProviderError>((Ok(first), events)),
                        Some(Err(err)) => Err(err),
                        None => Err(ProviderError::new(
                            ProviderErrorKind::Transport,
                            "stream ended before its first event",
                        )),
                    }
                }
                .boxed()
            })
            .await?;
        let (first, rest) = served.value;
        let metered = MeteredStream {
            first: Some(first),
            inner: rest,
            recorder: Some(UsageRecorder {
                sink: Arc::clone(&self.usage),
                event: self.usage_event(spec, &served.provider, &served.model),
                raw: None,
                prices: self.prices.clone(),
            }),
        };
        Ok(Served {
            value: metered.boxed(),
            provider: served.provider,
            model: served.model,
            credential: served.credential,
            failed_attempts: served.failed_attempts,
            fallback: served.fallback,
        })
    }

    fn usage_event(&self, spec: &CallSpec, provider: &str, model: &str) -> UsageEvent {
        let scope = current_usage_scope().unwrap_or_default();
        UsageEvent {
            run_id: scope.run_id,
            phase: scope.phase,
            role: scope.role.or_else(|| Some(spec.role.clone())),
            caller: scope.caller,
            provider: provider.to_owned(),
            model: model.to_owned(),
            billing: self
                .providers
                .get(provider)
                .map_or(Billing::Metered, |p| p.billing),
            ..UsageEvent::default()
        }
    }

    async fn run_chain<T, F>(
        &self,
        spec: &CallSpec,
        request: &LlmRequest,
        call: F,
    ) -> Result<Served<T>, PipelineError>
    where
        F: Fn(
            Arc<dyn LlmProvider>,
            LlmRequest,
            Option<Credential>,
        ) -> BoxFuture<'static, Result<T, ProviderError>>,
    {
        let chain = self.chain_for(spec)?;
        let mut attempts: Vec<Attempt> = Vec::new();
        for (index, candidate) in chain.candidates.iter().enumerate() {
            let Some(entry) = self.providers.get(&candidate.provider) else {
                return Err(PipelineError::ProviderNotWired(candidate.provider.clone()));
            };
            let mut request = request.clone();
            request.model = candidate.model.clone();
            let mut credential = self
                .rotor
                .pinned(&spec.session_id, &candidate.provider)
                .await
                .map_err(|e| PipelineError::Credentials(e.to_string()))?;
            let mut tried: BTreeSet<String> = credential.iter().map(|c| c.id.clone()).collect();
            let mut retries_used = 0u32;
            let mut attempt_no = 0u32;
            loop {
                attempt_no += 1;
                if let Some(progress) = &self.progress {
                    progress.send_replace(Some(CallProgress {
                        provider: candidate.provider.clone(),
                        model: candidate.model.clone(),
                        attempt: attempt_no,
                        max_attempts: self.policy.api_max_retries.saturating_add(1).max(attempt_no),
                        candidate: index + 1,
                        candidates: chain.candidates.len(),
                    }));
                }
                let result = call(Arc::clone(&entry.adapter), request.clone(), credential.clone()).await;
                let err = match result {
                    Ok(value) => {
                        let fallback = self.fallback_for(spec, &chain, candidate, &attempts);
                        return Ok(Served {
                            value,
                            provider: candidate.provider.clone(),
                            model: candidate.model.clone(),
                            credential: credential.map(|c| c.id),
                            failed_attempts: attempts,
                            fallback,
                        });
                    }
                    Err(err) => err,
                };
                tracing::debug!(
                    provider = candidate.provider.as_str(),
                    model = candidate.model.as_str(),
                    attempt = attempt_no,
                    error = %err,
                    "harness_provider_attempt_failed"
                );
                attempts.push(Attempt {
                    provider: candidate.provider.clone(),
                    model: candidate.model.clone(),
                    attempt: attempt_no,
                    credential: credential.as_ref().map(|c| c.id.clone()),
                    error: err.clone(),
                });
                let rotates = matches!(err.kind, ProviderErrorKind::Auth | ProviderErrorKind::RateLimit);
                if let (true, Some(failed)) = (rotates, credential.as_ref()) {
                    let dead_reason = (err.kind == ProviderErrorKind::Auth)
                        .then(|| format!("{} at {}", err, candidate.provider));
                    let next = self
                        .rotor
                        .rotate(
                            &spec.session_id,
                            &candidate.provider,
                            failed,
                            dead_reason.as_deref(),
                            &tried,
                        )
                        .await
                        .map_err(|e| PipelineError::Credentials(e.to_string()))?;
                    if let Some(next) = next {
                        tried.insert(next.id.clone());
                        credential = Some(next);
                        continue;
                    }
                }
                if RetryPolicy::is_retryable(&err) && retries_used < self.policy.api_max_retries {
                    let wait = self
                        .policy
                        .backoff(retries_used, err.retry_after, fastrand::f64());
                    retries_used += 1;
                    tokio::time::sleep(wait).await;
                    continue;
                }
                break;
            }
        }
        Err(PipelineError::AllProvidersFailed {
            role: spec.role.clone(),
            asked: spec.explicit.as_ref().map_or_else(
                || format!("role '{}'", spec.role),
                |c| format!("{}:{}", c.provider, c.model),
            ),
            attempts,
        })
    }

    fn fallback_for(
        &self,
        spec: &CallSpec,
        chain: &ResolvedChain,
        served: &Candidate,
        attempts: &[Attempt],
    ) -> Option<FallbackRecord> {
        let primary = &chain.configured_primary;
        if served == primary {
            return None;
        }
        let dropped = chain.dropped.iter().find(|d| &d.candidate == primary);
        let primary_failure = attempts
            .iter()
            .rev()
            .find(|a| a.provider == primary.provider && a.model == primary.model);
        let (reason, primary_error) = match (dropped, primary_failure) {
            (Some(d), _) => (FallbackReason::ModelMismatch, d.reason.clone()),
            (None, Some(a)) if a.error.kind == ProviderErrorKind::CapabilityUnsupported => {
                (FallbackReason::CapabilityUnsupported, a.error.to_string())
            }
            (None, Some(a)) => (FallbackReason::CallFailed, a.error.to_string()),
            (None, None) => (FallbackReason::CallFailed, "primary was not attempted".to_owned()),
        };
        let record = FallbackRecord {
            role: spec.role.clone(),
            primary: primary.provider.clone(),
            primary_model: primary.model.clone(),
            fallback: served.provider.clone(),
            fallback_model: served.model.clone(),
            reason,
            primary_error,
        };
        self.alarm.raise(record.clone());
        Some(record)
    }
}

/// Fills an event's token counts from the raw usage (per-family domain rule) and prices it.
/// No raw usage leaves every count `None` (unknown, never 0); no price table leaves cost `None`.
fn account(mut event: UsageEvent, raw: Option<RawUsage>, prices: Option<&PriceTable>) -> CallUsage {
    if let Some(raw) = &raw {
        normalize_usage(raw.family, &raw.raw).apply_to(&mut event);
    }
    let event = match prices {
        Some(table) => price_event(&event, table),
        None => event,
    };
    CallUsage { event, raw }
}

/// Records the stream's usage exactly once: at its end, at its error, or when dropped.
struct UsageRecorder {
    sink: Arc<dyn UsageSink>,
    event: UsageEvent,
    raw: Option<RawUsage>,
    prices: Option<Arc<PriceTable>>,
}

impl UsageRecorder {
    fn record(self) {
        self.sink
            .record(account(self.event, self.raw, self.prices.as_deref()));
    }
}

struct MeteredStream {
    first: Option<Result<StreamEvent, ProviderError>>,
    inner: LlmEventStream,
    recorder: Option<UsageRecorder>,
}

impl MeteredStream {
    fn observe(&mut self, item: &Option<Result<StreamEvent, ProviderError>>) {
        match item {
            Some(Ok(StreamEvent::Usage { usage })) => {
                if let Some(recorder) = self.recorder.as_mut() {
                    recorder.raw = Some(usage.clone());
                }
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => {
                if let Some(recorder) = self.recorder.take() {
                    recorder.record();
                }
            }
        }
    }
}

impl Stream for MeteredStream {
    type Item = Result<StreamEvent, ProviderError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(first) = this.first.take() {
            let item = Some(first);
            this.observe(&item);
            return Poll::Ready(item);
        }
        if this.recorder.is_none() {
            return Poll::Ready(None);
        }
        match this.inner.poll_next_unpin(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(item) => {
                this.observe(&item);
                Poll::Ready(item)
            }
        }
    }
}

impl Drop for MeteredStream {
    fn drop(&mut self) {
        if let Some(recorder) = self.recorder.take() {
            recorder.record();
        }
    }
}
