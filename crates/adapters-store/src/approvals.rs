//! The approval ledger on SQLite (FORGE-89, FORGE-406/466). Every transition is one
//! `BEGIN IMMEDIATE` transaction: a conditional UPDATE on `status = 'awaiting_approval'` plus an
//! append-only history row, so two processes deciding one hold serialise and exactly one wins.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_ports::{
    ApprovalDecision, ApprovalLedger, ApprovalRecord, ApprovalStatus, ApprovalTransition, ApprovalTrigger,
    Clock, ORPHANED_APPROVAL_REASON, PortError, PortErrorKind, ResolveOutcome, Timestamp, WaiterResolution,
};
use sqlx::{Sqlite, SqlitePool, Transaction};

use crate::sqlite::{
    begin_write, db_error, label, limit_i64, not_found, open_pool, parse_json, parse_label, parse_opt_ts,
    parse_ts, to_json, ts,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/approvals");

/// The reason written on a hold a read found past its deadline.
pub const DEADLINE_REASON: &str = "deadline passed: no waiter resolved this approval before its deadline";

const AWAITING: &str = "awaiting_approval";

/// The approval ledger in one SQLite file (`tool_approvals_ledger.db`).
#[derive(Clone)]
pub struct SqliteApprovalLedger {
    pool: SqlitePool,
    clock: Arc<dyn Clock>,
}

#[derive(sqlx::FromRow)]
struct ApprovalRow {
    id: String,
    kind: String,
    tool: String,
    arguments: String,
    caller: String,
    status: String,
    reason: Option<String>,
    approver: Option<String>,
    flow_version_id: Option<String>,
    created_at: String,
    decided_at: Option<String>,
    deadline: Option<String>,
}

impl ApprovalRow {
    fn into_record(self) -> Result<ApprovalRecord, PortError> {
        Ok(ApprovalRecord {
            kind: parse_label("approvals.kind", &self.kind)?,
            tool: self.tool,
            arguments: parse_json("approvals.arguments", &self.arguments)?,
            caller: self.caller,
            status: parse_label("approvals.status", &self.status)?,
            reason: self.reason,
            approver: self.approver,
            flow_version_id: self.flow_version_id,
            created_at: parse_ts("approvals.created_at", &self.created_at)?,
            decided_at: parse_opt_ts("approvals.decided_at", self.decided_at)?,
            deadline: parse_opt_ts("approvals.deadline", self.deadline)?,
            id: self.id,
        })
    }
}

#[derive(sqlx::FromRow)]
struct HistoryRow {
    approval_id: String,
    from_status: Option<String>,
    to_status: String,
    trigger: String,
    reason: Option<String>,
    approver: Option<String>,
    at: String,
}

impl SqliteApprovalLedger {
    /// Opens (creating and migrating) the ledger at `path`. Call [`ApprovalLedger::restore`]
    /// once at start-up, before serving.
    pub async fn open(path: &Path, clock: Arc<dyn Clock>) -> Result<Self, PortError> {
        let pool = open_pool(path, &MIGRATOR).await?;
        Ok(Self { pool, clock })
    }

    async fn fetch(&self, id: &str) -> Result<Option<ApprovalRecord>, PortError> {
        let row: Option<ApprovalRow> = sqlx::query_as(
            "SELECT id, kind, tool, arguments, caller, status, reason, approver, \
             flow_version_id, created_at, decided_at, deadline FROM approvals WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("read an approval", e))?;
        row.map(ApprovalRow::into_record).transpose()
    }

    /// Expires every open hold whose deadline has passed, as `timed_out` with trigger
    /// `deadline`. Runs before every read; takes the write lock only when there is work.
    async fn expire_overdue(&self) -> Result<(), PortError> {
        self.expire_overdue_at(self.clock.now()).await
    }

    /// Expires holds overdue at `now`. Decisions pass the same `now` they record, so a hold is
    /// either expired before the decision or decided before its deadline, never both.
    async fn expire_overdue_at(&self, now: Timestamp) -> Result<(), PortError> {
        let now = ts(now);
        let overdue: Option<(String,)> = sqlx::query_as(
            "SELECT id FROM approvals WHERE status = 'awaiting_approval' \
             AND deadline IS NOT NULL AND deadline <= ? LIMIT 1",
        )
        .bind(&now)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("look for overdue approvals", e))?;
        if overdue.is_none() {
            return Ok(());
        }
        let mut tx = begin_write(&self.pool).await?;
        let expired: Vec<(String,)> = sqlx::query_as(
            "SELECT id FROM approvals WHERE status = 'awaiting_approval' \
             AND deadline IS NOT NULL AND deadline <= ?",
        )
        .bind(&now)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| db_error("list overdue approvals", e))?;
        sqlx::query(
            "INSERT INTO approval_history (approval_id, from_status, to_status, trigger, reason, at) \
             SELECT id, status, 'timed_out', 'deadline', ?, ? FROM approvals \
             WHERE status = 'awaiting_approval' AND deadline IS NOT NULL AND deadline <= ?",
        )
        .bind(DEADLINE_REASON)
        .bind(&now)
        .bind(&now)
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("record approval deadline expiry", e))?;
        sqlx::query(
            "UPDATE approvals SET status = 'timed_out', reason = ?, decided_at = ? \
             WHERE status = 'awaiting_approval' AND deadline IS NOT NULL AND deadline <= ?",
        )
        .bind(DEADLINE_REASON)
        .bind(&now)
        .bind(&now)
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("expire overdue approvals", e))?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit approval deadline expiry", e))?;
        for (id,) in expired {
            tracing::info!(
                event = "tool_approval_resolved",
                approval_id = %id,
                result = "timed_out",
                trigger = ApprovalTrigger::Deadline.as_str(),
                "approval expired at its deadline"
            );
        }
        Ok(())
    }

    async fn fetch_in(
        tx: &mut Transaction<'static, Sqlite>,
        id: &str,
    ) -> Result<Option<ApprovalRecord>, PortError> {
        let row: Option<ApprovalRow> = sqlx::query_as(
            "SELECT id, kind, tool, arguments, caller, status, reason, approver, \
             flow_version_id, created_at, decided_at, deadline FROM approvals WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(|e| db_error("read an approval", e))?;
        row.map(ApprovalRow::into_record).transpose()
    }

    async fn append_history(
        tx: &mut Transaction<'static, Sqlite>,
        entry: &ApprovalTransition,
    ) -> Result<(), PortError> {
        let from = entry.from.map(|s| label(&s)).transpose()?;
        sqlx::query(
            "INSERT INTO approval_history \
             (approval_id, from_status, to_status, trigger, reason, approver, at) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&entry.approval_id)
        .bind(from)
        .bind(label(&entry.to)?)
        .bind(entry.trigger.as_str())
        .bind(&entry.reason)
        .bind(&entry.approver)
        .bind(ts(entry.at))
        .execute(&mut **tx)
        .await
        .map_err(|e| db_error("append approval history", e))?;
        Ok(())
    }
}

/// The conflict a decision on a closed hold gets: names the state and its reason (409 upstream).
pub(crate) fn closed_conflict(record: &ApprovalRecord) -> PortError {
    PortError::new(
        PortErrorKind::Conflict,
        format!(
            "approval {} is {}, not awaiting_approval: {}",
            record.id,
            record.status.as_str(),
            record.reason.as_deref().unwrap_or("no reason recorded")
        ),
    )
}

/// Refuses a record that cannot be parked, naming the field.
pub(crate) fn validate_park(record: &ApprovalRecord) -> Result<(), PortError> {
    let invalid = |field: &str, why: &str| {
        Err(PortError::new(
            PortErrorKind::Invalid,
            format!("approval.{field}: {why}"),
        ))
    };
    if record.id.trim().is_empty() {
        return invalid("id", "must not be empty");
    }
    if record.tool.trim().is_empty() {
        return invalid("tool", "must not be empty");
    }
    if record.status != ApprovalStatus::AwaitingApproval {
        return invalid("status", "a new hold must be awaiting_approval");
    }
    if record.approver.is_some() {
        return invalid("approver", "a new hold has no approver");
    }
    if record.decided_at.is_some() {
        return invalid("decided_at", "a new hold is not decided");
    }
    if record.deadline.is_some_and(|d| d < record.created_at) {
        return invalid("deadline", "must not be before created_at");
    }
    Ok(())
}

/// Refuses a decision without an approver.
pub(crate) fn validate_decision(decision: &ApprovalDecision) -> Result<(), PortError> {
    if decision.approver.trim().is_empty() {
        return Err(PortError::new(
            PortErrorKind::Invalid,
            "decision.approver: must not be empty",
        ));
    }
    Ok(())
}

#[async_trait]
impl ApprovalLedger for SqliteApprovalLedger {
    async fn park(&self, record: ApprovalRecord) -> Result<ApprovalRecord, PortError> {
        validate_park(&record)?;
        let mut tx = begin_write(&self.pool).await?;
        let inserted = sqlx::query(
            "INSERT INTO approvals (id, kind, tool, arguments, caller, status, reason, approver, \
             flow_version_id, created_at, decided_at, deadline) \
             VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, NULL, ?)",
        )
        .bind(&record.id)
        .bind(label(&record.kind)?)
        .bind(&record.tool)
        .bind(to_json("approval.arguments", &record.arguments)?)
        .bind(&record.caller)
        .bind(AWAITING)
        .bind(&record.reason)
        .bind(&record.flow_version_id)
        .bind(ts(record.created_at))
        .bind(record.deadline.map(ts))
        .execute(&mut *tx)
        .await;
        if let Err(e) = inserted {
            let err = db_error("park an approval", e);
            if err.kind == PortErrorKind::Conflict {
                return Err(PortError::new(
                    PortErrorKind::Conflict,
                    format!("approval {} already exists", record.id),
                ));
            }
            return Err(err);
        }
        Self::append_history(
            &mut tx,
            &ApprovalTransition {
                approval_id: record.id.clone(),
                from: None,
                to: ApprovalStatus::AwaitingApproval,
                trigger: ApprovalTrigger::Park,
                reason: record.reason.clone(),
                approver: None,
                at: record.created_at,
            },
        )
        .await?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit a parked approval", e))?;
        Ok(record)
    }

    async fn get(&self, id: &str) -> Result<ApprovalRecord, PortError> {
        self.expire_overdue().await?;
        self.fetch(id).await?.ok_or_else(|| not_found("approval", id))
    }

    async fn list_pending(&self) -> Result<Vec<ApprovalRecord>, PortError> {
        self.expire_overdue().await?;
        let rows: Vec<ApprovalRow> = sqlx::query_as(
            "SELECT id, kind, tool, arguments, caller, status, reason, approver, \
             flow_version_id, created_at, decided_at, deadline FROM approvals \
             WHERE status = 'awaiting_approval' ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("list pending approvals", e))?;
        rows.into_iter().map(ApprovalRow::into_record).collect()
    }

    async fn list_recent(&self, limit: usize) -> Result<Vec<ApprovalRecord>, PortError> {
        self.expire_overdue().await?;
        let rows: Vec<ApprovalRow> = sqlx::query_as(
            "SELECT id, kind, tool, arguments, caller, status, reason, approver, \
             flow_version_id, created_at, decided_at, deadline FROM approvals \
             ORDER BY created_at DESC, id DESC LIMIT ?",
        )
        .bind(limit_i64(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("list approvals", e))?;
        rows.into_iter().map(ApprovalRow::into_record).collect()
    }

    async fn decide(&self, id: &str, decision: ApprovalDecision) -> Result<ApprovalRecord, PortError> {
        validate_decision(&decision)?;
        let now = self.clock.now();
        self.expire_overdue_at(now).await?;
        let status = if decision.approve {
            ApprovalStatus::Approved
        } else {
            ApprovalStatus::Rejected
        };
        let mut tx = begin_write(&self.pool).await?;
        let changed = sqlx::query(
            "UPDATE approvals SET status = ?, reason = ?, approver = ?, decided_at = ? \
             WHERE id = ? AND status = 'awaiting_approval'",
        )
        .bind(label(&status)?)
        .bind(&decision.note)
        .bind(&decision.approver)
        .bind(ts(now))
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("decide an approval", e))?
        .rows_affected();
        if changed == 0 {
            let current = Self::fetch_in(&mut tx, id).await?;
            drop(tx);
            return Err(match current {
                None => not_found("approval", id),
                Some(record) => closed_conflict(&record),
            });
        }
        Self::append_history(
            &mut tx,
            &ApprovalTransition {
                approval_id: id.to_owned(),
                from: Some(ApprovalStatus::AwaitingApproval),
                to: status,
                trigger: ApprovalTrigger::Decision,
                reason: decision.note.clone(),
                approver: Some(decision.approver.clone()),
                at: now,
            },
        )
        .await?;
        let record = Self::fetch_in(&mut tx, id)
            .await?
            .ok_or_else(|| not_found("approval", id))?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit an approval decision", e))?;
        Ok(record)
    }

    async fn resolve(
        &self,
        id: &str,
        resolution: WaiterResolution,
        reason: Option<String>,
    ) -> Result<ResolveOutcome, PortError> {
        let now = self.clock.now();
        self.expire_overdue_at(now).await?;
        let status = resolution.status();
        let mut tx = begin_write(&self.pool).await?;
        let changed = sqlx::query(
            "UPDATE approvals SET status = ?, reason = ?, decided_at = ? \
             WHERE id = ? AND status = 'awaiting_approval'",
        )
        .bind(label(&status)?)
        .bind(&reason)
        .bind(ts(now))
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("resolve an approval", e))?
        .rows_affected();
        if changed == 0 {
            let current = Self::fetch_in(&mut tx, id).await?;
            drop(tx);
            return match current {
                None => Err(not_found("approval", id)),
                Some(record)
                    if matches!(record.status, ApprovalStatus::Approved | ApprovalStatus::Rejected) =>
                {
                    Err(closed_conflict(&record))
                }
                Some(record) => Ok(ResolveOutcome::AlreadyClosed { record }),
            };
        }
        Self::append_history(
            &mut tx,
            &ApprovalTransition {
                approval_id: id.to_owned(),
                from: Some(ApprovalStatus::AwaitingApproval),
                to: status,
                trigger: ApprovalTrigger::Waiter,
                reason,
                approver: None,
                at: now,
            },
        )
        .await?;
        let record = Self::fetch_in(&mut tx, id)
            .await?
            .ok_or_else(|| not_found("approval", id))?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit an approval resolution", e))?;
        Ok(ResolveOutcome::Resolved { record })
    }

    async fn restore(&self) -> Result<Vec<ApprovalRecord>, PortError> {
        // A hold whose deadline already passed timed out; only the rest were orphaned.
        self.expire_overdue().await?;
        let now = ts(self.clock.now());
        let mut tx = begin_write(&self.pool).await?;
        let ids: Vec<(String,)> = sqlx::query_as(
            "SELECT id FROM approvals WHERE status = 'awaiting_approval' ORDER BY created_at, id",
        )
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| db_error("list orphaned approvals", e))?;
        sqlx::query(
            "INSERT INTO approval_history (approval_id, from_status, to_status, trigger, reason, at) \
             SELECT id, status, 'failed', 'restart', ?, ? FROM approvals \
             WHERE status = 'awaiting_approval'",
        )
        .bind(ORPHANED_APPROVAL_REASON)
        .bind(&now)
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("record orphaned approvals", e))?;
        sqlx::query(
            "UPDATE approvals SET status = 'failed', reason = ?, decided_at = ? \
             WHERE status = 'awaiting_approval'",
        )
        .bind(ORPHANED_APPROVAL_REASON)
        .bind(&now)
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error("mark orphaned approvals failed", e))?;
        let mut orphaned = Vec::with_capacity(ids.len());
        for (id,) in &ids {
            if let Some(record) = Self::fetch_in(&mut tx, id).await? {
                orphaned.push(record);
            }
        }
        tx.commit()
            .await
            .map_err(|e| db_error("commit the approval restore", e))?;
        for record in &orphaned {
            tracing::warn!(
                event = "tool_approval_orphaned",
                approval_id = %record.id,
                tool = %record.tool,
                "{ORPHANED_APPROVAL_REASON}"
            );
        }
        Ok(orphaned)
    }

    async fn history(&self, id: &str) -> Result<Vec<ApprovalTransition>, PortError> {
        self.expire_overdue().await?;
        if self.fetch(id).await?.is_none() {
            return Err(not_found("approval", id));
        }
        let rows: Vec<HistoryRow> = sqlx::query_as(
            "SELECT approval_id, from_status, to_status, trigger, reason, approver, at \
             FROM approval_history WHERE approval_id = ? ORDER BY seq",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("read approval history", e))?;
        rows.into_iter()
            .map(|row| {
                Ok(ApprovalTransition {
                    approval_id: row.approval_id,
                    from: row
                        .from_status
                        .map(|s| parse_label("approval_history.from_status", &s))
                        .transpose()?,
                    to: parse_label("approval_history.to_status", &row.to_status)?,
                    trigger: ApprovalTrigger::parse(&row.trigger).ok_or_else(|| {
                        crate::sqlite::corrupt_label("approval_history.trigger", &row.trigger)
                    })?,
                    reason: row.reason,
                    approver: row.approver,
                    at: parse_ts("approval_history.at", &row.at)?,
                })
            })
            .collect()
    }
}
