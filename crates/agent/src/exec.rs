//! Tool-call execution for one turn (MET-569, FORGE-222/490): lookup, schema pre-validation and
//! gating (the domain's `tool_gating::decide`, validation first so no person is asked about a
//! call that could never run), holds in the approval ledger, the same-turn duplicate guard,
//! structured error envelopes and loud truncation. Shared by the native and the ReAct loops.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::join_all;
use metaforge_domain::compaction::truncate_observation;
use metaforge_domain::grounding::TurnStep;
use metaforge_domain::tool_cap::ToolOrigin;
use metaforge_domain::tool_gating::{
    Caller, Decision, ToolSpec, call_failed_envelope, canonical_call_key, decide, invalid_arguments_envelope,
    tool_error_envelope,
};
use metaforge_ports::{
    ApprovalKind, ApprovalLedger, ApprovalRecord, ApprovalStatus, Clock, IdGen, PortErrorKind, ToolCall,
    ToolOutput, WaiterResolution, hold_deadline,
};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::events::{EventSink, TurnEvent};
use crate::tools::{AgentTool, ToolBox};

/// How a hold-tier call is handled (FORGE-490).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApprovalMode {
    /// A person can answer: the call is parked in the approval ledger and the turn waits.
    #[default]
    Hold,
    /// Unattended (a design-flow phase turn): no in-process hold. An MCP tool is forwarded to
    /// its own server, whose policy decides; a native tool that needs approval is refused.
    Forward,
}

/// Error code and log event of a native approval tool refused in an unattended turn.
pub const APPROVAL_TOOL_REFUSED_UNATTENDED: &str = "approval_tool_refused_unattended";

/// What one executed call came to, as the model reads it and the events report it. Serialized,
/// it is the call as a client shows it and a chat thread stores it (without the model's own
/// name for the tool and the truncated text it read).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CallRecord {
    /// The model's call id.
    pub call_id: String,
    /// The name the model used.
    #[serde(skip)]
    pub name: String,
    /// The registry id (the name itself for an unknown tool).
    pub tool: String,
    /// The arguments as sent.
    pub arguments: Value,
    /// The observation (the tool's result, or an error envelope).
    pub result: Value,
    /// The observation is an error envelope.
    pub is_error: bool,
    /// The observation came from the same-turn duplicate guard.
    pub cached: bool,
    /// The hold this call waited on, when it was held.
    pub approval_id: Option<String>,
    /// The observation text the model reads (loudly truncated).
    #[serde(skip)]
    pub content: String,
}

impl CallRecord {
    /// The grounding check's view of the call.
    pub fn step(&self) -> TurnStep {
        TurnStep {
            tool: Some(self.tool.clone()),
            arguments: self.arguments.clone(),
            result: self.result.clone(),
            error: self.is_error.then(|| {
                self.result
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("error")
                    .to_owned()
            }),
        }
    }
}

/// The per-turn execution settings.
#[derive(Debug, Clone)]
pub struct ExecSettings {
    /// The caller the gate decides for (class, project, disabled gates, unattended).
    pub caller: Caller,
    /// Hold or forward.
    pub approval_mode: ApprovalMode,
    /// How long a held call waits for a person before it is closed as timed out.
    pub approval_timeout: Duration,
    /// How often a waiting hold re-reads the ledger.
    pub approval_poll: Duration,
    /// Longest observation text the model reads; longer ones carry a truncation marker.
    pub max_observation_chars: usize,
    /// The authenticated identity the turn runs for, recorded on every hold it parks (four eyes
    /// refuses that identity's decision).
    pub requested_by: Option<String>,
}

/// The ports execution needs.
#[derive(Clone)]
pub struct ExecPorts {
    /// The tools.
    pub tools: Arc<dyn ToolBox>,
    /// The one approval ledger; without it a held call is refused, never run.
    pub approvals: Option<Arc<dyn ApprovalLedger>>,
    /// Time for hold records.
    pub clock: Arc<dyn Clock>,
    /// Ids for hold records.
    pub ids: Arc<dyn IdGen>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One turn's executor: the duplicate cache and the open holds live exactly as long as the turn.
pub(crate) struct TurnExec<'a> {
    ports: &'a ExecPorts,
    settings: &'a ExecSettings,
    events: &'a EventSink,
    cancel: &'a CancellationToken,
    cache: Mutex<HashMap<String, Value>>,
    open_holds: Mutex<BTreeSet<String>>,
}

enum HoldEnd {
    Approved,
    Closed(Value),
}

impl<'a> TurnExec<'a> {
    pub(crate) fn new(
        ports: &'a ExecPorts,
        settings: &'a ExecSettings,
        events: &'a EventSink,
        cancel: &'a CancellationToken,
    ) -> Self {
        Self {
            ports,
            settings,
            events,
            cancel,
            cache: Mutex::new(HashMap::new()),
            open_holds: Mutex::new(BTreeSet::new()),
        }
    }

