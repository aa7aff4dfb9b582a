//! `POST /v1/chat/completions`: an OpenAI-compatible front door onto the provider pipeline.
//!
//! `model` is a routing role (resolved by the domain's routing rules over the gateway's harness
//! configuration, the durable selection included), an explicit `provider:model` (family-checked),
//! or a model name as OpenAI SDKs send it (`gpt-4o-mini`, `openai/gpt-4o-mini`; see
//! `gateway::models`). Errors are in OpenAI's shape so SDKs show the reason.
//! Every answer says who served it (`x-metaforge-served-by`, and `x-metaforge-fell-back-from` when a
//! fallback answered); every call is one usage event attributed to the role and the caller.

use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use metaforge_domain::usage::normalize_usage;
use metaforge_ports::{FinishReason, ProviderErrorKind, RawUsage, StreamEvent, ToolCall};
use serde::Serialize;
use utoipa::ToSchema;

use super::GatewayState;
use super::auth::Identity;
use super::chat_request::ChatCompletionRequest;
use super::chat_request::{ChatFunctionCall, ChatToolCall, FunctionKind, to_llm_request};
use super::error::{ApiError, OpenAiErrorBody};
use super::extract::ApiJson;
use super::models::{ModelTarget, resolve_model};
use metaforge_app::pipeline::{CallSpec, PipelineError, Served, UsageScope, with_usage_scope};

/// Response header naming the `provider:model` that served the answer.
pub const SERVED_BY_HEADER: &str = "x-metaforge-served-by";
/// Request header attributing a call to a design-flow run (usage by run, the per-run spend alarm).
pub const RUN_ID_HEADER: &str = "x-metaforge-run-id";
/// The longest run id accepted: ids are uuids; anything far longer is not one.
const MAX_RUN_ID_LEN: usize = 128;

/// Response header naming the configured primary `provider:model` when a fallback served.
pub const FELL_BACK_FROM_HEADER: &str = "x-metaforge-fell-back-from";

/// The assistant's message.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AssistantMessage {
    /// Always `assistant`.
    role: &'static str,
    /// The text; null when the model only made tool calls.
    content: Option<String>,
    /// Tool calls, when the model made any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ChatToolCall>,
}

/// One choice.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ChatChoice {
    /// Always 0.
    index: u32,
    /// The answer.
    message: AssistantMessage,
    /// `stop`, `length`, `tool_calls`, `content_filter`; null when the provider did not say.
    finish_reason: Option<String>,
}

/// Token counts; null when the provider did not report them (unknown is never 0).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ChatUsage {
    /// Prompt tokens.
    prompt_tokens: Option<u64>,
    /// Completion tokens.
    completion_tokens: Option<u64>,
    /// Their sum, when both are known.
    total_tokens: Option<u64>,
}

/// An OpenAI-compatible chat completion.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ChatCompletion {
    /// `chatcmpl-<request id>`.
    id: String,
    /// Always `chat.completion`.
    object: &'static str,
    /// Unix seconds.
    created: i64,
    /// The model that served.
    model: String,
    /// One choice.
    choices: Vec<ChatChoice>,
    /// Token counts; null when unknown.
    usage: Option<ChatUsage>,
}

fn finish_text(reason: &FinishReason) -> String {
    match reason {
        FinishReason::Stop => "stop".to_owned(),
        FinishReason::Length => "length".to_owned(),
        FinishReason::ToolCalls => "tool_calls".to_owned(),
        FinishReason::ContentFilter => "content_filter".to_owned(),
        FinishReason::Other(other) => other.clone(),
    }
}

/// Arguments as OpenAI's wire carries them: JSON text (a string the provider sent that was not
/// JSON is passed through as it came, not re-quoted).
fn arguments_text(arguments: &serde_json::Value) -> String {
    match arguments {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Null
        | serde_json::Value::Bool(_)
        | serde_json::Value::Number(_)
        | serde_json::Value::Array(_)
        | serde_json::Value::Object(_) => arguments.to_string(),
    }
}

fn wire_tool_call(call: ToolCall) -> ChatToolCall {
    ChatToolCall {
        id: call.id,
        kind: FunctionKind::Function.as_str().to_owned(),
        function: ChatFunctionCall {
            name: call.name,
            arguments: arguments_text(&call.arguments),
        },
    }
}

