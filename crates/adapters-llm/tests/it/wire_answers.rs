//! How each family's answer is read, at the edges the recordings do not reach: lists sent as
//! `null`, kinds of blocks, items and events the adapter does not read, error objects (their
//! kind taken from the family's own code), a stream event named only by its SSE event, and a
//! field of the wrong type (an error naming it, never a silently empty answer).

use metaforge_adapters_llm::anthropic::{self, AnthropicStreamDecoder};
use metaforge_adapters_llm::bedrock::{self, BedrockStreamDecoder};
use metaforge_adapters_llm::codex::CodexStreamDecoder;
use metaforge_adapters_llm::frames::{Frame, StreamDecoder};
use metaforge_adapters_llm::gemini::{self, GeminiStreamDecoder};
use metaforge_adapters_llm::openai::{self, OpenAiStreamDecoder};
use metaforge_ports::{FinishReason, ProviderErrorKind, StreamEvent};
use serde_json::{Value, json};

fn frame(event: Option<&str>, data: &Value) -> Frame {
    Frame {
        event: event.map(str::to_owned),
        data: data.to_string(),
    }
}

/// Feeds `frames` to `decoder`: the events, or the kind and message of the first error.
fn decode<D: StreamDecoder>(
    mut decoder: D,
    frames: &[(Option<&str>, Value)],
) -> Result<Vec<StreamEvent>, (ProviderErrorKind, String)> {
    let mut events = Vec::new();
    for (event, data) in frames {
        match decoder.on_frame(frame(*event, data)) {
            Ok(more) => events.extend(more),
            Err(err) => return Err((err.kind, err.provider_message)),
        }
    }
    events.extend(decoder.on_end().map_err(|e| (e.kind, e.provider_message))?);
    Ok(events)
}

#[test]
fn openai_reads_null_lists_as_empty_and_an_error_object_as_a_failure() {
    let body = json!({"choices": [{"message": {"content": null, "refusal": "I can't.", "tool_calls": null},
        "finish_reason": "stop"}], "usage": null, "model": "m"});
    let answer = openai::parse_completion(&body).unwrap();
    assert_eq!(answer.text, "I can't.");
    assert!(answer.tool_calls.is_empty() && answer.usage.is_none());
    assert_eq!(answer.finish, Some(FinishReason::Stop));

    let calls = json!({"choices": [{"message": {"tool_calls": [
        {"id": "c1", "function": {"name": "f", "arguments": "{\"a\":1}"}},
        {"id": "c2", "function": {"name": "g"}}]}}]});
    let answer = openai::parse_completion(&calls).unwrap();
    assert_eq!(answer.tool_calls[0].arguments, json!({"a": 1}));
    assert_eq!(
        answer.tool_calls[1].arguments,
        json!({}),
        "no arguments is an empty object"
    );

    let err = openai::parse_completion(&json!({"error": {"message": "boom"}})).unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Server);
    assert!(err.provider_message.contains("boom"), "{}", err.provider_message);
    let err = openai::parse_completion(&json!({"choices": null})).unwrap_err();
    assert!(
        err.provider_message.contains("without choices"),
        "{}",
        err.provider_message
    );
}

#[test]
fn openai_a_field_of_the_wrong_type_is_an_error_naming_it() {
    let err = openai::parse_completion(&json!({"choices": [{"message": {"content": 5}}]})).unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Server);
    assert!(
        err.provider_message.contains("invalid type"),
        "{}",
        err.provider_message
    );
    let chunk = json!({"choices": [{"delta": {"tool_calls": [{"index": "0"}]}}]});
    let (kind, message) = decode(OpenAiStreamDecoder::new(), &[(None, chunk)]).unwrap_err();
    assert_eq!(kind, ProviderErrorKind::Server);
    assert!(message.contains("invalid chunk JSON"), "{message}");
}

#[test]
fn openai_stream_error_chunks_keep_their_kind() {
    let chunk = json!({"error": {"message": "Upstream Overloaded"}});
    let (kind, _) = decode(OpenAiStreamDecoder::new(), &[(None, chunk)]).unwrap_err();
    assert_eq!(kind, ProviderErrorKind::Overloaded);
    let empty = json!({"choices": null, "usage": {"prompt_tokens": 1}});
    let done = json!({"choices": [{"delta": {}, "finish_reason": "length"}]});
    let events = decode(OpenAiStreamDecoder::new(), &[(None, empty), (None, done)]).unwrap();
    assert!(matches!(events[0], StreamEvent::Usage { .. }), "{events:?}");
    assert_eq!(
        events[1],
        StreamEvent::Finish {
            reason: FinishReason::Length
        }
    );
}

#[test]
fn anthropic_skips_blocks_and_events_it_does_not_read_and_maps_error_types() {
    let body = json!({"type": "message", "model": "claude", "stop_reason": "end_turn",
        "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Hi"},
                    {"type": "tool_use", "id": "t1", "name": "f"}]});
    let answer = anthropic::parse_message(&body).unwrap();
    assert_eq!(answer.text, "Hi");
    assert_eq!(
        answer.tool_calls[0].arguments,
        json!({}),
        "a tool use without input"
    );
    let err = anthropic::parse_message(&json!({"type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"}}))
    .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::RateLimit);
    assert_eq!(err.provider_message, "rate_limit_error: slow down");

    let frames = [
        (
            None,
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}}),
        ),
        (None, json!({"type": "ping"})),
        (
            None,
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        ),
        (
            None,
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "x"}}),
        ),
        (None, json!({"type": "content_block_stop", "index": 0})),
        (
            None,
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            None,
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "ok"}}),
        ),
        (
            None,
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        ),
        (None, json!({"type": "message_stop"})),
    ];
    let events = decode(AnthropicStreamDecoder::new(), &frames).unwrap();
    assert_eq!(events[0], StreamEvent::TextDelta { text: "ok".into() });
    let StreamEvent::Usage { usage } = &events[1] else {
        panic!("{events:?}")
    };
    assert_eq!(usage.raw, json!({"input_tokens": 3, "output_tokens": 2}));
    assert_eq!(events.len(), 3, "{events:?}");

    let error = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let (kind, message) = decode(AnthropicStreamDecoder::new(), &[(None, error)]).unwrap_err();
    assert_eq!(
        (kind, message.as_str()),
        (ProviderErrorKind::Overloaded, "overloaded_error: Overloaded")
    );
}