    /// Runs a batch the model emitted in one step: in parallel with per-call isolation, results
    /// in the model's call order; serially when a call in it needs approval (concurrent prompts
    /// race for one approver). Identical calls in one batch run once; the repeats reuse it.
    pub(crate) async fn run_batch(&self, calls: &[ToolCall], offered: &[AgentTool]) -> Vec<CallRecord> {
        for call in calls {
            self.events.emit(TurnEvent::ToolCall {
                call_id: call.id.clone(),
                tool: find(offered, &call.name).map_or_else(|| call.name.clone(), |t| t.id.clone()),
                arguments: call.arguments.clone(),
            });
        }
        let serial = calls
            .iter()
            .any(|c| find(offered, &c.name).is_some_and(AgentTool::requires_approval));
        let mut slots: Vec<Option<CallRecord>> = vec![None; calls.len()];
        if serial {
            for (slot, call) in slots.iter_mut().zip(calls) {
                *slot = Some(self.run_one(call, offered).await);
            }
        } else {
            let mut seen = BTreeSet::new();
            let leaders: Vec<usize> = (0..calls.len())
                .filter(|&i| seen.insert(call_key(&calls[i], offered)))
                .collect();
            let done = join_all(leaders.iter().map(|&i| self.run_one(&calls[i], offered))).await;
            for (i, record) in leaders.iter().zip(done) {
                slots[*i] = Some(record);
            }
            for (slot, call) in slots.iter_mut().zip(calls) {
                if slot.is_none() {
                    *slot = Some(self.run_one(call, offered).await);
                }
            }
        }
        let records: Vec<CallRecord> = slots.into_iter().flatten().collect();
        for record in &records {
            self.emit_result(record);
        }
        records
    }

    /// Runs one call (the ReAct loop's step) and reports it.
    pub(crate) async fn run_single(&self, call: &ToolCall, offered: &[AgentTool]) -> CallRecord {
        self.events.emit(TurnEvent::ToolCall {
            call_id: call.id.clone(),
            tool: find(offered, &call.name).map_or_else(|| call.name.clone(), |t| t.id.clone()),
            arguments: call.arguments.clone(),
        });
        let record = self.run_one(call, offered).await;
        self.emit_result(&record);
        record
    }

    fn emit_result(&self, record: &CallRecord) {
        self.events.emit(TurnEvent::ToolResult {
            call_id: record.call_id.clone(),
            tool: record.tool.clone(),
            is_error: record.is_error,
            cached: record.cached,
            content: record.content.clone(),
        });
    }

    /// Closes every hold of this turn still open as `canceled` (the turn was cancelled).
    pub(crate) async fn close_open_holds(&self) {
        let open: Vec<String> = std::mem::take(&mut *lock(&self.open_holds)).into_iter().collect();
        let Some(ledger) = &self.ports.approvals else {
            return;
        };
        for id in open {
            if let Err(e) = ledger
                .resolve(
                    &id,
                    WaiterResolution::Canceled,
                    Some("the turn was cancelled".to_owned()),
                )
                .await
            {
                tracing::warn!(event = "approval_close_failed", approval_id = %id, error = %e, "could not close a canceled turn's hold");
            }
        }
    }

