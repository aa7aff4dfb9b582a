//! Chat threads: a person's conversation with the agent loop, kept in the session ledger.
//!
//! A thread is a session (`SessionStore`); posting a message appends it, runs one agent turn over
//! the thread's history with the tools the central registry offers this caller, and appends the
//! tool calls and the reply. Every turn's events go to the poster's own stream and to every
//! subscriber of the thread (`GET …/stream`), so a second terminal sees a held call appear and a
//! turn can be watched from anywhere. The reply is stored before `agent.done` is sent, so a client
//! that reads the thread on `agent.done` always finds it.
//!
//! Invariants:
//! - the turn runs in its own task: a poster that goes away does not stop it; only
//!   [`ChatService::cancel`] (or the process ending) does, and cancelling closes the turn's open
//!   holds as canceled (the agent loop does that);
//! - two turns of one thread never write at once (the agent loop's session write-lock; a second
//!   post waits for the first);
//! - every turn has an iteration cap and may have a token budget (the thread's own limits, else
//!   the deployment's), and hitting one ends the turn with `notify_error` naming the limit;
//! - nothing is written for a bad post (empty content, unknown thread).
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## Chat threads (issue 15) — `app::chat`, `gateway::threads`, `adapters-gateway::ChatClient`, `metaforge chat`
//!
//! - `app::chat::ChatService` — a thread is a session of the session ledger (`SessionStore`,
//!   `$METAFORGE_HOME/sessions.db`, FTS5). `post(thread, content, poster)` stores the person's
//!   message, builds the turn (`TurnConfig::chat`: caller class from the transport, the poster's
//!   identity as `requested_by` on every hold, the thread's own `TurnLimits` over the deployment's
//!   `ChatSettings`), takes the turn's tools from `ToolBoxes::for_turn`, runs `Agent::run_turn` in
//!   its own task and forwards every `TurnEvent` to the poster's channel and to the thread's
//!   broadcast (subscribers of `GET …/stream`; a lagging one gets `stream.lagged`). The calls are
//!   stored as `tool` messages (JSON) and the reply (or a note naming why the turn failed) as the
//!   assistant's, BEFORE `agent.done` is forwarded. `cancel(thread)` cancels every turn running or
//!   waiting on the session lock. A post is refused with nothing stored when the content is empty
//!   or too long (`limits::MAX_MESSAGE_CHARS`), the thread is unknown, or no model serves `chat`
//!   (`ChatError::NoModel`, 503 naming what to set).
//! - `gateway::threads` — `POST/GET /v1/chat/threads`, `GET /v1/chat/threads/{id}` (messages,
//!   `turn_running`), `POST /v1/chat/threads/{id}/messages` (the stored turn as JSON; with
//!   `Accept: text/event-stream` the turn's events as SSE), `GET /v1/chat/threads/{id}/stream`,
//!   `POST /v1/chat/threads/{id}/cancel` (202; 409 `no_turn_running`), `GET /v1/chat/sessions/search`.
//! - `metaforge chat` / `metaforge sessions search` (`bins/src/cmd/chat.rs`) speak HTTP to a gateway
//!   through `metaforge_adapters_gateway::ChatClient`: the reply to stdout, tool activity and holds to
//!   stderr, a held call answered inline (y/n → `POST /v1/approvals/{id}/decision`, the approver is
//!   the client's key) or, without a terminal, left for a person elsewhere; Ctrl-C cancels the turn.
//!   Chat settings come from the environment once (`bins/src/chat_config.rs`).
//!
//! **Invariants:** a turn outlives its poster's connection (only cancel or the process ends it);
//! `agent.done` is sent after the reply is stored; two turns of a thread never write at once (the
//! agent's session lock, shared by `Agent::with_tools`); the approver of a chat hold is whoever
//! decides it, never the model or the poster's claim.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use metaforge_agent::CallRecord;
use metaforge_agent::{
    Agent, ApprovalMode, CancellationToken, EventSink, LoopMode, ToolBoxes, TurnConfig, TurnEvent, TurnInput,
};
use metaforge_domain::compaction::{ChatTurn, DEFAULT_HISTORY_TOKENS};
use metaforge_domain::grounding::GroundingReport;
use metaforge_domain::tool_gating::Caller;
use metaforge_domain::usage::UsageTotals;
use metaforge_ports::{
    CallerClass, CallerContext, ChatMessage, ChatSession, Clock, IdGen, InputChannel, MessageRole, PortError,
    PortErrorKind, SessionSearchHit, SessionStore, TurnLimits,
};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, oneshot};

