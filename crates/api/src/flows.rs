//! `POST /v1/design-flows/propose`: a tailoring request, and the proposal (or the questions to
//! answer first) it returns.

use metaforge_domain::flow::{
    AppliedOperation, AskedQuestion, GeneratedBy, ManufacturingContext, Operation, OperationProblem,
    ProposedBy, TailorResult, TargetMaturity,
};
use serde::{Deserialize, Serialize};

/// The caller who wrote the operations (provenance only).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProposeCaller {
    /// Client name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The caller's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// A tailoring request: the intent and context; `template` + `operations` for caller tailoring.
/// snake_case, with the camelCase names and the MCP tool's `template_id` accepted as aliases.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProposeRequest {
    /// What the person wants made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<String>,
    /// The template to tailor (caller-proposed tailoring; default `design_v1`). `template_id`
    /// (the `flow.propose` tool's name) is accepted too.
    #[serde(default, alias = "template_id", skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Caller-written operations (strict: any bad one refuses the proposal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operations: Option<Vec<Operation>>,
    /// Provenance of caller operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<ProposeCaller>,
    /// Manufacturing route, processes, machines, stock (camelCase accepted).
    #[serde(
        default,
        alias = "manufacturingContext",
        skip_serializing_if = "Option::is_none"
    )]
    pub manufacturing_context: Option<ManufacturingContext>,
    /// concept, sim_validated, physically_validated or released.
    #[serde(default, alias = "targetMaturity", skip_serializing_if = "Option::is_none")]
    pub target_maturity: Option<TargetMaturity>,
    /// Loads and use; "unknown" is a valid answer.
    #[serde(default, alias = "loadsAndUse", skip_serializing_if = "Option::is_none")]
    pub loads_and_use: Option<String>,
    /// Optional budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<serde_json::Value>,
    /// Requirements already known (when absent, `requirementsPending` is true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<serde_json::Value>,
}

/// A proposal, or the questions to answer first. The gateway sends it with the whole
/// [`TailorResult`] and [`AskedQuestion`]s; a client reads it with the parts it needs
/// ([`ProposeAnswerView`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProposeResponse<P = TailorResult, Q = AskedQuestion> {
    /// `proposed` or `needs_input`.
    pub status: String,
    /// The held approval (proposed only).
    #[serde(rename = "approvalId")]
    pub approval_id: Option<String>,
    /// The stored version id (proposed only), in the casing of this body.
    #[serde(rename = "versionId", default)]
    pub version_id: Option<String>,
    /// The same id under its first, snake_case name; kept so existing clients keep working.
    #[serde(rename = "version_id", default)]
    #[cfg_attr(feature = "openapi", schema(deprecated))]
    pub legacy_version_id: Option<String>,
    /// The tailoring: applied and skipped operations, diff, hash, the flow.
    pub proposal: P,
    /// needs_input only: the server's required questions, then at most three the model added
    /// (`source: model`). Ask the user; do not answer them yourself.
    #[serde(default = "Vec::new")]
    pub questions: Vec<Q>,
    /// Caller provenance (caller operations).
    #[serde(default)]
    pub proposed_by: Option<ProposedBy>,
    /// Model provenance (generator path); null for caller operations.
    #[serde(rename = "generatedBy", default)]
    pub generated_by: Option<GeneratedBy>,
    /// True when no requirements were sent.
    #[serde(rename = "requirementsPending", default)]
    pub requirements_pending: bool,
    /// What the proposal assumes, including the requirements-pending line.
    #[serde(default)]
    pub assumptions: Vec<String>,
    /// Questions left open for the reviewer (the generator's product-specific ones).
    #[serde(rename = "openQuestions", default)]
    pub open_questions: Vec<String>,
}

impl<P, Q> ProposeResponse<P, Q> {
    /// The stored version's id under either name (`versionId`, or `version_id` from a gateway
    /// that predates it).
    pub fn stored_version_id(&self) -> Option<&str> {
        self.version_id.as_deref().or(self.legacy_version_id.as_deref())
    }
}

/// The part of a proposal a client relays to its caller: what changed, as the gateway computed
/// it (the changes of a [`TailorResult`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProposalView {
    /// The prose diff against the template.
    #[serde(default)]
    pub diff: Vec<String>,
    /// The operations applied.
    #[serde(default)]
    pub applied: Vec<AppliedOperation>,
    /// The operations skipped, with reasons.
    #[serde(default)]
    pub skipped: Vec<OperationProblem>,
}

/// The propose answer as a client reads it: the proposal's changes and the questions to ask.
pub type ProposeAnswerView = ProposeResponse<ProposalView, AskedQuestion>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_the_template_either_way_and_the_context_in_either_casing() {
        let http: ProposeRequest =
            serde_json::from_str(r#"{"template":"mech_v1","targetMaturity":"concept"}"#).unwrap();
        let mcp: ProposeRequest =
            serde_json::from_str(r#"{"template_id":"mech_v1","target_maturity":"concept"}"#).unwrap();
        assert_eq!(http.template.as_deref(), Some("mech_v1"));
        assert_eq!(mcp.template.as_deref(), Some("mech_v1"));
        assert_eq!(http.target_maturity, mcp.target_maturity);
    }

    #[test]
    fn a_client_reads_the_version_id_under_the_new_name_or_the_old_one() {
        let new: ProposeResponse<ProposalView, serde_json::Value> =
            serde_json::from_str(r#"{"status":"proposed","approvalId":"a","versionId":"v","proposal":{}}"#)
                .unwrap();
        let old: ProposeResponse<ProposalView, serde_json::Value> =
            serde_json::from_str(r#"{"status":"proposed","approvalId":"a","version_id":"v","proposal":{}}"#)
                .unwrap();
        assert_eq!(new.stored_version_id(), Some("v"));
        assert_eq!(old.stored_version_id(), Some("v"));
    }
}
