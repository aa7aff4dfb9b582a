//! Post-turn grounding guard (FORGE-98) and claim-specific grounding (FORGE-520).
//!
//! Four deterministic checks on a model's own final reply, no model call:
//! 1. no tool call: a completion verb and no successful tool call at all (the reply then gets
//!    only this banner, and it is the only one that marks a design-flow phase ungrounded);
//! 2. twin write: the reply claims a twin write and no twin write call succeeded;
//! 3. node id: the reply quotes a node id no successful call returned and the turn's evidence
//!    does not contain; FreeCAD session object ids are never grounded;
//! 4. numeric: the reply states a quantity a tool of the turn computed with a value no tool
//!    returned ([`crate::numeric_grounding`]).
//!
//! The checks lean toward over-flagging: a false positive costs one banner line, a false
//! negative is a fabricated design action a person believes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::numeric_grounding::{NumericMismatch, numeric_mismatches};
use crate::tool_naming::same_tool;

/// Prepended when the reply claims an action and no tool call succeeded this turn.
pub const UNGROUNDED_BANNER: &str = "⚠ No tool calls were made this turn, so none of the actions described below were actually performed. Treat them as unverified.";

/// Prepended when the reply claims a twin write and no twin write call succeeded this turn.
pub const NO_TWIN_COMMIT_BANNER: &str = "⚠ No twin commit happened this turn, so nothing described below as saved or committed is in the digital twin.";

/// Prepended (followed by each number and what the tools returned) when the reply states a
/// quantity no tool of the turn returned ([`crate::numeric_grounding`]).
pub const NUMERIC_MISMATCH_BANNER: &str = "⚠ Numbers that differ from what the tools returned this turn";

/// Prepended (followed by the ids) when the reply quotes node ids no successful call returned.
pub const UNVERIFIED_NODE_ID_BANNER: &str =
    "⚠ Unverified node id(s), not returned by any successful tool call this turn";

/// The gate a persistent twin write declares.
pub const GATE_TWIN_WRITE: &str = "twin_write";

/// The gate a project mutation declares.
pub const GATE_PROJECT_WRITE: &str = "project_write";

/// The static twin-write tools, used when no registry is passed; each also counts under its
/// provider names (`mcp_twin_commit_geometry`, see [`crate::tool_naming::names_for_id`]).
pub const GATED_TWIN_WRITE_TOOLS: &[&str] = &[
    "twin.commit_geometry",
    "twin.record_decision",
    "twin.record_constraint_set",
    "twin.record_document",
    "twin.propose_change",
    "twin.stage_work_product_file",
];

/// Words that claim a design action was performed (FORGE-98).
pub const COMPLETION_VERBS: &[&str] = &[
    "assembled",
    "created",
    "committed",
    "recorded",
    "generated",
    "built",
    "added",
    "designed",
    "exported",
];

/// One step of the turn: a tool call (or none) and its outcome.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TurnStep {
    /// The tool called; `None` for a step that made no call.
    #[serde(default)]
    pub tool: Option<String>,
    /// The call's arguments.
    #[serde(default)]
    pub arguments: Value,
    /// The call's result.
    #[serde(default)]
    pub result: Value,
    /// The error the call raised, if any.
    #[serde(default)]
    pub error: Option<String>,
}

impl TurnStep {
    /// A call was made and raised no error (the FORGE-98 definition).
    pub fn made_call_without_error(&self) -> bool {
        self.tool.is_some() && self.error.is_none()
    }

    /// A call was made, raised no error and did not return an error envelope
    /// (`status: "error"` or `success: false`).
    pub fn succeeded(&self) -> bool {
        self.made_call_without_error() && !is_error_envelope(&self.result)
    }
}

/// True for `{"status": "error"}` or `{"success": false}` results.
pub fn is_error_envelope(result: &Value) -> bool {
    result.get("status").and_then(Value::as_str) == Some("error")
        || result.get("success").and_then(Value::as_bool) == Some(false)
}

/// The part of a tool's registry spec the twin-write check reads.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RegistryEntry {
    /// Gates the tool declares.
    #[serde(default)]
    pub required_gates: Vec<String>,
}