/// The system prompt of a chat turn when the deployment sets none.
pub const DEFAULT_CHAT_SYSTEM_PROMPT: &str = "You are MetaForge's engineering assistant. You work through the \
tools you are given: design flows, approvals and the engineering tools of this deployment. Never claim an action \
was performed unless one of your tool calls actually performed it; say what you did, what a person must still \
decide, and what you could not do.";

/// The routing role of a chat turn's model calls.
pub const CHAT_ROLE: &str = "chat";

/// Most messages a thread's history loads for a turn (the history budget folds older ones).
pub const MAX_HISTORY_MESSAGES: usize = 2_000;

pub use crate::limits::MAX_MESSAGE_CHARS;

/// How many events a slow stream subscriber may fall behind before it misses some (it is told).
const STREAM_BUFFER: usize = 1_024;

/// The deployment's chat defaults, read once by the binary.
#[derive(Debug, Clone)]
pub struct ChatSettings {
    /// The byte-stable system prompt.
    pub system_prompt: String,
    /// Most model calls in one turn unless the thread sets its own.
    pub max_iterations: usize,
    /// Most tokens one turn may use unless the thread sets its own; `None` = no budget.
    pub token_budget: Option<u64>,
    /// The history budget (`METAFORGE_HISTORY_TOKENS`).
    pub history_tokens: usize,
    /// How long a held call waits for a person.
    pub approval_timeout: Duration,
    /// Native, ReAct, or chosen from the model's capability.
    pub loop_mode: LoopMode,
    /// Gates switched off by the operator (`METAFORGE_CHAT_TWIN_WRITES=0` → `twin_write`).
    pub disabled_gates: Vec<String>,
}

impl Default for ChatSettings {
    fn default() -> Self {
        Self {
            system_prompt: DEFAULT_CHAT_SYSTEM_PROMPT.to_owned(),
            max_iterations: metaforge_agent::turn::DEFAULT_MAX_ITERATIONS,
            token_budget: None,
            history_tokens: DEFAULT_HISTORY_TOKENS,
            approval_timeout: metaforge_agent::turn::DEFAULT_APPROVAL_TIMEOUT,
            loop_mode: LoopMode::Auto,
            disabled_gates: Vec::new(),
        }
    }
}

/// Why a chat request was refused; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// No thread has that id.
    #[error("no chat thread has id '{0}'")]
    UnknownThread(String),
    /// A field of the request is not acceptable.
    #[error("{field}: {message}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// Why.
        message: String,
    },
    /// No model serves the chat role: nothing was stored (the message names what to set).
    #[error("{0}")]
    NoModel(String),
    /// Cancel was asked of a thread with no turn running.
    #[error("no turn is running on chat thread '{0}'")]
    NoTurnRunning(String),
    /// A ledger failed.
    #[error(transparent)]
    Port(#[from] PortError),
}

/// A new thread as a person asks for it.
#[derive(Debug, Clone, Default)]
pub struct NewThread {
    /// A title for lists.
    pub title: Option<String>,
    /// The project the thread is scoped to.
    pub project_id: Option<String>,
    /// The thread this one forks (its history is not copied; lineage is kept).
    pub parent_session_id: Option<String>,
    /// The thread's own limits.
    pub limits: TurnLimits,
}

/// A thread with its messages, oldest first.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadView {
    /// The thread.
    #[serde(flatten)]
    pub thread: ChatSession,
    /// Its messages.
    pub messages: Vec<ChatMessage>,
    /// Whether a turn is running on it now.
    pub turn_running: bool,
}

/// One event of a thread's stream: which turn it belongs to, and the turn's event.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadEvent {
    /// The thread.
    pub thread_id: String,
    /// The turn (the id of the person's message that started it).
    pub turn_id: String,
    /// The event.
    #[serde(flatten)]
    pub event: TurnEvent,
}

