//! The design-flow service: proposals and edits become stored versions held for a person.
//!
//! One code path for the gateway and the MCP sidecar, so "a proposal from a plugin" and "a
//! proposal from the dashboard" are the same record in the same two ledgers. A proposal writes
//! exactly one version and one held approval; nothing starts from it.

use std::sync::Arc;

use metaforge_domain::flow::{
    self, Flow, FlowContext, Operation, SizeLimitError, TailorMode, TailorResult, TailorStatus,
    TemplateError, VersionError, Violation, check_flow_size, check_operation_count,
};
use metaforge_ports::approval_ledger::ApprovalLedger;
use metaforge_ports::flow_version_store::FlowVersionStore;
use metaforge_ports::{
    ApprovalKind, ApprovalRecord, ApprovalStatus, Clock, FlowVersionOrigin, FlowVersionRecord, IdGen,
    PortError,
};
use serde::Serialize;

pub use metaforge_domain::flow::{GeneratedBy, ProposedBy};

/// What a proposal produced. `needs_input` carries questions and writes nothing.
#[derive(Debug, Clone, Serialize)]
pub struct ProposalOutcome {
    /// The tailoring result (status, applied, diff, hash, the flow, questions).
    pub result: TailorResult,
    /// The stored version, when one was written.
    pub version: Option<FlowVersionRecord>,
    /// The held approval deciding the version.
    pub approval_id: Option<String>,
    /// Caller provenance, when caller operations were applied.
    pub proposed_by: Option<ProposedBy>,
    /// Model provenance, when the server's generator wrote the operations.
    pub generated_by: Option<GeneratedBy>,
}

/// Who wrote the operations of a proposal; decides the stored origin and the provenance fields.
enum Provenance {
    Caller(Option<ProposedBy>),
    Generator(GeneratedBy),
}

/// Why a flow request was refused; each maps to one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum FlowServiceError {
    /// The template is unknown (422).
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// Strict tailoring refused operations, or the result breaks invariants (422).
    #[error("the proposal is invalid: {message}")]
    Invalid {
        /// A summary naming the first problem.
        message: String,
        /// The tailoring result with every refusal and violation.
        result: Box<TailorResult>,
    },
    /// An edit breaks invariants (422) — every violation listed.
    #[error("the flow breaks {} invariant(s)", violations.len())]
    Violations {
        /// Every violation.
        violations: Vec<Violation>,
    },
    /// An edit identical to its template (422): nothing to approve.
    #[error("{0}")]
    IdenticalToTemplate(String),
    /// The flow or the proposal is over a size limit (422 naming it); nothing was run.
    #[error(transparent)]
    TooLarge(#[from] SizeLimitError),
    /// A ledger failed; nothing is reported as done.
    #[error(transparent)]
    Port(#[from] PortError),
}

/// A refused flow request as both doors answer it (HTTP 422 `{error, message, details}`, an MCP
/// tool error `{status: "invalid", error, message, …details}`): one code per refusal, whichever
/// door and whichever deployment mode it came through. Nothing was stored.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRefusal {
    /// The stable snake_case code ([`FlowServiceError::code`]).
    pub code: &'static str,
    /// A sentence for people naming the first problem.
    pub message: String,
    /// Structured detail (every violation, the refused operations, the limit), when there is any.
    pub details: Option<serde_json::Value>,
}

/// The structured detail of a size-limit refusal: the field, the limit's name and both sizes,
/// never the oversized value.
fn size_limit_details(limit: &SizeLimitError) -> serde_json::Value {
    serde_json::json!({
        "field": limit.field,
        "limit": limit.limit,
        "max": limit.max,
        "actual": limit.actual,
    })
}

/// Who asks for a hold: the caller as the hold records it (a class, or a gateway key's identity)
/// and the identity its transport authenticated (`None`: nobody was authenticated), whom four
/// eyes keep from deciding it.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    /// The hold's `caller`.
    pub caller: &'a str,
    /// The hold's `requested_by`.
    pub identity: Option<&'a str>,
}

