//! `flow.await_gate` (FORGE-582): waits for the run's next gate, then asks the person through
//! MCP elicitation with only the decisions the gate allows — approve, reject, retry, rework (with
//! the earlier phases a rework may name) and a reason where the run's state machine requires one
//! — and records their answer through the run service as them (the identity the transport
//! authenticated), with `surface: "chat"`.
//!
//! The tool asks; it decides nothing (FORGE-400). The answer is read only from the person's form
//! ([`CallFacts::answers`]), never from the tool's arguments, and only for the gate this session
//! was asked about (a gate that moved on meanwhile is refused, nothing decided). Dismissing or
//! declining the form leaves the gate open; a client that cannot be asked gets the gate's details
//! and the allowed decisions as the result, and nothing is decided. A caller that is not a person's
//! client (`service`, `untrusted`) is never asked.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use metaforge_api::{FlowStateView, GateView};
use metaforge_api::{GateDecisionBody, RunReply};
use metaforge_app::limits::{GATE_ANSWERS, check_arguments};
use metaforge_ports::{
    CallFacts, CallerClass, CallerContext, DecisionSurface, GateDecisionKind, HostCallOutcome, InputQuestion,
    PortErrorKind, RunStatus, Timestamp, ToolHints, ToolOutput,
};
use serde_json::{Map, Value, json};

use super::args::{AwaitGateArgs, GateAnswers};
use super::{MAX_GATE_WAIT, SidecarRuns, failure, identity, output};
use crate::args::ArgError;
use crate::envelope::{ToolError, run_refusal};
use crate::typed::{ADDITIVE_WRITE, ToolGate, TypedTool};

/// The tool's name.
pub const TOOL: &str = "flow.await_gate";

/// At most this many asked gates are remembered (one per session and run).
const MAX_ASKED: usize = 1_024;

/// The gate a session was asked about: the answer is recorded only while that gate is open.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AskedGate {
    phase: String,
    opened_at: Timestamp,
    /// The gated phase's attempt (a retry reopens the same phase's gate as a new attempt).
    attempt: Option<u32>,
}

impl AskedGate {
    /// The gate `state` is parked at, as a person would be asked about it.
    fn of(state: &FlowStateView, gate: &GateView) -> Self {
        Self {
            phase: gate.phase.clone(),
            opened_at: gate.opened_at,
            attempt: state
                .phases
                .iter()
                .find(|p| p.id == gate.phase)
                .and_then(|p| p.attempt),
        }
    }
}

/// `flow.await_gate`.
pub struct AwaitGate {
    runs: SidecarRuns,
    asked: Mutex<HashMap<String, AskedGate>>,
}

/// Who was asked: the authenticated identity in its session (one key per person's chat and
/// run; a session id another key sends is another key's question).
fn asked_key(caller: &CallerContext, run_id: &str) -> String {
    let session = caller.session.as_deref().unwrap_or_default();
    format!("{}\u{1f}{session}\u{1f}{run_id}", identity(caller))
}

/// Whether a caller of this class is a person's client whose answer can be recorded as theirs.
fn asks_a_person(class: CallerClass) -> bool {
    match class {
        CallerClass::Local | CallerClass::Remote | CallerClass::ClientTask => true,
        CallerClass::Service | CallerClass::Untrusted => false,
    }
}

impl AwaitGate {
    /// The tool over `runs`.
    pub fn new(runs: SidecarRuns) -> Self {
        Self {
            runs,
            asked: Mutex::new(HashMap::new()),
        }
    }

    fn remember(&self, key: String, gate: AskedGate) {
        let mut asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
        if asked.len() >= MAX_ASKED && !asked.contains_key(&key) {
            asked.clear();
        }
        asked.insert(key, gate);
    }