/// Turns the pipeline's stream events into OpenAI chunk deltas. Tool-call indices are renumbered
/// 0, 1, … in the order calls start, whatever position the family gave them (Anthropic counts
/// text blocks too), because OpenAI clients index their call buffers by it.
#[derive(Debug, Default)]
struct ChunkDeltas {
    call_index: std::collections::BTreeMap<u32, u32>,
}

impl ChunkDeltas {
    /// The delta and finish reason `event` becomes; `None` for events with no wire chunk.
    fn delta_for(&mut self, event: StreamEvent) -> Option<(serde_json::Value, Option<String>)> {
        match event {
            StreamEvent::TextDelta { text } => Some((serde_json::json!({"content": text}), None)),
            StreamEvent::ToolCallStart { index, id, name } => {
                let next = u32::try_from(self.call_index.len()).unwrap_or(u32::MAX);
                let out = *self.call_index.entry(index).or_insert(next);
                Some((
                    serde_json::json!({"tool_calls": [{"index": out, "id": id, "type": "function",
                        "function": {"name": name, "arguments": ""}}]}),
                    None,
                ))
            }
            StreamEvent::ToolCallArgumentsDelta { index, delta } => {
                let out = self.call_index.get(&index).copied().unwrap_or(index);
                Some((
                    serde_json::json!({"tool_calls": [{"index": out, "function": {"arguments": delta}}]}),
                    None,
                ))
            }
            StreamEvent::Finish { reason } => Some((serde_json::json!({}), Some(finish_text(&reason)))),
            // A call's end adds nothing to OpenAI's chunks; usage is its own chunk (see `completions`).
            StreamEvent::ToolCallEnd { .. } | StreamEvent::Usage { .. } => None,
        }
    }
}

fn chat_usage(raw: &RawUsage) -> ChatUsage {
    let n = normalize_usage(raw.family, &raw.raw);
    ChatUsage {
        prompt_tokens: n.prompt_tokens,
        completion_tokens: n.completion_tokens,
        total_tokens: n.prompt_tokens.zip(n.completion_tokens).map(|(p, c)| p + c),
    }
}

/// `model` as a call (see `gateway::models` for what it may name): a role is resolved now by the
/// routing rules (so a selection stored a second ago is honoured) and passed as the primary.
async fn call_spec(state: &GatewayState, model: &str, session_id: String) -> Result<CallSpec, ApiError> {
    let harness = &state.harness;
    let (selection, _) = harness.usable_selection().await?;
    match resolve_model(harness, selection.as_deref(), model)? {
        ModelTarget::Role(role) => Ok(harness.role_call(&role, session_id).await?),
        ModelTarget::Explicit(candidate) => Ok(CallSpec {
            role: "chat".to_owned(),
            explicit: Some(candidate),
            session_id,
        }),
    }
}

/// Every failed attempt as the error `details` list it: provider, model, attempt, error kind,
/// upstream status and message.
pub(super) fn attempts_json(attempts: &[metaforge_app::pipeline::Attempt]) -> Vec<serde_json::Value> {
    attempts
        .iter()
        .map(|a| {
            serde_json::json!({
                "provider": a.provider, "model": a.model, "attempt": a.attempt,
                "error": a.error.kind.as_str(), "status": a.error.status,
                "message": a.error.provider_message,
            })
        })
        .collect()
}

/// A pipeline failure in the seed's codes: 429 (with Retry-After) when every attempt was rate
/// limited, 503 with every attempt in `details` otherwise.
fn pipeline_error(err: PipelineError) -> ApiError {
    match err {
        PipelineError::AllProvidersFailed { role, attempts, .. } => {
            let details = serde_json::json!({"role": role, "attempts": attempts_json(&attempts)});
            let all_limited = !attempts.is_empty()
                && attempts
                    .iter()
                    .all(|a| a.error.kind == ProviderErrorKind::RateLimit);
            if all_limited {
                let retry = attempts
                    .iter()
                    .filter_map(|a| a.error.retry_after)
                    .max()
                    .map_or(1, |d| d.as_secs().max(1));
                ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    format!("every provider for role '{role}' is rate limited"),
                )
                .with_details(details)
                .with_retry_after(retry)
            } else {
                ApiError::unavailable(format!("all providers failed for role '{role}'")).with_details(details)
            }
        }
        other @ (PipelineError::Config(_)
        | PipelineError::ProviderNotWired(_)
        | PipelineError::Credentials(_)) => ApiError::unavailable(other.to_string()),
    }
}

