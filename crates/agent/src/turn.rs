//! One agent turn: the native tool-calling loop or the JSON-ReAct loop, chosen from the serving
//! model's capability or forced by configuration, with the history budget, within-turn folding,
//! the provider's tool cap, an iteration cap, a token budget, cancellation, grounding on the
//! final reply and typed events.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use metaforge_domain::compaction::{
    ChatTurn, DEFAULT_HISTORY_TOKENS, budget_history, fold_native_exchanges, trace_token_budget,
};
use metaforge_domain::grounding::{
    GATE_TWIN_WRITE, GroundingInput, GroundingReport, RegistryEntry, check_grounding,
};
use metaforge_domain::tool_cap::{OfferedTool, select_tools};
use metaforge_domain::tool_gating::Caller;
use metaforge_domain::usage::UsageTotals;
use metaforge_ports::{
    ApprovalLedger, CallerClass, Clock, ContentPart, IdGen, LlmMessage, LlmRequest, LlmRole, ModelTool,
    SystemPrompt, ToolCall, ToolChoice, UsageEvent,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::events::{EventSink, TurnEvent};
use crate::exec::{ApprovalMode, CallRecord, ExecPorts, ExecSettings, TurnExec};
use crate::model::{ModelAnswer, ModelCall, ModelError, ModelProfile, TurnModel, UsageScope};
use crate::react::{ReactStep, parse_step, protocol_prompt, render};
use crate::tools::{AgentTool, ToolBox};

/// Which loop a turn runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoopMode {
    /// Native when the serving model parses native tool calls, ReAct otherwise.
    #[default]
    Auto,
    /// Always the native loop.
    Native,
    /// Always the JSON-ReAct loop.
    React,
}

/// The variable that forces the loop for a deployment (read by the binary, parsed by
/// [`LoopMode::parse_setting`]).
pub const AGENT_LOOP_ENV: &str = "METAFORGE_AGENT_LOOP";

/// A `METAFORGE_AGENT_LOOP` value that names no loop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{AGENT_LOOP_ENV}={value:?} is not a loop: accepted values are auto (the default), native, react")]
pub struct LoopModeError {
    /// The value as given.
    pub value: String,
}

impl LoopMode {
    /// The setting's name, as `METAFORGE_AGENT_LOOP` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Native => "native",
            Self::React => "react",
        }
    }

    /// Parses the deployment's `METAFORGE_AGENT_LOOP`: `auto` (also unset or empty), `native` or
    /// `react`, case-insensitive; anything else is an error naming the variable and the accepted
    /// values, never a silent `auto`.
    pub fn parse_setting(value: Option<&str>) -> Result<Self, LoopModeError> {
        let Some(raw) = value else {
            return Ok(Self::Auto);
        };
        match raw.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Self::Auto),
            "native" => Ok(Self::Native),
            "react" => Ok(Self::React),
            _ => Err(LoopModeError {
                value: raw.to_owned(),
            }),
        }
    }
}

impl std::str::FromStr for LoopMode {
    type Err = LoopModeError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Self::parse_setting(Some(value))
    }
}

/// Default most model calls in one turn.
pub const DEFAULT_MAX_ITERATIONS: usize = 12;

/// Default longest observation the model reads, in characters.
pub const DEFAULT_MAX_OBSERVATION_CHARS: usize = 8_000;

/// Default approval window of a held call (`chat_approval_timeout_seconds`, 1800 s).
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(1800);

/// How one turn runs.
#[derive(Debug, Clone)]
pub struct TurnConfig {
    /// The routing role of the turn's model calls (`chat`, `generator`, `phase_brain`, …).
    pub role: String,
    /// An explicit provider for the role; `None` = the role's primary.
    pub provider: Option<String>,
    /// Native, ReAct or chosen from the model's capability.
    pub mode: LoopMode,
    /// The caller the gate decides for.
    pub caller: Caller,
    /// Hold or forward (unattended).
    pub approval_mode: ApprovalMode,
    /// The chat thread or run id (credential pinning).
    pub session_id: String,
    /// The design-flow run, for usage attribution.
    pub run_id: Option<String>,
    /// The phase, for usage attribution.
    pub phase: Option<String>,
    /// Most model calls in the turn.
    pub max_iterations: usize,
    /// Most prompt + completion tokens the turn may use (as reported); `None` = no budget.
    pub token_budget: Option<u64>,
    /// The history budget in tokens (`METAFORGE_HISTORY_TOKENS`).
    pub history_tokens: usize,
    /// How long a held call waits for a person.
    pub approval_timeout: Duration,
    /// How often a waiting hold re-reads the ledger.
    pub approval_poll: Duration,
    /// Longest observation the model reads.
    pub max_observation_chars: usize,
    /// The authenticated identity the turn runs for (recorded on the holds it parks).
    pub requested_by: Option<String>,
}

