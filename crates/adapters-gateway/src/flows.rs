//! [`FlowBindings`] over the gateway's design-flow routes (FORGE-462): `POST
//! /v1/design-flows/propose` with caller operations (or none: the gateway's generator), and
//! `GET /v1/design-flows/versions/{id}`. A 422 is the flow service's refusal and comes back
//! typed as [`ProposalAnswer::Refused`] with the gateway's own code, message and details — the
//! same the in-process bindings give for the same refusal.

use async_trait::async_trait;
use metaforge_api::{
    CallerProposal, ErrorBody, FlowBindings, HeldProposal, ProposalAnswer, ProposeAnswerView, ProposeCaller,
    ProposeRequest,
};
use metaforge_ports::{FlowVersionRecord, PortError, PortErrorKind};
use reqwest::Method;
use serde_json::Value;

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
/// generator is asked), the intent, the tailoring context in the gateway's fields, and the
/// caller as provenance.
fn propose_request(proposal: CallerProposal) -> ProposeRequest {
    let operations = match (proposal.operations, &proposal.template_id) {
        (None, None) => None,
        (None, Some(_)) => Some(Vec::new()),
        (Some(ops), _) => Some(ops),
    };
    let context = proposal.context.unwrap_or_default();
    ProposeRequest {
        intent: proposal.intent,
        template: proposal.template_id,
        operations,
        caller: Some(ProposeCaller {
            client: Some(format!("mcp-sidecar ({})", proposal.caller)),
            model: None,
        }),
        manufacturing_context: context.manufacturing_context,
        target_maturity: context.target_maturity,
        loads_and_use: context.loads_and_use,
        budget: context.budget.filter(|b| !b.is_null()),
        requirements: proposal.requirements.filter(|r| !r.is_null()),
    }
}

/// The request body as JSON.
fn encode(request: &ProposeRequest) -> Result<Value, PortError> {
    serde_json::to_value(request)
        .map_err(|e| PortError::with_source(PortErrorKind::Invalid, "cannot encode the proposal", e))
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
                Some(&encode(&propose_request(proposal))?),
            )
            .await?
        {
            Ok(answer) => answer,
            Err(refusal) => return refused(&refusal),
        };
        let answer: ProposeAnswerView = decode(answer, "propose answer")?;
        if answer.status == "needs_input" {
            return Ok(ProposalAnswer::NeedsInput {
                questions: answer.questions,
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
        Ok(ProposalAnswer::Held(Box::new(HeldProposal {
            approval_id,
            flow_version_id: version_id,
            template_id: version.template_id,
            content_hash: version.content_hash,
            diff: answer.proposal.diff,
            applied: answer.proposal.applied,
            skipped: answer.proposal.skipped,
            generated_by: answer.generated_by,
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