    async fn run_one(&self, call: &ToolCall, offered: &[AgentTool]) -> CallRecord {
        let record = |tool: &str, result: Value, cached: bool, approval_id: Option<String>| {
            let is_error = !cached && is_error_envelope(&result);
            let text = match &result {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            CallRecord {
                call_id: call.id.clone(),
                name: call.name.clone(),
                tool: tool.to_owned(),
                arguments: call.arguments.clone(),
                content: truncate_observation(&text, self.settings.max_observation_chars),
                result,
                is_error,
                cached,
                approval_id,
            }
        };
        let Some(tool) = find(offered, &call.name) else {
            let envelope = json!({
                "status": "error", "error": "unknown_tool", "tool": call.name,
                "hint": "call one of the tools offered this turn",
            });
            return record(&call.name, envelope, false, None);
        };
        let Some(arguments) = call.arguments.as_object().cloned() else {
            let envelope = json!({
                "status": "error", "error": "invalid_arguments", "tool": tool.id,
                "validation_errors": [{"path": "", "keyword": "type", "message": "arguments must be a JSON object"}],
                "hint": "Send the arguments as a JSON object; this call was NOT executed.",
            });
            return record(&tool.id, envelope, false, None);
        };
        if self.cancel.is_cancelled() {
            return record(&tool.id, canceled_envelope(&tool.id), false, None);
        }
        let key = canonical_call_key(&tool.id, &call.arguments);
        let hit = lock(&self.cache).get(&key).cloned();
        if let Some(stored) = hit {
            return record(&tool.id, cached_view(stored), true, None);
        }
        // A forward-mode turn leaves a host-enforced tool's ask tier to its host (see
        // `ToolPolicy::host_enforced`); every other rule of the gate still applies here.
        let forwarded;
        let gate = if tool.host_enforced && matches!(self.settings.approval_mode, ApprovalMode::Forward) {
            forwarded = ToolSpec {
                requires_approval: false,
                ..tool.gate.clone()
            };
            &forwarded
        } else {
            &tool.gate
        };
        let verdict = decide(gate, &self.settings.caller, &call.arguments);
        let mut approval_id = None;
        match verdict.decision {
            Decision::Refuse if !verdict.validation_errors.is_empty() => {
                let envelope = invalid_arguments_envelope(&tool.id, &verdict.validation_errors);
                return record(&tool.id, envelope, false, None);
            }
            Decision::Refuse => {
                if self.settings.caller.unattended
                    && tool.requires_approval()
                    && tool.origin == ToolOrigin::Native
                {
                    return record(&tool.id, self.refuse_unattended(tool), false, None);
                }
                let envelope = json!({
                    "status": "error", "error": "refused", "tool": tool.id, "reason": verdict.reason,
                    "hint": "this call is not allowed here; do not retry it",
                });
                return record(&tool.id, envelope, false, None);
            }
            Decision::Hold => match (self.settings.approval_mode, &tool.origin) {
                (ApprovalMode::Forward, ToolOrigin::Mcp(server)) => {
                    tracing::info!(event = "tool_call_forwarded", tool = %tool.id, server = %server, "held-tier call forwarded to its own server's policy");
                }
                (ApprovalMode::Forward, ToolOrigin::Native) => {
                    return record(&tool.id, self.refuse_unattended(tool), false, None);
                }
                (ApprovalMode::Hold, _) => {
                    let (id, end) = self.hold_and_wait(call, tool, &verdict.reason).await;
                    approval_id = id;
                    if let HoldEnd::Closed(envelope) = end {
                        return record(&tool.id, envelope, false, approval_id);
                    }
                }
            },
            Decision::Run => {}
        }
        let result = tokio::select! {
            biased;
            () = self.cancel.cancelled() => {
                return record(&tool.id, canceled_envelope(&tool.id), false, approval_id);
            }
            result = async {
                match &approval_id {
                    Some(id) => self.ports.tools.call_approved(tool, arguments, id).await,
                    None => self.ports.tools.call(tool, arguments).await,
                }
            } => result,
        };
        let value = match result {
            Ok(output) if output.is_error => tool_error_envelope(&tool.id, &output),
            Ok(output) => observation(&output),
            Err(e) => call_failed_envelope(&tool.id, &e),
        };
        if !is_error_envelope(&value) {
            lock(&self.cache).insert(key, value.clone());
        }
        record(&tool.id, value, false, approval_id)
    }

    fn refuse_unattended(&self, tool: &AgentTool) -> Value {
        tracing::warn!(
            event = APPROVAL_TOOL_REFUSED_UNATTENDED,
            tool = %tool.id,
            caller = self.settings.caller.class.as_str(),
            "a tool that needs a person's approval was refused in an unattended turn"
        );
        json!({
            "status": "error",
            "error": APPROVAL_TOOL_REFUSED_UNATTENDED,
            "tool": tool.id,
            "message": format!("'{}' requires approval and is not available in an unattended design-flow turn", tool.id),
        })
    }

    /// Parks the call in the ledger and waits for a person, closing the hold as `timed_out` when
    /// the window ends and `canceled` when the turn is cancelled (FORGE-466: a decision that lands
    /// at the last moment is read back and honoured).
    async fn hold_and_wait(
        &self,
        call: &ToolCall,
        tool: &AgentTool,
        reason: &str,
    ) -> (Option<String>, HoldEnd) {
        let Some(ledger) = &self.ports.approvals else {
            let envelope = json!({
                "status": "error", "error": "approval_unavailable", "tool": tool.id,
                "message": "this call needs a person's approval and no approval ledger runs in this process; it was not run",
            });
            return (None, HoldEnd::Closed(envelope));
        };
        let now = self.ports.clock.now();
        let timeout_secs = self.settings.approval_timeout.as_secs().max(1);
        let deadline = match hold_deadline(now, Some(timeout_secs)) {
            Ok(d) => d,
            Err(e) => return (None, HoldEnd::Closed(call_failed_envelope(&tool.id, &e))),
        };
        let record = ApprovalRecord {
            id: self.ports.ids.new_id(),
            kind: ApprovalKind::ToolCall,
            tool: tool.id.clone(),
            arguments: call.arguments.clone(),
            caller: self.settings.caller.class.as_str().to_owned(),
            status: ApprovalStatus::AwaitingApproval,
            reason: Some(reason.to_owned()),
            approver: None,
            flow_version_id: None,
            created_at: now,
            decided_at: None,
            deadline,
            requested_by: self.settings.requested_by.clone(),
        };
        let parked = match ledger.park(record).await {
            Ok(parked) => parked,
            Err(e) => return (None, HoldEnd::Closed(call_failed_envelope(&tool.id, &e))),
        };
        let id = parked.id.clone();
        lock(&self.open_holds).insert(id.clone());
        tracing::info!(event = "tool_call_held", tool = %tool.id, approval_id = %id, "tool call parked for a person's approval");
        self.events.emit(TurnEvent::ApprovalRequested {
            approval_id: id.clone(),
            call_id: call.id.clone(),
            tool: tool.id.clone(),
            arguments: call.arguments.clone(),
        });
        let window = tokio::time::sleep(self.settings.approval_timeout);
        tokio::pin!(window);
        let decided = loop {
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => {
                    break self.close(ledger.as_ref(), &id, WaiterResolution::Canceled, "the turn was cancelled").await;
                }
                () = &mut window => {
                    break self.close(ledger.as_ref(), &id, WaiterResolution::TimedOut, "nobody decided within the approval window").await;
                }
                () = tokio::time::sleep(self.settings.approval_poll) => {
                    match ledger.get(&id).await {
                        Ok(current) if current.status.is_final() => break Some(current),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(event = "approval_read_failed", approval_id = %id, error = %e, "could not read a waiting hold"),
                    }
                }
            }
        };
        lock(&self.open_holds).remove(&id);
        let end = match decided {
            Some(r) if r.status == ApprovalStatus::Approved => HoldEnd::Approved,
            Some(r) => HoldEnd::Closed(json!({
                "status": "error",
                "error": r.status.as_str(),
                "tool": tool.id,
                "approval_id": id,
                "reason": r.reason,
                "approver": r.approver,
                "hint": match r.status {
                    ApprovalStatus::Rejected => "a person rejected this call; do not retry it unchanged",
                    ApprovalStatus::TimedOut => "nobody approved this call in time; it was NOT executed",
                    ApprovalStatus::Canceled => "the turn was cancelled; the call was NOT executed",
                    ApprovalStatus::AwaitingApproval | ApprovalStatus::Approved | ApprovalStatus::Failed => "the call was NOT executed",
                },
            })),
            None => HoldEnd::Closed(json!({
                "status": "error", "error": "approval_unavailable", "tool": tool.id, "approval_id": id,
                "message": "the approval ledger could not close this hold; the call was NOT executed",
            })),
        };
        (Some(id), end)
    }