impl TurnConfig {
    /// A chat turn of a local person, holding approval-tier calls, with the defaults.
    pub fn chat(session_id: impl Into<String>) -> Self {
        Self {
            role: "chat".to_owned(),
            provider: None,
            mode: LoopMode::Auto,
            caller: Caller::from(CallerClass::Local),
            approval_mode: ApprovalMode::Hold,
            session_id: session_id.into(),
            run_id: None,
            phase: None,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            token_budget: None,
            history_tokens: DEFAULT_HISTORY_TOKENS,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            approval_poll: Duration::from_millis(250),
            max_observation_chars: DEFAULT_MAX_OBSERVATION_CHARS,
            requested_by: None,
        }
    }

    fn scope(&self) -> UsageScope {
        UsageScope {
            run_id: self.run_id.clone(),
            phase: self.phase.clone(),
            role: Some(self.role.clone()),
            caller: Some(self.caller.class.as_str().to_owned()),
        }
    }
}

/// What a turn is asked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnInput {
    /// The byte-stable system prompt.
    pub system: String,
    /// Prior messages of the conversation, oldest first.
    pub history: Vec<ChatTurn>,
    /// The person's (or the calling loop's) message.
    pub user: String,
}

/// A finished turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The reply as shown: grounding banners, then the model's text.
    pub reply: String,
    /// The grounding verdict on the model's own text.
    pub grounding: GroundingReport,
    /// Every tool call, in order.
    pub calls: Vec<CallRecord>,
    /// The usage of every model call.
    pub usage_events: Vec<UsageEvent>,
    /// Model calls made.
    pub iterations: usize,
    /// The loop that ran.
    pub mode: LoopMode,
    /// The provider that served the last model call.
    pub provider: Option<String>,
}

impl TurnOutcome {
    /// The turn's usage totals.
    pub fn usage(&self) -> UsageTotals {
        UsageTotals::from_events(&self.usage_events)
    }
}

/// Why a turn ended without a reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnError {
    /// The model asked for more tools after its last allowed call.
    #[error(
        "the turn reached its iteration cap of {limit} model calls (max_iterations) without a final answer"
    )]
    IterationCap {
        /// The cap.
        limit: usize,
    },
    /// The turn used up its token budget before a final answer.
    #[error(
        "the turn used {used} tokens, reaching its token budget of {limit} (token_budget) without a final answer"
    )]
    TokenBudget {
        /// The budget.
        limit: u64,
        /// Tokens used (prompt + completion as reported).
        used: u64,
    },
    /// The turn was cancelled; its open holds were closed as canceled.
    #[error("the turn was cancelled")]
    Canceled,
    /// A model call failed.
    #[error(transparent)]
    Model(#[from] ModelError),
}

impl TurnError {
    /// The stable code of the `notify_error` event.
    pub fn code(&self) -> &'static str {
        match self {
            Self::IterationCap { .. } => "iteration_cap",
            Self::TokenBudget { .. } => "token_budget",
            Self::Canceled => "canceled",
            Self::Model(_) => "model_error",
        }
    }
}

/// A failed turn with what it did before failing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{error}")]
pub struct TurnFailure {
    /// Why it failed.
    pub error: TurnError,
    /// Tool calls made before it failed.
    pub calls: Vec<CallRecord>,
    /// Usage of the model calls made before it failed.
    pub usage_events: Vec<UsageEvent>,
}

/// The ports a turn runs over.
#[derive(Clone)]
pub struct AgentPorts {
    /// The model.
    pub model: Arc<dyn TurnModel>,
    /// The tools.
    pub tools: Arc<dyn ToolBox>,
    /// The one approval ledger (holds are refused without it).
    pub approvals: Option<Arc<dyn ApprovalLedger>>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Ids.
    pub ids: Arc<dyn IdGen>,
}