    fn take(&self, key: &str) -> Option<AskedGate> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key)
    }

    /// Waits for the run's gate; asks the person when one is open.
    async fn wait(
        &self,
        caller: &CallerContext,
        args: &AwaitGateArgs,
        key: String,
    ) -> Result<HostCallOutcome, ToolError> {
        let wait = args
            .wait_seconds
            .map_or(self.runs.settings.default_gate_wait, Duration::from_secs)
            .min(MAX_GATE_WAIT);
        let started = tokio::time::Instant::now();
        loop {
            match self.runs.bindings.flow_state(&args.run_id).await {
                Ok(state) if state.live && state.gate.is_some() => {
                    return Ok(self.ask(caller, state, key));
                }
                Ok(state)
                    if state.live && RunStatus::parse(&state.status).is_some_and(RunStatus::is_terminal) =>
                {
                    return Ok(output(&json!({
                        "status": "ended",
                        "run_id": state.run_id,
                        "run_status": state.status,
                        "error": state.error,
                        "gate": null,
                        "note": "the run ended; no gate will open",
                    }))?);
                }
                Ok(state) if started.elapsed() >= wait => {
                    return Ok(output(&json!({
                        "status": "waiting",
                        "run_id": state.run_id,
                        "run_status": state.status,
                        "live": state.live,
                        "reason": state.reason,
                        "running_phase": state.running_phase().map(|p| p.id.clone()),
                        "gate": null,
                        "note": format!("no gate opened within {}s; call flow.await_gate again (or follow with flow.status)", wait.as_secs()),
                    }))?);
                }
                Ok(_) => {}
                Err(e) if e.kind == PortErrorKind::Unavailable && started.elapsed() < wait => {
                    tracing::warn!(event = "mcp_await_gate_poll_failed", run_id = %args.run_id, error = %e);
                }
                Err(e) => return Ok(failure(TOOL, &args.run_id, e)?),
            }
            tokio::time::sleep(self.runs.settings.gate_poll).await;
        }
    }

    /// The open gate as the person's questions, with its details as the answer for a client that
    /// cannot ask (nothing is decided then).
    fn ask(&self, caller: &CallerContext, state: FlowStateView, key: String) -> HostCallOutcome {
        let Some(gate) = state.gate.clone() else {
            return HostCallOutcome::Done(ToolOutput::error(
                json!({"status": "error", "error": "no_open_gate"}),
            ));
        };
        let rework_phases = rework_targets(&state, &gate);
        let allowed: Vec<&str> = gate.allowed.iter().map(|d| d.as_str()).collect();
        let details = json!({
            "status": "awaiting_decision",
            "decided": false,
            "run_id": state.run_id,
            "gate": gate,
            "allowed": allowed,
            "rework_phases": rework_phases,
            "reason_required_for": [GateDecisionKind::Retry.as_str(), GateDecisionKind::Rework.as_str()],
            "note": "Nothing was decided. A person answers this gate: in a chat that supports elicitation (flow.await_gate asks them), in the MetaForge approvals queue, or POST /v1/runs/{id}/approval. No tool decides it.",
        });
        if !asks_a_person(caller.class) {
            return HostCallOutcome::Done(ToolOutput::json(details));
        }
        self.remember(key, AskedGate::of(&state, &gate));
        let mut questions = vec![InputQuestion {
            id: "decision".to_owned(),
            prompt: format!(
                "Your decision on {} (phase {}): {}",
                gate.gate, gate.phase, gate.approval_reason
            ),
            choices: allowed.iter().map(|d| (*d).to_owned()).collect(),
            optional: false,
        }];
        questions.push(InputQuestion {
            id: "reason".to_owned(),
            prompt: "Why? Required for retry and rework (the phase is told first); optional otherwise."
                .to_owned(),
            choices: Vec::new(),
            optional: true,
        });
        if !rework_phases.is_empty() {
            questions.push(InputQuestion {
                id: "rework_phase".to_owned(),
                prompt:
                    "For rework only: the earlier phase to go back to (it and every later phase run again)."
                        .to_owned(),
                choices: rework_phases,
                optional: true,
            });
        }
        let findings = if gate.findings.is_empty() {
            String::new()
        } else {
            format!(" Missing: {}.", gate.findings.join("; "))
        };
        HostCallOutcome::NeedsInput {
            message: format!(
                "Run {} is waiting at {} on phase {} ({}).{findings} You decide it; your answer is recorded as yours.",
                state.run_id,
                gate.gate,
                gate.phase,
                if gate.ready {
                    "ready for review"
                } else {
                    "not ready: it cannot be approved"
                },
            ),
            questions,
            result: ToolOutput::json(details),
        }
    }

    /// Records the person's answer to the gate this session was asked about.
    async fn record(
        &self,
        caller: &CallerContext,
        args: &AwaitGateArgs,
        key: &str,
        answers: &Map<String, Value>,
    ) -> Result<HostCallOutcome, ToolError> {
        check_arguments(&[GATE_ANSWERS], answers).map_err(ArgError::from)?;
        let answers = GateAnswers::from_answers(answers)?;
        let Some(asked) = self.take(key) else {
            return Ok(HostCallOutcome::Done(ToolOutput::error(json!({
                "status": "not_decided", "error": "not_asked", "tool": TOOL, "run_id": args.run_id,
                "message": "no gate of this run was put to the person in this session; call flow.await_gate (without answers) to ask them; nothing was decided",
            }))));
        };
        let state = match self.runs.bindings.flow_state(&args.run_id).await {
            Ok(state) => state,
            Err(e) => return Ok(failure(TOOL, &args.run_id, e)?),
        };
        let open = state.gate.as_ref().filter(|g| AskedGate::of(&state, g) == asked);
        if open.is_none() {
            return Ok(HostCallOutcome::Done(ToolOutput::error(json!({
                "status": "conflict", "error": "gate_changed", "tool": TOOL, "run_id": args.run_id,
                "asked_gate_phase": asked.phase, "gate": state.gate,
                "message": "the gate the person was asked about is no longer open; nothing was decided",
            }))));
        }
        let decision = answers.decision;
        let approver = identity(caller);
        let answer = GateDecisionBody {
            decision: decision.into(),
            reason: answers.reason,
            phase: answers
                .rework_phase
                .filter(|_| decision == GateDecisionKind::Rework),
            gate_phase: Some(asked.phase.clone()),
            surface: Some(DecisionSurface::Chat.into()),
        };
        match self
            .runs
            .bindings
            .answer_gate(&args.run_id, answer, &approver)
            .await
        {
            Ok(RunReply::Done(after)) => {
                tracing::info!(event = "mcp_gate_answered_in_chat", run_id = %args.run_id, gate_phase = %asked.phase, decision = decision.as_str(), approver = %approver, caller = caller.class.as_str(), surface = "chat", "a person answered a run's gate in the chat");
                Ok(output(&json!({
                    "status": "decided",
                    "decision": decision.as_str(),
                    "approver": approver,
                    "surface": DecisionSurface::Chat.as_str(),
                    "run_id": args.run_id,
                    "gate_phase": asked.phase,
                    "flow_state": after,
                }))?)
            }
            // Refused by the run's state machine (a reason missing, a rework target that is not
            // earlier, …): the gate stays open; ask again.
            Ok(RunReply::Refused(refusal)) => Ok(run_refusal(&refusal)),
            Err(e) => Ok(failure(TOOL, &args.run_id, e)?),
        }
    }
}

