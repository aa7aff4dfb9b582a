//! Chat: threads, a conversation, and a turn as it happens. Posting a message starts a turn
//! through the same chat service as `POST /v1/chat/threads/{id}/messages`. Without JavaScript the
//! post answers with a redirect to the thread (the turn runs on; its held calls wait in the
//! approvals queue); with it, the page's script reads the turn's own event stream from the post's
//! answer and shows the reply, each tool call, and each held call with approve and reject inline.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use maud::html;
use metaforge_app::chat::{ChatService, NewThread, Poster};
use serde::Deserialize;

use super::ConsoleState;
use super::page::{self, Nav};
use super::session::ConsoleUser;
use crate::threads::chat_error;

/// Threads the list shows.
const LISTED_THREADS: usize = 100;
/// The header the page's script sends to read the turn's events from the post's answer.
const STREAM_HEADER: &str = "x-console-stream";

/// The chat service, taken by a handler as an argument; a gateway that serves no chat answers
/// the problem page naming why before the handler runs.
pub(crate) struct Chat(Arc<ChatService>);

impl axum::extract::FromRequestParts<Arc<ConsoleState>> for Chat {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        console: &Arc<ConsoleState>,
    ) -> Result<Self, Response> {
        console.gateway.chat.as_ref().map(|chat| Self(Arc::clone(chat))).ok_or_else(|| {
            page::problem(
                &ConsoleUser::of(parts),
                StatusCode::SERVICE_UNAVAILABLE,
                "Chat unavailable",
                "This gateway serves no chat threads: no model serves the chat role (set METAFORGE_ROUTE_CHAT or configure a provider).",
            )
        })
    }
}

/// `GET /chat`: the threads, newest first, and a form for a new one.
pub(crate) async fn threads(Chat(chat): Chat, Extension(user): Extension<ConsoleUser>) -> Response {
    let threads = match chat.list_threads(LISTED_THREADS).await {
        Ok(threads) => threads,
        Err(e) => return page::api_problem(&user, &chat_error(e)),
    };
    page::html(
        StatusCode::OK,
        page::shell(
            &user,
            Nav::Chat,
            "Chat",
            html! {
                form method="post" action="/chat" {
                    (page::csrf_field(&user))
                    label for="title" { "New thread" }
                    input #title name="title" placeholder="A title" maxlength="200";
                    button type="submit" { "Start" }
                }
                @if threads.is_empty() { p { "No threads yet." } }
                @else {
                    ul.threads {
                        @for thread in &threads {
                            li { a href={ "/chat/" (thread.id) } { (thread.title.as_deref().unwrap_or("untitled")) } " " span.small { (page::when(&thread.created_at)) } }
                        }
                    }
                }
            },
        ),
    )
}

/// A new thread's fields.
#[derive(Debug, Deserialize)]
pub(crate) struct NewThreadForm {
    #[serde(default)]
    title: String,
}

/// `POST /chat`: starts a thread and opens it.
pub(crate) async fn create(
    Chat(chat): Chat,
    Extension(user): Extension<ConsoleUser>,
    Form(form): Form<NewThreadForm>,
) -> Response {
    let title = Some(form.title.trim().to_owned()).filter(|t| !t.is_empty());
    match chat
        .create_thread(NewThread {
            title,
            ..NewThread::default()
        })
        .await
    {
        Ok(thread) => Redirect::to(&format!("/chat/{}", thread.id)).into_response(),
        Err(e) => page::api_problem(&user, &chat_error(e)),
    }
}

/// `GET /chat/{id}`: the conversation and the message form.
pub(crate) async fn thread(
    Chat(chat): Chat,
    Extension(user): Extension<ConsoleUser>,
    Path(id): Path<String>,
) -> Response {
    let view = match chat.thread(&id).await {
        Ok(view) => view,
        Err(e) => return page::api_problem(&user, &chat_error(e)),
    };
    page::html(
        StatusCode::OK,
        page::shell(
            &user,
            Nav::Chat,
            view.thread.title.as_deref().unwrap_or("Chat thread"),
            html! {
                ol #messages.messages aria-live="polite" {
                    @for message in &view.messages {
                        li class={ "msg " (message.role.as_str()) } {
                            span.role { (message.role.as_str()) } " " span.small { (page::when(&message.created_at)) }
                            div.content { (message.content) }
                        }
                    }
                }
                @if view.turn_running {
                    p.notice role="status" { "A turn is running on this thread; reload to see its reply. Held calls wait in the " a href="/approvals" { "approvals queue" } "." }
                }
                div #turn aria-live="polite" {}
                form #post.chatform method="post" action={ "/chat/" (id) "/messages" } data-stream="1" {
                    (page::csrf_field(&user))
                    label for="content" { "Message" }
                    textarea #content name="content" rows="3" required maxlength="32000" {}
                    button type="submit" { "Send" }
                }
            },
        ),
    )
}

/// A message.
#[derive(Debug, Deserialize)]
pub(crate) struct MessageForm {
    #[serde(default)]
    content: String,
}

/// `POST /chat/{id}/messages`: starts a turn as the signed-in person. The page's script asks
/// for the turn's events as SSE; a plain form post is sent back to the thread.
pub(crate) async fn post(
    Chat(chat): Chat,
    Extension(user): Extension<ConsoleUser>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<MessageForm>,
) -> Response {
    let poster = Poster {
        class: user.class,
        identity: user.who().to_owned(),
    };
    let started = match chat.post(&id, &form.content, &poster).await {
        Ok(started) => started,
        Err(e) => return page::api_problem(&user, &chat_error(e)),
    };
    if headers.get(STREAM_HEADER).is_none() {
        return Redirect::to(&format!("/chat/{id}")).into_response();
    }
    let events = futures::stream::unfold(started.events, |mut events| async move {
        let event = events.recv().await?;
        let data = serde_json::to_string(&event).unwrap_or_else(|_| "{}".to_owned());
        Some((
            Ok::<Event, Infallible>(Event::default().event(event.name()).data(data)),
            events,
        ))
    });
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}