#[test]
fn gemini_reads_a_blocked_prompt_as_a_content_filter_and_stream_errors_by_code() {
    let blocked =
        json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 4}});
    let answer = gemini::parse_response(&blocked).unwrap();
    assert_eq!(answer.finish, Some(FinishReason::ContentFilter));
    assert!(answer.usage.is_some());

    let body = json!({"candidates": [{"content": {"parts": [
        {"text": "thinking…", "thought": true}, {"text": "Done."},
        {"functionCall": {"name": "f", "args": {"x": 1}}}]}, "finishReason": "STOP"}], "modelVersion": "g-1"});
    let answer = gemini::parse_response(&body).unwrap();
    assert_eq!(answer.text, "Done.");
    assert_eq!(answer.tool_calls[0].id, "call_0");
    assert_eq!(
        answer.finish,
        Some(FinishReason::ToolCalls),
        "a call turns STOP into tool calls"
    );
    assert_eq!(answer.model.as_deref(), Some("g-1"));

    let error = json!({"error": {"code": 429, "message": "quota"}});
    let (kind, _) = decode(GeminiStreamDecoder::new(), &[(None, error)]).unwrap_err();
    assert_eq!(kind, ProviderErrorKind::RateLimit);
}

#[test]
fn bedrock_ignores_events_it_does_not_read_but_still_requires_json() {
    let frames = [
        (Some("messageStart"), json!({"role": "assistant"})),
        (
            Some("contentBlockDelta"),
            json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}}),
        ),
        (Some("messageStop"), json!({"stopReason": "end_turn"})),
        (
            Some("metadata"),
            json!({"usage": {"inputTokens": 1, "outputTokens": 1}, "metrics": {"latencyMs": 3}}),
        ),
    ];
    let events = decode(BedrockStreamDecoder::new(), &frames).unwrap();
    assert_eq!(events[0], StreamEvent::TextDelta { text: "Hi".into() });
    assert!(matches!(events[1], StreamEvent::Usage { .. }), "{events:?}");
    assert_eq!(
        events[2],
        StreamEvent::Finish {
            reason: FinishReason::Stop
        }
    );

    let mut decoder = BedrockStreamDecoder::new();
    let broken = Frame {
        event: Some("messageStart".into()),
        data: "{not json".into(),
    };
    let err = decoder.on_frame(broken).unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Server);

    let answer = bedrock::parse_response(&json!({"output": {"message": {"content": null}}})).unwrap();
    assert!(answer.text.is_empty() && answer.tool_calls.is_empty() && answer.finish.is_none());
}

#[test]
fn codex_names_an_event_by_its_sse_name_when_the_data_has_no_type() {
    let frames = [
        (Some("response.created"), json!({"response": {"id": "r"}})),
        (
            None,
            json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_1"}}),
        ),
        (Some("response.output_text.delta"), json!({"delta": "Hi"})),
        (
            None,
            json!({"type": "response.output_item.added", "output_index": 2,
            "item": {"type": "function_call", "id": "fc_1", "name": "f"}}),
        ),
        (
            None,
            json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "{}"}),
        ),
        (
            Some("response.incomplete"),
            json!({"type": 7, "response": {"incomplete_details": {"reason": "max_output_tokens"}}}),
        ),
    ];
    let events = decode(CodexStreamDecoder::new(), &frames).unwrap();
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta { text: "Hi".into() },
            StreamEvent::ToolCallStart {
                index: 0,
                id: "fc_1".into(),
                name: "f".into()
            },
            StreamEvent::ToolCallArgumentsDelta {
                index: 0,
                delta: "{}".into()
            },
            StreamEvent::ToolCallEnd { index: 0 },
            StreamEvent::Finish {
                reason: FinishReason::Length
            },
        ]
    );
}

#[test]
fn codex_failures_take_their_kind_from_the_response_error_the_event_error_or_the_event() {
    let cases = [
        (
            json!({"type": "response.failed", "response": {"error": {"code": "rate_limit_exceeded", "message": "later"}}}),
            ProviderErrorKind::RateLimit,
            "rate_limit_exceeded: later",
        ),
        (
            json!({"type": "error", "error": {"code": "context_length_exceeded", "message": "long"}}),
            ProviderErrorKind::ContextLength,
            "context_length_exceeded: long",
        ),
        (
            json!({"type": "error", "code": "server_is_overloaded", "message": "busy", "param": null}),
            ProviderErrorKind::Overloaded,
            "server_is_overloaded: busy",
        ),
    ];
    for (data, kind, message) in cases {
        let (got_kind, got_message) = decode(CodexStreamDecoder::new(), &[(None, data)]).unwrap_err();
        assert_eq!((got_kind, got_message.as_str()), (kind, message));
    }
}
