//! The one approval ledger (FORGE-89, FORGE-406/466): every held action waits here, whichever
//! process holds it, and every state change is one durable transition with an audit entry.

use std::collections::BTreeSet;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::approval::{ApprovalRecord, ApprovalStatus};
use crate::clock::Timestamp;
use crate::error::PortError;

/// The reason a hold left open by a dead process is given at start-up, verbatim from the seed,
/// so the record survives for audit without implying it is still actionable.
pub const ORPHANED_APPROVAL_REASON: &str = "orphaned: gateway restarted while this approval was pending";

/// The grace added to a waiter's timeout to form a hold's deadline (seconds), per FORGE-466.
pub const APPROVAL_DEADLINE_GRACE_SECONDS: i64 = 30;

/// Holds one page of the pending queue carries when the caller names no size.
pub const DEFAULT_PENDING_PAGE: usize = 100;

/// The most holds one page of the pending queue carries.
pub const MAX_PENDING_PAGE: usize = 500;

/// Where a page of the pending queue (oldest first) resumes: after this hold. Sent to clients as
/// an opaque `<created_at>|<id>` token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCursor {
    /// The last hold's park time.
    pub created_at: Timestamp,
    /// The last hold's id (orders holds parked at the same instant).
    pub id: String,
}

impl PendingCursor {
    /// The cursor resuming after `record`.
    pub fn after(record: &ApprovalRecord) -> Self {
        Self {
            created_at: record.created_at,
            id: record.id.clone(),
        }
    }

    /// The token a client sends back.
    pub fn encode(&self) -> String {
        format!(
            "{}|{}",
            self.created_at
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            self.id
        )
    }

    /// Reads a token [`encode`](Self::encode) wrote; `None` for anything else.
    pub fn parse(token: &str) -> Option<Self> {
        let (at, id) = token.trim().split_once('|')?;
        let created_at = chrono::DateTime::parse_from_rfc3339(at)
            .ok()?
            .with_timezone(&chrono::Utc);
        (!id.is_empty()).then(|| Self {
            created_at,
            id: id.to_owned(),
        })
    }
}

/// One page of the pending queue.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingPage {
    /// The holds, oldest first.
    pub holds: Vec<ApprovalRecord>,
    /// Every hold awaiting a person now, on every page.
    pub total: usize,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<PendingCursor>,
}

impl PendingPage {
    /// The page of `limit` holds from `rows`, which an engine read as up to `limit + 1` pending
    /// holds in queue order (one more than the page, to know whether another page follows).
    pub fn from_rows(mut rows: Vec<ApprovalRecord>, limit: usize, total: usize) -> Self {
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = if more {
            rows.last().map(PendingCursor::after)
        } else {
            None
        };
        Self {
            holds: rows,
            total,
            next,
        }
    }
}

/// What moved a hold out of `awaiting_approval`; the `trigger` label of
/// `metaforge_tool_approval_resolution_total` and the audit trail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalTrigger {
    /// The hold was parked (the first history entry).
    Park,
    /// A person approved or rejected it.
    Decision,
    /// The waiter closed it (its window closed, or its call was cancelled).
    Waiter,
    /// A read found its deadline passed and expired it.
    Deadline,
    /// The process restarted while it was pending; it was marked failed (orphaned).
    Restart,
}

impl ApprovalTrigger {
    /// The snake_case label used in metrics, logs and the history table.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Park => "park",
            Self::Decision => "decision",
            Self::Waiter => "waiter",
            Self::Deadline => "deadline",
            Self::Restart => "restart",
        }
    }

    /// Parses the label written by [`ApprovalTrigger::as_str`].
    pub fn parse(label: &str) -> Option<Self> {
        Some(match label {
            "park" => Self::Park,
            "decision" => Self::Decision,
            "waiter" => Self::Waiter,
            "deadline" => Self::Deadline,
            "restart" => Self::Restart,
            _ => return None,
        })
    }
}

/// A person's answer to a hold. The approver is taken from here and written onto the record,
/// never from the held call's own arguments (FORGE-393).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    /// True to approve, false to reject.
    pub approve: bool,
    /// Who decided (non-empty).
    pub approver: String,
    /// The person's note, kept as the record's reason.
    pub note: Option<String>,
}

/// How a waiter closes a hold it stopped waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaiterResolution {
    /// The waiter's window closed.
    TimedOut,
    /// The waiting call was cancelled.
    Canceled,
}

impl WaiterResolution {
    /// The status a hold takes when closed this way.
    pub fn status(self) -> ApprovalStatus {
        match self {
            Self::TimedOut => ApprovalStatus::TimedOut,
            Self::Canceled => ApprovalStatus::Canceled,
        }
    }
}

/// What a waiter's close did: the route is idempotent, so closing an already closed hold is not
/// an error, but the caller learns it changed nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ResolveOutcome {
    /// The hold was open and is now closed as asked.
    Resolved {
        /// The record after the change.
        record: ApprovalRecord,
    },
    /// The hold was already closed by a waiter, a deadline or a restart; nothing changed.
    AlreadyClosed {
        /// The record as it stands.
        record: ApprovalRecord,
    },
}

impl ResolveOutcome {
    /// The record, whichever way it went.
    pub fn record(&self) -> &ApprovalRecord {
        match self {
            Self::Resolved { record } | Self::AlreadyClosed { record } => record,
        }
    }
}

