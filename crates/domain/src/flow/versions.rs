//! Flow versions (FORGE-399): an edited or tailored flow saved as an immutable, frozen, hashed
//! record held for approval. An edit is a new version; a decided version never changes, because
//! runs pin the version they started on and an approval that can be edited afterwards is not one.
//!
//! Ids and times come in as parameters; the store that keeps the records is a port.

use metaforge_ports::{FlowVersionOrigin, FlowVersionRecord, FlowVersionStatus, Timestamp};
use serde::Serialize;

use super::context::FlowContext;
use super::freeze::{FreezeError, content_hash, freeze, sha256_hex, thaw};
use super::invariants::{Violation, validate};
use super::model::Flow;

/// Why a version could not be created, decided or trusted.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    /// The flow breaks invariants; nothing is stored. Carries every violation.
    #[error("the flow breaks {} invariant(s)", violations.len())]
    Invalid {
        /// Every violation.
        violations: Vec<Violation>,
    },
    /// The flow is identical to its template: an approval with nothing to approve.
    #[error("the flow is identical to template '{template_id}' {template_version}: nothing to approve")]
    IdenticalToTemplate {
        /// Template id.
        template_id: String,
        /// Template version.
        template_version: String,
    },
    /// The version was already decided; decided versions are immutable.
    #[error("flow version '{id}' is already {status:?} and cannot change")]
    AlreadyDecided {
        /// Version id.
        id: String,
        /// Its final status.
        status: FlowVersionStatus,
    },
    /// The stored content no longer matches its hash (or does not parse): never run it.
    #[error("flow version '{id}' is corrupt: {reason}")]
    Corrupt {
        /// Version id.
        id: String,
        /// What failed.
        reason: String,
    },
    /// A required argument was empty.
    #[error("{0} must not be empty")]
    Missing(&'static str),
    /// Freezing failed.
    #[error(transparent)]
    Freeze(#[from] FreezeError),
}

/// A person's decision on a held version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum VersionDecision {
    /// Runs may start on the version.
    Approve,
    /// The version is kept for audit only.
    Reject,
}

/// Creates a new proposed version of `flow`, derived from `template`.
///
/// Refuses a flow that breaks any invariant under `context` (with every violation) and a flow
/// identical to its template. `id` is a fresh uuid v7 and `created_at` the current time, both
/// supplied by the caller.
pub fn new_version(
    id: String,
    created_at: Timestamp,
    template: &Flow,
    flow: &Flow,
    context: Option<&FlowContext>,
    origin: FlowVersionOrigin,
) -> Result<FlowVersionRecord, VersionError> {
    if id.trim().is_empty() {
        return Err(VersionError::Missing("id"));
    }
    let violations = validate(flow, context);
    if !violations.is_empty() {
        return Err(VersionError::Invalid { violations });
    }
    let frozen = freeze(flow)?;
    let hash = sha256_hex(&frozen);
    if hash == content_hash(template)? {
        return Err(VersionError::IdenticalToTemplate {
            template_id: template.id.clone(),
            template_version: template.version.clone(),
        });
    }
    Ok(FlowVersionRecord {
        id,
        template_id: template.id.clone(),
        template_version: template.version.clone(),
        status: FlowVersionStatus::Proposed,
        frozen,
        content_hash: hash,
        origin,
        approval_id: None,
        approver: None,
        created_at,
        decided_at: None,
    })
}

/// The approver recorded on a shipped template's version: shipping it is its approval (the
/// templates pass every invariant and their content hashes are pinned by the release's tests).
pub const TEMPLATE_APPROVER: &str = "template";

/// The id of a shipped template's version: `template-<id>-<version>-<first 16 hex of its hash>`,
/// the same for every run started from the same template text, so a store keeps one record per
/// shipped template version and an edited template (a new `version`, a new hash) gets a new one.
pub fn template_version_id(template_id: &str, template_version: &str, content_hash: &str) -> String {
    let short: String = content_hash.chars().take(16).collect();
    format!("template-{template_id}-{template_version}-{short}")
}

