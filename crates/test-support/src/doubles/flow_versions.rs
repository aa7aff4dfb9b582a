//! The flow-version store double. `corrupt` lets a test tamper with a stored row.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use metaforge_ports::{
    FlowVersionDecision, FlowVersionRecord, FlowVersionRestore, FlowVersionStore, PortError, PortErrorKind,
    SkippedFlowVersion, sha256_hex,
};

use super::{err, lock};

/// A flow-version store in memory (unit tests only).
#[derive(Default)]
pub struct MemoryFlowVersionStore {
    rows: Mutex<BTreeMap<String, FlowVersionRecord>>,
}

impl MemoryFlowVersionStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Overwrites a stored row's frozen content without fixing its hash (to test integrity).
    pub fn corrupt(&self, id: &str, frozen: &str) {
        if let Some(r) = lock(&self.rows).get_mut(id) {
            r.frozen = frozen.to_owned();
        }
    }

    fn verify(r: &FlowVersionRecord) -> Result<(), PortError> {
        let actual = sha256_hex(&r.frozen);
        if actual == r.content_hash {
            Ok(())
        } else {
            Err(err(
                PortErrorKind::Corrupt,
                format!(
                    "flow version {} fails its integrity check: stored content_hash {} but its frozen content hashes to {actual}",
                    r.id, r.content_hash
                ),
            ))
        }
    }

    fn sorted(&self) -> Vec<FlowVersionRecord> {
        let mut v: Vec<FlowVersionRecord> = lock(&self.rows).values().cloned().collect();
        v.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        v
    }
}

#[async_trait]
impl FlowVersionStore for MemoryFlowVersionStore {
    async fn save(&self, record: FlowVersionRecord) -> Result<FlowVersionRecord, PortError> {
        if record.id.trim().is_empty() || record.template_id.trim().is_empty() {
            return Err(err(
                PortErrorKind::Invalid,
                "flow_version.id/template_id: must not be empty",
            ));
        }
        if sha256_hex(&record.frozen) != record.content_hash {
            return Err(err(
                PortErrorKind::Invalid,
                "flow_version.content_hash: does not match the frozen content",
            ));
        }
        if record.status.is_decided() && (record.approver.is_none() || record.decided_at.is_none()) {
            return Err(err(
                PortErrorKind::Invalid,
                "flow_version.approver: a decided version must carry its approver and decided_at",
            ));
        }
        let mut rows = lock(&self.rows);
        if rows.contains_key(&record.id) {
            return Err(err(
                PortErrorKind::Conflict,
                format!("flow version {} already exists", record.id),
            ));
        }
        rows.insert(record.id.clone(), record.clone());
        Ok(record)
    }

    async fn get(&self, id: &str) -> Result<FlowVersionRecord, PortError> {
        let r = lock(&self.rows).get(id).cloned().ok_or_else(|| {
            err(
                PortErrorKind::NotFound,
                format!("flow version {id:?} does not exist"),
            )
        })?;
        Self::verify(&r)?;
        Ok(r)
    }

    async fn list(&self, template_id: Option<&str>) -> Result<Vec<FlowVersionRecord>, PortError> {
        Ok(self
            .sorted()
            .into_iter()
            .filter(|r| template_id.is_none_or(|t| r.template_id == t))
            .filter(|r| Self::verify(r).is_ok())
            .collect())
    }

    async fn decide(&self, id: &str, decision: FlowVersionDecision) -> Result<FlowVersionRecord, PortError> {
        if !decision.status.is_decided() {
            return Err(err(
                PortErrorKind::Invalid,
                "decision.status: must be approved or rejected",
            ));
        }
        if decision.approver.trim().is_empty() {
            return Err(err(
                PortErrorKind::Invalid,
                "decision.approver: must not be empty",
            ));
        }
        self.get(id).await?;
        let mut rows = lock(&self.rows);
        let r = rows.get_mut(id).ok_or_else(|| {
            err(
                PortErrorKind::NotFound,
                format!("flow version {id:?} does not exist"),
            )
        })?;
        if r.status.is_decided() {
            return Err(err(
                PortErrorKind::Conflict,
                format!("flow version {id} is already decided and immutable"),
            ));
        }
        r.status = decision.status;
        r.approver = Some(decision.approver);
        if decision.approval_id.is_some() {
            r.approval_id = decision.approval_id;
        }
        r.decided_at = Some(decision.at);
        Ok(r.clone())
    }

    async fn restore(&self) -> Result<FlowVersionRestore, PortError> {
        let mut out = FlowVersionRestore::default();
        for r in self.sorted() {
            match Self::verify(&r) {
                Ok(()) => out.restored.push(r),
                Err(e) => out.skipped.push(SkippedFlowVersion {
                    id: r.id,
                    reason: e.message,
                }),
            }
        }
        Ok(out)
    }
}
