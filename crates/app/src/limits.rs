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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// A string's length in characters.
    Chars(usize),
    /// An array's length.
    Items(usize),
    /// Any value's compact JSON size in bytes.
    JsonBytes(usize),
}

/// One limit on `field` of a body or of a tool's arguments (dotted path; `name[]` walks every
/// element of an array).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLimit {
    field: &'static str,
    limit: Limit,
}

const fn chars(field: &'static str, max: usize) -> FieldLimit {
    FieldLimit {
        field,
        limit: Limit::Chars(max),
    }
}

const fn items(field: &'static str, max: usize) -> FieldLimit {
    FieldLimit {
        field,
        limit: Limit::Items(max),
    }
}

const fn json_bytes(field: &'static str, max: usize) -> FieldLimit {
    FieldLimit {
        field,
        limit: Limit::JsonBytes(max),
    }
}

/// The limits of one body: the groups of fields it carries. A route names its groups in
/// [`ROUTES`]; an MCP tool's argument type names its own (`TypedTool::LIMITS` in the sidecar),
/// so a tool that takes a route's body takes the route's group, written once.
pub type Limits = &'static [&'static [FieldLimit]];

/// A chat thread.
pub const THREAD: &[FieldLimit] = &[
    chars("title", MAX_NAME_CHARS),
    chars("project_id", MAX_NAME_CHARS),
    chars("parent_session_id", MAX_NAME_CHARS),
];
/// A person's chat message.
pub const MESSAGE: &[FieldLimit] = &[chars("content", MAX_MESSAGE_CHARS)];
/// A decision's note.
pub const NOTE: &[FieldLimit] = &[chars("note", MAX_NOTE_CHARS)];
/// A resolve's, a gate decision's or a cancel's reason.
pub const REASON: &[FieldLimit] = &[chars("reason", MAX_NOTE_CHARS)];
/// A parked hold.
pub const PARKED_HOLD: &[FieldLimit] = &[
    chars("tool", MAX_NAME_CHARS),
    chars("caller", MAX_NAME_CHARS),
    json_bytes("arguments", MAX_ARGUMENTS_BYTES),
];
/// A proposal request's own fields, as the HTTP route spells them.
pub const PROPOSAL_REQUEST: &[FieldLimit] = &[
    chars("intent", MAX_INTENT_CHARS),
    chars("template", MAX_NAME_CHARS),
    chars("loadsAndUse", MAX_LOADS_AND_USE_CHARS),
    chars("loads_and_use", MAX_LOADS_AND_USE_CHARS),
    json_bytes("manufacturingContext", MAX_CONTEXT_BYTES),
    json_bytes("manufacturing_context", MAX_CONTEXT_BYTES),
    json_bytes("budget", MAX_CONTEXT_BYTES),
    json_bytes("requirements", MAX_CONTEXT_BYTES),
    chars("caller.client", MAX_NAME_CHARS),
    chars("caller.model", MAX_NAME_CHARS),
];
/// A proposal's operations (the HTTP route's and `flow.propose`'s).
pub const PROPOSAL_OPERATIONS: &[FieldLimit] = &[
    items("operations", MAX_OPERATIONS),
    chars("operations[].op", MAX_NAME_CHARS),
    chars("operations[].phase", MAX_NAME_CHARS),
    chars("operations[].rationale", MAX_RATIONALE_CHARS),
    json_bytes("operations[].value", MAX_OPERATION_VALUE_BYTES),
];
/// `flow.propose`'s own fields (the template under either name, the context object, answers).
pub const PROPOSAL_TOOL: &[FieldLimit] = &[
    chars("intent", MAX_INTENT_CHARS),
    chars("template_id", MAX_NAME_CHARS),
    chars("template", MAX_NAME_CHARS),
    json_bytes("context.manufacturing_context", MAX_CONTEXT_BYTES),
    json_bytes("answers", MAX_CONTEXT_BYTES),
];
/// A flow's context: its loads and use.
pub const FLOW_LOADS: &[FieldLimit] = &[
    chars("context.loads_and_use", MAX_LOADS_AND_USE_CHARS),
    chars("context.loadsAndUse", MAX_LOADS_AND_USE_CHARS),
];
/// A flow's context: its budget.
pub const FLOW_BUDGET: &[FieldLimit] = &[json_bytes("context.budget", MAX_CONTEXT_BYTES)];
/// A run's start.
pub const RUN_START: &[FieldLimit] = &[
    chars("flow_version_id", MAX_NAME_CHARS),
    chars("template_id", MAX_NAME_CHARS),
    chars("project_id", MAX_NAME_CHARS),
    chars("intelligence", MAX_NAME_CHARS),
];
/// The template under the HTTP route's other name, which `flow.start_run` also takes.
pub const RUN_START_TEMPLATE: &[FieldLimit] = &[chars("template", MAX_NAME_CHARS)];
/// A gate decision's phases.
pub const GATE_PHASES: &[FieldLimit] = &[
    chars("phase", MAX_NAME_CHARS),
    chars("gate_phase", MAX_NAME_CHARS),
];
/// A person's answers to a gate question (`flow.await_gate`).
pub const GATE_ANSWERS: &[FieldLimit] = &[
    chars("decision", MAX_NAME_CHARS),
    chars("reason", MAX_NOTE_CHARS),
    chars("rework_phase", MAX_NAME_CHARS),
];
/// A client's hand-back of a phase.
pub const SUBMISSION: &[FieldLimit] = &[
    chars("summary", MAX_SUMMARY_CHARS),
    json_bytes("details", MAX_SUBMISSION_DETAILS_BYTES),
];
/// The durable model selection.
pub const SELECTION: &[FieldLimit] = &[chars("selection", MAX_SELECTION_CHARS)];
/// A twin work product (`twin.commit_work_product`, `twin.commit_geometry`): what one commit
/// may put into the twin.
pub const TWIN_WORK_PRODUCT: &[FieldLimit] = &[
    chars("artifact", MAX_NAME_CHARS),
    chars("title", MAX_TWIN_TITLE_CHARS),
    chars("content", MAX_TWIN_CONTENT_CHARS),
    chars("content_hash", MAX_NAME_CHARS),
    chars("uri", MAX_TWIN_URI_CHARS),
    chars("node_id", MAX_NAME_CHARS),
    json_bytes("properties", MAX_TWIN_PROPERTIES_BYTES),
];
/// A twin decision (`twin.record_decision`).
pub const TWIN_DECISION: &[FieldLimit] = &[
    chars("decision", MAX_TWIN_TITLE_CHARS),
    chars("rationale", MAX_NOTE_CHARS),
    items("alternatives", MAX_TWIN_LIST_ITEMS),
    chars("alternatives[]", MAX_RATIONALE_CHARS),
    items("about", MAX_TWIN_LIST_ITEMS),
    chars("about[]", MAX_NAME_CHARS),
];
/// A twin link (`twin.link`).
pub const TWIN_LINK: &[FieldLimit] = &[
    chars("from", MAX_NAME_CHARS),
    chars("to", MAX_NAME_CHARS),
    json_bytes("properties", MAX_TWIN_PROPERTIES_BYTES),
];

