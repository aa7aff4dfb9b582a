//! The approval ledger (FORGE-89, FORGE-406/466), one engine on SQLite (a file per home) and on
//! PostgreSQL (shared by every gateway on the server). Every transition is one write transaction
//! that reads the hold (locking its row where the database needs it), then updates it on
//! `status = 'awaiting_approval'` with an append-only history row, so two processes deciding one
//! hold serialise: the first wins, the second reads the closed hold and gets its conflict (409).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_ports::{
    ApprovalDecision, ApprovalLedger, ApprovalRecord, ApprovalTransition, ApprovalTrigger, Clock,
    GoneParkers, ORPHANED_APPROVAL_REASON, PendingCursor, PendingPage, PortError, ResolveOutcome,
    WaiterResolution,
};
use sqlx::{Pool, Sqlite, Transaction};

use crate::codec::{corrupt_label, label, limit_i64, not_found, parse_json, parse_label, to_json};
use crate::sql::{Dialect, FromRecord, Record, on_conflict, pooled, sql, sql_locking, sql_owned};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/approvals");
#[cfg(feature = "postgres")]
static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres/approvals");

/// The schema holding this ledger's tables and migration history on PostgreSQL.
#[cfg(feature = "postgres")]
const PG_SCHEMA: &str = "metaforge_approvals";

const AWAITING: &str = "awaiting_approval";

/// The columns of an approval row, in one place for every read, so no read leaves one out.
const APPROVAL_COLUMNS: &str = "id, kind, tool, arguments, caller, status, reason, approver, \
     flow_version_id, created_at, decided_at, deadline, requested_by, parked_by";

/// The approval ledger over database `E`.
pub struct SqlApprovalLedger<E: Dialect> {
    pool: Pool<E>,
    clock: Arc<dyn Clock>,
    /// This process's name, written on every hold it parks ([`GoneParkers`]).
    parker: Option<String>,
}

impl<E: Dialect> Clone for SqlApprovalLedger<E> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            clock: Arc::clone(&self.clock),
            parker: self.parker.clone(),
        }
    }
}

/// The approval ledger in one SQLite file (`tool_approvals_ledger.db`).
pub type SqliteApprovalLedger = SqlApprovalLedger<Sqlite>;

/// The approval ledger in the `metaforge_approvals` schema of a PostgreSQL database.
#[cfg(feature = "postgres")]
pub type PgApprovalLedger = SqlApprovalLedger<sqlx::Postgres>;

impl SqlApprovalLedger<Sqlite> {
    /// Opens (creating and migrating) the ledger at `path`. Call [`ApprovalLedger::restore`]
    /// once at start-up, before serving.
    pub async fn open(path: &Path, clock: Arc<dyn Clock>) -> Result<Self, PortError> {
        Ok(Self::over(
            crate::sqlite::open_pool(path, &MIGRATOR).await?,
            clock,
        ))
    }
}

#[cfg(feature = "postgres")]
impl SqlApprovalLedger<sqlx::Postgres> {
    /// Connects to the server at `url` (creating and migrating the ledger's schema). Call
    /// [`ApprovalLedger::restore`] once at start-up, before serving.
    ///
    /// # Errors
    /// `Invalid` for a URL that does not parse, `Unavailable` when the server cannot be reached.
    pub async fn open(url: &str, clock: Arc<dyn Clock>) -> Result<Self, PortError> {
        Ok(Self::over(
            crate::postgres::open_pool(url, PG_SCHEMA, &PG_MIGRATOR).await?,
            clock,
        ))
    }
}

/// One approval row.
struct ApprovalRow {
    record: ApprovalRecord,
    /// The process that parked the hold (`None` for holds parked before parkers were named).
    parked_by: Option<String>,
}

impl<E: Dialect> FromRecord<E> for ApprovalRow {
    fn from_record(row: &Record<'_, E>) -> Result<Self, PortError> {
        let kind: String = row.get("kind")?;
        let arguments: String = row.get("arguments")?;
        let status: String = row.get("status")?;
        Ok(Self {
            record: ApprovalRecord {
                id: row.get("id")?,
                kind: parse_label("approvals.kind", &kind)?,
                tool: row.get("tool")?,
                arguments: parse_json("approvals.arguments", &arguments)?,
                caller: row.get("caller")?,
                status: parse_label("approvals.status", &status)?,
                reason: row.get("reason")?,
                approver: row.get("approver")?,
                flow_version_id: row.get("flow_version_id")?,
                created_at: row.time("created_at")?,
                decided_at: row.opt_time("decided_at")?,
                deadline: row.opt_time("deadline")?,
                requested_by: row.get("requested_by")?,
            },
            parked_by: row.get("parked_by")?,
        })
    }
}