impl FlowServiceError {
    /// The one code table for HTTP and MCP: the stable snake_case code of a refusal, whichever
    /// door and deployment mode it came through; `None` for a ledger failure, which is not a
    /// refusal (each door reports it as any port error).
    pub fn code(&self) -> Option<&'static str> {
        match self {
            Self::Template(_) => Some("unknown_template"),
            Self::Invalid { .. } => Some("invalid_proposal"),
            Self::Violations { .. } => Some("invariant_violations"),
            Self::IdenticalToTemplate(_) => Some("identical_to_template"),
            Self::TooLarge(_) => Some("too_large"),
            Self::Port(_) => None,
        }
    }

    /// A refusal's structured detail, the same at both doors: the refused operations, every
    /// violation and the diff of an invalid proposal; every violation of an invalid edit; the
    /// field and sizes of a size limit (never the value). `None` when there is nothing more.
    pub fn details(&self) -> Option<serde_json::Value> {
        match self {
            Self::Invalid { result, .. } => Some(serde_json::json!({
                "refused": result.refused,
                "violations": result.violations,
                "diff": result.diff,
            })),
            Self::Violations { violations } => Some(serde_json::json!({ "violations": violations })),
            Self::TooLarge(limit) => Some(size_limit_details(limit)),
            Self::Template(_) | Self::IdenticalToTemplate(_) | Self::Port(_) => None,
        }
    }

    /// The sentence for people: an invalid proposal's first problem, else the error itself.
    pub fn message(&self) -> String {
        match self {
            Self::Invalid { message, .. } => message.clone(),
            other @ (Self::Template(_)
            | Self::Violations { .. }
            | Self::IdenticalToTemplate(_)
            | Self::TooLarge(_)
            | Self::Port(_)) => other.to_string(),
        }
    }

    /// This error as the refusal both doors answer ([`code`](Self::code),
    /// [`message`](Self::message), [`details`](Self::details)), or the ledger failure it is.
    pub fn into_refusal(self) -> Result<FlowRefusal, PortError> {
        let refusal = self.code().map(|code| FlowRefusal {
            code,
            message: self.message(),
            details: self.details(),
        });
        match (refusal, self) {
            (Some(refusal), _) => Ok(refusal),
            (None, Self::Port(err)) => Err(err),
            // Unreachable while `code` names every refusal; an internal error, never a panic.
            (
                None,
                other @ (Self::Template(_)
                | Self::Invalid { .. }
                | Self::Violations { .. }
                | Self::IdenticalToTemplate(_)
                | Self::TooLarge(_)),
            ) => Err(PortError::new(
                metaforge_ports::PortErrorKind::Internal,
                format!("a flow refusal without a code: {other}"),
            )),
        }
    }
}

impl From<VersionError> for FlowServiceError {
    fn from(err: VersionError) -> Self {
        match err {
            VersionError::Invalid { violations } => Self::Violations { violations },
            VersionError::IdenticalToTemplate { .. } => Self::IdenticalToTemplate(err.to_string()),
            other @ (VersionError::AlreadyDecided { .. }
            | VersionError::Corrupt { .. }
            | VersionError::Missing(_)
            | VersionError::Freeze(_)) => Self::Port(PortError::new(
                metaforge_ports::PortErrorKind::Internal,
                other.to_string(),
            )),
        }
    }
}

/// The service over the version store and the approval ledger; `new` takes its ports in field
/// order.
#[derive(derive_more::Constructor)]
pub struct FlowService {
    versions: Arc<dyn FlowVersionStore>,
    approvals: Arc<dyn ApprovalLedger>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
}

impl FlowService {
    /// Caller-proposed tailoring (FORGE-481): strict, no model call. Missing context answers
    /// `needs_input` and writes nothing; a valid proposal is stored and held for a person.
    pub async fn propose_from_caller(
        &self,
        template_id: &str,
        operations: &[Operation],
        context: Option<&FlowContext>,
        proposed_by: Option<ProposedBy>,
        intent: Option<&str>,
        by: Requester<'_>,
    ) -> Result<ProposalOutcome, FlowServiceError> {
        check_operation_count(operations.len())?;
        let result = flow::propose(template_id, operations, context, TailorMode::Strict)?;
        let provenance = Provenance::Caller(proposed_by);
        self.hold_proposal(result, context, provenance, intent, by.caller, by.identity)
            .await
    }

    /// The server generator's tailoring (FORGE-398/468): the lenient result of the model's
    /// answer, stored with origin `server` and held with the model's provenance as
    /// `generated_by`. A result that breaks an invariant is refused and nothing is stored.
    pub async fn propose_generated(
        &self,
        result: TailorResult,
        context: Option<&FlowContext>,
        generated_by: GeneratedBy,
        intent: Option<&str>,
        by: Requester<'_>,
    ) -> Result<ProposalOutcome, FlowServiceError> {
        let provenance = Provenance::Generator(generated_by);
        self.hold_proposal(result, context, provenance, intent, by.caller, by.identity)
            .await
    }

