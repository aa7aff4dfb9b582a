//! The flow bindings the MCP sidecar's `flow.propose` and `flow.version` go through (FORGE-462).
//!
//! Inside the gateway they run in process over the flow-version store and the approval ledger;
//! in a sidecar with `METAFORGE_GATEWAY_URL` set they call the gateway's own routes, so a proposal
//! from a plugin is the one the dashboard shows. Both answer with these types, typed with the
//! domain's own values (operations, context, the tailoring's diff, applied and skipped
//! operations, the questions to ask), so the tool's result has the same shape either way — a
//! refusal included: it crosses the port typed ([`ProposalAnswer::Refused`], with the service's
//! code), never as a bare error message. Only free-form fields (`requirements`, a refusal's
//! `details`) stay JSON.

use async_trait::async_trait;
use metaforge_domain::flow::{
    AppliedOperation, AskedQuestion, FlowContext, GeneratedBy, Operation, OperationProblem,
};
use metaforge_ports::{FlowVersionRecord, PortError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tailoring request from a plugin: a template and the caller's own operations (checked
/// strictly, no model call), or — with neither — the intent for the server's own generator.
#[derive(Debug, Clone, PartialEq)]
pub struct CallerProposal {
    /// The built-in template to tailor, e.g. `mech_v1` (`design_v1` when operations come without
    /// one). With neither a template nor operations the server's generator tailors the flow.
    pub template_id: Option<String>,
    /// The caller's operations, checked strictly.
    pub operations: Option<Vec<Operation>>,
    /// What the person wants made; required by the server's generator.
    pub intent: Option<String>,
    /// The tailoring context (`manufacturing_context`, `target_maturity`, `loads_and_use`).
    pub context: Option<FlowContext>,
    /// Requirements already known, for the server's generator (free-form).
    pub requirements: Option<Value>,
    /// The proposing caller's class, recorded as provenance.
    pub caller: String,
    /// The identity the proposing caller's transport authenticated: the hold's requester, whom
    /// four eyes keep from approving it.
    pub requested_by: Option<String>,
}

impl CallerProposal {
    /// True when the server's generator is asked: neither a template nor operations.
    pub fn wants_generator(&self) -> bool {
        self.template_id.is_none() && self.operations.is_none()
    }
}

/// A proposal stored as a new version and held for a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldProposal {
    /// The hold a person answers.
    pub approval_id: String,
    /// The stored version.
    pub flow_version_id: String,
    /// The template it tailors.
    pub template_id: String,
    /// The version's content hash.
    pub content_hash: String,
    /// The prose diff against the template.
    pub diff: Vec<String>,
    /// The operations that were applied.
    pub applied: Vec<AppliedOperation>,
    /// Operations the server's generator skipped, with reasons (empty for caller operations).
    #[serde(default)]
    pub skipped: Vec<OperationProblem>,
    /// The model that wrote a generated proposal.
    #[serde(default)]
    pub generated_by: Option<GeneratedBy>,
    /// The generator's product-specific questions, left open for the reviewer.
    #[serde(default)]
    pub open_questions: Vec<String>,
}

/// How a proposal ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ProposalAnswer {
    /// Stored and held for a person.
    Held(Box<HeldProposal>),
    /// Context is missing: these questions must be answered first; nothing was stored.
    NeedsInput {
        /// The questions, as the domain words them.
        questions: Vec<AskedQuestion>,
        /// What the server's generator noted while asking (empty for caller operations).
        notes: Vec<String>,
    },
    /// The flow service refused the proposal; nothing was stored. The same refusal carries the
    /// same code in process and through the gateway (the service's one code table).
    Refused {
        /// The stable code (`invalid_proposal`, `unknown_template`, `invariant_violations`, …).
        code: String,
        /// A sentence for people naming the first problem.
        message: String,
        /// Structured detail (refused operations, violations, diff, a limit), when there is any.
        details: Option<Value>,
    },
}

/// Propose and read flow versions, in process or through the gateway. A refused proposal is
/// [`ProposalAnswer::Refused`]; an error is a failure to answer (`Unavailable` when the server's
/// generator or the gateway cannot be reached, `Invalid` for a request the bindings could not
/// send). Nothing is stored then.
#[async_trait]
pub trait FlowBindings: Send + Sync {
    /// Proposes a tailoring built from the caller's operations.
    async fn propose(&self, proposal: CallerProposal) -> Result<ProposalAnswer, PortError>;

    /// One stored version (`NotFound` when absent).
    async fn version(&self, id: &str) -> Result<FlowVersionRecord, PortError>;
}
