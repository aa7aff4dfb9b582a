//! What a run tells its watchers (FORGE-396/489): one [`RunNotice`] per thing that happened in a
//! transition, derived purely from the persisted transition (its event, then its commands in
//! order), so the notices of a transition are the same whether they are published as it happens,
//! re-published after a restart, or replayed from the ledger for a late subscriber. Each carries
//! the run id, the transition's sequence number and its index within the transition: a consumer
//! drops a duplicate by `(run_id, seq, index)`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::channel::mpsc::UnboundedReceiver;
use futures::{Stream, StreamExt};
use metaforge_ports::{
    BusEvent, PortError, RunCommand, RunEvent, RunLedger, RunStatus, RunTransition, Timestamp,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What a notice reports; its [`RunNoticeKind::as_str`] is the bus event kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RunNoticeKind {
    /// The run started (its first transition).
    #[serde(rename = "run.started")]
    Started,
    /// A phase attempt was handed to its brain.
    #[serde(rename = "run.phase_started")]
    PhaseStarted,
    /// A phase attempt finished; its recorded deliverables.
    #[serde(rename = "run.phase_finished")]
    PhaseFinished,
    /// A phase attempt failed (retried with the same key, or the run failed).
    #[serde(rename = "run.phase_failed")]
    PhaseFailed,
    /// The phase in flight was stopped (the run was canceled).
    #[serde(rename = "run.phase_canceled")]
    PhaseCanceled,
    /// A gate was parked in the approval ledger and waits for a person (the announcement).
    #[serde(rename = "run.gate_opened")]
    GateOpened,
    /// A gate was answered: by a person, or passed as an auto-approved checkpoint.
    #[serde(rename = "run.gate_decided")]
    GateDecided,
    /// A gate's deadline passed: a rejection.
    #[serde(rename = "run.gate_expired")]
    GateExpired,
    /// A parked gate was withdrawn unanswered (the run was canceled, expired or its flow changed).
    #[serde(rename = "run.gate_closed")]
    GateClosed,
    /// The run moved onto another approved flow version at a gate boundary.
    #[serde(rename = "run.flow_changed")]
    FlowChanged,
    /// The run finished successfully.
    #[serde(rename = "run.completed")]
    Completed,
    /// The run ended failed.
    #[serde(rename = "run.failed")]
    Failed,
    /// The run was canceled.
    #[serde(rename = "run.canceled")]
    Canceled,
}

impl RunNoticeKind {
    /// Every kind, for a consumer subscribing to each on the bus.
    pub const ALL: [Self; 13] = [
        Self::Started,
        Self::PhaseStarted,
        Self::PhaseFinished,
        Self::PhaseFailed,
        Self::PhaseCanceled,
        Self::GateOpened,
        Self::GateDecided,
        Self::GateExpired,
        Self::GateClosed,
        Self::FlowChanged,
        Self::Completed,
        Self::Failed,
        Self::Canceled,
    ];

    /// The bus event kind (`run.started`, …): a Kafka topic per kind when the bus is durable.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "run.started",
            Self::PhaseStarted => "run.phase_started",
            Self::PhaseFinished => "run.phase_finished",
            Self::PhaseFailed => "run.phase_failed",
            Self::PhaseCanceled => "run.phase_canceled",
            Self::GateOpened => "run.gate_opened",
            Self::GateDecided => "run.gate_decided",
            Self::GateExpired => "run.gate_expired",
            Self::GateClosed => "run.gate_closed",
            Self::FlowChanged => "run.flow_changed",
            Self::Completed => "run.completed",
            Self::Failed => "run.failed",
            Self::Canceled => "run.canceled",
        }
    }
}

/// One thing that happened to a run, as the bus and a run's subscribers receive it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunNotice {
    /// The run.
    pub run_id: String,
    /// The transition it belongs to (the run ledger's sequence number).
    pub seq: u64,
    /// Its position within the transition (0 first): with `seq`, the key a consumer dedupes on.
    pub index: u32,
    /// What happened.
    pub kind: RunNoticeKind,
    /// The run's status after the transition.
    pub status: RunStatus,
    /// The phase it is about, when it is about one.
    pub phase: Option<String>,
    /// The phase attempt, when it is about one.
    pub attempt: Option<u32>,
    /// The particulars (summary and deliverables, a decision and its approver, a reason, …).
    pub detail: Value,
    /// When the transition happened.
    pub at: Timestamp,
}