/// The run a call is attributed to, from [`RUN_ID_HEADER`]; a present but unusable value is a 400
/// naming the header (never silently unattributed).
fn run_id(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(RUN_ID_HEADER) else {
        return Ok(None);
    };
    let text = value.to_str().map(str::trim).unwrap_or_default();
    if text.is_empty() || text.len() > MAX_RUN_ID_LEN || !text.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ApiError::bad_request(
            RUN_ID_HEADER,
            format!("{RUN_ID_HEADER} must be a run id (1 to {MAX_RUN_ID_LEN} visible ASCII characters)"),
        ));
    }
    Ok(Some(text.to_owned()))
}

fn provenance<T>(served: &Served<T>) -> Vec<(HeaderName, HeaderValue)> {
    let mut headers = Vec::new();
    if let Ok(v) = HeaderValue::from_str(&format!("{}:{}", served.provider, served.model)) {
        headers.push((HeaderName::from_static(SERVED_BY_HEADER), v));
    }
    if let Some(fallback) = &served.fallback
        && let Ok(v) = HeaderValue::from_str(&format!("{}:{}", fallback.primary, fallback.primary_model))
    {
        headers.push((HeaderName::from_static(FELL_BACK_FROM_HEADER), v));
    }
    headers
}

/// One OpenAI-compatible chat completion through the provider pipeline.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "chat", request_body = ChatCompletionRequest,
    responses(
        (status = 200, description = "The completion (JSON), or `text/event-stream` chunks ending with `data: [DONE]` when `stream` is true",
            body = ChatCompletion,
            headers(("x-metaforge-served-by" = String, description = "provider:model that served"),
                    ("x-metaforge-fell-back-from" = String, description = "configured primary when a fallback served"))),
        (status = 400, description = "Malformed body, a model that names nothing served here (the accepted forms are in the message), family mismatch", body = OpenAiErrorBody),
        (status = 401, body = OpenAiErrorBody),
        (status = 429, description = "Every provider is rate limited; see Retry-After", body = OpenAiErrorBody),
        (status = 503, description = "No pipeline, no route, or every provider failed (attempts in details)", body = OpenAiErrorBody)),
    params(("x-metaforge-run-id" = Option<String>, Header,
        description = "The design-flow run this call works for: its usage is attributed to the run and counts toward the run's spend alarm")),
    security(("api_key" = [])))]
