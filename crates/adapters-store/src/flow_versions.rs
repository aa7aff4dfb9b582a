//! The flow-version store on SQLite (FORGE-482). Every row read back is verified
//! (`sha256(frozen) == content_hash`); a row that fails is logged and never served.

use std::path::Path;

use async_trait::async_trait;
use metaforge_ports::{
    FlowVersionDecision, FlowVersionRecord, FlowVersionRestore, FlowVersionStore, PortError, PortErrorKind,
    SkippedFlowVersion, sha256_hex,
};
use sqlx::SqlitePool;

use crate::sqlite::{
    begin_write, db_error, label, not_found, open_pool, parse_label, parse_opt_ts, parse_ts, ts,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/flow_versions");

/// The flow-version store in one SQLite file (`flow_versions.db`).
#[derive(Clone)]
pub struct SqliteFlowVersionStore {
    pool: SqlitePool,
}

#[derive(sqlx::FromRow)]
struct VersionRow {
    id: String,
    template_id: String,
    template_version: String,
    status: String,
    frozen: String,
    content_hash: String,
    origin: String,
    approval_id: Option<String>,
    approver: Option<String>,
    created_at: String,
    decided_at: Option<String>,
}

impl VersionRow {
    /// Decodes and verifies the row; a hash mismatch or undecodable field is `Corrupt`.
    fn into_verified(self) -> Result<FlowVersionRecord, PortError> {
        let actual = sha256_hex(&self.frozen);
        if actual != self.content_hash {
            return Err(PortError::new(
                PortErrorKind::Corrupt,
                format!(
                    "flow version {} fails its integrity check: stored content_hash {} but its \
                     frozen content hashes to {actual}",
                    self.id, self.content_hash
                ),
            ));
        }
        Ok(FlowVersionRecord {
            template_id: self.template_id,
            template_version: self.template_version,
            status: parse_label("flow_versions.status", &self.status)?,
            frozen: self.frozen,
            content_hash: self.content_hash,
            origin: parse_label("flow_versions.origin", &self.origin)?,
            approval_id: self.approval_id,
            approver: self.approver,
            created_at: parse_ts("flow_versions.created_at", &self.created_at)?,
            decided_at: parse_opt_ts("flow_versions.decided_at", self.decided_at)?,
            id: self.id,
        })
    }
}

/// Refuses a version that cannot be saved, naming the field.
pub(crate) fn validate_new_version(record: &FlowVersionRecord) -> Result<(), PortError> {
    let invalid = |field: &str, why: String| {
        Err(PortError::new(
            PortErrorKind::Invalid,
            format!("flow_version.{field}: {why}"),
        ))
    };
    if record.id.trim().is_empty() {
        return invalid("id", "must not be empty".into());
    }
    if record.template_id.trim().is_empty() {
        return invalid("template_id", "must not be empty".into());
    }
    let actual = sha256_hex(&record.frozen);
    if actual != record.content_hash {
        return invalid(
            "content_hash",
            format!(
                "{} does not match the frozen content ({actual})",
                record.content_hash
            ),
        );
    }
    if record.status.is_decided() && (record.approver.is_none() || record.decided_at.is_none()) {
        return invalid(
            "approver",
            "a decided version must carry its approver and decided_at".into(),
        );
    }
    Ok(())
}

/// Refuses a decision that is not approve/reject or has no approver.
pub(crate) fn validate_version_decision(decision: &FlowVersionDecision) -> Result<(), PortError> {
    if !decision.status.is_decided() {
        return Err(PortError::new(
            PortErrorKind::Invalid,
            "decision.status: must be approved or rejected",
        ));
    }
    if decision.approver.trim().is_empty() {
        return Err(PortError::new(
            PortErrorKind::Invalid,
            "decision.approver: must not be empty",
        ));
    }
    Ok(())
}

impl SqliteFlowVersionStore {
    /// Opens (creating and migrating) the store at `path`.
    pub async fn open(path: &Path) -> Result<Self, PortError> {
        Ok(Self {
            pool: open_pool(path, &MIGRATOR).await?,
        })
    }

    async fn rows(&self, template_id: Option<&str>) -> Result<Vec<VersionRow>, PortError> {
        sqlx::query_as(
            "SELECT id, template_id, template_version, status, frozen, content_hash, origin, \
             approval_id, approver, created_at, decided_at FROM flow_versions \
             WHERE (?1 IS NULL OR template_id = ?1) ORDER BY created_at, id",
        )
        .bind(template_id)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("read flow versions", e))
    }

    /// Verifies every row, splitting served versions from skipped (logged) ones.
    fn verify_all(rows: Vec<VersionRow>) -> FlowVersionRestore {
        let mut out = FlowVersionRestore::default();
        for row in rows {
            let id = row.id.clone();
            match row.into_verified() {
                Ok(record) => out.restored.push(record),
                Err(err) => {
                    tracing::error!(
                        event = "flow_version_restore_skipped",
                        flow_version_id = %id,
                        reason = %err.message,
                        "a stored flow version failed verification and will not be served"
                    );
                    out.skipped.push(SkippedFlowVersion {
                        id,
                        reason: err.message,
                    });
                }
            }
        }
        out
    }
}