/// What the checks read: the reply, the turn's steps, the evidence the model was given before the
/// turn (user message, system prompt, history, brief, project id) and, optionally, the registry.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GroundingInput {
    /// The model's own final text.
    pub reply: String,
    /// The turn's steps.
    #[serde(default)]
    pub steps: Vec<TurnStep>,
    /// Everything the model was given before the turn ran.
    #[serde(default)]
    pub context_text: Option<String>,
    /// Tool name → spec (keyed by registry id or provider name; a step matches either); without
    /// it the static twin-write set is used.
    #[serde(default)]
    pub registry: Option<BTreeMap<String, RegistryEntry>>,
}

/// Which banner a check raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Banner {
    /// [`UNGROUNDED_BANNER`].
    Ungrounded,
    /// [`NO_TWIN_COMMIT_BANNER`].
    NoTwinCommit,
    /// [`UNVERIFIED_NODE_ID_BANNER`].
    UnverifiedNodeId,
    /// [`NUMERIC_MISMATCH_BANNER`].
    NumericMismatch,
}

impl Banner {
    /// The metric label of `metaforge_chat_ungrounded_claim_total{kind}`.
    pub fn metric_kind(self) -> MetricKind {
        match self {
            Self::Ungrounded => MetricKind::NoToolCall,
            Self::NoTwinCommit => MetricKind::TwinWrite,
            Self::UnverifiedNodeId => MetricKind::NodeId,
            Self::NumericMismatch => MetricKind::Numeric,
        }
    }
}

/// The `kind` label of `metaforge_chat_ungrounded_claim_total` and the `chat_ungrounded_claim` log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricKind {
    /// The FORGE-98 check.
    NoToolCall,
    /// The twin-write claim check.
    TwinWrite,
    /// The node-id check.
    NodeId,
    /// The numeric check.
    Numeric,
}

impl MetricKind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoToolCall => "no_tool_call",
            Self::TwinWrite => "twin_write",
            Self::NodeId => "node_id",
            Self::Numeric => "numeric",
        }
    }
}

/// The verdict on one reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroundingReport {
    /// Any check fired.
    pub flagged: bool,
    /// The banners raised, in the order they are prepended.
    pub banners: Vec<Banner>,
    /// Node ids no successful call returned, in order of appearance.
    pub unverified_ids: Vec<String>,
    /// Stated quantities no tool of the turn returned, in order of appearance.
    #[serde(default)]
    pub numeric: Vec<NumericMismatch>,
    /// One metric kind per banner.
    pub metric_kinds: Vec<MetricKind>,
    /// The reply with the banners prepended (unchanged when nothing fired).
    pub text: String,
}

impl GroundingReport {
    /// Only the no-tool-call banner marks a design-flow phase ungrounded.
    pub fn is_ungrounded(&self) -> bool {
        self.banners.contains(&Banner::Ungrounded)
    }
}

fn re(pattern: &str) -> Option<Regex> {
    Regex::new(pattern).ok()
}

static WORD: LazyLock<Option<Regex>> = LazyLock::new(|| re(r"[A-Za-z']+"));
static UUID: LazyLock<Option<Regex>> =
    LazyLock::new(|| re(r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"));
static ID_AFTER_LABEL: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(
        r#"(?i)\b(?:node[ _]ids?|work[ _]product[ _]ids?|wp[ _]ids?)\b\s*(?:(?:is|was|are|of|=|:)\s*)?[`'"(\[]?([A-Za-z0-9][A-Za-z0-9_.:\-]*[A-Za-z0-9])"#,
    )
});
static SESSION_ID: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(
        r"(?i)^(?:part|assembly|asm|body|sketch|feature|shape|solid|pad|pocket|doc|document|object|obj|joint|face|edge|compound|mesh)_\d+$",
    )
});
static TWIN_MENTION: LazyLock<Option<Regex>> =
    LazyLock::new(|| re(r"(?i)\btwin\b|\bnode[ _]ids?\b|\bwork[ _]products?\b|\bwp[ _]ids?\b"));

