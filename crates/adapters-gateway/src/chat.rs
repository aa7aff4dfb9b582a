//! Chat threads over a gateway's HTTP API, for `metaforge chat` and `metaforge sessions`: create
//! or read a thread, post a message and read the turn's SSE events as they come, answer a held
//! call, cancel a turn, search.
//!
//! Events stay JSON (`(name, data)`): the client prints them and the gateway's OpenAPI document is
//! their contract.

use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use metaforge_ports::{PortError, PortErrorKind};
use reqwest::Method;
use serde_json::{Value, json};

use crate::client::{GatewayClient, encode, map_status, segment};

/// How long one turn's stream may stay open: a held call waits for a person (up to the hold's
/// window), so this is generous; cancel or Ctrl-C ends a turn sooner.
const TURN_STREAM_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// One event of a turn's stream.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatEvent {
    /// The SSE event name (`message.delta`, `tool.call`, `tool.result`,
    /// `tool.approval_requested`, `notify_error`, `agent.done`, `stream.lagged`).
    pub name: String,
    /// Its data.
    pub data: Value,
}

/// The chat routes of one gateway.
#[derive(Debug, Clone)]
pub struct ChatClient {
    client: GatewayClient,
}

impl ChatClient {
    /// A chat client over `client`.
    pub fn new(client: GatewayClient) -> Self {
        Self { client }
    }

    /// Creates a thread; the answer is the thread as the gateway stored it.
    pub async fn create_thread(&self, title: Option<&str>) -> Result<Value, PortError> {
        let body = encode(
            &metaforge_api::CreateThread {
                title: title.map(str::to_owned),
                ..metaforge_api::CreateThread::default()
            },
            "thread",
        )?;
        self.client
            .send(Method::POST, "/v1/chat/threads", Some(&body))
            .await
    }

    /// One thread with its messages.
    pub async fn thread(&self, id: &str) -> Result<Value, PortError> {
        self.client
            .send(Method::GET, &format!("/v1/chat/threads/{}", segment(id)), None)
            .await
    }

    /// Posts a message and returns the turn's events as they come, ending after `agent.done`.
    pub async fn post(
        &self,
        thread: &str,
        content: &str,
    ) -> Result<impl Stream<Item = Result<ChatEvent, PortError>> + Send + use<>, PortError> {
        let path = format!("/v1/chat/threads/{}/messages", segment(thread));
        let response = self
            .client
            .request(Method::POST, &path)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .timeout(TURN_STREAM_TIMEOUT)
            .json(&metaforge_api::PostMessage {
                content: content.to_owned(),
            })
            .send()
            .await
            .map_err(|e| unreachable(&self.client, &path, e))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            return Err(map_status(status, &Method::POST, &path, &text));
        }
        Ok(events(response.bytes_stream()))
    }

    /// A person's decision on a held call (the approver is whoever this client's key names).
    pub async fn decide(
        &self,
        approval_id: &str,
        approve: bool,
        note: Option<&str>,
    ) -> Result<Value, PortError> {
        let body = encode(
            &metaforge_api::DecisionRequest {
                decision: if approve {
                    metaforge_api::DecisionKind::Approve
                } else {
                    metaforge_api::DecisionKind::Reject
                },
                note: note.map(str::to_owned),
            },
            "decision",
        )?;
        self.client
            .send(
                Method::POST,
                &format!("/v1/approvals/{}/decision", segment(approval_id)),
                Some(&body),
            )
            .await
    }

    /// Cancels the thread's running turn.
    pub async fn cancel(&self, thread: &str) -> Result<Value, PortError> {
        self.client
            .send(
                Method::POST,
                &format!("/v1/chat/threads/{}/cancel", segment(thread)),
                Some(&json!({})),
            )
            .await
    }

    /// Messages of every thread containing every word of `query`.
    pub async fn search(&self, query: &str, limit: usize) -> Result<Value, PortError> {
        let path = format!("/v1/chat/sessions/search?q={}&limit={limit}", segment(query));
        self.client.send(Method::GET, &path, None).await
    }
}

fn unreachable(client: &GatewayClient, path: &str, error: reqwest::Error) -> PortError {
    PortError::with_source(
        PortErrorKind::Unavailable,
        format!("gateway unreachable: POST {}{path}", client.base_url()),
        error,
    )
}

/// The SSE frames of a turn, as events; a frame whose data is not JSON keeps it as a string.
fn events<S>(bytes: S) -> impl Stream<Item = Result<ChatEvent, PortError>> + Send
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
{
    sse_stream::SseByteStream::new(bytes).filter_map(|item| async move {
        match item {
            Ok(sse) => {
                let data = sse.data?;
                let name = sse.event.unwrap_or_else(|| "message".to_owned());
                let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                Some(Ok(ChatEvent { name, data }))
            }
            Err(e) => Some(Err(PortError::new(
                PortErrorKind::Unavailable,
                format!("the turn's stream was cut: {e}"),
            ))),
        }
    })
}