impl ThreadEvent {
    /// The SSE event name (`message.delta`, `tool.call`, `tool.result`, `tool.approval_requested`,
    /// `notify_error`, `agent.done`).
    pub fn name(&self) -> &'static str {
        self.event.name()
    }
}

/// How a finished turn came out, as stored.
#[derive(Debug, Clone, Serialize)]
pub struct TurnReport {
    /// The thread.
    pub thread_id: String,
    /// The turn (the person's message id).
    pub turn_id: String,
    /// The stored reply (grounding banners first), or the stored error note when the turn failed.
    pub message: ChatMessage,
    /// Every tool call, in order.
    pub calls: Vec<CallRecord>,
    /// The turn's usage (unknown counts `null`, never 0).
    pub usage: UsageTotals,
    /// The grounding verdict on the model's own text (absent when the turn failed).
    pub grounding: Option<GroundingReport>,
    /// Why the turn failed, when it did: `{code, message}`.
    pub error: Option<Value>,
    /// Model calls made.
    pub iterations: usize,
    /// The provider that served the last model call.
    pub provider: Option<String>,
}

/// A turn that was started: its events as they happen, and its report when it ends.
#[derive(Debug)]
pub struct StartedTurn {
    /// The turn (the person's stored message id).
    pub turn_id: String,
    /// The person's stored message.
    pub user_message: ChatMessage,
    /// This turn's events, ending with `agent.done` (sent after the reply is stored).
    pub events: mpsc::UnboundedReceiver<ThreadEvent>,
    /// The stored outcome.
    pub report: oneshot::Receiver<TurnReport>,
}

/// Who posts: the caller class the gateway decided from the connection.
#[derive(Debug, Clone)]
pub struct Poster {
    /// The caller class (local on open loopback, remote with a key).
    pub class: CallerClass,
    /// The authenticated identity (recorded on the holds the turn parks).
    pub identity: String,
}

#[derive(Default)]
struct LiveThread {
    /// Turns running (or waiting on the session lock), by turn id.
    running: Mutex<HashMap<String, CancellationToken>>,
    /// Every subscriber of the thread's stream.
    stream: Option<broadcast::Sender<ThreadEvent>>,
}

/// The chat use cases over the session ledger and the agent loop.
pub struct ChatService {
    sessions: Arc<dyn SessionStore>,
    agent: Agent,
    tools: Arc<dyn ToolBoxes>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
    settings: ChatSettings,
    live: Mutex<HashMap<String, Arc<LiveThread>>>,
}