impl<E: Dialect> FromRecord<E> for ApprovalTransition {
    fn from_record(row: &Record<'_, E>) -> Result<Self, PortError> {
        let from: Option<String> = row.get("from_status")?;
        let to: String = row.get("to_status")?;
        let trigger: String = row.get("trigger")?;
        Ok(Self {
            approval_id: row.get("approval_id")?,
            from: from
                .map(|s| parse_label("approval_history.from_status", &s))
                .transpose()?,
            to: parse_label("approval_history.to_status", &to)?,
            trigger: ApprovalTrigger::parse(&trigger)
                .ok_or_else(|| corrupt_label("approval_history.trigger", &trigger))?,
            reason: row.get("reason")?,
            approver: row.get("approver")?,
            at: row.time("at")?,
        })
    }
}

/// The records of `rows`.
fn records(rows: Vec<ApprovalRow>) -> Vec<ApprovalRecord> {
    rows.into_iter().map(|row| row.record).collect()
}

impl<E: Dialect> SqlApprovalLedger<E> {
    fn over(pool: Pool<E>, clock: Arc<dyn Clock>) -> Self {
        Self {
            pool,
            clock,
            parker: None,
        }
    }

    /// Names this process on every hold it parks, so a restore elsewhere orphans them only once
    /// this process is gone ([`ApprovalLedger::restore`]).
    #[must_use]
    pub fn with_parker(mut self, holder: impl Into<String>) -> Self {
        self.parker = Some(holder.into());
        self
    }

    async fn fetch(&self, id: &str) -> Result<Option<ApprovalRecord>, PortError> {
        let row: Option<ApprovalRow> = sql_owned(
            format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1"),
            "read an approval",
        )
        .bind(id.to_owned())
        .fetch_optional(&mut pooled(&self.pool).await?)
        .await?;
        Ok(row.map(|row| row.record))
    }

    /// Expires every open hold whose deadline has passed, as `timed_out` with trigger
    /// `deadline`. Runs before every read; takes the write lock only when there is work. With
    /// several gateways this duty runs in each: the rows are locked and updated on their open
    /// state, so a hold expires once, by whichever gateway gets there first.
    async fn expire_overdue(&self) -> Result<(), PortError> {
        self.expire_overdue_at(self.clock.now()).await
    }

