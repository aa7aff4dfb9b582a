//! Per-field limits on what MetaForge stores, in one place, for the HTTP routes and the MCP tools
//! alike (issue 12, item 8).
//!
//! A request body or a tool's arguments are checked against these before they are parsed, so an
//! oversized field is refused naming the field, its size and the limit, and nothing is written. The body limit (`DEFAULT_BODY_LIMIT_BYTES`) caps a request as a whole; these cap what
//! one field may put into a ledger. Error bodies never echo more than [`MAX_ECHOED_CHARS`] of any
//! value. The size of a flow document (phases, deliverables) is the flow rules' cap, not this one.

use serde_json::Value;

/// The longest message or detail string an error body carries (longer ones are cut).
pub const MAX_ECHOED_CHARS: usize = 512;
/// A person's decision note, or a waiter's resolve reason (characters).
pub const MAX_NOTE_CHARS: usize = 4_000;
/// `loadsAndUse` of a proposal or a flow's context (characters).
pub const MAX_LOADS_AND_USE_CHARS: usize = 4_000;
/// The intent a proposal is generated from (characters).
pub const MAX_INTENT_CHARS: usize = 8_000;
/// One operation's rationale (characters).
pub const MAX_RATIONALE_CHARS: usize = 2_000;
/// One operation's value, as JSON (bytes).
pub const MAX_OPERATION_VALUE_BYTES: usize = 16_384;
/// Most operations one proposal may carry: the flow rule's own limit (one number, one place).
pub use metaforge_domain::flow::MAX_OPERATIONS;
/// A name: tool, template, phase, client, model, caller class (characters).
pub const MAX_NAME_CHARS: usize = 200;
/// A held call's arguments, as JSON (bytes).
pub const MAX_ARGUMENTS_BYTES: usize = 65_536;
/// A free-form context object (manufacturing context, budget, requirements), as JSON (bytes).
pub const MAX_CONTEXT_BYTES: usize = 65_536;
/// A person's chat message (characters).
pub const MAX_MESSAGE_CHARS: usize = 32_000;
/// The durable model selection (`provider:model`, characters).
pub const MAX_SELECTION_CHARS: usize = 200;
/// A twin work product's title or a decision's statement (characters).
pub const MAX_TWIN_TITLE_CHARS: usize = 500;
/// A twin work product's text content, hashed and kept with it (characters): small enough that
/// a held call's arguments stay within [`MAX_ARGUMENTS_BYTES`].
pub const MAX_TWIN_CONTENT_CHARS: usize = 32_000;
/// A twin work product's `uri` (characters).
pub const MAX_TWIN_URI_CHARS: usize = 2_000;
/// The extra properties of one twin node or edge, as JSON (bytes).
pub const MAX_TWIN_PROPERTIES_BYTES: usize = 16_384;
/// Most entries of a decision's `alternatives` or `about` list.
pub const MAX_TWIN_LIST_ITEMS: usize = 50;
/// A client's summary of the phase it did (characters): what the gate's reviewer reads.
pub const MAX_SUMMARY_CHARS: usize = 32_000;
/// What a client hands back beside its summary, as JSON (bytes).
pub const MAX_SUBMISSION_DETAILS_BYTES: usize = 65_536;

/// How a field is measured.
#[derive(Debug, Clone, Copy)]
enum Limit {
    /// A string's length in characters.
    Chars(usize),
    /// An array's length.
    Items(usize),
    /// Any value's compact JSON size in bytes.
    JsonBytes(usize),
}

/// One limit: on `field` (dotted path; `name[]` walks every element of an array) of the body of
/// requests to `route` (`{…}` matches one path segment), or of an MCP tool's arguments.
struct FieldLimit {
    route: &'static str,
    field: &'static str,
    limit: Limit,
}

const fn limit(route: &'static str, field: &'static str, limit: Limit) -> FieldLimit {
    FieldLimit { route, field, limit }
}