impl std::fmt::Debug for ChatService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatService")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ChatService {
    /// Chat over `sessions`, running turns with `agent` over the tools `tools` offers each caller.
    pub fn new(
        sessions: Arc<dyn SessionStore>,
        agent: Agent,
        tools: Arc<dyn ToolBoxes>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGen>,
        settings: ChatSettings,
    ) -> Self {
        Self {
            sessions,
            agent,
            tools,
            clock,
            ids,
            settings,
            live: Mutex::new(HashMap::new()),
        }
    }

    /// The deployment's chat defaults.
    pub fn settings(&self) -> &ChatSettings {
        &self.settings
    }

    fn live(&self, thread_id: &str) -> Arc<LiveThread> {
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(live.entry(thread_id.to_owned()).or_insert_with(|| {
            Arc::new(LiveThread {
                running: Mutex::new(HashMap::new()),
                stream: Some(broadcast::channel(STREAM_BUFFER).0),
            })
        }))
    }

    fn turn_running(&self, thread_id: &str) -> bool {
        let live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        live.get(thread_id).is_some_and(|t| {
            !t.running
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_empty()
        })
    }

    /// Creates a thread (a fork names its parent, which must exist).
    pub async fn create_thread(&self, request: NewThread) -> Result<ChatSession, ChatError> {
        check_limits(&request.limits)?;
        let session = ChatSession {
            id: self.ids.new_id(),
            parent_session_id: request.parent_session_id,
            project_id: request.project_id,
            title: request.title,
            created_at: self.clock.now(),
            limits: request.limits,
        };
        match self.sessions.create_session(session).await {
            Err(e) if e.kind == PortErrorKind::NotFound => Err(ChatError::Invalid {
                field: "parent_session_id",
                message: e.message,
            }),
            other => Ok(other?),
        }
    }

    /// Threads, newest first.
    pub async fn list_threads(&self, limit: usize) -> Result<Vec<ChatSession>, ChatError> {
        Ok(self.sessions.list_sessions(limit).await?)
    }

    /// One thread with its messages.
    pub async fn thread(&self, thread_id: &str) -> Result<ThreadView, ChatError> {
        let thread = self.session(thread_id).await?;
        let messages = self.sessions.messages(thread_id).await?;
        Ok(ThreadView {
            turn_running: self.turn_running(thread_id),
            thread,
            messages,
        })
    }

    /// Messages containing every word of `query`, best first (query syntax is text).
    pub async fn search(&self, query: &str, limit: usize) -> Result<Vec<SessionSearchHit>, ChatError> {
        match self.sessions.search(query, limit).await {
            Err(e) if e.kind == PortErrorKind::Invalid => Err(ChatError::Invalid {
                field: "q",
                message: "the query must contain at least one word".to_owned(),
            }),
            other => Ok(other?),
        }
    }

    /// Every event of the thread from now on (every turn, whoever posted it).
    pub async fn subscribe(&self, thread_id: &str) -> Result<broadcast::Receiver<ThreadEvent>, ChatError> {
        self.session(thread_id).await?;
        let live = self.live(thread_id);
        live.stream
            .as_ref()
            .map(broadcast::Sender::subscribe)
            .ok_or_else(|| ChatError::Port(PortError::new(PortErrorKind::Internal, "thread stream missing")))
    }

    /// Cancels every turn running (or waiting) on the thread: the model call and tool calls in
    /// flight stop and the turn's open holds are closed as canceled. Returns the turn ids.
    pub async fn cancel(&self, thread_id: &str) -> Result<Vec<String>, ChatError> {
        self.session(thread_id).await?;
        let live = self.live(thread_id);
        let running = live
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if running.is_empty() {
            return Err(ChatError::NoTurnRunning(thread_id.to_owned()));
        }
        let mut ids: Vec<String> = running.keys().cloned().collect();
        ids.sort();
        for token in running.values() {
            token.cancel();
        }
        tracing::info!(event = "chat_turn_cancel_requested", thread_id = %thread_id, turns = ids.len(), "cancelling the thread's turns");
        Ok(ids)
    }

    /// Stores the person's message and starts one turn over the thread's history. The turn runs
    /// in its own task; its events come on [`StartedTurn::events`] and to every subscriber.
    pub async fn post(
        &self,
        thread_id: &str,
        content: &str,
        poster: &Poster,
    ) -> Result<StartedTurn, ChatError> {
        let content = content.trim();
        if content.is_empty() {
            return Err(ChatError::Invalid {
                field: "content",
                message: "a message needs some text".to_owned(),
            });
        }
        if content.chars().count() > MAX_MESSAGE_CHARS {
            return Err(ChatError::Invalid {
                field: "content",
                message: format!("a message is at most {MAX_MESSAGE_CHARS} characters"),
            });
        }
        let thread = self.session(thread_id).await?;
        // A turn no model can serve would store a message and a failure note: refuse first.
        if let Err(e) = self.agent.model().profile(CHAT_ROLE, None).await {
            return Err(ChatError::NoModel(match e {
                metaforge_agent::ModelError::NotConfigured { reason, .. } => {
                    format!("no model serves chat turns: {reason}")
                }
                metaforge_agent::ModelError::Failed { message, .. } => {
                    format!("no model serves chat turns: {message}")
                }
            }));
        }
        let mut history_messages = self.sessions.messages(thread_id).await?;
        if history_messages.len() > MAX_HISTORY_MESSAGES {
            history_messages.drain(..history_messages.len() - MAX_HISTORY_MESSAGES);
        }
        let history: Vec<ChatTurn> = history_messages
            .iter()
            .filter(|m| matches!(m.role, MessageRole::User | MessageRole::Assistant))
            .map(|m| ChatTurn {
                role: m.role.as_str().to_owned(),
                content: m.content.clone(),
            })
            .collect();
        let user_message = self
            .sessions
            .append_message(ChatMessage {
                id: self.ids.new_id(),
                session_id: thread_id.to_owned(),
                role: MessageRole::User,
                content: content.to_owned(),
                created_at: self.clock.now(),
            })
            .await?;
        let turn_id = user_message.id.clone();
        let config = self.turn_config(&thread, poster);
        let caller = CallerContext {
            class: poster.class,
            session: Some(thread_id.to_owned()),
            input_channel: InputChannel::None,
            identity: None,
        };
        let agent = self.agent.with_tools(self.tools.for_turn(&caller, None));
        let input = TurnInput {
            system: self.settings.system_prompt.clone(),
            history,
            user: content.to_owned(),
        };
        let cancel = CancellationToken::new();
        let live = self.live(thread_id);
        live.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(turn_id.clone(), cancel.clone());
        let (own_tx, own_rx) = mpsc::unbounded_channel();
        let (report_tx, report_rx) = oneshot::channel();
        let turn = TurnTask {
            sessions: Arc::clone(&self.sessions),
            clock: Arc::clone(&self.clock),
            ids: Arc::clone(&self.ids),
            live,
            thread_id: thread_id.to_owned(),
            turn_id: turn_id.clone(),
            own: own_tx,
        };
        tracing::info!(event = "chat_turn_started", thread_id = %thread_id, turn_id = %turn_id, caller = %poster.class.as_str(), "chat turn started");
        tokio::spawn(async move {
            let report = turn.run(agent, config, input, cancel).await;
            let _ignored = report_tx.send(report);
        });
        Ok(StartedTurn {
            turn_id,
            user_message,
            events: own_rx,
            report: report_rx,
        })
    }

    fn turn_config(&self, thread: &ChatSession, poster: &Poster) -> TurnConfig {
        let mut config = TurnConfig::chat(thread.id.clone());
        config.caller = Caller {
            disabled_gates: self.settings.disabled_gates.clone(),
            project_id: thread.project_id.clone(),
            ..Caller::from(poster.class)
        };
        config.approval_mode = ApprovalMode::Hold;
        config.mode = self.settings.loop_mode;
        config.history_tokens = self.settings.history_tokens;
        config.approval_timeout = self.settings.approval_timeout;
        config.max_iterations = thread
            .limits
            .max_iterations
            .map_or(self.settings.max_iterations, |n| n as usize);
        config.token_budget = thread.limits.token_budget.or(self.settings.token_budget);
        config.requested_by = Some(poster.identity.clone());
        config
    }

    async fn session(&self, thread_id: &str) -> Result<ChatSession, ChatError> {
        match self.sessions.get_session(thread_id).await {
            Err(e) if e.kind == PortErrorKind::NotFound => {
                Err(ChatError::UnknownThread(thread_id.to_owned()))
            }
            other => Ok(other?),
        }
    }
}

