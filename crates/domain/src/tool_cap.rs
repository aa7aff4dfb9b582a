//! The provider tool-array cap (FORGE-94/518): which tools one request carries when the provider
//! caps the array (OpenAI: 128).
//!
//! Selection is not a tail slice: every native tool, every pinned tool, every session opener,
//! every tool whose input schema requires the session id such an opener of its own server hands
//! out, and every session-critical verb is protected (and when those alone exceed the cap, the cap still holds:
//! natives first in their order, then the rest of the protected ones); companion groups are kept whole so the cap can never split
//! a stage → import or export → commit round trip; the rest of the budget is filled round-robin
//! across MCP origins, with niche families served last. The result names what was dropped so the
//! drop can be logged loudly (`tool_schemas_truncated`, `chat_tools_dropped`).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Name endings of the verbs that turn an open session's sketch into geometry, plus the joint
/// inspector (`_SESSION_CRITICAL_VERBS`).
pub const SESSION_CRITICAL_VERBS: &[&str] = &[
    "pad_sketch",
    "pocket_sketch",
    "revolve_sketch",
    "loft_sketches",
    "sweep_sketch",
    "list_joints",
];

/// Tools that are kept together or not at all (FORGE-518).
pub const COMPANION_GROUPS: &[&[&str]] = &[
    &[
        "twin.stage_work_product_file",
        "freecad.import_step",
        "freecad.describe_step_file",
    ],
    &["freecad.export_model", "twin.commit_geometry"],
    &["freecad.open_session", "freecad.close_session"],
];

/// Families that only receive what the other adapters leave over.
pub const NICHE_FAMILIES: &[&str] = &["gazebo", "isaac_sim", "omniverse_usd"];

/// Where a tool comes from: `native` or `mcp:<server>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ToolOrigin {
    /// A harness-native tool (few, curated, session-critical).
    Native,
    /// A tool an MCP server provides.
    Mcp(String),
}

impl ToolOrigin {
    /// Parses `native` or `mcp:<server>`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "native" => Some(Self::Native),
            other => other
                .strip_prefix("mcp:")
                .filter(|s| !s.trim().is_empty())
                .map(|s| Self::Mcp(s.trim().to_owned())),
        }
    }

    /// `native` or `mcp:<server>`.
    pub fn as_string(&self) -> String {
        match self {
            Self::Native => "native".to_owned(),
            Self::Mcp(server) => format!("mcp:{server}"),
        }
    }
}

impl Serialize for ToolOrigin {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_string())
    }
}

impl<'de> Deserialize<'de> for ToolOrigin {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("origin '{text}' is neither 'native' nor 'mcp:<server>'"))
        })
    }
}

/// A tool offered for one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OfferedTool {
    /// Full tool name.
    pub name: String,
    /// Where it comes from.
    pub origin: ToolOrigin,
    /// Its JSON Schema of arguments, when known: a tool that requires a session id from its own
    /// server's `*_open_session` is protected with the opener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
}

/// The outcome of capping one request's tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSelection {
    /// The cap applied; `None` = unbounded.
    pub cap: Option<usize>,
    /// Kept tool names, in input order.
    pub kept: Vec<String>,
    /// Dropped tool names, in input order.
    pub dropped: Vec<String>,
    /// The protected set alone is larger than the cap: the cap still held, natives first, and
    /// protected tools were dropped (logged loudly by the caller).
    pub protected_exceeds_cap: bool,
}

/// Whether `name` is `member` itself or its `mcp_<server>_<tool>` registration.
fn names_member(name: &str, member: &str) -> bool {
    name == member || name.ends_with(&format!("_{}", member.replace('.', "_")))
}

/// The companion group `name` belongs to, if any.
pub fn companion_group_of(name: &str) -> Option<usize> {
    COMPANION_GROUPS
        .iter()
        .position(|group| group.iter().any(|m| names_member(name, m)))
}

/// Whether `name` is a session opener: `*_open_session`, or the dotted `<adapter>.open_session`
/// form of the same registration.
fn is_session_opener(name: &str) -> bool {
    ["_open_session", ".open_session"]
        .iter()
        .any(|s| name.ends_with(s))
}

/// Whether a tool's input schema requires a session id (`session_id` or `<kind>_session_id`):
/// without the session an opener hands out the tool cannot be called at all.
pub fn requires_session_id(input_schema: &Value) -> bool {
    input_schema
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|required| {
            required
                .iter()
                .filter_map(Value::as_str)
                .any(|field| field == "session_id" || field.ends_with("_session_id"))
        })
}

/// Protected regardless of the round-robin: native, pinned, session openers, the tools that need
/// a session id from an opener of their own origin, session-critical verbs.
fn is_protected(tool: &OfferedTool, pinned: &BTreeSet<String>, openers: &BTreeSet<&ToolOrigin>) -> bool {
    tool.origin == ToolOrigin::Native
        || pinned.contains(&tool.name)
        || is_session_opener(&tool.name)
        || (openers.contains(&tool.origin) && tool.input_schema.as_ref().is_some_and(requires_session_id))
        || SESSION_CRITICAL_VERBS.iter().any(|v| tool.name.ends_with(v))
}