const PROPOSE: &str = "/v1/design-flows/propose";

/// Every stored field's limit, by route.
const FIELD_LIMITS: &[FieldLimit] = &[
    // Chat threads and their messages.
    limit("/v1/chat/threads", "title", Limit::Chars(MAX_NAME_CHARS)),
    limit("/v1/chat/threads", "project_id", Limit::Chars(MAX_NAME_CHARS)),
    limit(
        "/v1/chat/threads",
        "parent_session_id",
        Limit::Chars(MAX_NAME_CHARS),
    ),
    limit(
        "/v1/chat/threads/{id}/messages",
        "content",
        Limit::Chars(MAX_MESSAGE_CHARS),
    ),
    // Decisions and waiter resolutions.
    limit(
        "/v1/approvals/{id}/decision",
        "note",
        Limit::Chars(MAX_NOTE_CHARS),
    ),
    limit(
        "/v1/chat/tool_approvals/{id}",
        "note",
        Limit::Chars(MAX_NOTE_CHARS),
    ),
    limit(
        "/v1/chat/tool_approvals/{id}/resolve",
        "reason",
        Limit::Chars(MAX_NOTE_CHARS),
    ),
    // Parked holds.
    limit("/v1/chat/tool_approvals", "tool", Limit::Chars(MAX_NAME_CHARS)),
    limit("/v1/chat/tool_approvals", "caller", Limit::Chars(MAX_NAME_CHARS)),
    limit(
        "/v1/chat/tool_approvals",
        "arguments",
        Limit::JsonBytes(MAX_ARGUMENTS_BYTES),
    ),
    // Proposals.
    limit(PROPOSE, "intent", Limit::Chars(MAX_INTENT_CHARS)),
    limit(PROPOSE, "template", Limit::Chars(MAX_NAME_CHARS)),
    limit(PROPOSE, "loadsAndUse", Limit::Chars(MAX_LOADS_AND_USE_CHARS)),
    limit(PROPOSE, "loads_and_use", Limit::Chars(MAX_LOADS_AND_USE_CHARS)),
    limit(
        PROPOSE,
        "manufacturingContext",
        Limit::JsonBytes(MAX_CONTEXT_BYTES),
    ),
    limit(
        PROPOSE,
        "manufacturing_context",
        Limit::JsonBytes(MAX_CONTEXT_BYTES),
    ),
    limit(PROPOSE, "budget", Limit::JsonBytes(MAX_CONTEXT_BYTES)),
    limit(PROPOSE, "requirements", Limit::JsonBytes(MAX_CONTEXT_BYTES)),
    limit(PROPOSE, "caller.client", Limit::Chars(MAX_NAME_CHARS)),
    limit(PROPOSE, "caller.model", Limit::Chars(MAX_NAME_CHARS)),
    limit(PROPOSE, "operations", Limit::Items(MAX_OPERATIONS)),
    limit(PROPOSE, "operations[].op", Limit::Chars(MAX_NAME_CHARS)),
    limit(PROPOSE, "operations[].phase", Limit::Chars(MAX_NAME_CHARS)),
    limit(
        PROPOSE,
        "operations[].rationale",
        Limit::Chars(MAX_RATIONALE_CHARS),
    ),
    limit(
        PROPOSE,
        "operations[].value",
        Limit::JsonBytes(MAX_OPERATION_VALUE_BYTES),
    ),
    // A flow's context, where a flow is validated or saved.
    limit(
        "/v1/design-flows/versions",
        "context.loads_and_use",
        Limit::Chars(MAX_LOADS_AND_USE_CHARS),
    ),
    limit(
        "/v1/design-flows/versions",
        "context.loadsAndUse",
        Limit::Chars(MAX_LOADS_AND_USE_CHARS),
    ),
    limit(
        "/v1/design-flows/versions",
        "context.budget",
        Limit::JsonBytes(MAX_CONTEXT_BYTES),
    ),
    limit(
        "/v1/design-flows/validate",
        "context.loads_and_use",
        Limit::Chars(MAX_LOADS_AND_USE_CHARS),
    ),
    limit(
        "/v1/design-flows/validate",
        "context.loadsAndUse",
        Limit::Chars(MAX_LOADS_AND_USE_CHARS),
    ),
    // Design-flow runs: a start, a gate decision's or a cancel's reason, a client's hand-back.
    limit("/v1/runs", "flow_version_id", Limit::Chars(MAX_NAME_CHARS)),
    limit("/v1/runs", "template_id", Limit::Chars(MAX_NAME_CHARS)),
    limit("/v1/runs", "project_id", Limit::Chars(MAX_NAME_CHARS)),
    limit("/v1/runs", "intelligence", Limit::Chars(MAX_NAME_CHARS)),
    limit("/v1/runs/{id}/approval", "reason", Limit::Chars(MAX_NOTE_CHARS)),
    limit("/v1/runs/{id}/approval", "phase", Limit::Chars(MAX_NAME_CHARS)),
    limit(
        "/v1/runs/{id}/approval",
        "gate_phase",
        Limit::Chars(MAX_NAME_CHARS),
    ),
    limit("/v1/runs/{id}/cancel", "reason", Limit::Chars(MAX_NOTE_CHARS)),
    limit(
        "/v1/client-tasks/{id}/submit",
        "summary",
        Limit::Chars(MAX_SUMMARY_CHARS),
    ),
    limit(
        "/v1/client-tasks/{id}/submit",
        "details",
        Limit::JsonBytes(MAX_SUBMISSION_DETAILS_BYTES),
    ),
    // The durable selection.
    limit(
        "/v1/harness/selection",
        "selection",
        Limit::Chars(MAX_SELECTION_CHARS),
    ),
    // The twin's write tools (the MCP door's `twin.*`): what one commit may put into the twin.
    limit(TWIN_COMMIT_TOOL, "artifact", Limit::Chars(MAX_NAME_CHARS)),
    limit(TWIN_COMMIT_TOOL, "title", Limit::Chars(MAX_TWIN_TITLE_CHARS)),
    limit(TWIN_COMMIT_TOOL, "content", Limit::Chars(MAX_TWIN_CONTENT_CHARS)),
    limit(TWIN_COMMIT_TOOL, "content_hash", Limit::Chars(MAX_NAME_CHARS)),
    limit(TWIN_COMMIT_TOOL, "uri", Limit::Chars(MAX_TWIN_URI_CHARS)),
    limit(TWIN_COMMIT_TOOL, "node_id", Limit::Chars(MAX_NAME_CHARS)),
    limit(
        TWIN_COMMIT_TOOL,
        "properties",
        Limit::JsonBytes(MAX_TWIN_PROPERTIES_BYTES),
    ),
    limit(TWIN_GEOMETRY_TOOL, "artifact", Limit::Chars(MAX_NAME_CHARS)),
    limit(TWIN_GEOMETRY_TOOL, "title", Limit::Chars(MAX_TWIN_TITLE_CHARS)),
    limit(
        TWIN_GEOMETRY_TOOL,
        "content",
        Limit::Chars(MAX_TWIN_CONTENT_CHARS),
    ),
    limit(TWIN_GEOMETRY_TOOL, "content_hash", Limit::Chars(MAX_NAME_CHARS)),
    limit(TWIN_GEOMETRY_TOOL, "uri", Limit::Chars(MAX_TWIN_URI_CHARS)),
    limit(TWIN_GEOMETRY_TOOL, "node_id", Limit::Chars(MAX_NAME_CHARS)),
    limit(
        TWIN_GEOMETRY_TOOL,
        "properties",
        Limit::JsonBytes(MAX_TWIN_PROPERTIES_BYTES),
    ),
    limit(TWIN_DECISION_TOOL, "decision", Limit::Chars(MAX_TWIN_TITLE_CHARS)),
    limit(TWIN_DECISION_TOOL, "rationale", Limit::Chars(MAX_NOTE_CHARS)),
    limit(
        TWIN_DECISION_TOOL,
        "alternatives",
        Limit::Items(MAX_TWIN_LIST_ITEMS),
    ),
    limit(
        TWIN_DECISION_TOOL,
        "alternatives[]",
        Limit::Chars(MAX_RATIONALE_CHARS),
    ),
    limit(TWIN_DECISION_TOOL, "about", Limit::Items(MAX_TWIN_LIST_ITEMS)),
    limit(TWIN_DECISION_TOOL, "about[]", Limit::Chars(MAX_NAME_CHARS)),
    limit(TWIN_LINK_TOOL, "from", Limit::Chars(MAX_NAME_CHARS)),
    limit(TWIN_LINK_TOOL, "to", Limit::Chars(MAX_NAME_CHARS)),
    limit(
        TWIN_LINK_TOOL,
        "properties",
        Limit::JsonBytes(MAX_TWIN_PROPERTIES_BYTES),
    ),
    // The same proposal through the MCP door (the in-process sidecar's `flow.propose`).
    limit(FLOW_PROPOSE_TOOL, "intent", Limit::Chars(MAX_INTENT_CHARS)),
    limit(FLOW_PROPOSE_TOOL, "template_id", Limit::Chars(MAX_NAME_CHARS)),
    // The HTTP route's spelling, which the tool accepts as an alias of `template_id`.
    limit(FLOW_PROPOSE_TOOL, "template", Limit::Chars(MAX_NAME_CHARS)),
    limit(FLOW_PROPOSE_TOOL, "operations", Limit::Items(MAX_OPERATIONS)),
    limit(FLOW_PROPOSE_TOOL, "operations[].op", Limit::Chars(MAX_NAME_CHARS)),
    limit(
        FLOW_PROPOSE_TOOL,
        "operations[].phase",
        Limit::Chars(MAX_NAME_CHARS),
    ),
    limit(
        FLOW_PROPOSE_TOOL,
        "operations[].rationale",
        Limit::Chars(MAX_RATIONALE_CHARS),
    ),
    limit(
        FLOW_PROPOSE_TOOL,
        "operations[].value",
        Limit::JsonBytes(MAX_OPERATION_VALUE_BYTES),
    ),
    limit(
        FLOW_PROPOSE_TOOL,
        "context.loads_and_use",
        Limit::Chars(MAX_LOADS_AND_USE_CHARS),
    ),
    limit(
        FLOW_PROPOSE_TOOL,
        "context.loadsAndUse",
        Limit::Chars(MAX_LOADS_AND_USE_CHARS),
    ),
    limit(
        FLOW_PROPOSE_TOOL,
        "context.manufacturing_context",
        Limit::JsonBytes(MAX_CONTEXT_BYTES),
    ),
    limit(
        FLOW_PROPOSE_TOOL,
        "context.budget",
        Limit::JsonBytes(MAX_CONTEXT_BYTES),
    ),
    limit(FLOW_PROPOSE_TOOL, "answers", Limit::JsonBytes(MAX_CONTEXT_BYTES)),
    // The run tools through the MCP door: the limits of their HTTP routes (`/v1/runs`, the gate
    // answer — checked on the person's answers `flow.await_gate` relays — and the submission).
    limit(START_RUN_TOOL, "flow_version_id", Limit::Chars(MAX_NAME_CHARS)),
    limit(START_RUN_TOOL, "template_id", Limit::Chars(MAX_NAME_CHARS)),
    limit(START_RUN_TOOL, "template", Limit::Chars(MAX_NAME_CHARS)),
    limit(START_RUN_TOOL, "project_id", Limit::Chars(MAX_NAME_CHARS)),
    limit(START_RUN_TOOL, "intelligence", Limit::Chars(MAX_NAME_CHARS)),
    limit(AWAIT_GATE_TOOL, "decision", Limit::Chars(MAX_NAME_CHARS)),
    limit(AWAIT_GATE_TOOL, "reason", Limit::Chars(MAX_NOTE_CHARS)),
    limit(AWAIT_GATE_TOOL, "rework_phase", Limit::Chars(MAX_NAME_CHARS)),
    limit(SUBMIT_TOOL, "summary", Limit::Chars(MAX_SUMMARY_CHARS)),
    limit(
        SUBMIT_TOOL,
        "details",
        Limit::JsonBytes(MAX_SUBMISSION_DETAILS_BYTES),
    ),
];

