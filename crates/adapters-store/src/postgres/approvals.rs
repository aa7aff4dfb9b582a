//! The approval ledger on PostgreSQL (FORGE-89, FORGE-406/466), shared by every gateway on the
//! server. Every transition is one transaction that locks the hold's row (`SELECT … FOR UPDATE`)
//! and then updates it on `status = 'awaiting_approval'` with an append-only history row, so two
//! gateways deciding one hold serialise: the first wins, the second reads the closed hold and
//! gets its conflict (409).

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_ports::{
    ApprovalDecision, ApprovalLedger, ApprovalRecord, ApprovalTransition, ApprovalTrigger, Clock,
    GoneParkers, ORPHANED_APPROVAL_REASON, PendingCursor, PendingPage, PortError, PortErrorKind,
    ResolveOutcome, Timestamp, WaiterResolution,
};
use sqlx::{PgPool, Postgres, Transaction};

use super::{db_error, open_pool};
use crate::approvals::approval_columns;
use crate::codec::{corrupt_label, label, limit_i64, not_found, parse_json, parse_label, to_json};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres/approvals");

const AWAITING: &str = "awaiting_approval";

/// The schema holding this ledger's tables and migration history.
const SCHEMA: &str = "metaforge_approvals";

/// The approval ledger in the `metaforge_approvals` schema of a PostgreSQL database.
#[derive(Clone)]
pub struct PgApprovalLedger {
    pool: PgPool,
    clock: Arc<dyn Clock>,
    /// This process's name, written on every hold it parks ([`GoneParkers`]).
    parker: Option<String>,
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
    created_at: Timestamp,
    decided_at: Option<Timestamp>,
    deadline: Option<Timestamp>,
    requested_by: Option<String>,
    /// The process that parked the hold (`None` for holds parked before parkers were named).
    parked_by: Option<String>,
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
            created_at: self.created_at,
            decided_at: self.decided_at,
            deadline: self.deadline,
            requested_by: self.requested_by,
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
    at: Timestamp,
}

impl PgApprovalLedger {
    /// Connects to the server at `url` (creating and migrating the ledger's schema). Call
    /// [`ApprovalLedger::restore`] once at start-up, before serving.
    ///
    /// # Errors
    /// `Invalid` for a URL that does not parse, `Unavailable` when the server cannot be reached.
    pub async fn open(url: &str, clock: Arc<dyn Clock>) -> Result<Self, PortError> {
        let pool = open_pool(url, SCHEMA, &MIGRATOR).await?;
        Ok(Self {
            pool,
            clock,
            parker: None,
        })
    }

    /// Names this process on every hold it parks, so a restore elsewhere orphans them only once
    /// this process is gone ([`ApprovalLedger::restore`]).
    #[must_use]
    pub fn with_parker(mut self, holder: impl Into<String>) -> Self {
        self.parker = Some(holder.into());
        self
    }