fn is_niche(origin: &ToolOrigin) -> bool {
    match origin {
        ToolOrigin::Native => false,
        ToolOrigin::Mcp(server) => {
            let s = server.to_ascii_lowercase();
            NICHE_FAMILIES.iter().any(|n| s.contains(n))
        }
    }
}

/// Selects the tools for one request under `cap` (see the module doc for the rules).
pub fn select_tools(tools: &[OfferedTool], cap: Option<usize>, pinned: &BTreeSet<String>) -> ToolSelection {
    let all: Vec<usize> = (0..tools.len()).collect();
    let Some(cap) = cap else {
        return finish(tools, None, &all.into_iter().collect(), false);
    };
    let group_members = |group: usize| -> Vec<usize> {
        all.iter()
            .copied()
            .filter(|i| companion_group_of(&tools[*i].name) == Some(group))
            .collect()
    };
    let openers: BTreeSet<&ToolOrigin> = tools
        .iter()
        .filter(|t| is_session_opener(&t.name))
        .map(|t| &t.origin)
        .collect();
    let mut kept: BTreeSet<usize> = all
        .iter()
        .copied()
        .filter(|i| is_protected(&tools[*i], pinned, &openers))
        .collect();
    let protected_groups: BTreeSet<usize> = kept
        .iter()
        .filter_map(|i| companion_group_of(&tools[*i].name))
        .collect();
    for group in protected_groups {
        kept.extend(group_members(group));
    }
    if kept.len() > cap {
        return finish(tools, Some(cap), &protected_within(tools, &kept, cap), true);
    }
    if kept.len() == cap {
        return finish(tools, Some(cap), &kept, false);
    }
    let mut queues: BTreeMap<(bool, String), Vec<usize>> = BTreeMap::new();
    for i in all.iter().copied().filter(|i| !kept.contains(i)) {
        let origin = &tools[i].origin;
        queues
            .entry((is_niche(origin), origin.as_string()))
            .or_default()
            .push(i);
    }
    for queue in queues.values_mut() {
        queue.sort_by(|a, b| tools[*a].name.cmp(&tools[*b].name));
    }
    for niche in [false, true] {
        let mut lanes: Vec<std::collections::VecDeque<usize>> = queues
            .iter()
            .filter(|((n, _), _)| *n == niche)
            .map(|(_, q)| q.iter().copied().collect())
            .collect();
        while kept.len() < cap && lanes.iter().any(|l| !l.is_empty()) {
            for lane in &mut lanes {
                if kept.len() >= cap {
                    break;
                }
                let Some(i) = lane.pop_front() else { continue };
                if kept.contains(&i) {
                    continue;
                }
                let unit = match companion_group_of(&tools[i].name) {
                    Some(group) => group_members(group),
                    None => vec![i],
                };
                let new: Vec<usize> = unit.into_iter().filter(|j| !kept.contains(j)).collect();
                if kept.len() + new.len() <= cap {
                    kept.extend(new);
                }
            }
        }
    }
    finish(tools, Some(cap), &kept, false)
}

/// When the protected tools alone exceed the cap, the cap still holds (a request over it is one
/// the provider rejects): the natives first, in their stable order, then the other protected
/// tools in order, each companion group whole or not at all, until the cap is full.
fn protected_within(tools: &[OfferedTool], protected: &BTreeSet<usize>, cap: usize) -> BTreeSet<usize> {
    let mut kept = BTreeSet::new();
    let natives = protected
        .iter()
        .copied()
        .filter(|i| tools[*i].origin == ToolOrigin::Native);
    let others = protected
        .iter()
        .copied()
        .filter(|i| tools[*i].origin != ToolOrigin::Native);
    for i in natives.chain(others) {
        if kept.len() >= cap {
            break;
        }
        if kept.contains(&i) {
            continue;
        }
        let unit: Vec<usize> = match companion_group_of(&tools[i].name) {
            Some(group) => protected
                .iter()
                .copied()
                .filter(|j| companion_group_of(&tools[*j].name) == Some(group))
                .collect(),
            None => vec![i],
        };
        if kept.len() + unit.len() <= cap {
            kept.extend(unit);
        }
    }
    kept
}

fn finish(tools: &[OfferedTool], cap: Option<usize>, kept: &BTreeSet<usize>, exceeds: bool) -> ToolSelection {
    let (k, d): (Vec<_>, Vec<_>) = tools.iter().enumerate().partition(|(i, _)| kept.contains(i));
    ToolSelection {
        cap,
        kept: k.into_iter().map(|(_, t)| t.name.clone()).collect(),
        dropped: d.into_iter().map(|(_, t)| t.name.clone()).collect(),
        protected_exceeds_cap: exceeds,
    }
}