/// `flow.start_run`: a run request through the MCP door.
const START_RUN_TOOL: &str = "flow.start_run";
/// `flow.await_gate`: the person's answers it relays as a gate decision.
const AWAIT_GATE_TOOL: &str = "flow.await_gate";
/// `phase.submit`: a client's hand-back of a phase.
const SUBMIT_TOOL: &str = "phase.submit";

/// The MCP tool whose stored arguments are capped like the HTTP route's body.
const FLOW_PROPOSE_TOOL: &str = "flow.propose";
/// The twin's write tools, whose arguments become twin content (and a held call's record).
const TWIN_COMMIT_TOOL: &str = "twin.commit_work_product";
const TWIN_GEOMETRY_TOOL: &str = "twin.commit_geometry";
const TWIN_DECISION_TOOL: &str = "twin.record_decision";
const TWIN_LINK_TOOL: &str = "twin.link";

/// A field over its limit: which one, its size and the limit (never its value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field '{field}' is {actual} {unit}; the limit is {max}")]
pub struct FieldTooLarge {
    /// The concrete path of the field (`operations[3].rationale`).
    pub field: String,
    /// The limit.
    pub max: usize,
    /// The field's size.
    pub actual: usize,
    /// What the sizes count (`characters`, `items`, `bytes of JSON`).
    pub unit: &'static str,
}

