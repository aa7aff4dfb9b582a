//! The flow-version store (FORGE-482), one engine on SQLite and on PostgreSQL (shared by every
//! gateway on the server). Every row read back is verified (`sha256(frozen) == content_hash`);
//! a row that fails is logged and never served. A decision is one write transaction that reads
//! the version (locking its row where the database needs it), verifies it and updates it on
//! `status = 'proposed'`, so two gateways deciding one version serialise: the first wins, the
//! second reads the decided version and gets its conflict.

use std::path::Path;

use async_trait::async_trait;
use metaforge_ports::{
    FlowVersionDecision, FlowVersionRecord, FlowVersionRestore, FlowVersionStore, PortError, PortErrorKind,
    SkippedFlowVersion, sha256_hex,
};
use sqlx::{Pool, Sqlite};

use crate::codec::{label, not_found, parse_label};
use crate::sql::{Dialect, FromRecord, Record, pooled, sql, sql_locking, sql_owned};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/flow_versions");
#[cfg(feature = "postgres")]
static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres/flow_versions");

/// The schema holding this store's table and migration history on PostgreSQL.
#[cfg(feature = "postgres")]
const PG_SCHEMA: &str = "metaforge_flow_versions";

/// The columns every read selects.
const VERSION_COLUMNS: &str = "id, template_id, template_version, status, frozen, content_hash, origin, \
     approval_id, approver, created_at, decided_at";

/// The flow-version store over database `E`.
pub struct SqlFlowVersionStore<E: Dialect> {
    pool: Pool<E>,
}

impl<E: Dialect> Clone for SqlFlowVersionStore<E> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
        }
    }
}

/// The flow-version store in one SQLite file (`flow_versions.db`).
pub type SqliteFlowVersionStore = SqlFlowVersionStore<Sqlite>;

/// The flow-version store in the `metaforge_flow_versions` schema of a PostgreSQL database.
#[cfg(feature = "postgres")]
pub type PgFlowVersionStore = SqlFlowVersionStore<sqlx::Postgres>;

impl SqlFlowVersionStore<Sqlite> {
    /// Opens (creating and migrating) the store at `path`.
    pub async fn open(path: &Path) -> Result<Self, PortError> {
        Ok(Self {
            pool: crate::sqlite::open_pool(path, &MIGRATOR).await?,
        })
    }
}

#[cfg(feature = "postgres")]
impl SqlFlowVersionStore<sqlx::Postgres> {
    /// Connects to the server at `url` (creating and migrating the store's schema).
    ///
    /// # Errors
    /// `Invalid` for a URL that does not parse, `Unavailable` when the server cannot be reached.
    pub async fn open(url: &str) -> Result<Self, PortError> {
        Ok(Self {
            pool: crate::postgres::open_pool(url, PG_SCHEMA, &PG_MIGRATOR).await?,
        })
    }
}

/// One stored version, not yet verified.
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
    created_at: metaforge_ports::Timestamp,
    decided_at: Option<metaforge_ports::Timestamp>,
}

impl<E: Dialect> FromRecord<E> for VersionRow {
    fn from_record(row: &Record<'_, E>) -> Result<Self, PortError> {
        Ok(Self {
            id: row.get("id")?,
            template_id: row.get("template_id")?,
            template_version: row.get("template_version")?,
            status: row.get("status")?,
            frozen: row.get("frozen")?,
            content_hash: row.get("content_hash")?,
            origin: row.get("origin")?,
            approval_id: row.get("approval_id")?,
            approver: row.get("approver")?,
            created_at: row.time("created_at")?,
            decided_at: row.opt_time("decided_at")?,
        })
    }
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

