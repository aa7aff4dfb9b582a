//! Contract tests: the requests the OpenAI-compatible adapter sends (plain, streaming, tools) are
//! accepted by the Steady mock serving OpenAI's own OpenAPI description, and Bedrock request,
//! response and stream-event shapes conform to AWS's botocore service model.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns may panic"
)]

use std::process::{Command, Stdio};
use std::time::Duration;

use metaforge_adapters_llm::{bedrock, openai};
use metaforge_ports::{ContentPart, LlmMessage, LlmRequest, LlmRole, ModelTool, SystemPrompt, ToolChoice};
use metaforge_test_support::{ChildGuard, Peer, net, require};
use serde_json::{Value, json};

fn tool_request() -> LlmRequest {
    LlmRequest {
        model: "gpt-4o".into(),
        system: SystemPrompt {
            stable: "You are MetaForge.".into(),
            volatile_suffix: Some("Round note: 2 tools dropped.".into()),
        },
        messages: vec![
            LlmMessage::user_text("weather in Paris?"),
            LlmMessage {
                role: LlmRole::Assistant,
                content: vec![ContentPart::ToolCall {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    arguments: json!({"location": "Paris"}),
                }],
            },
            LlmMessage {
                role: LlmRole::User,
                content: vec![ContentPart::ToolResult {
                    call_id: "call_1".into(),
                    name: "get_weather".into(),
                    content: "18C, cloudy".into(),
                    is_error: false,
                }],
            },
        ],
        tools: vec![ModelTool {
            name: "get_weather".into(),
            description: "Current weather for a city".into(),
            parameters: json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}),
        }],
        tool_choice: ToolChoice::Required,
        max_tokens: Some(128),
        temperature: Some(0.2),
        stop: vec!["END".into()],
        prompt_cache_key: Some("mf-0123456789abcdef".into()),
    }
}

fn plain_request() -> LlmRequest {
    LlmRequest {
        model: "gpt-4o".into(),
        messages: vec![LlmMessage::user_text("hi")],
        ..LlmRequest::default()
    }
}

/// A typed request body as the JSON it puts on the wire.
fn sent(body: impl serde::Serialize) -> Value {
    serde_json::to_value(body).unwrap()
}

struct Steady {
    _child: ChildGuard,
    url: String,
}

