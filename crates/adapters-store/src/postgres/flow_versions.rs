//! The flow-version store on PostgreSQL (FORGE-482), shared by every gateway on the server. Every
//! row read back is verified (`sha256(frozen) == content_hash`); a row that fails is logged and
//! never served. A decision is one transaction that locks the version's row (`SELECT … FOR
//! UPDATE`), verifies it and updates it on `status = 'proposed'`, so two gateways deciding one
//! version serialise: the first wins, the second reads the decided version and gets its conflict.

use async_trait::async_trait;
use metaforge_ports::{
    FlowVersionDecision, FlowVersionRecord, FlowVersionRestore, FlowVersionStore, PortError, PortErrorKind,
    SkippedFlowVersion, Timestamp, sha256_hex,
};
use sqlx::PgPool;

use super::{db_error, open_pool, refuse_nul};
use crate::codec::{label, not_found, parse_label};
use crate::flow_versions::{validate_new_version, validate_version_decision};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres/flow_versions");

/// The schema holding this store's table and migration history.
const SCHEMA: &str = "metaforge_flow_versions";

/// The columns every read selects, in [`VersionRow`]'s order (a macro, so each statement stays
/// one `&'static str` literal).
macro_rules! columns {
    () => {
        "id, template_id, template_version, status, frozen, content_hash, origin, approval_id, \
         approver, created_at, decided_at"
    };
}

/// The flow-version store in the `metaforge_flow_versions` schema of a PostgreSQL database.
#[derive(Clone)]
pub struct PgFlowVersionStore {
    pool: PgPool,
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
    created_at: Timestamp,
    decided_at: Option<Timestamp>,
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
            created_at: self.created_at,
            decided_at: self.decided_at,
            id: self.id,
        })
    }

    /// Verifies a row about to be served, logging a failure as the SQLite store does.
    fn into_served(self) -> Result<FlowVersionRecord, PortError> {
        let id = self.id.clone();
        self.into_verified().inspect_err(|err| {
            tracing::error!(
                event = "flow_version_integrity_failed",
                flow_version_id = %id,
                reason = %err.message,
                "refusing to serve a flow version whose hash does not match"
            );
        })
    }
}

fn already_decided(id: &str, record: &FlowVersionRecord) -> Result<PortError, PortError> {
    Ok(PortError::new(
        PortErrorKind::Conflict,
        format!(
            "flow version {id} is already {} and immutable",
            label(&record.status)?
        ),
    ))
}

impl PgFlowVersionStore {
    /// Connects to the server at `url` (creating and migrating the store's schema).
    ///
    /// # Errors
    /// `Invalid` for a URL that does not parse, `Unavailable` when the server cannot be reached.
    pub async fn open(url: &str) -> Result<Self, PortError> {
        Ok(Self {
            pool: open_pool(url, SCHEMA, &MIGRATOR).await?,
        })
    }

    async fn rows(&self, template_id: Option<&str>) -> Result<Vec<VersionRow>, PortError> {
        // No stored template id holds a NUL, and the server would refuse the bind.
        if template_id.is_some_and(|t| t.contains('\0')) {
            return Ok(Vec::new());
        }
        sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM flow_versions \
             WHERE ($1::text IS NULL OR template_id = $1) ORDER BY created_at, id"
        ))
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
impl FlowVersionStore for PgFlowVersionStore {
    async fn save(&self, record: FlowVersionRecord) -> Result<FlowVersionRecord, PortError> {
        validate_new_version(&record)?;
        for (field, value) in [
            ("flow_version.id", Some(record.id.as_str())),
            ("flow_version.template_id", Some(record.template_id.as_str())),
            (
                "flow_version.template_version",
                Some(record.template_version.as_str()),
            ),
            ("flow_version.frozen", Some(record.frozen.as_str())),
            ("flow_version.approval_id", record.approval_id.as_deref()),
            ("flow_version.approver", record.approver.as_deref()),
        ] {
            refuse_nul(field, value)?;
        }
        // One statement: a racing save of the same id meets the primary key and is a conflict.
        let inserted = sqlx::query(
            "INSERT INTO flow_versions (id, template_id, template_version, status, frozen, \
             content_hash, origin, approval_id, approver, created_at, decided_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
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
        .bind(record.created_at)
        .bind(record.decided_at)
        .execute(&self.pool)
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
        Ok(record)
    }

    async fn get(&self, id: &str) -> Result<FlowVersionRecord, PortError> {
        if id.contains('\0') {
            return Err(not_found("flow version", id));
        }
        let row: Option<VersionRow> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM flow_versions WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("read a flow version", e))?;
        row.ok_or_else(|| not_found("flow version", id))?.into_served()
    }

    async fn list(&self, template_id: Option<&str>) -> Result<Vec<FlowVersionRecord>, PortError> {
        Ok(Self::verify_all(self.rows(template_id).await?).restored)
    }

    async fn decide(&self, id: &str, decision: FlowVersionDecision) -> Result<FlowVersionRecord, PortError> {
        validate_version_decision(&decision)?;
        refuse_nul("flow_version.approver", Some(&decision.approver))?;
        if let Some(approval_id) = &decision.approval_id {
            refuse_nul("flow_version.approval_id", Some(approval_id))?;
        }
        if id.contains('\0') {
            return Err(not_found("flow version", id));
        }
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| db_error("begin a write transaction", e))?;
        // The row stays locked until the transaction ends: a second gateway deciding the same
        // version waits here, then reads it decided.
        let row: Option<VersionRow> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM flow_versions WHERE id = $1 FOR UPDATE"
        ))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| db_error("read a flow version", e))?;
        // Verify before deciding: a corrupt version is never approved.
        let current = row.ok_or_else(|| not_found("flow version", id))?.into_served()?;
        if current.status.is_decided() {
            return Err(already_decided(id, &current)?);
        }
        let updated: Option<VersionRow> = sqlx::query_as(concat!(
            "UPDATE flow_versions SET status = $1, approver = $2, \
             approval_id = COALESCE($3, approval_id), decided_at = $4 \
             WHERE id = $5 AND status = 'proposed' AND content_hash = $6 RETURNING ",
            columns!()
        ))
        .bind(label(&decision.status)?)
        .bind(&decision.approver)
        .bind(&decision.approval_id)
        .bind(decision.at)
        .bind(id)
        .bind(&current.content_hash)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| db_error("decide a flow version", e))?;
        // Unreachable while the row is locked (it was read proposed in this transaction);
        // answered as the conflict it would be rather than assumed.
        let Some(updated) = updated else {
            return Err(already_decided(id, &current)?);
        };
        let decided = updated.into_served()?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit a flow version decision", e))?;
        Ok(decided)
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