/// The agent loop over its ports.
#[derive(Clone)]
pub struct Agent {
    ports: AgentPorts,
    sessions: Arc<SessionLocks>,
}

/// The session write-lock: one turn at a time per session, so two turns never write for one
/// session at once. Entries are weak, so a session nobody runs costs nothing.
#[derive(Default)]
struct SessionLocks {
    locks: std::sync::Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl SessionLocks {
    fn lock_for(&self, session: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(lock) = locks.get(session).and_then(Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, weak| weak.strong_count() > 0);
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(session.to_owned(), Arc::downgrade(&lock));
        lock
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").finish_non_exhaustive()
    }
}

struct Progress {
    calls: Vec<CallRecord>,
    usage: Vec<UsageEvent>,
    iterations: usize,
    provider: Option<String>,
}

impl Progress {
    fn tokens_used(&self) -> u64 {
        self.usage
            .iter()
            .map(|e| e.prompt_tokens.unwrap_or(0) + e.completion_tokens.unwrap_or(0))
            .sum()
    }
}

impl Agent {
    /// An agent over `ports`.
    pub fn new(ports: AgentPorts) -> Self {
        Self {
            ports,
            sessions: Arc::new(SessionLocks::default()),
        }
    }

    /// The same agent (model, ledger, session write-locks) over another set of tools: a chat
    /// thread or a phase gets its tools per turn ([`crate::ToolBoxes`]) while every turn of one
    /// session still waits on the one session lock.
    pub fn with_tools(&self, tools: Arc<dyn ToolBox>) -> Self {
        let mut ports = self.ports.clone();
        ports.tools = tools;
        Self {
            ports,
            sessions: Arc::clone(&self.sessions),
        }
    }

    /// The model port (the P→G→E loop calls it directly for the planner and the evaluator; a
    /// chat thread asks it whether any model serves the role before storing a message).
    pub fn model(&self) -> &Arc<dyn TurnModel> {
        &self.ports.model
    }

