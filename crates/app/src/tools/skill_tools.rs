//! The skill layer's native tools (issue 19): progressive disclosure of the skill catalogue to a
//! turn. Only each skill's name and description reach the model, in the descriptions of two
//! native tools (native, so the provider's tool cap never drops them):
//! - `skills.activate` — activates a skill that does not commit: its instructions come back as
//!   the result, and its `allowed-tools` narrow the turn's tools from the next step on;
//! - `skills.activate_committing` — the same for a skill that commits
//!   (`metadata: {metaforge-commits: "true"}`), declared in the ask tier, so every activation is
//!   held for a person first (FORGE-97). The writes such a skill prescribes are twin tools,
//!   gated and grounded themselves.
//!
//! A skill is activated with the tool of its class; the other answers with an error naming the
//! right one, so a committing skill is never activated unheld.

use std::collections::BTreeSet;

use metaforge_agent::{AgentTool, ToolPolicy};
use metaforge_domain::tool_cap::ToolOrigin;
use metaforge_ports::{PortError, PortErrorKind, ToolDescriptor, ToolHints, ToolOutput};
use serde_json::{Map, Value, json};

use crate::skills::SkillCatalog;

/// Activates a skill that does not commit.
pub const ACTIVATE_ID: &str = "skills.activate";
/// Activates a skill that commits (held for a person first).
pub const ACTIVATE_COMMITTING_ID: &str = "skills.activate_committing";
/// Reads one file a skill references (`references/…`, `scripts/…`, `assets/…`), on demand.
pub const READ_ID: &str = "skills.read";
/// The most characters of a skill file one read returns (a longer file says it was cut).
const MAX_READ_CHARS: usize = 64 * 1024;

/// What an activation narrows a turn to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Activation {
    /// The skill.
    pub(crate) skill: String,
    /// Its `allowed-tools` (registry ids or provider names); empty narrows nothing.
    pub(crate) allowed: BTreeSet<String>,
}

impl Activation {
    /// True when `tool` may be offered while this skill is active: the skill tools always, and,
    /// when the skill names its tools, only those (by registry id or provider name).
    pub(crate) fn admits(&self, tool: &AgentTool) -> bool {
        is_skill_tool(&tool.id)
            || self.allowed.is_empty()
            || self.allowed.contains(&tool.id)
            || self.allowed.contains(&tool.provider_name)
    }
}

/// True for the skill layer's own tools.
pub(crate) fn is_skill_tool(id: &str) -> bool {
    id == ACTIVATE_ID || id == ACTIVATE_COMMITTING_ID || id == READ_ID
}

/// Declares the committing activation in the ask tier.
pub(crate) fn declare(policy: &mut ToolPolicy) {
    policy.requires_approval.insert(ACTIVATE_COMMITTING_ID.to_owned());
}

fn descriptor(id: &str, title: &str, lead: &str, skills: &[(&String, &String)]) -> ToolDescriptor {
    let mut description = format!("{lead}\nAvailable skills:\n");
    for (name, about) in skills {
        description.push_str(&format!("- {name}: {about}\n"));
    }
    ToolDescriptor {
        name: id.to_owned(),
        title: Some(title.to_owned()),
        description,
        input_schema: json!({
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "enum": skills.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
                         "description": "the skill to activate"}
            },
            "additionalProperties": false
        }),
        hints: ToolHints {
            read_only_hint: Some(true),
            destructive_hint: Some(false),
            ..ToolHints::default()
        },
    }
}

