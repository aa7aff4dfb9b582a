//! [`ApprovalLedger`] over the gateway's `/v1/chat/tool_approvals` routes: the sidecar parks,
//! polls and closes its holds in the gateway's ledger, which owns ids, deadlines and restoration.

use async_trait::async_trait;
use metaforge_api::{ApprovalList, ParkBody, Resolution, ResolveRequest, ResolveResponse};
use metaforge_ports::{
    ApprovalDecision, ApprovalLedger, ApprovalRecord, ApprovalTransition, GoneParkers, MAX_PENDING_PAGE,
    PendingCursor, PendingPage, PortError, PortErrorKind, ResolveOutcome, WaiterResolution,
};
use reqwest::Method;

use crate::client::{GatewayClient, decode, encode, segment};

/// The gateway's ledger, seen from a sidecar. It never decides: deciding happens where a person
/// is, and the approver comes off the gateway's record (FORGE-393).
#[derive(Debug, Clone)]
pub struct RemoteApprovalLedger {
    client: GatewayClient,
}

impl RemoteApprovalLedger {
    /// The ledger of the gateway `client` talks to.
    pub fn new(client: GatewayClient) -> Self {
        Self { client }
    }
}

/// The waiter's timeout the gateway should use: the record's deadline minus the grace the
/// gateway adds back (`None` when the record has no deadline).
fn timeout_seconds(record: &ApprovalRecord) -> Option<u64> {
    let deadline = record.deadline?;
    let total = deadline.signed_duration_since(record.created_at).num_seconds();
    let waiter = total.saturating_sub(metaforge_ports::APPROVAL_DEADLINE_GRACE_SECONDS);
    Some(u64::try_from(waiter).unwrap_or(0).max(1))
}

#[async_trait]
impl ApprovalLedger for RemoteApprovalLedger {
    /// Parks through `POST /v1/chat/tool_approvals`. The gateway assigns the id and the deadline:
    /// the returned record (not the one passed in) is the hold to poll.
    async fn park(&self, record: ApprovalRecord) -> Result<ApprovalRecord, PortError> {
        let body = encode(
            &ParkBody {
                timeout_seconds: timeout_seconds(&record),
                tool: record.tool,
                arguments: record.arguments,
                caller: Some(record.caller),
            },
            "hold",
        )?;
        let answer = self
            .client
            .send(Method::POST, "/v1/chat/tool_approvals", Some(&body))
            .await?;
        decode(answer, "approval record")
    }

    async fn get(&self, id: &str) -> Result<ApprovalRecord, PortError> {
        let path = format!("/v1/chat/tool_approvals/{}", segment(id));
        decode(
            self.client.send(Method::GET, &path, None).await?,
            "approval record",
        )
    }

    /// Every page of the gateway's queue, followed to its end.
    async fn list_pending(&self) -> Result<Vec<ApprovalRecord>, PortError> {
        let mut all = Vec::new();
        let mut after: Option<PendingCursor> = None;
        loop {
            let page = self.pending_page(after.as_ref(), MAX_PENDING_PAGE).await?;
            all.extend(page.holds);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(all),
            }
        }
    }

    async fn pending_page(
        &self,
        after: Option<&PendingCursor>,
        limit: usize,
    ) -> Result<PendingPage, PortError> {
        let mut path = format!("/v1/chat/tool_approvals?limit={limit}");
        if let Some(cursor) = after {
            path.push_str("&after=");
            path.push_str(&segment(&cursor.encode()));
        }
        let list =
            decode::<ApprovalList>(self.client.send(Method::GET, &path, None).await?, "approval list")?;
        let next = match list.next_cursor.as_deref() {
            None => None,
            Some(token) => Some(PendingCursor::parse(token).ok_or_else(|| {
                PortError::new(
                    PortErrorKind::Corrupt,
                    format!("the gateway's next_cursor {token:?} is not a queue cursor"),
                )
            })?),
        };
        Ok(PendingPage {
            total: list.total.unwrap_or(list.approvals.len()),
            holds: list.approvals,
            next,
        })
    }

    async fn list_recent(&self, limit: usize) -> Result<Vec<ApprovalRecord>, PortError> {
        let answer = self
            .client
            .send(Method::GET, "/v1/chat/tool_approvals?status=all", None)
            .await?;
        let mut approvals = decode::<ApprovalList>(answer, "approval list")?.approvals;
        approvals.truncate(limit);
        Ok(approvals)
    }

    /// Refused: a sidecar never decides a hold (FORGE-400); a person does, at the gateway.
    async fn decide(&self, id: &str, _decision: ApprovalDecision) -> Result<ApprovalRecord, PortError> {
        Err(PortError::new(
            PortErrorKind::Invalid,
            format!(
                "approval {id}: the sidecar never decides a hold; a person decides it at the gateway \
                 (POST /v1/approvals/{{id}}/decision)"
            ),
        ))
    }

    async fn resolve(
        &self,
        id: &str,
        resolution: WaiterResolution,
        reason: Option<String>,
    ) -> Result<ResolveOutcome, PortError> {
        let resolution = match resolution {
            WaiterResolution::TimedOut => Resolution::TimedOut,
            WaiterResolution::Canceled => Resolution::Canceled,
        };
        let path = format!("/v1/chat/tool_approvals/{}/resolve", segment(id));
        let body = encode(&ResolveRequest { resolution, reason }, "resolve request")?;
        let answer: ResolveResponse = decode(
            self.client.send(Method::POST, &path, Some(&body)).await?,
            "resolve answer",
        )?;
        Ok(match answer.outcome.as_str() {
            "resolved" => ResolveOutcome::Resolved {
                record: answer.approval,
            },
            _ => ResolveOutcome::AlreadyClosed {
                record: answer.approval,
            },
        })
    }

    /// Nothing to restore here: the gateway orphans the holds of gone processes itself.
    async fn restore(&self, _gone: &GoneParkers) -> Result<Vec<ApprovalRecord>, PortError> {
        Ok(Vec::new())
    }

    /// The gateway names the parkers of the holds it keeps; none are named through a sidecar.
    async fn open_parkers(&self) -> Result<std::collections::BTreeSet<String>, PortError> {
        Ok(std::collections::BTreeSet::new())
    }

    /// The gateway serves no audit-trail route to waiters; the trail is read at the gateway.
    async fn history(&self, id: &str) -> Result<Vec<ApprovalTransition>, PortError> {
        Err(PortError::new(
            PortErrorKind::Invalid,
            format!("approval {id}: the audit trail is read at the gateway, not through a sidecar"),
        ))
    }
}

#[cfg(test)]
mod tests;

/// A hold as the sidecar's approvals service builds it before parking.
#[cfg(test)]
#[expect(
    clippy::disallowed_methods,
    reason = "a test fixture stamped with the wall clock"
)]
pub(crate) fn sample_record(deadline_seconds: Option<i64>) -> ApprovalRecord {
    let now = chrono::Utc::now();
    ApprovalRecord {
        id: "local-id".into(),
        kind: metaforge_ports::ApprovalKind::ToolCall,
        tool: "test.write".into(),
        arguments: serde_json::Value::Null,
        caller: "remote".into(),
        status: metaforge_ports::ApprovalStatus::AwaitingApproval,
        reason: None,
        approver: None,
        flow_version_id: None,
        created_at: now,
        decided_at: None,
        deadline: deadline_seconds.map(|s| now + chrono::Duration::seconds(s)),
        requested_by: None,
    }
}