    /// Runs one turn and reports it through `events`, ending with `agent.done` (after
    /// `notify_error` when it fails).
    pub async fn run_turn(
        &self,
        config: &TurnConfig,
        input: &TurnInput,
        events: &EventSink,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, TurnFailure> {
        let result = self.run_turn_quiet(config, input, events, cancel).await;
        match &result {
            Ok(outcome) => events.emit(TurnEvent::Done {
                usage: outcome.usage(),
            }),
            Err(failure) => {
                events.emit(TurnEvent::NotifyError {
                    code: failure.error.code().to_owned(),
                    message: failure.error.to_string(),
                });
                events.emit(TurnEvent::Done {
                    usage: UsageTotals::from_events(&failure.usage_events),
                });
            }
        }
        result
    }

    /// Runs one turn without the closing `notify_error`/`agent.done` (the P→G→E loop sends one
    /// pair for the whole run).
    pub(crate) async fn run_turn_quiet(
        &self,
        config: &TurnConfig,
        input: &TurnInput,
        events: &EventSink,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, TurnFailure> {
        let session = self.sessions.lock_for(&config.session_id);
        let _turn = match session.try_lock() {
            Ok(guard) => guard,
            Err(_) => {
                tracing::info!(event = "session_turn_waiting", session_id = %config.session_id, "another turn of this session is running; waiting for it");
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => {
                        return Err(TurnFailure {
                            error: TurnError::Canceled,
                            calls: Vec::new(),
                            usage_events: Vec::new(),
                        });
                    }
                    guard = session.lock() => guard,
                }
            }
        };
        let exec_ports = ExecPorts {
            tools: Arc::clone(&self.ports.tools),
            approvals: self.ports.approvals.clone(),
            clock: Arc::clone(&self.ports.clock),
            ids: Arc::clone(&self.ports.ids),
        };
        let settings = ExecSettings {
            caller: config.caller.clone(),
            approval_mode: config.approval_mode,
            approval_timeout: config.approval_timeout,
            approval_poll: config.approval_poll,
            max_observation_chars: config.max_observation_chars,
            requested_by: config.requested_by.clone(),
        };
        let exec = TurnExec::new(&exec_ports, &settings, events, cancel);
        let mut progress = Progress {
            calls: Vec::new(),
            usage: Vec::new(),
            iterations: 0,
            provider: None,
        };
        let result = self.drive(config, input, &exec, cancel, &mut progress).await;
        if matches!(result, Err(TurnError::Canceled)) || cancel.is_cancelled() {
            exec.close_open_holds().await;
        }
        match result {
            Ok((text, mode)) => {
                let grounding = ground(&text, input, &progress.calls, &self.ports.tools.tools());
                events.emit(TurnEvent::MessageDelta {
                    text: grounding.text.clone(),
                });
                Ok(TurnOutcome {
                    reply: grounding.text.clone(),
                    grounding,
                    calls: progress.calls,
                    usage_events: progress.usage,
                    iterations: progress.iterations,
                    mode,
                    provider: progress.provider,
                })
            }
            Err(error) => Err(TurnFailure {
                error,
                calls: progress.calls,
                usage_events: progress.usage,
            }),
        }
    }

    async fn drive(
        &self,
        config: &TurnConfig,
        input: &TurnInput,
        exec: &TurnExec<'_>,
        cancel: &CancellationToken,
        progress: &mut Progress,
    ) -> Result<(String, LoopMode), TurnError> {
        let profile = self
            .ports
            .model
            .profile(&config.role, config.provider.as_deref())
            .await?;
        let mode = match config.mode {
            LoopMode::Auto if profile.native_tools => LoopMode::Native,
            LoopMode::Auto => LoopMode::React,
            forced @ (LoopMode::Native | LoopMode::React) => forced,
        };
        let mut transcript = history_messages(&input.history, config.history_tokens);
        transcript.push(LlmMessage::user_text(input.user.clone()));
        let trace_budget = trace_token_budget(profile.context_window_tokens);
        let mut react_step = 0usize;
        let mut last_dropped: Option<Vec<String>> = None;
        loop {
            if cancel.is_cancelled() {
                return Err(TurnError::Canceled);
            }
            if progress.iterations >= config.max_iterations {
                return Err(TurnError::IterationCap {
                    limit: config.max_iterations,
                });
            }
            if let Some(limit) = config.token_budget {
                let used = progress.tokens_used();
                if used >= limit {
                    return Err(TurnError::TokenBudget { limit, used });
                }
            }
            let (offered, dropped) = capped_tools(self.ports.tools.as_ref(), &profile);
            if !dropped.is_empty() && last_dropped.as_ref() != Some(&dropped) {
                tracing::info!(
                    event = "chat_tools_dropped",
                    dropped = %dropped.join(","),
                    "tools left out of this turn's requests by the provider's tool cap"
                );
                last_dropped = Some(dropped.clone());
            }
            let note = truncation_note(&dropped, profile.max_tools);
            let messages = fold(&transcript, trace_budget);
            let request = match mode {
                LoopMode::Native | LoopMode::Auto => LlmRequest {
                    system: SystemPrompt {
                        stable: input.system.clone(),
                        volatile_suffix: note.clone(),
                    },
                    messages,
                    tools: offered
                        .iter()
                        .map(|t| ModelTool {
                            name: t.provider_name.clone(),
                            description: t.descriptor.description.clone(),
                            parameters: t.descriptor.input_schema.clone(),
                        })
                        .collect(),
                    tool_choice: ToolChoice::Auto,
                    ..LlmRequest::default()
                },
                LoopMode::React => LlmRequest {
                    system: SystemPrompt {
                        stable: join_system(&input.system, &protocol_prompt(&offered)),
                        volatile_suffix: note.clone(),
                    },
                    messages: render(&messages),
                    tool_choice: ToolChoice::None,
                    ..LlmRequest::default()
                },
            };
            let call = ModelCall {
                role: config.role.clone(),
                provider: config.provider.clone(),
                scope: config.scope(),
                session_id: config.session_id.clone(),
            };
            let answer: ModelAnswer = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(TurnError::Canceled),
                answer = self.ports.model.complete(&call, request) => answer?,
            };
            progress.iterations += 1;
            progress.usage.push(answer.usage.clone());
            progress.provider = Some(answer.provider.clone());
            let response = answer.response;
            match mode {
                LoopMode::Native | LoopMode::Auto => {
                    if response.tool_calls.is_empty() {
                        return Ok((response.text, LoopMode::Native));
                    }
                    if progress.iterations >= config.max_iterations {
                        return Err(TurnError::IterationCap {
                            limit: config.max_iterations,
                        });
                    }
                    let mut content = Vec::new();
                    if !response.text.trim().is_empty() {
                        content.push(ContentPart::Text {
                            text: response.text.clone(),
                        });
                    }
                    content.extend(response.tool_calls.iter().map(|c| ContentPart::ToolCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    }));
                    transcript.push(LlmMessage {
                        role: LlmRole::Assistant,
                        content,
                    });
                    let records = exec.run_batch(&response.tool_calls, &offered).await;
                    transcript.push(results_message(&records));
                    progress.calls.extend(records);
                }
                LoopMode::React => match parse_step(&response.text) {
                    ReactStep::Final(text) => return Ok((text, LoopMode::React)),
                    ReactStep::Action { action, input } => {
                        if progress.iterations >= config.max_iterations {
                            return Err(TurnError::IterationCap {
                                limit: config.max_iterations,
                            });
                        }
                        react_step += 1;
                        let call = ToolCall {
                            id: format!("react_{react_step}"),
                            name: action,
                            arguments: input,
                        };
                        transcript.push(LlmMessage {
                            role: LlmRole::Assistant,
                            content: vec![ContentPart::ToolCall {
                                id: call.id.clone(),
                                name: call.name.clone(),
                                arguments: call.arguments.clone(),
                            }],
                        });
                        let record = exec.run_single(&call, &offered).await;
                        transcript.push(results_message(std::slice::from_ref(&record)));
                        progress.calls.push(record);
                    }
                },
            }
            if cancel.is_cancelled() {
                return Err(TurnError::Canceled);
            }
        }
    }
}

