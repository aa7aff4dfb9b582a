//! [`FlowBindings`] in process (FORGE-462): the same port the gateway's HTTP client implements
//! (`metaforge_adapters_gateway::RemoteFlowBindings`), over the local stores and the same
//! [`FlowService`] the gateway runs, with MetaForge's generator when this process has one. The
//! sidecar's `flow.propose` and `flow.version` go through this port in both deployment modes, so
//! there is one code path and one answer shape, refusals included.

use std::sync::Arc;

use metaforge_api::{CallerProposal, FlowBindings, HeldProposal, ProposalAnswer};
use metaforge_app::approvals::ApprovalService;
use metaforge_app::flow_generator::{GenerateError, GenerateRequest, Generated, ProposalGenerator};
use metaforge_app::flows::Requester;
use metaforge_app::flows::{FlowService, FlowServiceError, ProposalOutcome};
use metaforge_domain::flow::{DEFAULT_TEMPLATE_ID, TailorStatus, questions_to_ask};
use metaforge_ports::{
    ApprovalLedger, Clock, FlowVersionRecord, FlowVersionStore, IdGen, PortError, PortErrorKind,
};

/// What the in-process tools need: the one approval ledger, the version store, time and ids.
/// The tools go through the same services as the gateway ([`FlowService`], [`ApprovalService`]),
/// so a proposal from a plugin is the same record a dashboard proposal is.
#[derive(Clone)]
pub struct FlowStores {
    /// The approval ledger (SQLite in the sidecar).
    pub approvals: Arc<dyn ApprovalLedger>,
    /// The flow-version store.
    pub versions: Arc<dyn FlowVersionStore>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Ids (uuid v7).
    pub ids: Arc<dyn IdGen>,
}

impl FlowStores {
    /// The design-flow service over these stores.
    pub fn flow_service(&self) -> FlowService {
        FlowService::new(
            Arc::clone(&self.versions),
            Arc::clone(&self.approvals),
            Arc::clone(&self.clock),
            Arc::clone(&self.ids),
        )
    }

    /// The approvals service over these stores.
    pub fn approval_service(&self) -> ApprovalService {
        ApprovalService::new(
            Arc::clone(&self.approvals),
            Arc::clone(&self.versions),
            Arc::clone(&self.clock),
            Arc::clone(&self.ids),
        )
    }
}

/// Why a generator call cannot be answered in a process that has no generator.
const NO_GENERATOR: &str = "MetaForge's generator does not run in this sidecar: send template_id and operations (your own tailoring), or run the sidecar with METAFORGE_GATEWAY_URL or under `metaforge up`";

/// [`FlowBindings`] over the local stores, through the same [`FlowService`] the gateway uses:
/// correct only inside the gateway's process (`metaforge up`) or over a sidecar's own ledgers.
#[derive(Clone)]
pub struct InProcessFlowBindings {
    stores: FlowStores,
    generator: Option<Arc<dyn ProposalGenerator>>,
}

impl InProcessFlowBindings {
    /// The bindings over `stores`; without a generator, a proposal with neither template nor
    /// operations is answered `Unavailable` naming what to send instead.
    pub fn new(stores: FlowStores) -> Self {
        Self {
            stores,
            generator: None,
        }
    }

    /// Answers proposals without template and operations through `generator` (the gateway's,
    /// when the sidecar runs inside it).
    #[must_use]
    pub fn with_generator(mut self, generator: Arc<dyn ProposalGenerator>) -> Self {
        self.generator = Some(generator);
        self
    }

    /// The stores these bindings write to.
    pub fn stores(&self) -> &FlowStores {
        &self.stores
    }

    async fn generate(&self, proposal: CallerProposal) -> Result<ProposalAnswer, PortError> {
        let Some(generator) = &self.generator else {
            return Err(PortError::new(PortErrorKind::Unavailable, NO_GENERATOR));
        };
        let Some(intent) = proposal.intent.filter(|i| !i.trim().is_empty()) else {
            return Err(invalid(
                "intent",
                "send intent (and context) for MetaForge's generator, or template_id and operations",
            ));
        };
        let request = GenerateRequest {
            intent,
            context: proposal.context.unwrap_or_default(),
            requirements: proposal.requirements.filter(|r| !r.is_null()),
            session: format!("mcp-{}", proposal.caller),
            caller: proposal.caller,
            requested_by: proposal.requested_by,
        };
        match generator.generate(request).await {
            Ok(Generated::NeedsInput { questions, notes, .. }) => {
                Ok(ProposalAnswer::NeedsInput { questions, notes })
            }
            Ok(Generated::Proposed {
                outcome,
                open_questions,
                ..
            }) => held(&outcome, open_questions),
            Err(GenerateError::Flow(err)) => refused(err),
            Err(err) => Err(PortError::new(PortErrorKind::Unavailable, err.to_string())),
        }
    }
}

fn invalid(field: &str, message: impl std::fmt::Display) -> PortError {
    PortError::new(PortErrorKind::Invalid, format!("{field}: {message}"))
}

/// The service's refusal, typed through the port with its code from the one table.
fn refused(err: FlowServiceError) -> Result<ProposalAnswer, PortError> {
    let refusal = err.into_refusal()?;
    Ok(ProposalAnswer::Refused {
        code: refusal.code.to_owned(),
        message: refusal.message,
        details: refusal.details,
    })
}

/// A stored, held proposal as the port carries it.
fn held(outcome: &ProposalOutcome, open_questions: Vec<String>) -> Result<ProposalAnswer, PortError> {
    let (Some(version), Some(approval_id)) = (&outcome.version, &outcome.approval_id) else {
        return Err(PortError::new(
            PortErrorKind::Internal,
            "a proposal was accepted without a stored version and a hold",
        ));
    };
    Ok(ProposalAnswer::Held(Box::new(HeldProposal {
        approval_id: approval_id.clone(),
        flow_version_id: version.id.clone(),
        template_id: version.template_id.clone(),
        content_hash: version.content_hash.clone(),
        diff: outcome.result.diff.clone(),
        applied: outcome.result.applied.clone(),
        skipped: outcome.result.skipped.clone(),
        generated_by: outcome.generated_by.clone(),
        open_questions,
    })))
}

#[async_trait::async_trait]
impl FlowBindings for InProcessFlowBindings {
    async fn propose(&self, proposal: CallerProposal) -> Result<ProposalAnswer, PortError> {
        if proposal.wants_generator() {
            return self.generate(proposal).await;
        }
        let template_id = proposal.template_id.as_deref().unwrap_or(DEFAULT_TEMPLATE_ID);
        let operations = proposal.operations.as_deref().unwrap_or_default();
        let outcome = match self
            .stores
            .flow_service()
            .propose_from_caller(
                template_id,
                operations,
                proposal.context.as_ref(),
                None,
                proposal.intent.as_deref(),
                Requester {
                    caller: &proposal.caller,
                    identity: proposal.requested_by.as_deref(),
                },
            )
            .await
        {
            Ok(outcome) => outcome,
            Err(err) => return refused(err),
        };
        if outcome.result.status == TailorStatus::NeedsInput {
            return Ok(ProposalAnswer::NeedsInput {
                questions: questions_to_ask(&outcome.result.questions, &[]),
                notes: Vec::new(),
            });
        }
        held(&outcome, Vec::new())
    }

    async fn version(&self, id: &str) -> Result<FlowVersionRecord, PortError> {
        self.stores.versions.get(id).await
    }
}