/// A shipped template frozen, as it is, into an approved version with origin `template` and
/// approver [`TEMPLATE_APPROVER`], so a run started from a template pins a stored, hash-verified
/// version exactly like a run started from a tailored one (FORGE-474), and "which flow did this
/// run use" has the same answer either way. Refuses a template that breaks an invariant
/// (`Invalid`, every violation): the catalogue lists it as unstartable. Apart from `at` the record
/// depends only on the template's text (see [`template_version_id`]).
pub fn template_version(template: &Flow, at: Timestamp) -> Result<FlowVersionRecord, VersionError> {
    let violations = validate(template, None);
    if !violations.is_empty() {
        return Err(VersionError::Invalid { violations });
    }
    let frozen = freeze(template)?;
    let hash = sha256_hex(&frozen);
    Ok(FlowVersionRecord {
        id: template_version_id(&template.id, &template.version, &hash),
        template_id: template.id.clone(),
        template_version: template.version.clone(),
        status: FlowVersionStatus::Approved,
        frozen,
        content_hash: hash,
        origin: FlowVersionOrigin::Template,
        approval_id: None,
        approver: Some(TEMPLATE_APPROVER.to_owned()),
        created_at: at,
        decided_at: Some(at),
    })
}

/// Links a proposed version to the approval that decides it. A decided version is refused.
pub fn attach_approval(
    version: &FlowVersionRecord,
    approval_id: String,
) -> Result<FlowVersionRecord, VersionError> {
    refuse_decided(version)?;
    if approval_id.trim().is_empty() {
        return Err(VersionError::Missing("approval_id"));
    }
    Ok(FlowVersionRecord {
        approval_id: Some(approval_id),
        ..version.clone()
    })
}

/// Records a decision: a new record with the final status, the approver (read from the approval
/// record by the caller, never from a request field) and the decision time. Refuses a version
/// that is already decided or whose content no longer matches its hash.
pub fn decide_version(
    version: &FlowVersionRecord,
    decision: VersionDecision,
    approver: String,
    decided_at: Timestamp,
) -> Result<FlowVersionRecord, VersionError> {
    refuse_decided(version)?;
    if approver.trim().is_empty() {
        return Err(VersionError::Missing("approver"));
    }
    verify_version(version)?;
    Ok(FlowVersionRecord {
        status: match decision {
            VersionDecision::Approve => FlowVersionStatus::Approved,
            VersionDecision::Reject => FlowVersionStatus::Rejected,
        },
        approver: Some(approver),
        decided_at: Some(decided_at),
        ..version.clone()
    })
}

/// Checks a stored version before it is served or run: the hash matches the frozen text, the
/// text parses as a flow, and re-freezing reproduces it exactly. Returns the flow.
pub fn verify_version(version: &FlowVersionRecord) -> Result<Flow, VersionError> {
    let corrupt = |reason: String| VersionError::Corrupt {
        id: version.id.clone(),
        reason,
    };
    let actual = sha256_hex(&version.frozen);
    if actual != version.content_hash {
        return Err(corrupt(format!(
            "content hash {actual} does not match the recorded {}",
            version.content_hash
        )));
    }
    let flow = thaw(&version.frozen).map_err(|e| corrupt(format!("frozen flow does not parse: {e}")))?;
    if freeze(&flow)? != version.frozen {
        return Err(corrupt(
            "re-freezing the flow does not reproduce the stored text".to_owned(),
        ));
    }
    Ok(flow)
}

fn refuse_decided(version: &FlowVersionRecord) -> Result<(), VersionError> {
    if version.status.is_decided() {
        return Err(VersionError::AlreadyDecided {
            id: version.id.clone(),
            status: version.status,
        });
    }
    Ok(())
}