fn join_system(system: &str, protocol: &str) -> String {
    if system.trim().is_empty() {
        protocol.to_owned()
    } else {
        format!("{system}\n\n{protocol}")
    }
}

fn results_message(records: &[CallRecord]) -> LlmMessage {
    LlmMessage {
        role: LlmRole::User,
        content: records
            .iter()
            .map(|r| ContentPart::ToolResult {
                call_id: r.call_id.clone(),
                name: r.name.clone(),
                content: r.content.clone(),
                is_error: r.is_error,
            })
            .collect(),
    }
}

/// Prior turns under the history budget: the newest whole, older ones folded into a leading
/// summary exchange (MET-568).
fn history_messages(history: &[ChatTurn], budget_tokens: usize) -> Vec<LlmMessage> {
    let budgeted = budget_history(history, budget_tokens);
    if budgeted.truncated_chars > 0 {
        tracing::warn!(
            event = "history_turn_truncated",
            truncated_chars = budgeted.truncated_chars,
            budget_tokens,
            "the newest prior turn alone is over the history budget; kept, cut with a marker"
        );
    }
    let mut out = Vec::new();
    if let Some(summary) = budgeted.summary {
        out.push(LlmMessage::user_text(summary));
        out.push(LlmMessage::assistant_text(
            "Understood; I have the earlier context.",
        ));
    }
    for turn in budgeted.kept {
        out.push(if turn.role == "assistant" {
            LlmMessage::assistant_text(turn.content)
        } else {
            LlmMessage::user_text(turn.content)
        });
    }
    out
}

/// Within-turn folding (MET-568): past the trace budget, the oldest tool exchanges fold into one
/// synopsis message by the domain's rule, which reads OpenAI-shaped messages; each transcript
/// message maps to exactly one of them, so the fold maps back by position.
fn fold(transcript: &[LlmMessage], budget_tokens: usize) -> Vec<LlmMessage> {
    let shaped: Vec<Value> = transcript.iter().map(openai_shape).collect();
    let folded = fold_native_exchanges(&shaped, budget_tokens);
    if folded.len() >= shaped.len() {
        return transcript.to_vec();
    }
    let head = shaped
        .iter()
        .position(|m| m.get("tool_calls").is_some())
        .unwrap_or(0);
    let tail = folded.len().saturating_sub(head + 1);
    let synopsis = folded
        .get(head)
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    tracing::info!(
        event = "context_folded",
        messages = transcript.len(),
        kept = head + tail,
        budget_tokens,
        "older tool exchanges folded into a synopsis"
    );
    let mut out = transcript[..head].to_vec();
    out.push(LlmMessage::user_text(synopsis));
    out.extend_from_slice(&transcript[transcript.len() - tail..]);
    out
}