/// Checks an MCP tool's arguments against the same limits as the HTTP route's body.
pub fn check_tool_arguments(
    tool: &str,
    arguments: &serde_json::Map<String, Value>,
) -> Result<(), FieldTooLarge> {
    // Most tools have no limits: their arguments are not copied to be walked.
    if !FIELD_LIMITS.iter().any(|rule| route_matches(rule.route, tool)) {
        return Ok(());
    }
    check(tool, &Value::Object(arguments.clone()))
}

fn route_matches(pattern: &str, path: &str) -> bool {
    let mut want = pattern.split('/');
    let mut got = path.split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some(w), Some(g)) if w == g || (w.starts_with('{') && !g.is_empty()) => {}
            _ => return false,
        }
    }
}

/// Every value at `field` under `value`, with its concrete path (`operations[3].rationale`).
fn values_at<'a>(value: &'a Value, field: &str, prefix: String, out: &mut Vec<(String, &'a Value)>) {
    let (head, rest) = field.split_once('.').map_or((field, None), |(h, r)| (h, Some(r)));
    let (name, each) = head.strip_suffix("[]").map_or((head, false), |name| (name, true));
    let Some(found) = value.get(name) else {
        return;
    };
    let path = if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    };
    let visit = |child: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>| match rest {
        Some(rest) => values_at(child, rest, path, out),
        None => out.push((path, child)),
    };
    if each {
        if let Value::Array(items) = found {
            for (i, item) in items.iter().enumerate() {
                visit(item, format!("{path}[{i}]"), out);
            }
        }
    } else {
        visit(found, path, out);
    }
}