    /// Expires holds overdue at `now`. Decisions pass the same `now` they record, so a hold is
    /// either expired before the decision or decided before its deadline, never both.
    async fn expire_overdue_at(&self, at: metaforge_ports::Timestamp) -> Result<(), PortError> {
        let overdue: Option<String> = sql(
            "SELECT id FROM approvals WHERE status = 'awaiting_approval' \
             AND deadline IS NOT NULL AND deadline < $1 LIMIT 1",
            "look for overdue approvals",
        )
        .bind_time(at)
        .fetch_optional(&mut pooled(&self.pool).await?)
        .await?;
        if overdue.is_none() {
            return Ok(());
        }
        let mut tx = E::begin_write(&self.pool).await?;
        let rows: Vec<ApprovalRow> = sql_locking(
            format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE status = 'awaiting_approval' AND deadline IS NOT NULL AND deadline < $1 \
                 ORDER BY id"
            ),
            "list overdue approvals",
        )
        .bind_time(at)
        .fetch_all(&mut tx)
        .await?;
        let mut expired = Vec::with_capacity(rows.len());
        for row in rows {
            let current = row.record;
            if let Some(next) = current.expired(at)
                && Self::persist(&mut tx, &current, &next, ApprovalTrigger::Deadline).await?
            {
                expired.push(next.id);
            }
        }
        tx.commit()
            .await
            .map_err(|e| E::db_error("commit approval deadline expiry", e))?;
        for id in expired {
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

    /// Starts a change of hold `id`: expires what is overdue first (so a decision never lands
    /// on a hold whose deadline passed), then reads the hold in a write transaction with its row
    /// locked. Returns the transaction, the hold as it is, and the time the change is made at.
    async fn open_for_change(
        &self,
        id: &str,
    ) -> Result<
        (
            Transaction<'static, E>,
            ApprovalRecord,
            metaforge_ports::Timestamp,
        ),
        PortError,
    > {
        let now = self.clock.now();
        self.expire_overdue_at(now).await?;
        let mut tx = E::begin_write(&self.pool).await?;
        let current = Self::fetch_in(&mut tx, id)
            .await?
            .ok_or_else(|| not_found("approval", id))?;
        Ok((tx, current, now))
    }

    /// Reads one hold inside `tx`, locking its row until the transaction ends.
    async fn fetch_in(
        tx: &mut Transaction<'static, E>,
        id: &str,
    ) -> Result<Option<ApprovalRecord>, PortError> {
        let row: Option<ApprovalRow> = sql_locking(
            format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1"),
            "read an approval",
        )
        .bind(id.to_owned())
        .fetch_optional(tx)
        .await?;
        Ok(row.map(|row| row.record))
    }

    /// Writes `next` over `current` if the row is still open (compare-and-set on
    /// `awaiting_approval`) and appends the audit entry. The next record was computed by the one
    /// state machine (`ApprovalRecord::{decided, resolved, expired, orphaned}`); this only stores
    /// it. Returns false when another writer closed the hold first (nothing written).
    async fn persist(
        tx: &mut Transaction<'static, E>,
        current: &ApprovalRecord,
        next: &ApprovalRecord,
        trigger: ApprovalTrigger,
    ) -> Result<bool, PortError> {
        let changed = sql(
            "UPDATE approvals SET status = $1, reason = $2, approver = $3, decided_at = $4 \
             WHERE id = $5 AND status = 'awaiting_approval'",
            "change an approval",
        )
        .bind(label(&next.status)?)
        .bind(next.reason.clone())
        .bind(next.approver.clone())
        .bind_opt_time(next.decided_at)
        .bind(current.id.clone())
        .execute(tx)
        .await?;
        if changed == 0 {
            return Ok(false);
        }
        Self::append_history(tx, &current.transition_to(next, trigger)).await?;
        Ok(true)
    }

    async fn append_history(
        tx: &mut Transaction<'static, E>,
        entry: &ApprovalTransition,
    ) -> Result<(), PortError> {
        E::check_text("approval.reason", entry.reason.as_deref())?;
        E::check_text("approval.approver", entry.approver.as_deref())?;
        sql(
            "INSERT INTO approval_history \
             (approval_id, from_status, to_status, trigger, reason, approver, at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            "append approval history",
        )
        .bind(entry.approval_id.clone())
        .bind(entry.from.map(|s| label(&s)).transpose()?)
        .bind(label(&entry.to)?)
        .bind(entry.trigger.as_str().to_owned())
        .bind(entry.reason.clone())
        .bind(entry.approver.clone())
        .bind_time(entry.at)
        .execute(tx)
        .await?;
        Ok(())
    }

    /// Every open hold, oldest first, read inside `tx` with their rows locked.
    async fn pending_in(tx: &mut Transaction<'static, E>) -> Result<Vec<ApprovalRow>, PortError> {
        sql_locking(
            format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE status = 'awaiting_approval' ORDER BY created_at, id"
            ),
            "list open approvals",
        )
        .fetch_all(tx)
        .await
    }
}

#[async_trait]
impl<E: Dialect> ApprovalLedger for SqlApprovalLedger<E> {
    async fn park(&self, record: ApprovalRecord) -> Result<ApprovalRecord, PortError> {
        record.check_new()?;
        let mut tx = E::begin_write(&self.pool).await?;
        let inserted = sql(
            "INSERT INTO approvals (id, kind, tool, arguments, caller, status, reason, approver, \
             flow_version_id, created_at, decided_at, deadline, requested_by, parked_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8, $9, NULL, $10, $11, $12)",
            "park an approval",
        )
        .bind(record.id.clone())
        .bind(label(&record.kind)?)
        .bind(record.tool.clone())
        .bind(to_json("approval.arguments", &record.arguments)?)
        .bind(record.caller.clone())
        .bind(AWAITING.to_owned())
        .bind(record.reason.clone())
        .bind(record.flow_version_id.clone())
        .bind_time(record.created_at)
        .bind_opt_time(record.deadline)
        .bind(record.requested_by.clone())
        .bind(self.parker.clone())
        .execute(&mut tx)
        .await;
        inserted.map_err(|err| on_conflict(err, || format!("approval {} already exists", record.id)))?;
        Self::append_history(&mut tx, &record.park_transition()).await?;
        tx.commit()
            .await
            .map_err(|e| E::db_error("commit a parked approval", e))?;
        Ok(record)
    }

    async fn get(&self, id: &str) -> Result<ApprovalRecord, PortError> {
        self.expire_overdue().await?;
        self.fetch(id).await?.ok_or_else(|| not_found("approval", id))
    }

