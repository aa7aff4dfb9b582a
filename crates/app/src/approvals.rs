//! The approvals service: the one ledger's use cases, and carrying a decision on to the flow
//! version it decides (FORGE-462). The approver is always the authenticated identity passed in,
//! never a request field (FORGE-393).

use std::sync::Arc;

use crate::processes::Presence;
use metaforge_domain::approvals::{
    ApprovalError, ApproverPolicy, check_approver, check_waiter_identity, check_waiter_may_resolve,
};
use metaforge_ports::approval_ledger::{
    ApprovalDecision, ApprovalLedger, MAX_PENDING_PAGE, PendingCursor, PendingPage, ResolveOutcome,
    WaiterResolution,
};
use metaforge_ports::flow_version_store::{FlowVersionDecision, FlowVersionStore};
use metaforge_ports::{
    ApprovalKind, ApprovalRecord, ApprovalStatus, Clock, FlowVersionStatus, IdGen, PortError, PortErrorKind,
};

pub use metaforge_ports::MAX_HOLD_TIMEOUT_SECONDS;

/// A hold a waiter asks to park (sidecar remote mode, chat harness).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ParkRequest {
    /// The held tool.
    #[cfg_attr(feature = "openapi", schema(min_length = 1))]
    pub tool: String,
    /// Its arguments, shown to the person deciding.
    #[serde(default)]
    pub arguments: serde_json::Value,
    /// The caller class of the held call (local, remote, untrusted, service, client_task).
    #[cfg_attr(feature = "openapi", schema(min_length = 1))]
    pub caller: String,
    /// The authenticated identity parking it (set by the gateway from the key, never read from a
    /// request body); four eyes refuses that identity's decision.
    #[serde(skip)]
    pub requested_by: Option<String>,
    /// How long the waiter waits (at most a week); the deadline is this plus 30 s.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 604_800))]
    pub timeout_seconds: Option<u64>,
}

/// Use cases over the approval ledger.
pub struct ApprovalService {
    ledger: Arc<dyn ApprovalLedger>,
    /// `None` for a waiter-only service (the sidecar in remote mode), which never decides.
    versions: Option<Arc<dyn FlowVersionStore>>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
    /// Who may decide (four eyes with `METAFORGE_APPROVALS_SEPARATE_APPROVER=on`).
    policy: ApproverPolicy,
}

/// A rule of the approvals domain refused the request; the domain error travels as the port
/// error's source so the gateway answers its own status and code (403 four eyes, 409 waiter).
fn refused(kind: PortErrorKind, err: ApprovalError) -> PortError {
    PortError::with_source(kind, err.to_string(), err)
}

impl ApprovalService {
    /// Builds the service over its ports.
    pub fn new(
        ledger: Arc<dyn ApprovalLedger>,
        versions: Arc<dyn FlowVersionStore>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGen>,
    ) -> Self {
        Self {
            ledger,
            versions: Some(versions),
            clock,
            ids,
            policy: ApproverPolicy::Any,
        }
    }

