//! Chat threads over HTTP: create and list threads, post a message (one agent turn), follow a
//! thread's events as SSE, cancel a running turn, and search every thread's messages.
//!
//! The caller class of a turn is the transport's (`local` on open loopback, `remote` with a
//! key); the authenticated identity is recorded on every hold the turn parks, so the approver of
//! record is whoever answers `POST /v1/approvals/{id}/decision`, never the model.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::StreamExt;
use metaforge_app::chat::{ChatError, ChatService, NewThread, Poster, ThreadEvent};
use metaforge_ports::{ChatMessage, ChatSession, SessionSearchHit, TurnLimits};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::GatewayState;
use super::auth::{Identity, TransportClass};
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiQuery};
use metaforge_api::{CreateThread, PostMessage};

/// Most threads one list answers.
const MAX_LIST: usize = 500;

/// One thread.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ThreadBody {
    /// uuid v7.
    id: String,
    /// The thread this one forks.
    parent_session_id: Option<String>,
    /// The project it is scoped to.
    project_id: Option<String>,
    /// Its title.
    title: Option<String>,
    /// RFC 3339.
    created_at: String,
    /// The thread's own limits (absent = the deployment's defaults).
    #[schema(value_type = Object)]
    limits: TurnLimits,
}

impl From<ChatSession> for ThreadBody {
    fn from(s: ChatSession) -> Self {
        Self {
            id: s.id,
            parent_session_id: s.parent_session_id,
            project_id: s.project_id,
            title: s.title,
            created_at: s.created_at.to_rfc3339(),
            limits: s.limits,
        }
    }
}

/// One stored message.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MessageBody {
    /// uuid v7.
    id: String,
    /// `user`, `assistant`, `tool` (a tool call with its result, as JSON text) or `system`.
    role: String,
    /// Its text.
    content: String,
    /// RFC 3339.
    created_at: String,
}

impl From<ChatMessage> for MessageBody {
    fn from(m: ChatMessage) -> Self {
        Self {
            id: m.id,
            role: m.role.as_str().to_owned(),
            content: m.content,
            created_at: m.created_at.to_rfc3339(),
        }
    }
}

/// A thread with its messages.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ThreadDetail {
    /// The thread.
    #[serde(flatten)]
    thread: ThreadBody,
    /// Its messages, oldest first.
    messages: Vec<MessageBody>,
    /// A turn is running on it now.
    turn_running: bool,
}

/// The threads, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ThreadList {
    /// Threads.
    threads: Vec<ThreadBody>,
}

/// How many threads to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// At most this many (default 100, at most 500).
    #[serde(default)]
    limit: Option<usize>,
}

/// A finished turn: the stored reply, every tool call, usage and the grounding verdict.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TurnBody {
    /// The thread.
    thread_id: String,
    /// The turn (the person's stored message id).
    turn_id: String,
    /// The stored reply (grounding banners first), or the stored note of a failed turn.
    message: MessageBody,
    /// Every tool call, in order: tool, arguments, result, is_error, cached, approval_id.
    #[schema(value_type = Vec<Object>)]
    calls: Vec<metaforge_app::chat::CallRecord>,
    /// The turn's usage (unknown counts null, never 0).
    #[schema(value_type = Object)]
    usage: metaforge_domain::usage::UsageTotals,
    /// The grounding verdict on the model's own text (absent when the turn failed).
    #[schema(value_type = Option<Object>)]
    grounding: Option<metaforge_domain::grounding::GroundingReport>,
    /// Why the turn failed: `{code, message}` (`iteration_cap`, `token_budget`, `canceled`,
    /// `model_error`).
    #[schema(value_type = Option<Object>)]
    error: Option<serde_json::Value>,
    /// Model calls made.
    iterations: usize,
    /// The provider that served the last model call.
    provider: Option<String>,
}

/// The turns a cancel stopped.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Canceled {
    /// The turn ids.
    canceled: Vec<String>,
}

/// What to search for.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct SearchQuery {
    /// Words every hit contains (whole words, any case; query syntax is treated as text).
    q: String,
    /// At most this many hits (default 20, at most 500).
    #[serde(default)]
    limit: Option<usize>,
}

