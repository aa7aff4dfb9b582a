//! [`FlowBindings`] over the gateway's design-flow routes (FORGE-462): `POST
//! /v1/design-flows/propose` with caller operations (or none: the gateway's generator), and
//! `GET /v1/design-flows/versions/{id}`. A 422 is the flow service's refusal and comes back
//! typed as [`ProposalAnswer::Refused`] with the gateway's own code, message and details — the
//! same the in-process bindings give for the same refusal.

use async_trait::async_trait;
use metaforge_api::{ErrorBody, ProposalView, ProposeResponse};
use metaforge_ports::{
    CallerProposal, FlowBindings, FlowVersionRecord, HeldProposal, PortError, PortErrorKind, ProposalAnswer,
};
use reqwest::Method;
use serde_json::{Map, Value, json};

use crate::client::{GatewayClient, decode, segment};

/// The propose answer as this client reads it: the typed contract, with the proposal's changes
/// carried as the gateway wrote them.
type ProposeAnswer = ProposeResponse<ProposalView, Value>;

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
    if let Some(requirements) = proposal.requirements.as_ref().filter(|r| !r.is_null()) {
        body.insert("requirements".into(), requirements.clone());
    }
    body.insert(
        "caller".into(),
        json!({"client": format!("mcp-sidecar ({})", proposal.caller)}),
    );
    if let Some(Value::Object(context)) = &proposal.context {
        for key in [
            "manufacturing_context",
            "target_maturity",
            "loads_and_use",
            "budget",
        ] {
            if let Some(value) = context.get(key).filter(|v| !v.is_null()) {
                body.insert(key.into(), value.clone());
            }
        }
    }
    Value::Object(body)
}

fn malformed(what: &str) -> PortError {
    PortError::new(
        PortErrorKind::Internal,
        format!("gateway propose answer lacks {what}"),
    )
}

/// A 422 from the propose route: the service's refusal, typed.
fn refused(body: &str) -> Result<ProposalAnswer, PortError> {
    let body: ErrorBody = serde_json::from_str(body).map_err(|e| {
        PortError::with_source(
            PortErrorKind::Internal,
            "the gateway refused the proposal with a malformed error body",
            e,
        )
    })?;
    Ok(ProposalAnswer::Refused {
        code: body.error,
        message: body.message,
        details: body.details,
    })
}

#[async_trait]
impl FlowBindings for RemoteFlowBindings {
    async fn propose(&self, proposal: CallerProposal) -> Result<ProposalAnswer, PortError> {
        let answer = match self
            .client
            .send_or_refused(
                Method::POST,
                "/v1/design-flows/propose",
                Some(&propose_body(&proposal)),
            )
            .await?
        {
            Ok(answer) => answer,
            Err(refusal) => return refused(&refusal),
        };
        let answer: ProposeAnswer = decode(answer, "propose answer")?;
        if answer.status == "needs_input" {
            return Ok(ProposalAnswer::NeedsInput {
                questions: Value::Array(answer.questions),
                notes: answer.assumptions,
            });
        }
        let version_id = answer
            .stored_version_id()
            .ok_or_else(|| malformed("versionId"))?
            .to_owned();
        let approval_id = answer
            .approval_id
            .clone()
            .ok_or_else(|| malformed("approvalId"))?;
        let version = self.version(&version_id).await?;
        let generated_by = match answer.generated_by {
            Some(generated) => Some(serde_json::to_value(generated).map_err(|e| {
                PortError::with_source(PortErrorKind::Internal, "cannot carry generatedBy", e)
            })?),
            None => None,
        };
        Ok(ProposalAnswer::Held(Box::new(HeldProposal {
            approval_id,
            flow_version_id: version_id,
            template_id: version.template_id,
            content_hash: version.content_hash,
            diff: answer.proposal.diff,
            applied: answer.proposal.applied,
            skipped: answer.proposal.skipped,
            generated_by,
            open_questions: answer.open_questions,
        })))
    }

    async fn version(&self, id: &str) -> Result<FlowVersionRecord, PortError> {
        let path = format!("/v1/design-flows/versions/{}", segment(id));
        let answer = self.client.send(Method::GET, &path, None).await?;
        let mut answer = answer;
        let version = answer
            .get_mut("version")
            .map(Value::take)
            .ok_or_else(|| malformed("version"))?;
        decode(version, "flow version")
    }
}