impl RunNotice {
    /// The key a consumer drops duplicates by.
    pub fn key(&self) -> (u64, u32) {
        (self.seq, self.index)
    }
}

/// The bus event that carries `notice`, under the id `id`: its kind is the notice's, its trace
/// id the run's, its payload the notice itself (every engine publishes a notice this way).
pub fn bus_event_of(notice: &RunNotice, id: String) -> Result<BusEvent, serde_json::Error> {
    Ok(BusEvent {
        id,
        kind: notice.kind.as_str().to_owned(),
        trace_id: notice.run_id.clone(),
        payload: serde_json::to_value(notice)?,
        at: notice.at,
        traceparent: None,
    })
}

/// The backlog a watcher resuming after `after` (a transition's seq and a notice's index in it)
/// reads from the ledger: every notice from that transition on (the consumer drops the ones it
/// had by `(seq, index)`); nothing for a watcher that asked for live notices only.
pub(super) async fn backlog_after(
    runs: &dyn RunLedger,
    run_id: &str,
    after: Option<(u64, u32)>,
) -> Result<Vec<RunNotice>, PortError> {
    let Some((seq, _)) = after else {
        return Ok(Vec::new());
    };
    Ok(runs
        .transitions(run_id, seq.saturating_sub(1))
        .await?
        .iter()
        .flat_map(notices_of)
        .collect())
}

/// The notices of one persisted transition: its event's first, then one per command that
/// reports something, in order.
pub fn notices_of(transition: &RunTransition) -> Vec<RunNotice> {
    let state = &transition.state;
    let mut drafts: Vec<(RunNoticeKind, Option<String>, Option<u32>, Value)> = Vec::new();
    let attempt_of = |phase: &str| state.phase(phase).map(|p| p.attempt);
    match &transition.event {
        None => drafts.push((
            RunNoticeKind::Started,
            None,
            None,
            json!({
                "flow_version_id": state.flow.version_id,
                "content_hash": state.flow.content_hash,
                "phases": state.phases.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
            }),
        )),
        Some(RunEvent::PhaseStarted { .. } | RunEvent::GateOpened { .. } | RunEvent::Canceled { .. }) => {}
        Some(RunEvent::PhaseFinished {
            phase,
            attempt,
            summary,
            deliverables,
            ..
        }) => drafts.push((
            RunNoticeKind::PhaseFinished,
            Some(phase.clone()),
            Some(*attempt),
            json!({"summary": summary, "deliverables": deliverables}),
        )),
        Some(RunEvent::PhaseFailed {
            phase,
            attempt,
            failure,
            reason,
            ..
        }) => {
            let retrying = transition
                .commands
                .iter()
                .any(|c| matches!(c, RunCommand::StartPhase { phase: p, .. } if p == phase));
            drafts.push((
                RunNoticeKind::PhaseFailed,
                Some(phase.clone()),
                Some(*attempt),
                json!({"failure": failure, "reason": reason, "retrying": retrying}),
            ));
        }
        Some(RunEvent::GateDecided {
            phase,
            decision,
            approver,
            surface,
            ..
        }) => {
            let attempt = state
                .decisions
                .iter()
                .rev()
                .find(|d| d.phase == *phase && !d.auto)
                .map(|d| d.attempt);
            drafts.push((
                RunNoticeKind::GateDecided,
                Some(phase.clone()),
                attempt,
                json!({"decision": decision, "approver": approver, "auto": false, "surface": surface}),
            ));
        }
        Some(RunEvent::GateExpired { phase, .. }) => drafts.push((
            RunNoticeKind::GateExpired,
            Some(phase.clone()),
            attempt_of(phase),
            json!({"error": state.error}),
        )),
        Some(RunEvent::FlowChanged {
            version_id,
            content_hash,
            ..
        }) => drafts.push((
            RunNoticeKind::FlowChanged,
            None,
            None,
            json!({"flow_version_id": version_id, "content_hash": content_hash}),
        )),
    }
    for command in &transition.commands {
        match command {
            RunCommand::StartPhase {
                phase,
                attempt,
                key,
                feedback,
                ..
            } => drafts.push((
                RunNoticeKind::PhaseStarted,
                Some(phase.clone()),
                Some(*attempt),
                json!({"key": key, "feedback": feedback}),
            )),
            RunCommand::OpenGate { .. } => {}
            RunCommand::AnnounceGate {
                phase, gate, reason, ..
            } => {
                let open = state.gate.as_ref().filter(|g| g.phase == *phase);
                drafts.push((
                    RunNoticeKind::GateOpened,
                    Some(phase.clone()),
                    attempt_of(phase),
                    json!({
                        "gate": gate,
                        "reason": reason,
                        "ready": open.map(|g| g.ready),
                        "findings": open.map(|g| g.findings.clone()),
                        "allowed": open.map(|g| g.allowed.clone()),
                        "deadline": open.and_then(|g| g.deadline),
                        "approval_id": open.and_then(|g| g.approval_id.clone()),
                    }),
                ));
            }
            RunCommand::AutoApproveGate { phase, gate, .. } => drafts.push((
                RunNoticeKind::GateDecided,
                Some(phase.clone()),
                attempt_of(phase),
                json!({
                    "gate": gate,
                    "decision": {"decision": "approve"},
                    "approver": metaforge_ports::AUTO_APPROVER,
                    "auto": true,
                }),
            )),
            RunCommand::CloseGate {
                phase, gate, reason, ..
            } => drafts.push((
                RunNoticeKind::GateClosed,
                Some(phase.clone()),
                attempt_of(phase),
                json!({"gate": gate, "reason": reason}),
            )),
            RunCommand::CancelPhase {
                phase, attempt, key, ..
            } => drafts.push((
                RunNoticeKind::PhaseCanceled,
                Some(phase.clone()),
                Some(*attempt),
                json!({"key": key}),
            )),
            RunCommand::CompleteRun { .. } => drafts.push((RunNoticeKind::Completed, None, None, json!({}))),
            RunCommand::FailRun { reason, .. } => {
                drafts.push((RunNoticeKind::Failed, None, None, json!({"reason": reason})));
            }
            RunCommand::CancelRun { reason, .. } => {
                drafts.push((RunNoticeKind::Canceled, None, None, json!({"reason": reason})));
            }
        }
    }
    drafts
        .into_iter()
        .zip(0u32..)
        .map(|((kind, phase, attempt, detail), index)| RunNotice {
            run_id: transition.run_id.clone(),
            seq: transition.seq,
            index,
            kind,
            status: state.status,
            phase,
            attempt,
            detail,
            at: transition.at,
        })
        .collect()
}

