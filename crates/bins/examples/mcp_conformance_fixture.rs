//! TEST-ONLY: the MetaForge sidecar transport serving the MCP conformance suite's fixture tools
//! (`test_simple_text`, `test_elicitation`, …) next to the product's own tools.
//!
//! The product binary never offers these; this example exists so
//! `@modelcontextprotocol/conformance server --url …` can exercise the sidecar's protocol
//! plumbing (the same `bind_http` and `SidecarServer`) on scenarios that need fixtures.
//! Usage: `cargo run -p metaforge-bins --example mcp_conformance_fixture -- 127.0.0.1:PORT`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use metaforge_ports::{
    CallerContext, HostCallOutcome, InputQuestion, PortError, ResourceTemplateDescriptor, ResourceText,
    ToolDescriptor, ToolHints, ToolHost, ToolOutput,
};
use metaforge_sidecar::{SidecarResource, SidecarTool, read_only_host};
use serde_json::{Map, Value, json};

/// A 1x1 red PNG.
const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A 44-byte silent WAV header.
const WAV_SILENT: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";

struct Fixture {
    name: &'static str,
    schema: Value,
}

fn descriptor(name: &str, schema: Value) -> ToolDescriptor {
    ToolDescriptor {
        name: name.to_owned(),
        title: None,
        description: format!("conformance fixture {name}"),
        input_schema: schema,
        hints: ToolHints {
            read_only_hint: Some(true),
            ..ToolHints::default()
        },
    }
}

fn output(content: Vec<Value>, is_error: bool) -> HostCallOutcome {
    HostCallOutcome::Done(ToolOutput {
        content,
        structured: None,
        is_error,
    })
}

#[async_trait::async_trait]
impl SidecarTool for Fixture {
    fn descriptor(&self) -> ToolDescriptor {
        descriptor(self.name, self.schema.clone())
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        Ok(match self.name {
            "test_simple_text" => output(
                vec![json!({"type": "text", "text": "This is a simple text response for testing."})],
                false,
            ),
            "test_image_content" => output(
                vec![json!({"type": "image", "data": PNG_1X1, "mimeType": "image/png"})],
                false,
            ),
            "test_audio_content" => output(
                vec![json!({"type": "audio", "data": WAV_SILENT, "mimeType": "audio/wav"})],
                false,
            ),
            "test_embedded_resource" => output(
                vec![json!({"type": "resource", "resource": {
                    "uri": "test://embedded-resource", "mimeType": "text/plain",
                    "text": "This is an embedded resource content."}})],
                false,
            ),
            "test_multiple_content_types" => output(
                vec![
                    json!({"type": "text", "text": "Multiple content types test:"}),
                    json!({"type": "image", "data": PNG_1X1, "mimeType": "image/png"}),
                    json!({"type": "resource", "resource": {
                        "uri": "test://mixed-content-resource", "mimeType": "application/json",
                        "text": "{\"test\":\"data\",\"value\":123}"}}),
                ],
                false,
            ),
            "test_error_handling" => output(
                vec![json!({"type": "text", "text": "This tool intentionally returns an error for testing"})],
                true,
            ),
            // Elicitation through the sidecar's own needs-input path.
            _ => match arguments.get("answers") {
                Some(answers) => output(
                    vec![
                        json!({"type": "text", "text": format!("User response: <action: accept, content: {answers}>")}),
                    ],
                    false,
                ),
                None => HostCallOutcome::NeedsInput {
                    message: arguments
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("Please provide your details")
                        .to_owned(),
                    questions: vec![
                        InputQuestion {
                            id: "username".into(),
                            prompt: "User's response".into(),
                            choices: vec![],
                            optional: false,
                        },
                        InputQuestion {
                            id: "email".into(),
                            prompt: "User's email address".into(),
                            choices: vec![],
                            optional: false,
                        },
                    ],
                    result: ToolOutput::error(json!({"status": "error", "error": "elicitation_unsupported"})),
                },
            },
        })
    }
}

struct FixtureResources;

#[async_trait::async_trait]
impl SidecarResource for FixtureResources {
    fn template(&self) -> ResourceTemplateDescriptor {
        ResourceTemplateDescriptor {
            uri_template: "test://template/{id}/data".into(),
            name: "template".into(),
            description: "conformance fixture template".into(),
            mime_type: "application/json".into(),
        }
    }

    async fn read(&self, uri: &str) -> Option<Result<ResourceText, PortError>> {
        if uri == "test://static-text" {
            return Some(Ok(ResourceText {
                uri: uri.into(),
                mime_type: "text/plain".into(),
                text: "This is the content of the static text resource.".into(),
            }));
        }
        let id = uri.strip_prefix("test://template/")?.strip_suffix("/data")?;
        Some(Ok(ResourceText {
            uri: uri.into(),
            mime_type: "application/json".into(),
            text: json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string(),
        }))
    }
}

fn main() -> ExitCode {
    let Some(addr) = std::env::args().nth(1).and_then(|a| a.parse::<SocketAddr>().ok()) else {
        eprintln!("usage: mcp_conformance_fixture 127.0.0.1:PORT");
        return ExitCode::from(2);
    };
    let empty = json!({"type": "object", "properties": {}});
    let mut host = read_only_host().with_resource(Arc::new(FixtureResources));
    for name in [
        "test_simple_text",
        "test_image_content",
        "test_audio_content",
        "test_embedded_resource",
        "test_multiple_content_types",
        "test_error_handling",
    ] {
        host = host.with_tool(Arc::new(Fixture {
            name,
            schema: empty.clone(),
        }));
    }
    host = host.with_tool(Arc::new(Fixture {
        name: "test_elicitation",
        schema: json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
    }));
    let host: Arc<dyn ToolHost> = Arc::new(host);
    let Ok(runtime) = tokio::runtime::Runtime::new() else {
        return ExitCode::FAILURE;
    };
    let served = runtime.block_on(async move {
        let shutdown = tokio_util::sync::CancellationToken::new();
        let sidecar = metaforge_adapters_mcp::bind_http(host, addr, None, shutdown).await?;
        eprintln!("fixture sidecar on http://{}/mcp", sidecar.local_addr);
        sidecar.run().await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