    async fn fetch(&self, id: &str) -> Result<Option<ApprovalRecord>, PortError> {
        let row: Option<ApprovalRow> = sqlx::query_as(concat!(
            "SELECT ",
            approval_columns!(),
            " FROM approvals WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("read an approval", e))?;
        row.map(ApprovalRow::into_record).transpose()
    }

    /// Expires every open hold whose deadline has passed, as `timed_out` with trigger
    /// `deadline`. Runs before every read; locks rows only when there is work. With several gateways
    /// this duty runs in each: the rows are locked and updated on their open state, so a hold
    /// expires once whichever gateway gets there first.
    async fn expire_overdue(&self) -> Result<(), PortError> {
        self.expire_overdue_at(self.clock.now()).await
    }

    /// Expires holds overdue at `now`. Decisions pass the same `now` they record, so a hold is
    /// either expired before the decision or decided before its deadline, never both.
    async fn expire_overdue_at(&self, at: Timestamp) -> Result<(), PortError> {
        let overdue: Option<(String,)> = sqlx::query_as(
            "SELECT id FROM approvals WHERE status = 'awaiting_approval' \
             AND deadline IS NOT NULL AND deadline < $1 LIMIT 1",
        )
        .bind(at)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("look for overdue approvals", e))?;
        if overdue.is_none() {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        let rows: Vec<ApprovalRow> = sqlx::query_as(concat!(
            "SELECT ",
            approval_columns!(),
            " FROM approvals \
             WHERE status = 'awaiting_approval' AND deadline IS NOT NULL AND deadline < $1 \
             ORDER BY id FOR UPDATE"
        ))
        .bind(at)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| db_error("list overdue approvals", e))?;
        let mut expired = Vec::with_capacity(rows.len());
        for row in rows {
            let current = row.into_record()?;
            if let Some(next) = current.expired(at)
                && Self::persist(&mut tx, &current, &next, ApprovalTrigger::Deadline).await?
            {
                expired.push((next.id,));
            }
        }
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

    async fn begin(&self) -> Result<Transaction<'static, Postgres>, PortError> {
        self.pool
            .begin()
            .await
            .map_err(|e| db_error("begin a write transaction", e))
    }

    /// Reads one hold and locks its row until the transaction ends.
    async fn fetch_in(
        tx: &mut Transaction<'static, Postgres>,
        id: &str,
    ) -> Result<Option<ApprovalRecord>, PortError> {
        let row: Option<ApprovalRow> = sqlx::query_as(concat!(
            "SELECT ",
            approval_columns!(),
            " FROM approvals \
             WHERE id = $1 FOR UPDATE"
        ))
        .bind(id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(|e| db_error("read an approval", e))?;
        row.map(ApprovalRow::into_record).transpose()
    }

    /// Writes `next` over `current` if the row is still open (compare-and-set on
    /// `awaiting_approval`) and appends the audit entry. The next record was computed by the one
    /// state machine (`ApprovalRecord::{decided, resolved, expired, orphaned}`); this only stores
    /// it. Returns false when another writer closed the hold first (nothing written).
    async fn persist(
        tx: &mut Transaction<'static, Postgres>,
        current: &ApprovalRecord,
        next: &ApprovalRecord,
        trigger: ApprovalTrigger,
    ) -> Result<bool, PortError> {
        let changed = sqlx::query(
            "UPDATE approvals SET status = $1, reason = $2, approver = $3, decided_at = $4 \
             WHERE id = $5 AND status = 'awaiting_approval'",
        )
        .bind(label(&next.status)?)
        .bind(&next.reason)
        .bind(&next.approver)
        .bind(next.decided_at)
        .bind(&current.id)
        .execute(&mut **tx)
        .await
        .map_err(|e| db_error("change an approval", e))?
        .rows_affected();
        if changed == 0 {
            return Ok(false);
        }
        Self::append_history(tx, &current.transition_to(next, trigger)).await?;
        Ok(true)
    }

    async fn append_history(
        tx: &mut Transaction<'static, Postgres>,
        entry: &ApprovalTransition,
    ) -> Result<(), PortError> {
        let from = entry.from.map(|s| label(&s)).transpose()?;
        sqlx::query(
            "INSERT INTO approval_history \
             (approval_id, from_status, to_status, trigger, reason, approver, at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&entry.approval_id)
        .bind(from)
        .bind(label(&entry.to)?)
        .bind(entry.trigger.as_str())
        .bind(&entry.reason)
        .bind(&entry.approver)
        .bind(entry.at)
        .execute(&mut **tx)
        .await
        .map_err(|e| db_error("append approval history", e))?;
        Ok(())
    }
}

#[async_trait]
impl ApprovalLedger for PgApprovalLedger {
    async fn park(&self, record: ApprovalRecord) -> Result<ApprovalRecord, PortError> {
        record.check_new()?;
        let mut tx = self.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO approvals (id, kind, tool, arguments, caller, status, reason, approver, \
             flow_version_id, created_at, decided_at, deadline, requested_by, parked_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8, $9, NULL, $10, $11, $12)",
        )
        .bind(&record.id)
        .bind(label(&record.kind)?)
        .bind(&record.tool)
        .bind(to_json("approval.arguments", &record.arguments)?)
        .bind(&record.caller)
        .bind(AWAITING)
        .bind(&record.reason)
        .bind(&record.flow_version_id)
        .bind(record.created_at)
        .bind(record.deadline)
        .bind(&record.requested_by)
        .bind(&self.parker)
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
        Self::append_history(&mut tx, &record.park_transition()).await?;
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
        let rows: Vec<ApprovalRow> = sqlx::query_as(concat!(
            "SELECT ",
            approval_columns!(),
            " FROM approvals \
             WHERE status = 'awaiting_approval' ORDER BY created_at, id"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("list pending approvals", e))?;
        rows.into_iter().map(ApprovalRow::into_record).collect()
    }

    async fn pending_page(
        &self,
        after: Option<&PendingCursor>,
        limit: usize,
    ) -> Result<PendingPage, PortError> {
        self.expire_overdue().await?;
        let (after_at, after_id) = after.map_or((None, None), |c| (Some(c.created_at), Some(c.id.clone())));
        let rows: Vec<ApprovalRow> = sqlx::query_as(concat!(
            "SELECT ",
            approval_columns!(),
            " FROM approvals \
             WHERE status = 'awaiting_approval' \
               AND ($1::timestamptz IS NULL OR (created_at, id) > ($1, $2)) \
             ORDER BY created_at, id LIMIT $3"
        ))
        .bind(after_at)
        .bind(after_id)
        .bind(limit_i64(limit.saturating_add(1)))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("list a page of pending approvals", e))?;
        let total: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM approvals WHERE status = 'awaiting_approval'")
                .fetch_one(&self.pool)
                .await
                .map_err(|e| db_error("count pending approvals", e))?;
        let rows = rows
            .into_iter()
            .map(ApprovalRow::into_record)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PendingPage::from_rows(
            rows,
            limit,
            usize::try_from(total).unwrap_or(0),
        ))
    }

    async fn list_recent(&self, limit: usize) -> Result<Vec<ApprovalRecord>, PortError> {
        self.expire_overdue().await?;
        let rows: Vec<ApprovalRow> = sqlx::query_as(concat!(
            "SELECT ",
            approval_columns!(),
            " FROM approvals \
             ORDER BY created_at DESC, id DESC LIMIT $1"
        ))
        .bind(limit_i64(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("list approvals", e))?;
        rows.into_iter().map(ApprovalRow::into_record).collect()
    }

    async fn decide(&self, id: &str, decision: ApprovalDecision) -> Result<ApprovalRecord, PortError> {
        decision.check()?;
        let now = self.clock.now();
        self.expire_overdue_at(now).await?;
        let mut tx = self.begin().await?;
        let current = Self::fetch_in(&mut tx, id)
            .await?
            .ok_or_else(|| not_found("approval", id))?;
        let next = current.decided(&decision, now)?;
        if !Self::persist(&mut tx, &current, &next, ApprovalTrigger::Decision).await? {
            // Unreachable while the row is locked (it was read open in this transaction);
            // answered as the conflict it would be rather than assumed.
            return Err(current.conflict());
        }
        tx.commit()
            .await
            .map_err(|e| db_error("commit an approval decision", e))?;
        Ok(next)
    }

    async fn resolve(
        &self,
        id: &str,
        resolution: WaiterResolution,
        reason: Option<String>,
    ) -> Result<ResolveOutcome, PortError> {
        let now = self.clock.now();
        self.expire_overdue_at(now).await?;
        let mut tx = self.begin().await?;
        let current = Self::fetch_in(&mut tx, id)
            .await?
            .ok_or_else(|| not_found("approval", id))?;
        let outcome = current.resolved(resolution, reason, now)?;
        if let ResolveOutcome::Resolved { record: next } = &outcome
            && !Self::persist(&mut tx, &current, next, ApprovalTrigger::Waiter).await?
        {
            return Err(current.conflict());
        }
        tx.commit()
            .await
            .map_err(|e| db_error("commit an approval resolution", e))?;
        Ok(outcome)
    }

    async fn restore(&self, gone: &GoneParkers) -> Result<Vec<ApprovalRecord>, PortError> {
        // A hold whose deadline already passed timed out; only the rest were orphaned.
        self.expire_overdue().await?;
        let now = self.clock.now();
        let mut tx = self.begin().await?;
        let rows: Vec<ApprovalRow> = sqlx::query_as(concat!(
            "SELECT ",
            approval_columns!(),
            " FROM approvals \
             WHERE status = 'awaiting_approval' ORDER BY created_at, id FOR UPDATE"
        ))
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| db_error("list orphaned approvals", e))?;
        let mut orphaned = Vec::with_capacity(rows.len());
        for row in rows {
            if !gone.covers(row.parked_by.as_deref()) {
                continue;
            }
            let current = row.into_record()?;
            if let Some(next) = current.orphaned(now)
                && Self::persist(&mut tx, &current, &next, ApprovalTrigger::Restart).await?
            {
                orphaned.push(next);
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

    async fn open_parkers(&self) -> Result<BTreeSet<String>, PortError> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT DISTINCT parked_by FROM approvals \
             WHERE status = 'awaiting_approval' AND parked_by IS NOT NULL",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("list the parkers of open approvals", e))?;
        Ok(rows.into_iter().map(|(holder,)| holder).collect())
    }

    async fn history(&self, id: &str) -> Result<Vec<ApprovalTransition>, PortError> {
        self.expire_overdue().await?;
        if self.fetch(id).await?.is_none() {
            return Err(not_found("approval", id));
        }
        let rows: Vec<HistoryRow> = sqlx::query_as(
            "SELECT approval_id, from_status, to_status, trigger, reason, approver, at \
             FROM approval_history WHERE approval_id = $1 ORDER BY seq",
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
                    trigger: ApprovalTrigger::parse(&row.trigger)
                        .ok_or_else(|| corrupt_label("approval_history.trigger", &row.trigger))?,
                    reason: row.reason,
                    approver: row.approver,
                    at: row.at,
                })
            })
            .collect()
    }
}