/// The skill tools for `catalog` (none when it offers no skill of a class), declared under
/// `policy`.
pub(crate) fn tools(catalog: &SkillCatalog, policy: &ToolPolicy) -> Vec<AgentTool> {
    let of_class = |commits: bool| -> Vec<(&String, &String)> {
        catalog
            .skills
            .iter()
            .filter(|(_, s)| s.skill.commits() == commits)
            .map(|(name, s)| (name, &s.skill.description))
            .collect()
    };
    let (committing, plain) = (of_class(true), of_class(false));
    let mut out = Vec::new();
    if !plain.is_empty() {
        out.push(descriptor(
            ACTIVATE_ID,
            "Activate a skill",
            "Activate a skill (a playbook of steps and tools) when the person's request matches its \
             description; its instructions come back, follow them. Use skills.activate_committing for \
             the skills that commit.",
            &plain,
        ));
    }
    if !committing.is_empty() {
        out.push(descriptor(
            ACTIVATE_COMMITTING_ID,
            "Activate a skill that commits",
            "Activate a skill that commits work to the twin; a person approves the activation first, \
             then its instructions come back, follow them.",
            &committing,
        ));
    }
    if catalog.skills.values().any(|s| !s.contents.is_empty()) {
        out.push(ToolDescriptor {
            name: READ_ID.to_owned(),
            title: Some("Read a skill's file".to_owned()),
            description: "Read one file an activated skill lists (its references, scripts or assets) \
                          when its instructions point to it."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "required": ["name", "path"],
                "properties": {
                    "name": {"type": "string", "description": "the skill"},
                    "path": {"type": "string", "description": "the file, as the activation listed it"}
                },
                "additionalProperties": false
            }),
            hints: ToolHints {
                read_only_hint: Some(true),
                destructive_hint: Some(false),
                ..ToolHints::default()
            },
        });
    }
    out.into_iter()
        .map(|d| {
            let provider_name = d.name.replace('.', "_");
            AgentTool::new(d.name.clone(), provider_name, ToolOrigin::Native, d, policy)
        })
        .collect()
}

/// Reads the file `path` of skill `name` (text, cut at [`MAX_READ_CHARS`]).
pub(crate) fn read(catalog: &SkillCatalog, arguments: &Map<String, Value>) -> Result<ToolOutput, PortError> {
    let field = |key: &str| {
        arguments
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| PortError::new(PortErrorKind::Invalid, format!("{key}: a string is required")))
    };
    let (name, path) = (field("name")?, field("path")?);
    let Some(skill) = catalog.get(name) else {
        return Ok(ToolOutput::error(
            json!({"status": "error", "error": "unknown_skill", "skill": name}),
        ));
    };
    let Some(bytes) = skill.contents.get(path) else {
        return Ok(ToolOutput::error(json!({
            "status": "error", "error": "unknown_file", "skill": name, "path": path, "files": skill.files,
        })));
    };
    let text = String::from_utf8_lossy(bytes);
    let cut = text.chars().count() > MAX_READ_CHARS;
    let shown: String = text.chars().take(MAX_READ_CHARS).collect();
    Ok(ToolOutput::json(
        json!({"skill": name, "path": path, "text": shown, "truncated": cut}),
    ))
}

/// Activates the skill `arguments` name with the tool `tool_id`: the instructions as the
/// result, and what the turn narrows to.
pub(crate) fn activate(
    catalog: &SkillCatalog,
    tool_id: &str,
    arguments: &Map<String, Value>,
) -> Result<(ToolOutput, Option<Activation>), PortError> {
    let name = arguments
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| PortError::new(PortErrorKind::Invalid, "name: the skill to activate is required"))?;
    let Some(loaded) = catalog.get(name) else {
        let known: Vec<&str> = catalog.skills.keys().map(String::as_str).collect();
        return Ok((
            ToolOutput::error(json!({
                "status": "error", "error": "unknown_skill", "skill": name, "known": known,
            })),
            None,
        ));
    };
    let commits = loaded.skill.commits();
    let right = if commits {
        ACTIVATE_COMMITTING_ID
    } else {
        ACTIVATE_ID
    };
    if right != tool_id {
        return Ok((
            ToolOutput::error(json!({
                "status": "error", "error": "wrong_activation_tool", "skill": name,
                "hint": format!("skill '{name}' {} commit: activate it with {right}", if commits { "does" } else { "does not" }),
            })),
            None,
        ));
    }
    tracing::info!(event = "skill_activated", skill = %name, commits, allowed_tools = loaded.skill.allowed_tools.len(), "a turn activated a skill");
    let activation = Activation {
        skill: name.to_owned(),
        allowed: loaded.skill.allowed_tools.iter().cloned().collect(),
    };
    Ok((
        ToolOutput::json(json!({
            "skill": name,
            "instructions": loaded.skill.body,
            "allowed_tools": loaded.skill.allowed_tools,
            "files": loaded.files,
            "commits": commits,
        })),
        Some(activation),
    ))
}