    async fn close(
        &self,
        ledger: &dyn ApprovalLedger,
        id: &str,
        resolution: WaiterResolution,
        reason: &str,
    ) -> Option<ApprovalRecord> {
        match ledger.resolve(id, resolution, Some(reason.to_owned())).await {
            Ok(outcome) => Some(outcome.record().clone()),
            // A person decided at the last moment: their decision stands.
            Err(e) if e.kind == PortErrorKind::Conflict => ledger.get(id).await.ok(),
            Err(e) => {
                tracing::warn!(event = "approval_close_failed", approval_id = %id, error = %e, "could not close a hold");
                None
            }
        }
    }
}

fn canceled_envelope(tool: &str) -> Value {
    json!({"status": "error", "error": "canceled", "tool": tool, "message": "the turn was cancelled while this call ran"})
}

/// The tool offered this turn under `name` (provider name or registry id).
pub(crate) fn find<'t>(offered: &'t [AgentTool], name: &str) -> Option<&'t AgentTool> {
    offered
        .iter()
        .find(|t| t.provider_name == name)
        .or_else(|| offered.iter().find(|t| t.id == name))
}

fn call_key(call: &ToolCall, offered: &[AgentTool]) -> String {
    let id = find(offered, &call.name).map_or(call.name.as_str(), |t| t.id.as_str());
    canonical_call_key(id, &call.arguments)
}

/// True for the error envelopes this module builds (and a tool's own `status: error` result).
fn is_error_envelope(value: &Value) -> bool {
    metaforge_domain::grounding::is_error_envelope(value)
}

/// A successful output as the model reads it: the structured content, else the text parsed as
/// JSON, else the text.
fn observation(output: &ToolOutput) -> Value {
    if let Some(structured) = &output.structured {
        return structured.clone();
    }
    let text = output.text();
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// The stored observation of an identical earlier call, marked `cached: true`.
fn cached_view(stored: Value) -> Value {
    match stored {
        Value::Object(mut map) => {
            let mut out = Map::new();
            out.insert("cached".to_owned(), Value::Bool(true));
            out.append(&mut map);
            Value::Object(out)
        }
        other => json!({"cached": true, "result": other}),
    }
}