/// Most model calls a thread may allow one turn.
pub const MAX_TURN_ITERATIONS: u32 = 1_000;
/// Most tokens a thread may allow one turn.
pub const MAX_TURN_TOKEN_BUDGET: u64 = 1_000_000_000;

fn check_limits(limits: &TurnLimits) -> Result<(), ChatError> {
    if let Some(n) = limits.max_iterations
        && !(1..=MAX_TURN_ITERATIONS).contains(&n)
    {
        return Err(ChatError::Invalid {
            field: "max_iterations",
            message: format!("a turn makes between 1 and {MAX_TURN_ITERATIONS} model calls, not {n}"),
        });
    }
    if let Some(n) = limits.token_budget
        && !(1..=MAX_TURN_TOKEN_BUDGET).contains(&n)
    {
        return Err(ChatError::Invalid {
            field: "token_budget",
            message: format!("a token budget is between 1 and {MAX_TURN_TOKEN_BUDGET}, not {n}"),
        });
    }
    Ok(())
}

/// One running turn: forwards its events, stores its calls and reply, then sends `agent.done`.
struct TurnTask {
    sessions: Arc<dyn SessionStore>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
    live: Arc<LiveThread>,
    thread_id: String,
    turn_id: String,
    own: mpsc::UnboundedSender<ThreadEvent>,
}

