//! [`FlowBindings`] over the gateway's design-flow routes (FORGE-462): `POST
//! /v1/design-flows/propose` with caller operations (or none: the gateway's generator), and
//! `GET /v1/design-flows/versions/{id}`.

use async_trait::async_trait;
use metaforge_ports::{
    CallerProposal, FlowBindings, FlowVersionRecord, HeldProposal, PortError, PortErrorKind, ProposalAnswer,
};
use reqwest::Method;
use serde_json::{Map, Value, json};

use crate::client::{GatewayClient, decode, segment};

/// The gateway's flow bindings, seen from a sidecar.
#[derive(Debug, Clone)]
pub struct RemoteFlowBindings {
    client: GatewayClient,
}

impl RemoteFlowBindings {
    /// The bindings of the gateway `client` talks to.
    pub fn new(client: GatewayClient) -> Self {
        Self { client }
    }
}

/// The propose body: the template and the caller's operations (both left out when the server's
/// generator is asked), the intent, the tailoring context flattened into the gateway's fields,
/// and the caller as provenance.
fn propose_body(proposal: &CallerProposal) -> Value {
    let mut body = Map::new();
    if let Some(template) = &proposal.template_id {
        body.insert("template".into(), json!(template));
    }
    match (&proposal.operations, &proposal.template_id) {
        (Value::Null, None) => {}
        (Value::Null, Some(_)) => {
            body.insert("operations".into(), json!([]));
        }
        (ops, _) => {
            body.insert("operations".into(), ops.clone());
        }
    }
    if let Some(intent) = &proposal.intent {
        body.insert("intent".into(), json!(intent));
    }
    body.insert(
        "caller".into(),
        json!({"client": format!("mcp-sidecar ({})", proposal.caller)}),
    );
    if let Some(Value::Object(context)) = &proposal.context {
        for key in ["manufacturing_context", "target_maturity", "loads_and_use"] {
            if let Some(value) = context.get(key).filter(|v| !v.is_null()) {
                body.insert(key.into(), value.clone());
            }
        }
    }
    Value::Object(body)
}

fn field<'a>(value: &'a Value, pointer: &str) -> Result<&'a Value, PortError> {
    value.pointer(pointer).ok_or_else(|| {
        PortError::new(
            PortErrorKind::Internal,
            format!("gateway propose answer lacks {pointer}"),
        )
    })
}

fn text(value: &Value, pointer: &str) -> Result<String, PortError> {
    field(value, pointer)?.as_str().map(str::to_owned).ok_or_else(|| {
        PortError::new(
            PortErrorKind::Internal,
            format!("gateway propose answer: {pointer} is not text"),
        )
    })
}

#[async_trait]
impl FlowBindings for RemoteFlowBindings {
    async fn propose(&self, proposal: CallerProposal) -> Result<ProposalAnswer, PortError> {
        let answer = self
            .client
            .send(
                Method::POST,
                "/v1/design-flows/propose",
                Some(&propose_body(&proposal)),
            )
            .await?;
        if answer.get("status").and_then(Value::as_str) == Some("needs_input") {
            return Ok(ProposalAnswer::NeedsInput {
                questions: answer.get("questions").cloned().unwrap_or_else(|| json!([])),
            });
        }
        let version_id = text(&answer, "/version_id")?;
        let version = self.version(&version_id).await?;
        Ok(ProposalAnswer::Held(Box::new(HeldProposal {
            approval_id: text(&answer, "/approvalId")?,
            flow_version_id: version_id,
            template_id: version.template_id,
            content_hash: version.content_hash,
            diff: field(&answer, "/proposal/diff")?.clone(),
            applied: field(&answer, "/proposal/applied")?.clone(),
            skipped: answer
                .pointer("/proposal/skipped")
                .cloned()
                .unwrap_or(Value::Null),
            generated_by: answer.get("generatedBy").filter(|g| !g.is_null()).cloned(),
            open_questions: answer
                .get("openQuestions")
                .and_then(Value::as_array)
                .map(|q| q.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default(),
        })))
    }

    async fn version(&self, id: &str) -> Result<FlowVersionRecord, PortError> {
        let path = format!("/v1/design-flows/versions/{}", segment(id));
        let answer = self.client.send(Method::GET, &path, None).await?;
        decode(field(&answer, "/version")?.clone(), "flow version")
    }
}