/// The size of `value` as `limit` measures it; `None` when the limit does not apply to its type
/// (a type error is the parser's to report).
fn measure(value: &Value, limit: Limit) -> Option<usize> {
    match (limit, value) {
        (Limit::Chars(_), Value::String(s)) => Some(s.chars().count()),
        (Limit::Items(_), Value::Array(items)) => Some(items.len()),
        (Limit::JsonBytes(_), Value::Null) => None,
        (Limit::JsonBytes(_), v) => serde_json::to_string(v).ok().map(|s| s.len()),
        _ => None,
    }
}

/// Checks a request body (or a tool's arguments) against the limits of the route (or tool) it
/// was sent to: the first field over its limit is named with its size and the limit.
pub fn check(path: &str, body: &Value) -> Result<(), FieldTooLarge> {
    for rule in FIELD_LIMITS.iter().filter(|r| route_matches(r.route, path)) {
        let mut found = Vec::new();
        values_at(body, rule.field, String::new(), &mut found);
        for (field, value) in found {
            let (max, unit) = match rule.limit {
                Limit::Chars(n) => (n, "characters"),
                Limit::Items(n) => (n, "items"),
                Limit::JsonBytes(n) => (n, "bytes of JSON"),
            };
            if let Some(actual) = measure(value, rule.limit).filter(|&size| size > max) {
                return Err(FieldTooLarge {
                    field,
                    max,
                    actual,
                    unit,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn routes_match_by_segment_with_placeholders() {
        assert!(route_matches(
            "/v1/approvals/{id}/decision",
            "/v1/approvals/abc/decision"
        ));
        assert!(!route_matches(
            "/v1/approvals/{id}/decision",
            "/v1/approvals//decision"
        ));
        assert!(!route_matches(
            "/v1/chat/tool_approvals/{id}",
            "/v1/chat/tool_approvals/a/resolve"
        ));
        assert!(route_matches(
            "/v1/chat/tool_approvals",
            "/v1/chat/tool_approvals"
        ));
    }

    #[test]
    fn the_first_oversized_field_is_named_with_its_index_and_never_echoed() {
        let body = json!({"operations": [
            {"op": "drop_phase", "rationale": "fine"},
            {"op": "drop_phase", "rationale": "x".repeat(MAX_RATIONALE_CHARS + 1)},
        ]});
        let err = check(PROPOSE, &body).unwrap_err();
        assert_eq!(err.field, "operations[1].rationale");
        assert!(!err.to_string().contains("xxxx"));
    }

    #[test]
    fn run_reasons_and_a_clients_summary_are_capped_on_their_routes() {
        let reason = json!({"decision": "retry", "reason": "r".repeat(MAX_NOTE_CHARS + 1)});
        let err = check("/v1/runs/run-1/approval", &reason).unwrap_err();
        assert_eq!((err.field.as_str(), err.max), ("reason", MAX_NOTE_CHARS));
        let cancel = json!({"reason": "r".repeat(MAX_NOTE_CHARS + 1)});
        assert!(check("/v1/runs/run-1/cancel", &cancel).is_err());
        let summary = json!({"summary": "s".repeat(MAX_SUMMARY_CHARS + 1)});
        let err = check("/v1/client-tasks/r:p:1/submit", &summary).unwrap_err();
        assert_eq!(err.field, "summary");
        let start = json!({"template_id": "t".repeat(MAX_NAME_CHARS + 1)});
        assert_eq!(check("/v1/runs", &start).unwrap_err().field, "template_id");
        assert!(check("/v1/runs", &json!({"template_id": "design_v1"})).is_ok());
    }

    #[test]
    fn sizes_at_the_limit_pass_and_other_routes_are_not_checked() {
        let at_limit = json!({"note": "n".repeat(MAX_NOTE_CHARS)});
        assert!(check("/v1/approvals/1/decision", &at_limit).is_ok());
        let over = json!({"note": "n".repeat(MAX_NOTE_CHARS + 1)});
        assert!(check("/v1/approvals/1/decision", &over).is_err());
        assert!(check("/v1/chat/completions", &over).is_ok());
        let many = json!({"operations": vec![json!({}); MAX_OPERATIONS + 1]});
        let err = check(PROPOSE, &many).unwrap_err();
        assert_eq!(err.field, "operations");
    }
}
