//! The provider pipeline (Phase 1, FORGE-468, MET-551, FORGE-476, FORGE-478): resolves a role's
//! ordered candidates, retries each under a [`RetryPolicy`], rotates credentials per session,
//! falls through to the next candidate, raises the fallback alarm, records one usage event per
//! call and returns served-by provenance with every answer.
//!
//! Streams retry or fall back only before the first event reached the caller; after that a cut
//! stream ends with the adapter's typed error, because the caller has already acted on output.
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## LLM: ports `llm`/`credentials`, `crates/adapters-llm`, `app::pipeline` (issue 4)
//!
//! - `metaforge_ports::llm` — `LlmProvider { family, complete, stream }`, the normalised
//!   `LlmRequest` (system = stable prefix + volatile suffix, messages with tool calls/results, tools,
//!   tool_choice, max tokens, temperature, stop, prompt_cache_key), `LlmResponse`, `StreamEvent`
//!   (text delta, tool-call start / argument delta / end, usage, finish) and the typed
//!   `ProviderError { kind, status, retry_after, provider_message }`. `credentials` —
//!   `CredentialStore` (list/healthy/add/mark_dead/mark_healthy), secrets redacted in `Debug`.
//! - `adapters-llm` — one module per family (each family's typed request and response structs in
//!   `<family>/wire.rs`, what they share in `wire`; `tests/it/wire_fixtures.rs` pins every request's
//!   bytes): `openai` (chat completions, `stream_options.include_usage`,
//!   `prompt_cache_key` only when built for OpenAI/OpenRouter), `anthropic` (Messages; cache_control
//!   on the last tool, the stable system block and the last message block), `gemini`
//!   (generateContent / `streamGenerateContent?alt=sse`), `bedrock` (Converse/ConverseStream; SigV4 by
//!   `aws-sigv4`, event-stream framing by `aws-smithy-eventstream`), `codex` (Responses API,
//!   Codex-CLI `auth.json`; streamed calls with tools declined as `CapabilityUnsupported`).
//!   `frames` turns SSE / event-stream frames into events through a per-family `StreamDecoder`;
//!   `http` holds the rustls(ring) client, error classification and Retry-After parsing;
//!   `credentials_file` is the 0600 JSON credential store.
//! - `app::pipeline` — `ProviderPipeline` (`complete`/`stream` → `Served<T>` with provenance),
//!   `RetryPolicy`, `RoleModelSlots` (family-mismatch candidates dropped at config time),
//!   `CredentialRotor` (pin per session, rotate on 401/403/429), `FallbackAlarm`
//!   (`harness_provider_fallback` log, `metaforge_harness_provider_fallback_total` counter,
//!   `last_fallback`/`fallback_count`; reasons are `metaforge_domain::routing::FallbackReason`),
//!   `usage` (tokio task-local `UsageScope`, `UsageSink`; counts filled by
//!   `metaforge_domain::usage::normalize_usage`, cost by `price_event` when a `PriceTable` is set),
//!   `caching` (sorted tools with sorted keys + stable system = cached prefix, `prompt_cache_key`).
//! - `bins` `providers_config` — the ONE provider composition shared by `metaforge llm`,
//!   `metaforge providers list` and `metaforge gateway`: the only place that reads
//!   `HARNESS_<ID>_BASE_URL` (an explicit override even for fixed-URL providers),
//!   `METAFORGE_CREDENTIALS_PATH`, `*_API_KEY`, AWS and Codex env and `METAFORGE_FALLBACK_PROVIDERS`
//!   (ordered `provider:model` fallbacks behind the routed primary); layers file over env
//!   credentials, one adapter per family, `provider_rows()` (the providers view's rows),
//!   `credentialed()`, `build_pipeline(chains, required, optional, sink)`. `cmd::llm` keeps only
//!   argument parsing, `METAFORGE_ROUTE_<ROLE>`/`METAFORGE_MODEL_ROUTES_PATH` resolution and output.
//! - `metaforge_gateway::chat` — `POST /v1/chat/completions` (OpenAI shapes, JSON and SSE ending with
//!   `data: [DONE]`); `model` = a routing role (resolved per request with the domain rules over
//!   `app::routing::RouteResolver`, durable selection included, and passed as the primary so the role's chain
//!   follows) or an explicit family-checked `provider:model`. Provenance headers
//!   `x-metaforge-served-by` / `x-metaforge-fell-back-from`. `app::pipeline::StoreSink` stamps `at` from the
//!   clock and records into the gateway's `UsageStore` (role from the request, caller = identity,
//!   run from the `x-metaforge-run-id` header — a present but unusable one is a 400 naming it); with
//!   `with_metrics` each event also feeds `app::usage_metrics::UsageMetrics`:
//!   `metaforge_llm_calls_total{role,provider,model,usage_reported}`,
//!   `metaforge_llm_tokens_total{…,kind}` (reported counts only), `metaforge_llm_cost_usd_total`
//!   (priced calls; a Prometheus counter of fractional dollars kept by
//!   `usage_metrics::FloatCounterFamily`, because `metrics` counters are integral) and, once per run crossing
//!   `METAFORGE_RUN_SPEND_ALERT_USD` (default 5; a bad value refuses start),
//!   `metaforge_llm_run_spend_exceeded_total{role}` + the `llm_run_spend_exceeded` log.
//!   **Usage durability (issue 13):** `record` only queues the event; one writer task gathers, from
//!   the first event queued, for `USAGE_COMMIT_WINDOW` = 10 ms (or until `USAGE_BATCH_MAX` = 1024
//!   events or a flush arrive) and commits them in one `synchronous=FULL` transaction
//!   (`UsageStore::record_batch`, all or nothing), never on the response path: at most one fsync per
//!   window at any rate of calls (a commit per call was a sixth of a busy gateway's CPU). SQLite writes a batch as one multi-row `INSERT` (256 rows a statement; a
//!   larger batch is one transaction of them), so a batch crosses to sqlx's connection thread once
//!   instead of once per event plus BEGIN and COMMIT. A graceful stop (SIGTERM/Ctrl-C) drains the listener, then
//!   `StoreSink::flush` commits everything queued: nothing acknowledged is lost. On kill -9 at
//!   most the events of the last commit window are lost (the window being gathered, the batch being
//!   committed and those queued behind it, ≤ one batch): `bins/tests/it/usage_durability.rs` kills a gateway ten times under load
//!   and counts. The credential file is read from memory and re-parsed when its mtime, size or inode
//!   changes (`adapters-llm::credentials_file`; permissions still checked by a `stat` per read).
//!   No pipeline / no route → 503 naming why; all attempts rate limited → 429 + Retry-After; all
//!   failed → 503 with `details.attempts`. `gateway::chat_request` — the request wire types and
//!   their strict mapping onto `LlmRequest`: function `tools` → `ModelTool` (name `^[a-zA-Z0-9_-]{1,64}$`,
//!   unique; `parameters` an object, `{type:object,properties:{}}` when absent), `tool_choice`
//!   (`auto|none|required|{type:function,function:{name}}`; `required`/named need tools, the name
//!   must be declared), assistant `tool_calls` → `ContentPart::ToolCall` (arguments must be JSON
//!   text; ids unique), `tool` messages → `ContentPart::ToolResult` (needs `tool_call_id` answering
//!   an earlier call, whose name it takes; consecutive tool messages become ONE user turn), content
//!   = string or `{type:text}` parts only. Every refusal is a 400 with `details.field` as a path
//!   (`messages[2].tool_calls[0].function.arguments`) and nothing goes upstream. Responses: JSON
//!   `tool_calls` with arguments as JSON text (`content` null when only calls); SSE maps
//!   `ToolCallStart`/`ToolCallArgumentsDelta` to OpenAI `delta.tool_calls[{index,id,type,function}]`
//!   chunks, renumbering call indices 0.. in start order (families count blocks differently),
//!   `finish_reason: tool_calls`; `stream_options.include_usage` (only with `stream: true`) adds
//!   OpenAI's last chunk with empty `choices` and `usage` (null counts when unknown).
//!   `gateway::providers` — `GET /v1/harness/providers`:
//!   rows computed by the binary at start plus the alarm's `last_fallback`/`fallback_count`
//!   (`null` count when no pipeline runs: unknown is not 0). The binary builds the pipeline at start
//!   (`cmd::serve::gateway_pipeline`: each role's start-time route + fallbacks; every configured
//!   provider wired for explicit calls); no configured provider → `pipeline: None`, gateway starts.
//!
//! **Invariants.** Usage crosses the port raw (family + the provider's own usage object) and is never
//! turned into a 0: unknown counts stay `None`. A stream is retried or falls back only before its
//! first event reached the caller; after that a cut stream ends with a typed `Transport` error, and
//! one usage event is recorded per served call (a stream's at its end, error or drop; failed
//! attempts record none). Every decoder detects a missing terminal marker (`[DONE]`/finish, `message_stop`,
//! `finishReason`, `messageStop`, `response.completed`). Retryable: 429, 500/502/503/504/529,
//! timeouts, transport; everything else falls to the next candidate at once. 401/403 blacklist the
//! credential in the store, 429 rotates without blacklisting. A credentials file readable by group
//! or others is refused, never read. No OpenSSL: reqwest runs rustls with the ring provider.
//! Tests: `adapters-llm/tests/wire_recorded.rs` (every recorded stream, insta), `contracts.rs`
//! (Steady + botocore), `aimock_families.rs`, `cache_usage_fixtures.rs`, `app/tests/it/fault_injection.rs`;
//! `cargo xtask bench pipeline`, `cargo xtask e2e --real-model` (opt-in).

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