    /// Verifies a row about to be served, logging a failure.
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

impl<E: Dialect> SqlFlowVersionStore<E> {
    async fn rows(&self, template_id: Option<&str>) -> Result<Vec<VersionRow>, PortError> {
        // No stored template id holds text the database cannot hold.
        if template_id.is_some_and(|t| !E::can_hold(t)) {
            return Ok(Vec::new());
        }
        sql_owned(
            format!(
                "SELECT {VERSION_COLUMNS} FROM flow_versions \
                 WHERE (CAST($1 AS TEXT) IS NULL OR template_id = $1) ORDER BY created_at, id"
            ),
            "read flow versions",
        )
        .bind(template_id.map(str::to_owned))
        .fetch_all(&mut pooled(&self.pool).await?)
        .await
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
impl<E: Dialect> FlowVersionStore for SqlFlowVersionStore<E> {
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
            E::check_text(field, value)?;
        }
        // One statement: a racing save of the same id meets the primary key and is a conflict.
        let inserted = sql(
            "INSERT INTO flow_versions (id, template_id, template_version, status, frozen, \
             content_hash, origin, approval_id, approver, created_at, decided_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            "save a flow version",
        )
        .bind(record.id.clone())
        .bind(record.template_id.clone())
        .bind(record.template_version.clone())
        .bind(label(&record.status)?)
        .bind(record.frozen.clone())
        .bind(record.content_hash.clone())
        .bind(label(&record.origin)?)
        .bind(record.approval_id.clone())
        .bind(record.approver.clone())
        .bind_time(record.created_at)
        .bind_opt_time(record.decided_at)
        .execute(&mut pooled(&self.pool).await?)
        .await;
        match inserted {
            Ok(_) => Ok(record),
            Err(err) if err.kind == PortErrorKind::Conflict => Err(PortError::new(
                PortErrorKind::Conflict,
                format!("flow version {} already exists", record.id),
            )),
            Err(err) => Err(err),
        }
    }

    async fn get(&self, id: &str) -> Result<FlowVersionRecord, PortError> {
        if !E::can_hold(id) {
            return Err(not_found("flow version", id));
        }
        let row: Option<VersionRow> = sql_owned(
            format!("SELECT {VERSION_COLUMNS} FROM flow_versions WHERE id = $1"),
            "read a flow version",
        )
        .bind(id.to_owned())
        .fetch_optional(&mut pooled(&self.pool).await?)
        .await?;
        row.ok_or_else(|| not_found("flow version", id))?.into_served()
    }

    async fn list(&self, template_id: Option<&str>) -> Result<Vec<FlowVersionRecord>, PortError> {
        Ok(Self::verify_all(self.rows(template_id).await?).restored)
    }

    async fn decide(&self, id: &str, decision: FlowVersionDecision) -> Result<FlowVersionRecord, PortError> {
        validate_version_decision(&decision)?;
        E::check_text("flow_version.approver", Some(&decision.approver))?;
        E::check_text("flow_version.approval_id", decision.approval_id.as_deref())?;
        if !E::can_hold(id) {
            return Err(not_found("flow version", id));
        }
        let mut tx = E::begin_write(&self.pool).await?;
        // The row stays held until the transaction ends: a second gateway deciding the same
        // version waits here, then reads it decided.
        let row: Option<VersionRow> = sql_locking(
            format!("SELECT {VERSION_COLUMNS} FROM flow_versions WHERE id = $1"),
            "read a flow version",
        )
        .bind(id.to_owned())
        .fetch_optional(&mut tx)
        .await?;
        // Verify before deciding: a corrupt version is never approved.
        let current = row.ok_or_else(|| not_found("flow version", id))?.into_served()?;
        if current.status.is_decided() {
            return Err(already_decided(id, &current)?);
        }
        let updated: Option<VersionRow> = sql_owned(
            format!(
                "UPDATE flow_versions SET status = $1, approver = $2, \
                 approval_id = COALESCE($3, approval_id), decided_at = $4 \
                 WHERE id = $5 AND status = 'proposed' AND content_hash = $6 \
                 RETURNING {VERSION_COLUMNS}"
            ),
            "decide a flow version",
        )
        .bind(label(&decision.status)?)
        .bind(decision.approver.clone())
        .bind(decision.approval_id.clone())
        .bind_time(decision.at)
        .bind(id.to_owned())
        .bind(current.content_hash.clone())
        .fetch_optional(&mut tx)
        .await?;
        // Unreachable while the write transaction holds the row (it was read proposed in it);
        // answered as the conflict it would be rather than assumed.
        let Some(updated) = updated else {
            return Err(already_decided(id, &current)?);
        };
        let decided = updated.into_served()?;
        tx.commit()
            .await
            .map_err(|e| E::db_error("commit a flow version decision", e))?;
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