    /// One way a tailoring result becomes a proposal: needs_input writes nothing, an invalid
    /// result is refused naming its first problem, a proposed one is stored and held once.
    async fn hold_proposal(
        &self,
        result: TailorResult,
        context: Option<&FlowContext>,
        provenance: Provenance,
        intent: Option<&str>,
        caller: &str,
        requested_by: Option<&str>,
    ) -> Result<ProposalOutcome, FlowServiceError> {
        let (proposed_by, generated_by, origin) = match provenance {
            Provenance::Caller(by) => (by, None, FlowVersionOrigin::Caller),
            Provenance::Generator(by) => (None, Some(by), FlowVersionOrigin::Server),
        };
        match result.status {
            TailorStatus::NeedsInput => Ok(ProposalOutcome {
                result,
                version: None,
                approval_id: None,
                proposed_by,
                generated_by,
            }),
            TailorStatus::Invalid => {
                let message = result
                    .refused
                    .first()
                    .map(|p| format!("operation {} ({}): {}", p.index, p.op, p.reason))
                    .or_else(|| {
                        result
                            .violations
                            .first()
                            .map(|v| format!("[{}] {}", v.rule, v.message))
                    })
                    .unwrap_or_else(|| "refused".to_owned());
                Err(FlowServiceError::Invalid {
                    message,
                    result: Box::new(result),
                })
            }
            TailorStatus::Proposed => {
                let Some(tailored) = result.flow.clone() else {
                    return Err(FlowServiceError::Invalid {
                        message: "the tailoring produced no flow".to_owned(),
                        result: Box::new(result),
                    });
                };
                let template = flow::template(&result.template_id)?;
                let payload = serde_json::json!({
                    "intent": intent,
                    "template_id": result.template_id,
                    "template_version": result.template_version,
                    "content_hash": result.content_hash,
                    "diff": result.diff,
                    "applied": result.applied,
                    "skipped": result.skipped,
                    "proposed_by": proposed_by,
                    "generated_by": generated_by,
                });
                let (version, approval) = self
                    .store_and_hold(
                        &template,
                        &tailored,
                        context,
                        origin,
                        ApprovalKind::DesignFlowProposal,
                        "flow.propose",
                        payload,
                        caller,
                        requested_by,
                    )
                    .await?;
                Ok(ProposalOutcome {
                    result,
                    version: Some(version),
                    approval_id: Some(approval.id),
                    proposed_by,
                    generated_by,
                })
            }
        }
    }

    /// Saves an edited flow as a new version held for approval (FORGE-399). The template is the
    /// built-in flow with the edit's id. Invalid or unchanged edits store nothing.
    pub async fn save_edit(
        &self,
        edited: &Flow,
        context: Option<&FlowContext>,
        by: Requester<'_>,
    ) -> Result<(FlowVersionRecord, ApprovalRecord, Vec<String>), FlowServiceError> {
        check_flow_size(edited)?;
        let template = flow::template(&edited.id)?;
        let diff = flow::prose_diff(&template, edited);
        let payload = serde_json::json!({
            "template_id": template.id,
            "template_version": template.version,
            "diff": diff,
        });
        let (version, approval) = self
            .store_and_hold(
                &template,
                edited,
                context,
                FlowVersionOrigin::Server,
                ApprovalKind::DesignFlowVersion,
                "design_flow.save_version",
                payload,
                by.caller,
                by.identity,
            )
            .await?;
        Ok((version, approval, diff))
    }

    /// A stored version (hash-verified by the store).
    pub async fn version(&self, id: &str) -> Result<FlowVersionRecord, PortError> {
        self.versions.get(id).await
    }

    /// Every stored version, optionally of one template.
    pub async fn versions(&self, template_id: Option<&str>) -> Result<Vec<FlowVersionRecord>, PortError> {
        self.versions.list(template_id).await
    }