    /// Sets who may decide: [`ApproverPolicy::Separate`] refuses a decision by the identity that
    /// proposed or parked the item (four eyes).
    #[must_use]
    pub fn with_approver_policy(mut self, policy: ApproverPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// A service that only parks, reads and closes holds: the sidecar in remote mode, whose
    /// ledger is the gateway's and which never decides (deciding a flow approval fails closed).
    pub fn waiter(ledger: Arc<dyn ApprovalLedger>, clock: Arc<dyn Clock>, ids: Arc<dyn IdGen>) -> Self {
        Self {
            ledger,
            versions: None,
            clock,
            ids,
            policy: ApproverPolicy::Any,
        }
    }

    /// Parks a held tool call and returns the open record.
    pub async fn park(&self, request: ParkRequest) -> Result<ApprovalRecord, PortError> {
        if request.tool.trim().is_empty() {
            return Err(PortError::new(PortErrorKind::Invalid, "tool must not be empty"));
        }
        if request.caller.trim().is_empty() {
            return Err(PortError::new(PortErrorKind::Invalid, "caller must not be empty"));
        }
        let now = self.clock.now();
        let deadline = metaforge_ports::hold_deadline(now, request.timeout_seconds)?;
        let record = ApprovalRecord {
            id: self.ids.new_id(),
            kind: ApprovalKind::ToolCall,
            tool: request.tool,
            arguments: request.arguments,
            caller: request.caller,
            status: ApprovalStatus::AwaitingApproval,
            reason: None,
            approver: None,
            flow_version_id: None,
            created_at: now,
            decided_at: None,
            deadline,
            requested_by: request.requested_by,
        };
        self.ledger.park(record).await
    }

    /// One hold.
    pub async fn get(&self, id: &str) -> Result<ApprovalRecord, PortError> {
        self.ledger.get(id).await
    }

    /// One page of the pending queue, oldest first (`limit` held to 1..=[`MAX_PENDING_PAGE`]).
    pub async fn pending_page(
        &self,
        after: Option<&PendingCursor>,
        limit: usize,
    ) -> Result<PendingPage, PortError> {
        self.ledger
            .pending_page(after, limit.clamp(1, MAX_PENDING_PAGE))
            .await
    }

    /// Pending holds (oldest first), or every recent hold.
    pub async fn list(&self, all: bool) -> Result<Vec<ApprovalRecord>, PortError> {
        if all {
            self.ledger.list_recent(500).await
        } else {
            self.ledger.list_pending().await
        }
    }

    /// A person decides. Deciding a decided hold is a `Conflict` naming its state and reason; a
    /// run's gate hold is a `Conflict` whose source is `metaforge_ports::GateDecisionRefused`
    /// (it is answered through the run). Approving a flow proposal or edit decides the version
    /// too, with the same approver.
    pub async fn decide(
        &self,
        id: &str,
        approve: bool,
        approver: &str,
        note: Option<String>,
    ) -> Result<ApprovalRecord, PortError> {
        if approver.trim().is_empty() {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                "a decision must name the person who made it",
            ));
        }
        // Who asked and what the hold is about never change, so reading them before the
        // conditional decide is race-free.
        let record = self.ledger.get(id).await?;
        // A run's gate is answered through its engine (which checks the decision against the
        // gate), never by a generic approve/reject: a Conflict naming the run, for the door to
        // redirect.
        record.check_generic_decision().inspect_err(|_| {
            tracing::warn!(event = "approval_gate_generic_decision_refused", approval_id = %id, approver, "a gate is decided through its run");
        })?;
        if self.policy != ApproverPolicy::Any {
            check_approver(&record, approver, self.policy).map_err(|e| {
                tracing::warn!(event = "approval_same_approver_refused", approval_id = %id, approver, kind = record.kind.as_str(), "four eyes: the requester cannot decide");
                refused(PortErrorKind::Invalid, e)
            })?;
        }
        let decided = self
            .ledger
            .decide(
                id,
                ApprovalDecision {
                    approve,
                    approver: approver.to_owned(),
                    note,
                },
            )
            .await?;
        self.carry_to_version(&decided).await?;
        tracing::info!(
            event = "approval_decided",
            approval_id = %decided.id,
            kind = decided.kind.as_str(),
            decision = if approve { "approve" } else { "reject" },
            approver = %approver,
            "a person decided"
        );
        Ok(decided)
    }

    /// A waiter closes a hold it stopped waiting for (idempotent; `Conflict` if a person decided).
    /// `waiter` is the identity a door authenticated (only the hold's requester may close it);
    /// `None` is the in-process waiter that parked the hold itself.
    pub async fn resolve(
        &self,
        id: &str,
        waiter: Option<&str>,
        resolution: WaiterResolution,
        reason: Option<String>,
    ) -> Result<ResolveOutcome, PortError> {
        // The kind and requester never change, so reading them first is race-free; a proposal or
        // edit is never closed from the side (it would leave its version proposed forever, with
        // no approver).
        let outcome = match self.ledger.get(id).await {
            Ok(record) => match waiter.map(|w| check_waiter_identity(&record, w)) {
                Some(Err(e)) => {
                    tracing::warn!(event = "approval_resolve_not_the_waiter", approval_id = %id, caller = ?waiter, "a resolve from an identity that did not park the hold was refused");
                    Err(refused(PortErrorKind::Invalid, e))
                }
                Some(Ok(())) | None => match check_waiter_may_resolve(&record) {
                    Ok(()) => self.ledger.resolve(id, resolution, reason).await,
                    Err(e) => Err(refused(PortErrorKind::Conflict, e)),
                },
            },
            Err(err) => Err(err),
        };
        let label = match &outcome {
            Ok(ResolveOutcome::Resolved { record }) => record.status.as_str(),
            Ok(_) => "already_closed",
            Err(err) if err.kind == PortErrorKind::Conflict => "conflict",
            Err(_) => "failed",
        };
        metrics::counter!("metaforge_tool_approval_resolution_total", "result" => label, "trigger" => "waiter")
            .increment(1);
        outcome
    }

    /// Carries an approval's decision to its flow version. A version already carrying the same
    /// decision is left as is, so the carry-over is safe to repeat (start-up reconciliation).
    async fn carry_to_version(&self, decided: &ApprovalRecord) -> Result<(), PortError> {
        let about_a_version = matches!(
            decided.kind,
            ApprovalKind::DesignFlowProposal | ApprovalKind::DesignFlowVersion
        );
        let (Some(version_id), true) = (decided.flow_version_id.as_deref(), about_a_version) else {
            return Ok(());
        };
        let status = match decided.status {
            ApprovalStatus::Approved => FlowVersionStatus::Approved,
            ApprovalStatus::Rejected => FlowVersionStatus::Rejected,
            ApprovalStatus::AwaitingApproval
            | ApprovalStatus::TimedOut
            | ApprovalStatus::Canceled
            | ApprovalStatus::Failed => return Ok(()),
        };
        let Some(versions) = &self.versions else {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                "this approvals service only waits; deciding a flow approval needs the flow-version store",
            ));
        };
        let current = versions.get(version_id).await?;
        if current.status == status {
            return Ok(());
        }
        let approver = decided.approver.clone().unwrap_or_default();
        let at = decided.decided_at.unwrap_or_else(|| self.clock.now());
        let decision = FlowVersionDecision {
            status,
            approver,
            approval_id: Some(decided.id.clone()),
            at,
        };
        match versions.decide(version_id, decision).await {
            Ok(_) => Ok(()),
            // Another process carried the same decision between the read above and this write
            // (the deciding gateway, or another process's start-up restore): done already.
            Err(err) if err.kind == PortErrorKind::Conflict => match versions.get(version_id).await {
                Ok(now) if now.status == status => Ok(()),
                Ok(_) | Err(_) => Err(err),
            },
            Err(err) => Err(err),
        }
    }

    /// Start-up: orphan the holds left by processes that are gone (and those parked before
    /// parkers were named), then carry every decided flow approval on to its version (repairs a
    /// crash between the two writes). Returns (orphaned, carried).
    pub async fn restore(&self, presence: &Presence) -> Result<(usize, usize), PortError> {
        let gone = presence.gone_among(self.ledger.open_parkers().await?).await;
        let orphaned = self.ledger.restore(&gone).await?.len();
        let Some(versions) = &self.versions else {
            // A waiter-only service restores nothing of its own: the gateway owns the ledger.
            return Ok((orphaned, 0));
        };
        let mut carried = 0;
        for record in self.ledger.list_recent(10_000).await? {
            if record.flow_version_id.is_some() && record.status.is_final() {
                let before = match record.flow_version_id.as_deref() {
                    Some(v) => versions.get(v).await.map(|v| v.status).ok(),
                    None => None,
                };
                self.carry_to_version(&record).await?;
                if before == Some(FlowVersionStatus::Proposed)
                    && matches!(record.status, ApprovalStatus::Approved | ApprovalStatus::Rejected)
                {
                    carried += 1;
                }
            }
        }
        Ok((orphaned, carried))
    }

    /// While running: orphans the holds of processes found gone since (a gateway killed on
    /// another host). Does nothing, and takes no lock, when every parker is alive.
    ///
    /// # Errors
    /// When the ledger cannot be read or written.
    pub async fn orphan_gone(&self, presence: &Presence) -> Result<usize, PortError> {
        let gone = presence.gone_among(self.ledger.open_parkers().await?).await;
        if gone.holders().next().is_none() {
            return Ok(0);
        }
        Ok(self.ledger.restore(&gone.sparing_unnamed()).await?.len())
    }
}