/// The phases a rework at `gate` may go back to: the ones before it in execution order, when the
/// gate allows a rework at all.
fn rework_targets(state: &FlowStateView, gate: &GateView) -> Vec<String> {
    if !gate.allowed.contains(&GateDecisionKind::Rework) {
        return Vec::new();
    }
    state
        .phases
        .iter()
        .take_while(|p| p.id != gate.phase)
        .map(|p| p.id.clone())
        .collect()
}

#[async_trait::async_trait]
impl TypedTool for AwaitGate {
    const NAME: &'static str = TOOL;
    const TITLE: &'static str = "Bring a run's gate to the person";
    const DESCRIPTION: &'static str = "Wait for the run's next gate, then ask the person (elicitation) \
        with only the decisions the gate allows; their answer is recorded as theirs. You never \
        answer it yourself: a client that cannot ask gets the gate's details and nothing is \
        decided. Dismissing the question leaves the gate open.";
    const HINTS: ToolHints = ADDITIVE_WRITE;
    const GATE: ToolGate = ToolGate::Write {
        requires_approval: false,
    };
    // It only asks the person; what they answer is their decision, recorded as theirs. The
    // domain's rule for the caller's class is still asked (it lets a client task ask: the tool
    // decides nothing).
    const HOLDS_ITS_OWN_EFFECT: bool = true;
    type Args = AwaitGateArgs;

    async fn run(
        &self,
        caller: &CallerContext,
        facts: &CallFacts,
        args: AwaitGateArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        let key = asked_key(caller, &args.run_id);
        match &facts.answers {
            Some(answers) if asks_a_person(caller.class) => self.record(caller, &args, &key, answers).await,
            Some(_) | None => self.wait(caller, &args, key).await,
        }
    }
}