/// Search hits, best first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SearchHits {
    /// Hits.
    hits: Vec<SearchHit>,
}

/// One hit.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SearchHit {
    /// The thread.
    session_id: String,
    /// The message.
    message_id: String,
    /// The message's text.
    content: String,
}

impl From<SessionSearchHit> for SearchHit {
    fn from(h: SessionSearchHit) -> Self {
        Self {
            session_id: h.session_id,
            message_id: h.message_id,
            content: h.content,
        }
    }
}

fn chat(state: &GatewayState) -> Result<&Arc<ChatService>, ApiError> {
    state.chat.as_ref().ok_or_else(|| {
        ApiError::unavailable("chat threads are not served by this process (no session ledger is open)")
    })
}

pub(crate) fn chat_error(err: ChatError) -> ApiError {
    match err {
        ChatError::UnknownThread(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", err.to_string()),
        ChatError::Invalid { field, message } => ApiError::bad_request(field, message),
        ChatError::NoModel(reason) => ApiError::unavailable(reason),
        ChatError::NoTurnRunning(_) => {
            ApiError::new(StatusCode::CONFLICT, "no_turn_running", err.to_string())
        }
        ChatError::Port(e) => e.into(),
    }
}

/// Creates a chat thread.
#[utoipa::path(post, path = "/v1/chat/threads", tag = "chat", request_body = CreateThread,
    responses((status = 201, body = ThreadBody), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn create_thread(
    State(state): State<Arc<GatewayState>>,
    ApiJson(body): ApiJson<CreateThread>,
) -> Result<(StatusCode, Json<ThreadBody>), ApiError> {
    let thread = chat(&state)?
        .create_thread(NewThread {
            title: body.title,
            project_id: body.project_id,
            parent_session_id: body.parent_session_id,
            limits: TurnLimits {
                max_iterations: body.max_iterations,
                token_budget: body.token_budget,
            },
        })
        .await
        .map_err(chat_error)?;
    Ok((StatusCode::CREATED, Json(thread.into())))
}

/// The chat threads, newest first.
#[utoipa::path(get, path = "/v1/chat/threads", tag = "chat", params(ListQuery),
    responses((status = 200, body = ThreadList), (status = 400, description = "A malformed limit", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn list_threads(
    State(state): State<Arc<GatewayState>>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<ThreadList>, ApiError> {
    let limit = query.limit.unwrap_or(100).clamp(1, MAX_LIST);
    let threads = chat(&state)?.list_threads(limit).await.map_err(chat_error)?;
    Ok(Json(ThreadList {
        threads: threads.into_iter().map(ThreadBody::from).collect(),
    }))
}

/// One thread with its messages (tool calls are `tool` messages carrying the call as JSON).
#[utoipa::path(get, path = "/v1/chat/threads/{id}", tag = "chat",
    params(("id" = String, Path, description = "Thread id")),
    responses((status = 200, body = ThreadDetail), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn get_thread(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
) -> Result<Json<ThreadDetail>, ApiError> {
    let view = chat(&state)?.thread(&id).await.map_err(chat_error)?;
    Ok(Json(ThreadDetail {
        thread: view.thread.into(),
        messages: view.messages.into_iter().map(MessageBody::from).collect(),
        turn_running: view.turn_running,
    }))
}

fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"))
}

fn sse_event(event: &ThreadEvent) -> Event {
    let data = serde_json::to_string(event).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    Event::default().event(event.name()).data(data)
}

/// Posts a message and runs one agent turn. With `Accept: text/event-stream` the answer is the
/// turn's events as SSE (`message.delta`, `tool.call`, `tool.result`, `tool.approval_requested`,
/// `notify_error`, then `agent.done` once the reply is stored); otherwise the stored turn as
/// JSON once it ends. A held call waits for a person (`POST /v1/approvals/{id}/decision`); the
/// turn carries on when they answer. A client that goes away does not stop the turn: cancel does.
#[utoipa::path(post, path = "/v1/chat/threads/{id}/messages", tag = "chat", request_body = PostMessage,
    params(("id" = String, Path, description = "Thread id")),
    responses((status = 200, description = "The finished turn (JSON), or its events (text/event-stream)", body = TurnBody),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn post_message(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
    Extension(transport): Extension<TransportClass>,
    Extension(identity): Extension<Identity>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<PostMessage>,
) -> Result<Response, ApiError> {
    let poster = Poster {
        class: transport.0,
        identity: identity.0,
    };
    let started = chat(&state)?
        .post(&id, &body.content, &poster)
        .await
        .map_err(chat_error)?;
    if wants_stream(&headers) {
        let events =
            tokio_stream_from(started.events).map(|event| Ok::<Event, Infallible>(sse_event(&event)));
        return Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response());
    }
    let report = started
        .report
        .await
        .map_err(|_| ApiError::internal("the turn's task ended without a report".to_owned()))?;
    Ok(Json(TurnBody {
        thread_id: report.thread_id,
        turn_id: report.turn_id,
        message: report.message.into(),
        calls: report.calls,
        usage: report.usage,
        grounding: report.grounding,
        error: report.error,
        iterations: report.iterations,
        provider: report.provider,
    })
    .into_response())
}

/// The events of a turn's own channel, ending with the channel.
fn tokio_stream_from(
    mut events: tokio::sync::mpsc::UnboundedReceiver<ThreadEvent>,
) -> impl futures::Stream<Item = ThreadEvent> {
    futures::stream::poll_fn(move |cx| events.poll_recv(cx))
}

/// Every event of the thread from now on, whoever posted the turn: message deltas, tool calls
/// and results, `tool.approval_requested` with the approval id, `notify_error` before
/// `agent.done` when a turn fails, `agent.done` with usage. A subscriber too slow to keep up is
/// told how many events it missed (`stream.lagged`).
#[utoipa::path(get, path = "/v1/chat/threads/{id}/stream", tag = "chat",
    params(("id" = String, Path, description = "Thread id")),
    responses((status = 200, description = "text/event-stream of the thread's turn events"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn stream(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let receiver = chat(&state)?.subscribe(&id).await.map_err(chat_error)?;
    let events = futures::stream::unfold(receiver, |mut receiver| async move {
        use tokio::sync::broadcast::error::RecvError;
        let event = match receiver.recv().await {
            Ok(event) => sse_event(&event),
            Err(RecvError::Lagged(missed)) => Event::default()
                .event("stream.lagged")
                .data(serde_json::json!({"missed": missed}).to_string()),
            Err(RecvError::Closed) => return None,
        };
        Some((Ok::<Event, Infallible>(event), receiver))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}

/// Cancels the thread's running turn: the model call and tool calls in flight stop, its open
/// holds close as canceled, and the turn ends with `notify_error` (`canceled`) then
/// `agent.done`. 409 when no turn is running.
#[utoipa::path(post, path = "/v1/chat/threads/{id}/cancel", tag = "chat",
    params(("id" = String, Path, description = "Thread id")),
    responses((status = 202, body = Canceled), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "No turn is running", body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn cancel(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Canceled>), ApiError> {
    let canceled = chat(&state)?.cancel(&id).await.map_err(chat_error)?;
    Ok((StatusCode::ACCEPTED, Json(Canceled { canceled })))
}

/// Searches every thread's messages.
#[utoipa::path(get, path = "/v1/chat/sessions/search", tag = "chat", params(SearchQuery),
    responses((status = 200, body = SearchHits), (status = 400, description = "No word to search for", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn search(
    State(state): State<Arc<GatewayState>>,
    ApiQuery(query): ApiQuery<SearchQuery>,
) -> Result<Json<SearchHits>, ApiError> {
    let limit = query.limit.unwrap_or(20).clamp(1, MAX_LIST);
    let hits = chat(&state)?.search(&query.q, limit).await.map_err(chat_error)?;
    Ok(Json(SearchHits {
        hits: hits.into_iter().map(SearchHit::from).collect(),
    }))
}