    /// Validates, freezes and stores the version, then parks the one approval deciding it.
    #[expect(
        clippy::too_many_arguments,
        reason = "one private step shared by both entry points"
    )]
    async fn store_and_hold(
        &self,
        template: &Flow,
        tailored: &Flow,
        context: Option<&FlowContext>,
        origin: FlowVersionOrigin,
        kind: ApprovalKind,
        tool: &str,
        payload: serde_json::Value,
        caller: &str,
        requested_by: Option<&str>,
    ) -> Result<(FlowVersionRecord, ApprovalRecord), FlowServiceError> {
        let now = self.clock.now();
        let approval_id = self.ids.new_id();
        let version = flow::new_version(self.ids.new_id(), now, template, tailored, context, origin)?;
        let version = flow::attach_approval(&version, approval_id.clone())?;
        let version = self.versions.save(version).await?;
        let hold = ApprovalRecord {
            id: approval_id,
            kind,
            tool: tool.to_owned(),
            arguments: payload,
            caller: caller.to_owned(),
            status: ApprovalStatus::AwaitingApproval,
            reason: None,
            approver: None,
            flow_version_id: Some(version.id.clone()),
            created_at: now,
            decided_at: None,
            deadline: None,
            requested_by: requested_by.map(str::to_owned),
        };
        let approval = self.approvals.park(hold).await?;
        tracing::info!(
            event = "design_flow_version_held",
            version_id = %version.id,
            approval_id = %approval.id,
            template_id = %version.template_id,
            origin = ?version.origin,
            "flow version saved and held for approval"
        );
        Ok((version, approval))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metaforge_domain::flow::TailorMode;
    use metaforge_ports::PortErrorKind;

    fn violation() -> Violation {
        Violation {
            rule: "has-phases".to_owned(),
            phase: None,
            message: "the flow has no phases".to_owned(),
        }
    }

    #[test]
    fn each_refusal_has_one_code_its_message_and_its_details() {
        let strict = flow::propose(
            "mech_v1",
            &[Operation {
                op: "drop_phase".to_owned(),
                phase: Some("no_such_phase".to_owned()),
                value: None,
                rationale: Some("r".to_owned()),
            }],
            Some(&FlowContext {
                manufacturing_context: Some(flow::ManufacturingContext {
                    route: Some(flow::ManufacturingRoute::Vendor),
                    ..flow::ManufacturingContext::default()
                }),
                target_maturity: Some(flow::TargetMaturity::Concept),
                loads_and_use: Some("unknown".to_owned()),
                budget: None,
            }),
            TailorMode::Strict,
        )
        .unwrap();
        let cases = [
            (
                FlowServiceError::Template(flow::template("nope_v9").unwrap_err()),
                "unknown_template",
                None,
            ),
            (
                FlowServiceError::Invalid {
                    message: "operation 0 (drop_phase): unknown phase".to_owned(),
                    result: Box::new(strict),
                },
                "invalid_proposal",
                Some(vec!["refused", "violations", "diff"]),
            ),
            (
                FlowServiceError::Violations {
                    violations: vec![violation()],
                },
                "invariant_violations",
                Some(vec!["violations"]),
            ),
            (
                FlowServiceError::IdenticalToTemplate("nothing to approve".to_owned()),
                "identical_to_template",
                None,
            ),
            (
                FlowServiceError::TooLarge(check_operation_count(1_000_000).unwrap_err()),
                "too_large",
                Some(vec!["field", "limit", "max", "actual"]),
            ),
        ];
        for (err, code, detail_keys) in cases {
            assert_eq!(err.code(), Some(code));
            let message = err.message();
            let refusal = err.into_refusal().unwrap();
            assert_eq!(refusal.code, code);
            assert_eq!(refusal.message, message);
            assert!(!refusal.message.is_empty(), "{code}");
            let keys = refusal.details.as_ref().map(|d| {
                d.as_object()
                    .unwrap()
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
            });
            assert_eq!(keys, detail_keys, "{code}");
        }
    }

    #[test]
    fn an_invalid_proposal_says_its_first_problem_and_a_ledger_failure_is_no_refusal() {
        let err = FlowServiceError::Invalid {
            message: "operation 0 (drop_phase): unknown phase".to_owned(),
            result: Box::new(flow::propose("mech_v1", &[], None, TailorMode::Strict).unwrap()),
        };
        assert_eq!(err.message(), "operation 0 (drop_phase): unknown phase");
        let port = FlowServiceError::Port(PortError::new(PortErrorKind::Unavailable, "ledger down"));
        assert_eq!(port.code(), None);
        let back = port.into_refusal().unwrap_err();
        assert_eq!(back.kind, PortErrorKind::Unavailable);
    }
}