/// One append-only audit entry: a hold moved from one state to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalTransition {
    /// The hold.
    pub approval_id: String,
    /// The state before (`None` for the park entry).
    pub from: Option<ApprovalStatus>,
    /// The state after.
    pub to: ApprovalStatus,
    /// What caused it.
    pub trigger: ApprovalTrigger,
    /// The reason written with it.
    pub reason: Option<String>,
    /// The approver, for a decision.
    pub approver: Option<String>,
    /// When it happened.
    pub at: Timestamp,
}

/// The processes whose open holds a restore fails as orphaned: a hold's waiter lives in the
/// process that parked it, so when several processes share one ledger only the holds of a
/// process known to be gone are orphaned, never those a live process still waits on (issue 20).
/// At start-up a hold with no parker recorded (parked before parkers were named, or by a ledger
/// opened without a name) counts as gone, as every open hold did when there was one process;
/// a sweep while running spares them ([`GoneParkers::sparing_unnamed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoneParkers {
    holders: BTreeSet<String>,
    unnamed_gone: bool,
}

impl Default for GoneParkers {
    /// No named parker is gone; holds with no parker recorded are (a lone process's start-up).
    fn default() -> Self {
        Self::of([])
    }
}

impl GoneParkers {
    /// The processes named by `holders` are gone, and so are the parkers of unnamed holds.
    #[must_use]
    pub fn of(holders: impl IntoIterator<Item = String>) -> Self {
        Self {
            holders: holders.into_iter().collect(),
            unnamed_gone: true,
        }
    }

    /// The same, but holds with no parker recorded stay open: a running process sweeping for
    /// gone peers cannot know who parked them.
    #[must_use]
    pub fn sparing_unnamed(mut self) -> Self {
        self.unnamed_gone = false;
        self
    }

    /// Whether a hold parked by `parked_by` lost its waiter.
    #[must_use]
    pub fn covers(&self, parked_by: Option<&str>) -> bool {
        match parked_by {
            Some(holder) => self.holders.contains(holder),
            None => self.unnamed_gone,
        }
    }

    /// The gone processes, for logs.
    pub fn holders(&self) -> impl Iterator<Item = &str> {
        self.holders.iter().map(String::as_str)
    }
}

/// The durable approval ledger. Every read first expires holds whose deadline has passed (as
/// `timed_out`, trigger `deadline`), so a waiter that died silently cannot leave a hold open.
#[async_trait]
pub trait ApprovalLedger: Send + Sync {
    /// Parks a new hold. It must be `awaiting_approval` with no decision fields; an existing id
    /// is a `Conflict`, a malformed record is `Invalid`, and nothing is written in either case.
    async fn park(&self, record: ApprovalRecord) -> Result<ApprovalRecord, PortError>;

    /// One hold by id (`NotFound` when absent).
    async fn get(&self, id: &str) -> Result<ApprovalRecord, PortError>;

    /// Every hold still awaiting a person, oldest first.
    async fn list_pending(&self) -> Result<Vec<ApprovalRecord>, PortError>;

    /// Every hold, newest first, at most `limit`.
    async fn list_recent(&self, limit: usize) -> Result<Vec<ApprovalRecord>, PortError>;

    /// At most `limit` holds awaiting a person, oldest first, after `after` (from the start
    /// when `None`), with the queue's total and the cursor of the next page: a queue of
    /// thousands is read a page at a time, never whole.
    async fn pending_page(
        &self,
        after: Option<&PendingCursor>,
        limit: usize,
    ) -> Result<PendingPage, PortError>;

    /// A person's decision. Only an open hold can be decided: any other state is a `Conflict`
    /// whose message names the state and its reason. Exactly one of two racing deciders wins.
    async fn decide(&self, id: &str, decision: ApprovalDecision) -> Result<ApprovalRecord, PortError>;

    /// A waiter closes a hold it stopped waiting for. Idempotent for a hold already closed by a
    /// waiter, deadline or restart; a `Conflict` for a hold a person decided.
    async fn resolve(
        &self,
        id: &str,
        resolution: WaiterResolution,
        reason: Option<String>,
    ) -> Result<ResolveOutcome, PortError>;

    /// At start-up and whenever a parking process is found gone: every hold still awaiting whose
    /// parker `gone` covers, and whose waiter is not the run engine
    /// ([`ApprovalRecord::orphaned`]), is marked `failed` with [`ORPHANED_APPROVAL_REASON`].
    /// Idempotent and safe to run from several processes at once. Returns the holds marked.
    async fn restore(&self, gone: &GoneParkers) -> Result<Vec<ApprovalRecord>, PortError>;

    /// The processes that parked the holds still awaiting (those with a parker recorded), so a
    /// caller can ask which of them are gone before [`ApprovalLedger::restore`].
    async fn open_parkers(&self) -> Result<BTreeSet<String>, PortError>;

    /// The hold's audit trail, oldest first (`NotFound` when the hold does not exist).
    async fn history(&self, id: &str) -> Result<Vec<ApprovalTransition>, PortError>;
}

#[cfg(test)]
mod tests {
    use super::GoneParkers;

    #[test]
    fn a_start_up_restore_orphans_unnamed_holds_and_a_sweep_spares_them() {
        let at_start = GoneParkers::of(["box/1/a".to_owned()]);
        assert!(at_start.covers(Some("box/1/a")));
        assert!(!at_start.covers(Some("box/2/b")), "a live parker's holds stay");
        assert!(
            at_start.covers(None),
            "no one waits on an unnamed hold after a start"
        );
        let sweep = at_start.sparing_unnamed();
        assert!(sweep.covers(Some("box/1/a")));
        assert!(
            !sweep.covers(None),
            "a sweep cannot know who parked an unnamed hold"
        );
        assert!(GoneParkers::default().covers(None));
        assert!(!GoneParkers::default().covers(Some("box/1/a")));
    }
}