pub(crate) async fn completions(
    State(state): State<Arc<GatewayState>>,
    Extension(identity): Extension<Identity>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let llm_request = to_llm_request(&request)?;
    let request_id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("local")
        .to_owned();
    let run_id = run_id(&headers)?;
    let spec = call_spec(&state, &request.model, request_id.clone()).await?;
    let Some(pipeline) = state.pipeline.clone() else {
        return Err(ApiError::unavailable(
            metaforge_app::pipeline::no_pipeline_reason(&spec.role),
        ));
    };
    let scope = UsageScope {
        run_id,
        role: Some(spec.role.clone()),
        caller: Some(identity.0.clone()),
        ..UsageScope::default()
    };
    let id = format!("chatcmpl-{request_id}");
    let created = state.clock.now().timestamp();
    if request.stream == Some(true) {
        let served = with_usage_scope(scope, pipeline.stream(&spec, llm_request))
            .await
            .map_err(pipeline_error)?;
        let extra = provenance(&served);
        let model = served.model.clone();
        let envelope = move |choices: serde_json::Value| {
            serde_json::json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": choices,
            })
        };
        let chunk_envelope = envelope.clone();
        let chunk = move |delta: serde_json::Value, finish: Option<String>| {
            chunk_envelope(serde_json::json!([{"index": 0, "delta": delta, "finish_reason": finish}]))
        };
        let first = chunk(serde_json::json!({"role": "assistant", "content": ""}), None);
        let include_usage = request.include_usage();
        let events = served.value;
        let mut deltas = ChunkDeltas::default();
        let body = futures::stream::once(async move { first })
            .chain(events.filter_map(move |event| {
                let out = match event {
                    // OpenAI's usage chunk: empty choices, the counts (null when unknown).
                    Ok(StreamEvent::Usage { usage }) if include_usage => {
                        let mut value = envelope(serde_json::json!([]));
                        value["usage"] = serde_json::to_value(chat_usage(&usage)).unwrap_or_default();
                        Some(value)
                    }
                    Ok(event) => deltas
                        .delta_for(event)
                        .map(|(delta, finish)| chunk(delta, finish)),
                    Err(err) => Some(
                        serde_json::json!({"error": {"message": err.to_string(), "type": err.kind.as_str()}}),
                    ),
                };
                futures::future::ready(out)
            }))
            .map(|value| Ok::<Event, std::convert::Infallible>(Event::default().data(value.to_string())))
            .chain(futures::stream::once(async {
                Ok(Event::default().data("[DONE]"))
            }));
        // The usage event's attribution was fixed when the stream started (inside the scope);
        // the metered stream records it when the stream ends.
        let mut response = Sse::new(body).into_response();
        response.headers_mut().extend(extra);
        return Ok(response);
    }
    let served = with_usage_scope(scope, pipeline.complete(&spec, llm_request))
        .await
        .map_err(pipeline_error)?;
    let extra = provenance(&served);
    let value = served.value;
    let completion = ChatCompletion {
        id,
        object: "chat.completion",
        created,
        model: value.model.clone().unwrap_or_else(|| served.model.clone()),
        choices: vec![ChatChoice {
            index: 0,
            message: AssistantMessage {
                role: "assistant",
                content: (!value.text.is_empty() || value.tool_calls.is_empty()).then_some(value.text),
                tool_calls: value.tool_calls.into_iter().map(wire_tool_call).collect(),
            },
            finish_reason: value.finish.as_ref().map(finish_text),
        }],
        usage: value.usage.as_ref().map(chat_usage),
    };
    let mut response = axum::Json(completion).into_response();
    response.headers_mut().extend(extra);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use metaforge_ports::{FinishReason, StreamEvent};
    use serde_json::json;

    use super::ChunkDeltas;

    #[test]
    fn tool_call_indices_are_renumbered_in_start_order_whatever_the_family_counted() {
        // Anthropic-style positions: a text block at 0, tool blocks at 1 and 3.
        let events = [
            StreamEvent::TextDelta {
                text: "Let me check.".into(),
            },
            StreamEvent::ToolCallStart {
                index: 1,
                id: "toolu_a".into(),
                name: "get_weather".into(),
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 1,
                delta: "{\"location\":".into(),
            },
            StreamEvent::ToolCallStart {
                index: 3,
                id: "toolu_b".into(),
                name: "local_time".into(),
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 1,
                delta: "\"Paris\"}".into(),
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 3,
                delta: "{}".into(),
            },
            StreamEvent::ToolCallEnd { index: 1 },
            StreamEvent::Finish {
                reason: FinishReason::ToolCalls,
            },
        ];
        let mut deltas = ChunkDeltas::default();
        let out: Vec<_> = events.into_iter().filter_map(|e| deltas.delta_for(e)).collect();
        let expected = vec![
            (json!({"content": "Let me check."}), None),
            (
                json!({"tool_calls": [{"index": 0, "id": "toolu_a", "type": "function",
                    "function": {"name": "get_weather", "arguments": ""}}]}),
                None,
            ),
            (
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"location\":"}}]}),
                None,
            ),
            (
                json!({"tool_calls": [{"index": 1, "id": "toolu_b", "type": "function",
                    "function": {"name": "local_time", "arguments": ""}}]}),
                None,
            ),
            (
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
                None,
            ),
            (
                json!({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
                None,
            ),
            (json!({}), Some("tool_calls".to_owned())),
        ];
        assert_eq!(out, expected);
    }
}