const PROPOSE: &str = "/v1/design-flows/propose";

/// Every HTTP route whose body stores something, and its limits (`{…}` matches one segment).
const ROUTES: &[(&str, Limits)] = &[
    ("/v1/chat/threads", &[THREAD]),
    ("/v1/chat/threads/{id}/messages", &[MESSAGE]),
    ("/v1/approvals/{id}/decision", &[NOTE]),
    ("/v1/chat/tool_approvals/{id}", &[NOTE]),
    ("/v1/chat/tool_approvals/{id}/resolve", &[REASON]),
    ("/v1/chat/tool_approvals", &[PARKED_HOLD]),
    (PROPOSE, &[PROPOSAL_REQUEST, PROPOSAL_OPERATIONS]),
    ("/v1/design-flows/versions", &[FLOW_LOADS, FLOW_BUDGET]),
    ("/v1/design-flows/validate", &[FLOW_LOADS]),
    ("/v1/runs", &[RUN_START]),
    ("/v1/runs/{id}/approval", &[REASON, GATE_PHASES]),
    ("/v1/runs/{id}/cancel", &[REASON]),
    ("/v1/client-tasks/{id}/submit", &[SUBMISSION]),
    ("/v1/harness/selection", &[SELECTION]),
];

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

/// Checks a tool's arguments against its limits (its argument type's groups).
///
/// # Errors
/// The first field over its limit.
pub fn check_arguments(
    limits: Limits,
    arguments: &serde_json::Map<String, Value>,
) -> Result<(), FieldTooLarge> {
    // Most tools have no limits: their arguments are not copied to be walked.
    if limits.is_empty() {
        return Ok(());
    }
    check_fields(limits, &Value::Object(arguments.clone()))
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

/// Checks a request body against the limits of the route it was sent to: the first field over
/// its limit is named with its size and the limit.
///
/// # Errors
/// The first field over its limit.
pub fn check(path: &str, body: &Value) -> Result<(), FieldTooLarge> {
    for (_, limits) in ROUTES.iter().filter(|(route, _)| route_matches(route, path)) {
        check_fields(limits, body)?;
    }
    Ok(())
}

/// Checks `body` against every limit of `limits`, in order.
///
/// # Errors
/// The first field over its limit.
pub fn check_fields(limits: Limits, body: &Value) -> Result<(), FieldTooLarge> {
    for rule in limits.iter().flat_map(|group| group.iter()) {
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
