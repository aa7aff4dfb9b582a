//! The frozen flow a run walks (FORGE-401/474): a verified version, its id and hash, and its
//! phases in execution order, computed once. Both engines build it the same way, so they run
//! exactly the approved version and never the template it came from.

use metaforge_ports::{FlowRef, FlowVersionRecord, FlowVersionStatus};

use super::refusal::RunRefusal;
use crate::flow::{Flow, Phase, content_hash, execution_order, freeze, sha256_hex, thaw};

/// A verified, runnable flow version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrozenFlow {
    reference: FlowRef,
    flow: Flow,
    order: Vec<String>,
}

impl FrozenFlow {
    /// From a stored version: it must be approved and its frozen text must match its hash.
    pub fn from_version(version: &FlowVersionRecord) -> Result<Self, RunRefusal> {
        match version.status {
            FlowVersionStatus::Approved => {}
            FlowVersionStatus::Proposed | FlowVersionStatus::Rejected => {
                return Err(RunRefusal::NotApproved {
                    version_id: version.id.clone(),
                    status: format!("{:?}", version.status).to_lowercase(),
                });
            }
        }
        Self::from_frozen(&version.id, &version.content_hash, &version.frozen)
    }

    /// From frozen text and the hash it must have: the hash is checked, the text parsed, and
    /// re-freezing must reproduce it exactly (a rebuild that differs is not the approved version).
    pub fn from_frozen(version_id: &str, expected_hash: &str, frozen: &str) -> Result<Self, RunRefusal> {
        let corrupt = |reason: String| RunRefusal::Corrupt {
            version_id: version_id.to_owned(),
            reason,
        };
        let actual = sha256_hex(frozen);
        if actual != expected_hash {
            return Err(corrupt(format!(
                "content hash {actual} does not match the recorded {expected_hash}"
            )));
        }
        let flow = thaw(frozen).map_err(|e| corrupt(format!("frozen flow does not parse: {e}")))?;
        match freeze(&flow) {
            Ok(again) if again == frozen => {}
            Ok(_) => {
                return Err(corrupt(
                    "re-freezing the flow does not reproduce the stored text".to_owned(),
                ));
            }
            Err(e) => return Err(corrupt(e.to_string())),
        }
        Self::build(version_id, actual, flow)
    }

    /// From a flow in memory (a template, a test): the hash is computed from it.
    pub fn new(version_id: &str, flow: Flow) -> Result<Self, RunRefusal> {
        let hash = content_hash(&flow).map_err(|e| RunRefusal::Corrupt {
            version_id: version_id.to_owned(),
            reason: e.to_string(),
        })?;
        Self::build(version_id, hash, flow)
    }

    fn build(version_id: &str, content_hash: String, flow: Flow) -> Result<Self, RunRefusal> {
        if version_id.trim().is_empty() {
            return Err(RunRefusal::Missing("flow_version_id"));
        }
        let unrunnable = |reason: &str| RunRefusal::Unrunnable {
            version_id: version_id.to_owned(),
            reason: reason.to_owned(),
        };
        if flow.phases.is_empty() {
            return Err(unrunnable("it has no phases"));
        }
        if let Some(phase) = flow.phases.iter().find(|p| p.id.contains(':')) {
            return Err(RunRefusal::ColonInId {
                field: "phase",
                value: phase.id.clone(),
            });
        }
        let order: Vec<String> = execution_order(&flow)
            .ok_or_else(|| unrunnable("its phase ids repeat or its dependencies form a cycle"))?
            .into_iter()
            .map(str::to_owned)
            .collect();
        Ok(Self {
            reference: FlowRef {
                version_id: version_id.to_owned(),
                content_hash,
            },
            flow,
            order,
        })
    }

    /// The version id and hash the run is pinned to.
    pub fn reference(&self) -> &FlowRef {
        &self.reference
    }

    /// The flow.
    pub fn flow(&self) -> &Flow {
        &self.flow
    }

    /// Phase ids in execution order.
    pub fn order(&self) -> &[String] {
        &self.order
    }

    /// The phase with this id.
    pub fn phase(&self, id: &str) -> Option<&Phase> {
        self.flow.phase(id)
    }
}