/// Steady serving OpenAI's OpenAPI description from the recordings; `None` (skipped) when Steady
/// or the recordings are missing. Steady's launcher execs a native binary, so the whole process
/// group is killed on drop.
fn start_steady() -> Option<Steady> {
    let cli = require(Peer::Steady)?;
    let spec = require(Peer::Recordings)?.join("contracts/openai-openapi.yaml");
    let port = net::unused_port();
    let child = ChildGuard::spawn(
        Command::new("node")
            .arg(&cli)
            .args(["--host", "127.0.0.1", "-p", &port.to_string(), "-q"])
            .arg(&spec)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .unwrap_or_else(|e| panic!("cannot start node for Steady: {e}"));
    assert!(
        net::wait_listening(("127.0.0.1", port), Duration::from_secs(60)),
        "Steady did not listen on {port} within 60s"
    );
    Some(Steady {
        _child: child,
        url: format!("http://127.0.0.1:{port}"),
    })
}

async fn post(url: &str, body: &Value) -> (u16, String) {
    metaforge_adapters_llm::http::ensure_crypto_provider();
    let response = reqwest::Client::new()
        .post(format!("{url}/chat/completions"))
        .bearer_auth("sk-contract")
        .json(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn openai_requests_plain_streaming_and_with_tools_are_accepted_by_the_openapi_contract() {
    let Some(steady) = start_steady() else {
        return;
    };
    let (plain, tools) = (plain_request(), tool_request());
    let cases = [
        ("plain", sent(openai::request_body(&plain, false, false))),
        ("streaming", sent(openai::request_body(&plain, true, true))),
        ("tools", sent(openai::request_body(&tools, false, true))),
        ("tools streaming", sent(openai::request_body(&tools, true, true))),
    ];
    for (name, body) in cases {
        let (status, text) = post(&steady.url, &body).await;
        assert!(
            (200..300).contains(&status),
            "{name}: HTTP {status}: {text}\nbody: {body}"
        );
    }
    // The contract is live: a body with a wrong type is refused, naming the path.
    let mut broken = sent(openai::request_body(&tools, false, true));
    broken["temperature"] = json!("hot");
    let (status, text) = post(&steady.url, &broken).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("body.temperature"), "{text}");
}

/// A small checker for botocore shapes: structures (members, required, unions), lists, maps
/// and scalars. Members bound to the URI or headers are not part of the body.
struct Botocore {
    shapes: Value,
}

impl Botocore {
    fn load(upstream: &std::path::Path) -> Self {
        let path = upstream.join("contracts/bedrock-runtime-service-2.json");
        let model: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        Self {
            shapes: model["shapes"].clone(),
        }
    }

    fn check(&self, shape_name: &str, value: &Value, path: &str, errors: &mut Vec<String>) {
        let shape = &self.shapes[shape_name];
        if shape["document"] == true {
            return; // a Document is any JSON value
        }
        match shape["type"].as_str().unwrap_or_default() {
            "structure" => {
                let Some(object) = value.as_object() else {
                    errors.push(format!("{path}: expected object for {shape_name}"));
                    return;
                };
                let members = shape["members"].as_object().unwrap();
                for (key, member_value) in object {
                    match members.get(key) {
                        Some(member) => {
                            let target = member["shape"].as_str().unwrap();
                            self.check(target, member_value, &format!("{path}.{key}"), errors);
                        }
                        None => errors.push(format!("{path}.{key}: not a member of {shape_name}")),
                    }
                }
                for required in shape["required"].as_array().into_iter().flatten() {
                    let name = required.as_str().unwrap();
                    let in_body = members[name].get("location").is_none();
                    if in_body && !object.contains_key(name) {
                        errors.push(format!("{path}: missing required {name} of {shape_name}"));
                    }
                }
                if shape["union"] == true && object.len() != 1 {
                    errors.push(format!("{path}: union {shape_name} must set exactly one member"));
                }
            }
            "list" => match value.as_array() {
                Some(items) => {
                    let member = shape["member"]["shape"].as_str().unwrap();
                    for (i, item) in items.iter().enumerate() {
                        self.check(member, item, &format!("{path}[{i}]"), errors);
                    }
                }
                None => errors.push(format!("{path}: expected array for {shape_name}")),
            },
            "string" if !value.is_string() => errors.push(format!("{path}: expected string")),
            "integer" | "long" if !value.is_u64() && !value.is_i64() => {
                errors.push(format!("{path}: expected integer"));
            }
            "float" | "double" if !value.is_number() => errors.push(format!("{path}: expected number")),
            "boolean" if !value.is_boolean() => errors.push(format!("{path}: expected boolean")),
            _ => {}
        }
    }

    fn assert_conforms(&self, shape: &str, value: &Value) {
        let mut errors = Vec::new();
        self.check(shape, value, shape, &mut errors);
        assert!(
            errors.is_empty(),
            "{shape} violations: {errors:#?}\nvalue: {value}"
        );
    }
}

#[test]
fn bedrock_converse_request_bodies_conform_to_the_botocore_model() {
    let Some(upstream) = require(Peer::Recordings) else {
        return;
    };
    let model = Botocore::load(&upstream);
    let (plain, tools) = (plain_request(), tool_request());
    model.assert_conforms("ConverseRequest", &sent(bedrock::request_body(&tools)));
    model.assert_conforms("ConverseStreamRequest", &sent(bedrock::request_body(&plain)));
    for choice in [
        ToolChoice::Auto,
        ToolChoice::None,
        ToolChoice::Tool("get_weather".into()),
    ] {
        let request = LlmRequest {
            tool_choice: choice,
            ..tool_request()
        };
        model.assert_conforms("ConverseRequest", &sent(bedrock::request_body(&request)));
    }
}

#[test]
fn bedrock_converse_response_and_stream_events_the_parser_reads_are_contract_shapes() {
    let Some(upstream) = require(Peer::Recordings) else {
        return;
    };
    let model = Botocore::load(&upstream);
    let response = json!({
        "output": {"message": {"role": "assistant", "content": [
            {"text": "Checking."},
            {"toolUse": {"toolUseId": "tu_1", "name": "get_weather", "input": {"location": "Paris"}}}]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 20, "outputTokens": 9, "totalTokens": 1229,
                  "cacheReadInputTokens": 1000, "cacheWriteInputTokens": 200},
        "metrics": {"latencyMs": 420}
    });
    model.assert_conforms("ConverseResponse", &response);
    let parsed = bedrock::parse_response(&response).unwrap();
    assert_eq!(parsed.tool_calls[0].arguments["location"], "Paris");
    assert_eq!(parsed.usage.unwrap().raw["cacheReadInputTokens"], 1000);

    let events = [
        ("messageStart", json!({"role": "assistant"})),
        (
            "contentBlockStart",
            json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tu_1", "name": "get_weather"}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"location\":\"Paris\"}"}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "Checking."}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 1})),
        ("messageStop", json!({"stopReason": "tool_use"})),
        (
            "metadata",
            json!({"usage": {"inputTokens": 20, "outputTokens": 9, "totalTokens": 1229,
            "cacheReadInputTokens": 1000, "cacheWriteInputTokens": 200}, "metrics": {"latencyMs": 420}}),
        ),
    ];
    for (event, payload) in &events {
        model.assert_conforms("ConverseStreamOutput", &json!({ *event: payload }));
    }
}