fn words(text: &str) -> Vec<String> {
    WORD.as_ref()
        .map(|w| {
            w.find_iter(text)
                .map(|m| m.as_str().to_ascii_lowercase())
                .collect()
        })
        .unwrap_or_default()
}

/// True when a FreeCAD session object id (part_N, assembly_N, body_N, …) is presented.
pub fn is_session_object_id(id: &str) -> bool {
    SESSION_ID.as_ref().is_some_and(|r| r.is_match(id))
}

/// Splits text into sentences at `.`, `!`, `?` (followed by whitespace or the end) and newlines;
/// each sentence keeps its terminator so a question can be recognised.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if *c == '\n' {
            if !current.trim().is_empty() {
                out.push(current.trim().to_owned());
            }
            current.clear();
            continue;
        }
        current.push(*c);
        let at_boundary = chars.get(i + 1).is_none_or(|n| n.is_whitespace());
        if matches!(c, '.' | '!' | '?') && at_boundary {
            out.push(current.trim().to_owned());
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_owned());
    }
    out
}

const NEGATIONS: &[&str] = &[
    "not", "no", "never", "without", "nothing", "cannot", "yet", "unable", "failed",
];
const PLAN_WORDS: &[&str] = &["will", "i'll", "we'll", "shall", "should", "would", "could"];
const PLAN_OR_OFFER_PHRASES: &[&str] = &[
    "going to",
    "plan to",
    "planning to",
    "about to",
    "want me to",
    "would you like",
    "do you want",
    "let me know",
    "if you'd like",
    "if you want",
    "i can ",
    "we can ",
    "can i ",
    "ready to",
    "next step",
];

fn is_question_negation_plan_or_offer(sentence: &str) -> bool {
    if sentence.trim_end().ends_with('?') {
        return true;
    }
    let lowered = sentence.to_ascii_lowercase().replace('\u{2019}', "'");
    let ws = words(&lowered);
    ws.iter()
        .any(|w| NEGATIONS.contains(&w.as_str()) || PLAN_WORDS.contains(&w.as_str()) || w.ends_with("n't"))
        || PLAN_OR_OFFER_PHRASES.iter().any(|p| lowered.contains(p))
}

/// Whether the reply claims a twin write (FORGE-520): a sentence with committed or persisted, or
/// with saved/stored/recorded/written when the reply also mentions the twin, a node id or a work
/// product; questions, negations, plans and offers are skipped.
pub fn claims_twin_write(reply: &str) -> bool {
    let mentions_twin = TWIN_MENTION.as_ref().is_some_and(|r| r.is_match(reply));
    sentences(reply).iter().any(|sentence| {
        let ws = words(sentence);
        let strong = ws.iter().any(|w| w == "committed" || w == "persisted");
        let weak = mentions_twin
            && ws
                .iter()
                .any(|w| matches!(w.as_str(), "saved" | "stored" | "recorded" | "written"));
        (strong || weak) && !is_question_negation_plan_or_offer(sentence)
    })
}

fn is_twin_write_call(step: &TurnStep, registry: Option<&BTreeMap<String, RegistryEntry>>) -> bool {
    let Some(tool) = step.tool.as_deref() else {
        return false;
    };
    // A tool counts under every name the registry gives it (`twin.commit_geometry`,
    // `mcp_twin_commit_geometry`, …), whichever name the registry or the step uses.
    let gated = match registry {
        Some(reg) => reg.iter().any(|(name, spec)| {
            spec.required_gates.iter().any(|g| g == GATE_TWIN_WRITE) && same_tool(name, tool)
        }),
        None => GATED_TWIN_WRITE_TOOLS.iter().any(|name| same_tool(name, tool)),
    };
    let commit_false = step.arguments.get("commit").and_then(Value::as_bool) == Some(false);
    gated && !commit_false && step.succeeded()
}