    async fn list_pending(&self) -> Result<Vec<ApprovalRecord>, PortError> {
        self.expire_overdue().await?;
        let rows: Vec<ApprovalRow> = sql_owned(
            format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE status = 'awaiting_approval' ORDER BY created_at, id"
            ),
            "list pending approvals",
        )
        .fetch_all(&mut pooled(&self.pool).await?)
        .await?;
        Ok(records(rows))
    }

    async fn pending_page(
        &self,
        after: Option<&PendingCursor>,
        limit: usize,
    ) -> Result<PendingPage, PortError> {
        self.expire_overdue().await?;
        let (after_at, after_id) = after.map_or((None, None), |c| (Some(c.created_at), Some(c.id.clone())));
        let mut conn = pooled(&self.pool).await?;
        let rows: Vec<ApprovalRow> = sql_owned(
            format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE status = 'awaiting_approval' \
                   AND (CAST($1 AS {}) IS NULL OR (created_at, id) > ($1, $2)) \
                 ORDER BY created_at, id LIMIT $3",
                E::TIMESTAMP
            ),
            "list a page of pending approvals",
        )
        .bind_opt_time(after_at)
        .bind(after_id)
        .bind(limit_i64(limit.saturating_add(1)))
        .fetch_all(&mut conn)
        .await?;
        let total: i64 = sql(
            "SELECT COUNT(*) AS total FROM approvals WHERE status = 'awaiting_approval'",
            "count pending approvals",
        )
        .fetch_one(&mut conn)
        .await?;
        Ok(PendingPage::from_rows(
            records(rows),
            limit,
            usize::try_from(total).unwrap_or(0),
        ))
    }

    async fn list_recent(&self, limit: usize) -> Result<Vec<ApprovalRecord>, PortError> {
        self.expire_overdue().await?;
        let rows: Vec<ApprovalRow> = sql_owned(
            format!("SELECT {APPROVAL_COLUMNS} FROM approvals ORDER BY created_at DESC, id DESC LIMIT $1"),
            "list approvals",
        )
        .bind(limit_i64(limit))
        .fetch_all(&mut pooled(&self.pool).await?)
        .await?;
        Ok(records(rows))
    }

    async fn decide(&self, id: &str, decision: ApprovalDecision) -> Result<ApprovalRecord, PortError> {
        decision.check()?;
        let (mut tx, current, now) = self.open_for_change(id).await?;
        let next = current.decided(&decision, now)?;
        if !Self::persist(&mut tx, &current, &next, ApprovalTrigger::Decision).await? {
            // Unreachable while the write transaction holds the row (it was read open in this
            // transaction); answered as the conflict it would be rather than assumed.
            return Err(current.conflict());
        }
        tx.commit()
            .await
            .map_err(|e| E::db_error("commit an approval decision", e))?;
        Ok(next)
    }

    async fn resolve(
        &self,
        id: &str,
        resolution: WaiterResolution,
        reason: Option<String>,
    ) -> Result<ResolveOutcome, PortError> {
        let (mut tx, current, now) = self.open_for_change(id).await?;
        let outcome = current.resolved(resolution, reason, now)?;
        if let ResolveOutcome::Resolved { record: next } = &outcome
            && !Self::persist(&mut tx, &current, next, ApprovalTrigger::Waiter).await?
        {
            return Err(current.conflict());
        }
        tx.commit()
            .await
            .map_err(|e| E::db_error("commit an approval resolution", e))?;
        Ok(outcome)
    }

    async fn restore(&self, gone: &GoneParkers) -> Result<Vec<ApprovalRecord>, PortError> {
        // A hold whose deadline already passed timed out; only the rest were orphaned.
        self.expire_overdue().await?;
        let now = self.clock.now();
        let mut tx = E::begin_write(&self.pool).await?;
        let rows = Self::pending_in(&mut tx).await?;
        let mut orphaned = Vec::with_capacity(rows.len());
        for row in rows {
            if !gone.covers(row.parked_by.as_deref()) {
                continue;
            }
            let current = row.record;
            if let Some(next) = current.orphaned(now)
                && Self::persist(&mut tx, &current, &next, ApprovalTrigger::Restart).await?
            {
                orphaned.push(next);
            }
        }
        tx.commit()
            .await
            .map_err(|e| E::db_error("commit the approval restore", e))?;
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
        let parkers: Vec<String> = sql(
            "SELECT DISTINCT parked_by FROM approvals \
             WHERE status = 'awaiting_approval' AND parked_by IS NOT NULL",
            "list the parkers of open approvals",
        )
        .fetch_all(&mut pooled(&self.pool).await?)
        .await?;
        Ok(parkers.into_iter().collect())
    }

    async fn history(&self, id: &str) -> Result<Vec<ApprovalTransition>, PortError> {
        self.expire_overdue().await?;
        if self.fetch(id).await?.is_none() {
            return Err(not_found("approval", id));
        }
        sql(
            "SELECT approval_id, from_status, to_status, trigger, reason, approver, at \
             FROM approval_history WHERE approval_id = $1 ORDER BY seq",
            "read approval history",
        )
        .bind(id.to_owned())
        .fetch_all(&mut pooled(&self.pool).await?)
        .await
    }
}