/// A run's notices for one subscriber (the `GET /v1/runs/{id}/events` stream): the replayed
/// backlog first (notices after the key asked for), then the live notices, each once and in
/// `(seq, index)` order (an SSE event id of `seq.index` resumes exactly). The stream ends when
/// the run has ended.
pub struct RunEvents {
    backlog: VecDeque<RunNotice>,
    live: Option<UnboundedReceiver<RunNotice>>,
    last: Option<(u64, u32)>,
}

impl RunEvents {
    pub(crate) fn new(
        backlog: Vec<RunNotice>,
        live: Option<UnboundedReceiver<RunNotice>>,
        after: Option<(u64, u32)>,
    ) -> Self {
        Self {
            backlog: backlog.into(),
            live,
            last: after,
        }
    }
}

impl std::fmt::Debug for RunEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunEvents")
            .field("backlog", &self.backlog.len())
            .field("live", &self.live.is_some())
            .field("last", &self.last)
            .finish()
    }
}

impl Stream for RunEvents {
    type Item = RunNotice;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RunNotice>> {
        let this = &mut *self;
        while let Some(notice) = this.backlog.pop_front() {
            if this.last.is_some_and(|last| notice.key() <= last) {
                continue;
            }
            this.last = Some(notice.key());
            return Poll::Ready(Some(notice));
        }
        let Some(live) = this.live.as_mut() else {
            return Poll::Ready(None);
        };
        loop {
            match live.poll_next_unpin(cx) {
                Poll::Ready(Some(notice)) => {
                    if this.last.is_some_and(|last| notice.key() <= last) {
                        continue;
                    }
                    this.last = Some(notice.key());
                    return Poll::Ready(Some(notice));
                }
                Poll::Ready(None) => {
                    this.live = None;
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