impl TurnTask {
    fn send(&self, event: TurnEvent) {
        let event = ThreadEvent {
            thread_id: self.thread_id.clone(),
            turn_id: self.turn_id.clone(),
            event,
        };
        if let Some(stream) = &self.live.stream {
            let _no_subscriber = stream.send(event.clone());
        }
        let _poster_gone = self.own.send(event);
    }

    async fn run(
        self,
        agent: Agent,
        config: TurnConfig,
        input: TurnInput,
        cancel: CancellationToken,
    ) -> TurnReport {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sink = EventSink::channel(tx);
        let turn = agent.run_turn(&config, &input, &sink, &cancel);
        tokio::pin!(turn);
        let mut done: Option<TurnEvent> = None;
        // Forward events as they come; hold `agent.done` back until the reply is stored.
        let result = loop {
            tokio::select! {
                biased;
                Some(event) = rx.recv() => self.forward(event, &mut done),
                result = &mut turn => break result,
            }
        };
        while let Ok(event) = rx.try_recv() {
            self.forward(event, &mut done);
        }
        let report = self.store(result).await;
        self.live
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.turn_id);
        tracing::info!(
            event = "chat_turn_finished",
            thread_id = %self.thread_id,
            turn_id = %self.turn_id,
            calls = report.calls.len(),
            iterations = report.iterations,
            error = report.error.as_ref().and_then(|e| e["code"].as_str()).unwrap_or(""),
            "chat turn finished"
        );
        self.send(done.unwrap_or(TurnEvent::Done {
            usage: report.usage.clone(),
        }));
        report
    }

    fn forward(&self, event: TurnEvent, done: &mut Option<TurnEvent>) {
        match event {
            TurnEvent::Done { .. } => *done = Some(event),
            TurnEvent::MessageDelta { .. }
            | TurnEvent::ToolCall { .. }
            | TurnEvent::ToolResult { .. }
            | TurnEvent::ApprovalRequested { .. }
            | TurnEvent::NotifyError { .. } => self.send(event),
        }
    }

    /// Stores every call as a `tool` message, then the reply (or an error note) as the
    /// assistant's message. A store failure is logged and reported in the answer, never hidden.
    async fn store(
        &self,
        result: Result<metaforge_agent::TurnOutcome, metaforge_agent::TurnFailure>,
    ) -> TurnReport {
        let (calls, usage_events, reply, grounding, error, iterations, provider) = match result {
            Ok(outcome) => (
                outcome.calls,
                outcome.usage_events,
                outcome.reply,
                Some(outcome.grounding),
                None,
                outcome.iterations,
                outcome.provider,
            ),
            Err(failure) => {
                let error = json!({"code": failure.error.code(), "message": failure.error.to_string()});
                let note = format!("(the turn ended without a reply: {})", failure.error);
                (
                    failure.calls,
                    failure.usage_events,
                    note,
                    None,
                    Some(error),
                    0,
                    None,
                )
            }
        };
        for call in &calls {
            // A call record is strings and JSON values: it always serializes.
            if let Ok(record) = serde_json::to_string(call) {
                self.append(MessageRole::Tool, record).await;
            }
        }
        let message = self.append(MessageRole::Assistant, reply).await;
        TurnReport {
            thread_id: self.thread_id.clone(),
            turn_id: self.turn_id.clone(),
            message,
            calls,
            usage: UsageTotals::from_events(&usage_events),
            grounding,
            error,
            iterations,
            provider,
        }
    }

    async fn append(&self, role: MessageRole, content: String) -> ChatMessage {
        let message = ChatMessage {
            id: self.ids.new_id(),
            session_id: self.thread_id.clone(),
            role,
            content,
            created_at: self.clock.now(),
        };
        if let Err(e) = self.sessions.append_message(message.clone()).await {
            tracing::error!(event = "chat_message_not_stored", thread_id = %self.thread_id, role = %role.as_str(), error = %e, "the session ledger refused a message");
        }
        message
    }
}
