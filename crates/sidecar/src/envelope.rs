//! What the sidecar's tools answer an agent, in one place: the tool-level error envelopes, a held
//! proposal, a run refusal, and the questions of a needs-input answer. Leaf functions over port types only, so
//! every tool (and both deployment modes) answers the same thing in the same shape.

use metaforge_api::{HeldProposal, RefusalKind, RunRefused};
use metaforge_domain::flow::AskedQuestion;
use metaforge_ports::{HostCallOutcome, InputQuestion, PortError, PortErrorKind, ToolOutput};
use serde_json::{Value, json};

use crate::args::ArgError;

/// What a tool's body can fail with: an argument it cannot use (answered as the
/// `invalid_arguments` envelope at the tool boundary), or a port failure (a protocol-level error).
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// A bad argument; nothing was done.
    #[error(transparent)]
    Arg(#[from] ArgError),
    /// A port failed.
    #[error(transparent)]
    Port(#[from] PortError),
}

/// The tool boundary: the one place an [`ArgError`] becomes the `invalid_arguments` envelope.
pub fn at_boundary(
    tool: &str,
    result: Result<HostCallOutcome, ToolError>,
) -> Result<HostCallOutcome, PortError> {
    match result {
        Ok(outcome) => Ok(outcome),
        Err(ToolError::Arg(err)) => Ok(invalid_arguments(tool, &err)),
        Err(ToolError::Port(err)) => Err(err),
    }
}

/// A tool-level refusal naming the field, in the MET-569 envelope shape.
pub fn invalid_arguments(tool: &str, err: &ArgError) -> HostCallOutcome {
    HostCallOutcome::Done(ToolOutput::error(json!({
        "status": "error", "error": "invalid_arguments", "tool": tool,
        "validation_errors": [err.to_string()],
        "hint": "fix the arguments and call again; the tool was NOT executed"
    })))
}

/// The gating rules refused the call for this caller.
pub fn refused(tool: &str, reason: &str) -> HostCallOutcome {
    HostCallOutcome::Done(ToolOutput::error(json!({
        "status": "refused", "error": "refused", "tool": tool, "reason": reason,
    })))
}

/// The flow service refused the proposal (nothing was stored): its code from the one code table,
/// its message, and its details spread beside them (`refused`, `violations`, `diff`, a limit's
/// `field` …) — the same body whether the refusal was made in process or by the gateway.
pub fn refusal(code: &str, message: &str, details: Option<&Value>) -> HostCallOutcome {
    refusal_as("invalid", code, message, details)
}

/// The run service refused the request (nothing was recorded): `invalid` (a field) or `conflict`
/// (the run's state does not allow it), its code from the service's one code table, its message
/// and its details spread beside them (the field, the decisions the open gate allows …) — the same
/// body in process and through the gateway.
pub fn run_refusal(refused: &RunRefused) -> HostCallOutcome {
    let status = match refused.kind {
        RefusalKind::Invalid => "invalid",
        RefusalKind::Conflict => "conflict",
    };
    refusal_as(status, &refused.code, &refused.message, refused.details.as_ref())
}

/// A port failure a tool answers as a tool-level error the agent can act on (`conflict`: the
/// record is not in the state the call needs; `unavailable`: the engine or the gateway cannot be
/// reached; `invalid`: the bindings refused the request); `None` for failures that are protocol
/// errors (corrupt records, internal errors).
pub fn port_failure(tool: &str, err: &PortError) -> Option<HostCallOutcome> {
    let status = match err.kind {
        PortErrorKind::Conflict => "conflict",
        PortErrorKind::Unavailable => "unavailable",
        PortErrorKind::Invalid => "invalid",
        PortErrorKind::NotFound | PortErrorKind::Corrupt | PortErrorKind::Internal => return None,
    };
    Some(HostCallOutcome::Done(ToolOutput::error(json!({
        "status": status, "error": status, "tool": tool, "message": err.message,
        "hint": "nothing was done",
    }))))
}

fn refusal_as(status: &str, code: &str, message: &str, details: Option<&Value>) -> HostCallOutcome {
    let mut body = serde_json::Map::new();
    body.insert("status".to_owned(), json!(status));
    body.insert("error".to_owned(), json!(code));
    body.insert("message".to_owned(), json!(message));
    match details {
        Some(Value::Object(details)) => {
            for (key, value) in details {
                body.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
        Some(
            other @ (Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Array(_)),
        ) => {
            body.insert("details".to_owned(), other.clone());
        }
        None => {}
    }
    HostCallOutcome::Done(ToolOutput::error(Value::Object(body)))
}

/// The bindings refused the request itself (the gateway answered 4xx other than a refusal).
pub fn invalid_proposal(message: &str) -> HostCallOutcome {
    HostCallOutcome::Done(ToolOutput::error(json!({
        "status": "invalid", "error": "invalid_proposal", "message": message,
    })))
}

/// The server's generator cannot run: nothing was proposed.
pub fn generator_unavailable(message: &str) -> HostCallOutcome {
    HostCallOutcome::Done(ToolOutput::error(json!({
        "status": "unavailable", "error": "generator_unavailable", "message": message,
    })))
}

/// No record with this id.
pub fn not_found(id: &str, message: &str) -> HostCallOutcome {
    HostCallOutcome::Done(ToolOutput::error(
        json!({"status": "error", "error": "not_found", "id": id, "message": message}),
    ))
}

/// The result a held proposal gives the agent, whichever bindings stored it.
pub fn held_proposal_output(held: &HeldProposal) -> Value {
    json!({
        "status": "proposed",
        "held_for_approval": true,
        "approval_id": held.approval_id,
        "flow_version_id": held.flow_version_id,
        "template_id": held.template_id,
        "content_hash": held.content_hash,
        "diff": held.diff,
        "applied": held.applied,
        "skipped": held.skipped,
        "generated_by": held.generated_by,
        "open_questions": held.open_questions,
        "note": "A person approves or rejects this in the MetaForge approvals queue; no MCP tool decides it.",
    })
}

/// The questions as the transport asks them (id, prompt, the allowed answers).
pub fn input_questions(questions: &[AskedQuestion]) -> Vec<InputQuestion> {
    questions
        .iter()
        .map(|q| InputQuestion {
            id: q.id.clone(),
            prompt: q.question.clone(),
            choices: q.options.clone().unwrap_or_default(),
            optional: false,
        })
        .collect()
}

/// The hint every needs-input answer ends with.
const ANSWER_HINT: &str =
    "call flow.propose again with the same arguments plus answers: {question id: answer}";

/// needs_input before tailoring `template_id` with the caller's operations.
pub fn template_needs_input(template_id: &str, questions: &[AskedQuestion]) -> HostCallOutcome {
    let asked = input_questions(questions);
    HostCallOutcome::NeedsInput {
        message: format!(
            "Before tailoring {template_id}, MetaForge needs {} answer(s).",
            asked.len()
        ),
        questions: asked,
        result: ToolOutput::json(json!({
            "status": "needs_input",
            "template_id": template_id,
            "questions": questions,
            "hint": ANSWER_HINT,
        })),
    }
}

/// needs_input from the generator path, in the wire form of its questions (`id`, `question`,
/// `options`, `source`).
pub fn generated_needs_input(questions: &[AskedQuestion], notes: &[String]) -> HostCallOutcome {
    let asked = input_questions(questions);
    HostCallOutcome::NeedsInput {
        message: format!(
            "Before MetaForge's generator tailors a flow, it needs {} answer(s). Ask the person; do not answer them yourself.",
            asked.len()
        ),
        questions: asked,
        result: ToolOutput::json(json!({
            "status": "needs_input",
            "questions": questions,
            "notes": notes,
            "hint": ANSWER_HINT,
        })),
    }
}