fn openai_shape(message: &LlmMessage) -> Value {
    let mut text = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    let mut errors = 0usize;
    for part in &message.content {
        match part {
            ContentPart::Text { text: t } => text.push(t.clone()),
            ContentPart::ToolCall { id, name, arguments } => calls.push(json!({
                "id": id, "type": "function",
                "function": {"name": name, "arguments": arguments.to_string()},
            })),
            ContentPart::ToolResult {
                content, is_error, ..
            } => {
                results.push(content.clone());
                errors += usize::from(*is_error);
            }
        }
    }
    match message.role {
        LlmRole::Assistant if !calls.is_empty() => {
            json!({"role": "assistant", "content": text.join("\n"), "tool_calls": calls})
        }
        LlmRole::Assistant => json!({"role": "assistant", "content": text.join("\n")}),
        LlmRole::User if !results.is_empty() => {
            json!({"role": "tool", "content": results.join("\n"), "error_count": errors})
        }
        LlmRole::User => json!({"role": "user", "content": text.join("\n")}),
    }
}

/// The provider's tool-array cap by the domain's rule (FORGE-94/518), dropped tools logged loudly.
fn capped_tools(tools: &dyn ToolBox, profile: &ModelProfile) -> (Vec<AgentTool>, Vec<String>) {
    let all = tools.tools();
    let offered: Vec<OfferedTool> = all
        .iter()
        .map(|t| OfferedTool {
            name: t.id.clone(),
            origin: t.origin.clone(),
            input_schema: Some(t.descriptor.input_schema.clone()),
        })
        .collect();
    let selection = select_tools(&offered, profile.max_tools, &tools.pinned());
    if !selection.dropped.is_empty() {
        tracing::warn!(
            event = "tool_schemas_truncated",
            limit = profile.max_tools.unwrap_or(0),
            provider = %profile.provider,
            registered = offered.len(),
            kept = selection.kept.len(),
            dropped_count = selection.dropped.len(),
            dropped = %selection.dropped.join(","),
            protected_exceeds_cap = selection.protected_exceeds_cap,
            "provider tool cap dropped tool schemas"
        );
    }
    let kept: BTreeSet<&str> = selection.kept.iter().map(String::as_str).collect();
    let offered = all.into_iter().filter(|t| kept.contains(t.id.as_str())).collect();
    (offered, selection.dropped)
}

/// The per-round note (never part of the cached prefix) telling the model tools were left out.
fn truncation_note(dropped: &[String], cap: Option<usize>) -> Option<String> {
    (!dropped.is_empty()).then(|| {
        format!(
            "{} tool(s) were left out of this request by the provider's limit of {} tools; call \
             search_tools to find and pin one you need.",
            dropped.len(),
            cap.unwrap_or_default()
        )
    })
}

/// The grounding guard on the model's own final text (FORGE-98/520), logged per kind.
fn ground(reply: &str, input: &TurnInput, calls: &[CallRecord], tools: &[AgentTool]) -> GroundingReport {
    let mut context = vec![input.system.clone(), input.user.clone()];
    context.extend(input.history.iter().map(|t| t.content.clone()));
    // A registry that declares no twin-write gate would make every twin commit count as none:
    // then the domain's static twin-write set decides instead.
    let declares_twin_write = tools
        .iter()
        .any(|t| t.gate.required_gates.iter().any(|g| g == GATE_TWIN_WRITE));
    let registry: Option<BTreeMap<String, RegistryEntry>> = declares_twin_write.then(|| {
        tools
            .iter()
            .map(|t| {
                (
                    t.id.clone(),
                    RegistryEntry {
                        required_gates: t.gate.required_gates.clone(),
                    },
                )
            })
            .collect()
    });
    let report = check_grounding(&GroundingInput {
        reply: reply.to_owned(),
        steps: calls.iter().map(CallRecord::step).collect(),
        context_text: Some(context.join("\n")),
        registry,
    });
    for kind in &report.metric_kinds {
        tracing::warn!(
            event = "chat_ungrounded_claim",
            kind = kind.as_str(),
            unverified_ids = %report.unverified_ids.join(","),
            "the reply claims what no successful tool call this turn shows"
        );
        metrics::counter!("metaforge_chat_ungrounded_claim_total", "kind" => kind.as_str()).increment(1);
    }
    report
}