/// The node ids the reply quotes: every UUID, and id-shaped tokens (containing a digit, `_` or
/// `-`) after node id / node_id / work product id / wp id. In order of appearance, deduplicated.
pub fn quoted_node_ids(reply: &str) -> Vec<String> {
    let mut found: Vec<(usize, String)> = Vec::new();
    if let Some(uuid) = UUID.as_ref() {
        found.extend(uuid.find_iter(reply).map(|m| (m.start(), m.as_str().to_owned())));
    }
    if let Some(label) = ID_AFTER_LABEL.as_ref() {
        for cap in label.captures_iter(reply) {
            if let Some(m) = cap.get(1) {
                let token = m.as_str().trim_end_matches(['.', ':']);
                if token.chars().any(|c| c.is_ascii_digit() || c == '_' || c == '-') {
                    found.push((m.start(), token.to_owned()));
                }
            }
        }
    }
    found.sort();
    let mut seen = BTreeSet::new();
    found
        .into_iter()
        .filter(|(_, id)| seen.insert(id.to_ascii_lowercase()))
        .map(|(_, id)| id)
        .collect()
}

fn value_text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Runs the three checks and builds the report.
pub fn check_grounding(input: &GroundingInput) -> GroundingReport {
    let reply = input.reply.as_str();
    let verbs = words(reply);
    let claims_action = verbs.iter().any(|w| COMPLETION_VERBS.contains(&w.as_str()));
    let any_call = input.steps.iter().any(TurnStep::made_call_without_error);
    if claims_action && !any_call {
        return report(reply, vec![Banner::Ungrounded], Vec::new(), Vec::new());
    }
    let mut banners = Vec::new();
    let registry = input.registry.as_ref();
    if claims_twin_write(reply) && !input.steps.iter().any(|s| is_twin_write_call(s, registry)) {
        banners.push(Banner::NoTwinCommit);
    }
    let mut evidence: Vec<String> = input
        .steps
        .iter()
        .filter(|s| s.succeeded())
        .flat_map(|s| [value_text(&s.arguments), value_text(&s.result)])
        .collect();
    evidence.extend(input.context_text.clone());
    let evidence = evidence.join("\n").to_ascii_lowercase();
    let unverified: Vec<String> = quoted_node_ids(reply)
        .into_iter()
        .filter(|id| is_session_object_id(id) || !evidence.contains(&id.to_ascii_lowercase()))
        .collect();
    if !unverified.is_empty() {
        banners.push(Banner::UnverifiedNodeId);
    }
    let calls: Vec<(&str, &Value, &Value)> = input
        .steps
        .iter()
        .filter(|s| s.succeeded())
        .map(|s| (s.tool.as_deref().unwrap_or_default(), &s.arguments, &s.result))
        .collect();
    let numeric = numeric_mismatches(reply, &calls, input.context_text.as_deref().unwrap_or_default());
    if !numeric.is_empty() {
        banners.push(Banner::NumericMismatch);
    }
    report(reply, banners, unverified, numeric)
}

fn report(
    reply: &str,
    banners: Vec<Banner>,
    unverified_ids: Vec<String>,
    numeric: Vec<NumericMismatch>,
) -> GroundingReport {
    let mut lines: Vec<String> = banners
        .iter()
        .map(|b| match b {
            Banner::Ungrounded => UNGROUNDED_BANNER.to_owned(),
            Banner::NoTwinCommit => NO_TWIN_COMMIT_BANNER.to_owned(),
            Banner::UnverifiedNodeId => format!("{UNVERIFIED_NODE_ID_BANNER}: {}", unverified_ids.join(", ")),
            Banner::NumericMismatch => format!(
                "{NUMERIC_MISMATCH_BANNER}: {}",
                numeric
                    .iter()
                    .map(|m| format!("{} (the tools returned {})", m.stated, m.returned.join(", ")))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        })
        .collect();
    let text = if lines.is_empty() {
        reply.to_owned()
    } else {
        lines.push(String::new());
        lines.push(reply.to_owned());
        lines.join("\n")
    };
    GroundingReport {
        flagged: !banners.is_empty(),
        metric_kinds: banners.iter().map(|b| b.metric_kind()).collect(),
        banners,
        unverified_ids,
        numeric,
        text,
    }
}
