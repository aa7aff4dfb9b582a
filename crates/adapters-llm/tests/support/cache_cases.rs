//! The hand-written cache-token fixtures (`fixtures/cache_usage_cases.json`) on the wire: framed
//! as the provider sends them (JSON, SSE, Bedrock event-stream cut into odd-sized reads) and
//! parsed by the family adapter. Shared by this crate's adapter test and `metaforge-app`'s
//! adapter → domain accounting test (included there by `#[path]`), so both read the fixtures the
//! same way.

use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use bytes::Bytes;
use metaforge_adapters_llm::bedrock::{BedrockStreamDecoder, eventstream_frames};
use metaforge_adapters_llm::frames::{StreamDecoder, collect_stream, decode_frames, decode_sse_bytes};
use metaforge_adapters_llm::{anthropic, bedrock, codex, gemini, openai};
use metaforge_ports::LlmResponse;
use serde_json::Value;

pub(crate) fn cases() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../adapters-llm/tests/fixtures/cache_usage_cases.json"
    );
    let file: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    file["cases"].as_array().unwrap().clone()
}

pub(crate) fn sse_body(frames: &[Value]) -> Bytes {
    let mut out = String::new();
    for frame in frames {
        if let Some(event) = frame["event"].as_str() {
            out.push_str(&format!("event: {event}\n"));
        }
        match frame.get("raw").and_then(Value::as_str) {
            Some(raw) => out.push_str(&format!("data: {raw}\n\n")),
            None => out.push_str(&format!("data: {}\n\n", frame["data"])),
        }
    }
    Bytes::from(out)
}

pub(crate) fn eventstream_body(frames: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for frame in frames {
        let message = Message::new(Bytes::from(frame["data"].to_string()))
            .add_header(Header::new(
                ":event-type",
                HeaderValue::String(frame["event"].as_str().unwrap().to_owned().into()),
            ))
            .add_header(Header::new(":message-type", HeaderValue::String("event".into())))
            .add_header(Header::new(
                ":content-type",
                HeaderValue::String("application/json".into()),
            ));
        aws_smithy_eventstream::frame::write_message_to(&message, &mut out).unwrap();
    }
    out
}

async fn sse<D: StreamDecoder>(frames: &[Value], decoder: D) -> LlmResponse {
    collect_stream(decode_sse_bytes(sse_body(frames), decoder))
        .await
        .unwrap()
}

pub(crate) async fn parse(case: &Value) -> LlmResponse {
    let frames = case["frames"].as_array().cloned().unwrap_or_default();
    match (case["family"].as_str().unwrap(), case["kind"].as_str().unwrap()) {
        ("openai_compatible", "json") => openai::parse_completion(&case["body"]).unwrap(),
        ("openai_compatible", "sse") => sse(&frames, openai::OpenAiStreamDecoder::new()).await,
        ("anthropic", "json") => anthropic::parse_message(&case["body"]).unwrap(),
        ("anthropic", "sse") => sse(&frames, anthropic::AnthropicStreamDecoder::new()).await,
        ("gemini", "sse") => sse(&frames, gemini::GeminiStreamDecoder::new()).await,
        ("bedrock", "json") => bedrock::parse_response(&case["body"]).unwrap(),
        ("bedrock", "eventstream") => {
            let bytes = eventstream_body(&frames);
            // Odd-sized chunks: frames straddle reads, as on a real socket.
            let chunks: Vec<Result<Bytes, std::io::Error>> =
                bytes.chunks(7).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
            let events = decode_frames(
                eventstream_frames(futures::stream::iter(chunks)),
                BedrockStreamDecoder::new(),
            );
            collect_stream(events).await.unwrap()
        }
        ("openai_codex", "sse") => sse(&frames, codex::CodexStreamDecoder::new()).await,
        other => panic!("no parser for {other:?}"),
    }
}