#[async_trait]
impl FlowVersionStore for SqliteFlowVersionStore {
    async fn save(&self, record: FlowVersionRecord) -> Result<FlowVersionRecord, PortError> {
        validate_new_version(&record)?;
        let mut tx = begin_write(&self.pool).await?;
        let inserted = sqlx::query(
            "INSERT INTO flow_versions (id, template_id, template_version, status, frozen, \
             content_hash, origin, approval_id, approver, created_at, decided_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&record.id)
        .bind(&record.template_id)
        .bind(&record.template_version)
        .bind(label(&record.status)?)
        .bind(&record.frozen)
        .bind(&record.content_hash)
        .bind(label(&record.origin)?)
        .bind(&record.approval_id)
        .bind(&record.approver)
        .bind(ts(record.created_at))
        .bind(record.decided_at.map(ts))
        .execute(&mut *tx)
        .await;
        if let Err(e) = inserted {
            let err = db_error("save a flow version", e);
            return Err(if err.kind == PortErrorKind::Conflict {
                PortError::new(
                    PortErrorKind::Conflict,
                    format!("flow version {} already exists", record.id),
                )
            } else {
                err
            });
        }
        tx.commit()
            .await
            .map_err(|e| db_error("commit a flow version", e))?;
        Ok(record)
    }

    async fn get(&self, id: &str) -> Result<FlowVersionRecord, PortError> {
        let row: Option<VersionRow> = sqlx::query_as(
            "SELECT id, template_id, template_version, status, frozen, content_hash, origin, \
             approval_id, approver, created_at, decided_at FROM flow_versions WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("read a flow version", e))?;
        let row = row.ok_or_else(|| not_found("flow version", id))?;
        row.into_verified().inspect_err(|err| {
            tracing::error!(
                event = "flow_version_integrity_failed",
                flow_version_id = %id,
                reason = %err.message,
                "refusing to serve a flow version whose hash does not match"
            );
        })
    }

    async fn list(&self, template_id: Option<&str>) -> Result<Vec<FlowVersionRecord>, PortError> {
        Ok(Self::verify_all(self.rows(template_id).await?).restored)
    }

    async fn decide(&self, id: &str, decision: FlowVersionDecision) -> Result<FlowVersionRecord, PortError> {
        validate_version_decision(&decision)?;
        // Verify before deciding: a corrupt version is never approved.
        let current = self.get(id).await?;
        if current.status.is_decided() {
            return Err(PortError::new(
                PortErrorKind::Conflict,
                format!(
                    "flow version {id} is already {} and immutable",
                    label(&current.status)?
                ),
            ));
        }
        let mut tx = begin_write(&self.pool).await?;
        let changed = sqlx::query(
            "UPDATE flow_versions SET status = ?, approver = ?, approval_id = COALESCE(?, approval_id), \
             decided_at = ? WHERE id = ? AND status = 'proposed' AND content_hash = ?",
        )
        .bind(label(&decision.status)?)
        .bind(&decision.approver)
        .bind(&decision.approval_id)
        .bind(ts(decision.at))
        .bind(id)
        .bind(&current.content_hash)
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("decide a flow version", e))?
        .rows_affected();
        if changed == 0 {
            drop(tx);
            let now = self.get(id).await?;
            return Err(PortError::new(
                PortErrorKind::Conflict,
                format!(
                    "flow version {id} is already {} and immutable",
                    label(&now.status)?
                ),
            ));
        }
        tx.commit()
            .await
            .map_err(|e| db_error("commit a flow version decision", e))?;
        self.get(id).await
    }

    async fn restore(&self) -> Result<FlowVersionRestore, PortError> {
        let restored = Self::verify_all(self.rows(None).await?);
        tracing::info!(
            event = "flow_versions_restored",
            restored = restored.restored.len(),
            skipped = restored.skipped.len(),
            "flow versions restored"
        );
        Ok(restored)
    }
}
