//! Skills (issue 19): playbooks in the Agent Skills format (agentskills.io). A skill is a
//! directory whose `SKILL.md` starts with YAML frontmatter — `name` (matching the directory,
//! lowercase letters, digits and single hyphens, at most 64 characters), `description` (at most
//! 1024), and optionally `license`, `compatibility` (at most 500), `metadata` (string to string)
//! and `allowed-tools` (space-delimited) — followed by the instructions in Markdown. No other
//! field is allowed; MetaForge's own additions live under `metadata` with a `metaforge-` prefix.
//!
//! [`parse_skill`] is the one rule every door and source uses (the CLI's `skills validate`, the
//! loader, skills read from an MCP server): it answers the skill, or every problem at once with
//! its line, so a skill is never half-loaded.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// The file that makes a directory a skill.
pub const SKILL_FILE: &str = metaforge_ports::SKILL_MANIFEST;
/// The longest name, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// The longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// The longest compatibility note, in characters.
pub const MAX_COMPATIBILITY_CHARS: usize = 500;
/// The frontmatter fields the specification allows.
pub const FIELDS: [&str; 6] = [
    "allowed-tools",
    "compatibility",
    "description",
    "license",
    "metadata",
    "name",
];
/// The `metadata` key (value `"true"`) of a skill whose use commits to the twin: it is gated
/// like the twin writes it calls (FORGE-97).
pub const COMMITS_KEY: &str = "metaforge-commits";
/// The `metadata` key listing, comma-separated, the disciplines a skill serves.
pub const DISCIPLINES_KEY: &str = "metaforge-disciplines";

/// A valid skill as its `SKILL.md` gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skill {
    /// Its name (the directory's).
    pub name: String,
    /// What it does and when to use it: all the model sees before activating it.
    pub description: String,
    /// Its licence, when it names one.
    pub license: Option<String>,
    /// What it needs of its environment, when it says.
    pub compatibility: Option<String>,
    /// Free key-value properties (MetaForge's own under `metaforge-`).
    pub metadata: BTreeMap<String, String>,
    /// The tools an activation may use (empty: it does not narrow them).
    pub allowed_tools: Vec<String>,
    /// The instructions: the Markdown after the frontmatter.
    pub body: String,
}

impl Skill {
    /// True when the skill commits to the twin (`metadata: {metaforge-commits: "true"}`).
    pub fn commits(&self) -> bool {
        self.metadata.get(COMMITS_KEY).is_some_and(|v| v.trim() == "true")
    }

    /// The disciplines it says it serves.
    pub fn disciplines(&self) -> Vec<String> {
        self.metadata
            .get(DISCIPLINES_KEY)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// One thing wrong with a `SKILL.md`, with the line (1-based) where it is, when known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{}{message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
pub struct SkillProblem {
    /// The 1-based line in `SKILL.md`.
    pub line: Option<u64>,
    /// The field it is about, when it is about one.
    pub field: Option<String>,
    /// What is wrong, in a sentence.
    pub message: String,
}

fn problem(line: Option<u64>, field: Option<&str>, message: impl Into<String>) -> SkillProblem {
    SkillProblem {
        line,
        field: field.map(str::to_owned),
        message: message.into(),
    }
}

/// Why a skill name is not one, or `None` when it is: at most [`MAX_NAME_CHARS`] characters,
/// lowercase letters and digits with single hyphens inside (`pdf-tools`, `gate-review-2`).
pub fn name_problem(name: &str) -> Option<String> {
    let trimmed = name.trim();
    if trimmed.is_empty() {
        return Some("must be a non-empty string".to_owned());
    }
    let count = trimmed.chars().count();
    if count > MAX_NAME_CHARS {
        return Some(format!(
            "'{trimmed}' is {count} characters; at most {MAX_NAME_CHARS}"
        ));
    }
    if trimmed != trimmed.to_lowercase() {
        return Some(format!("'{trimmed}' must be lowercase"));
    }
    if trimmed.starts_with('-') || trimmed.ends_with('-') {
        return Some(format!("'{trimmed}' cannot start or end with a hyphen"));
    }
    if trimmed.contains("--") {
        return Some(format!("'{trimmed}' cannot contain consecutive hyphens"));
    }
    if trimmed.chars().any(|c| !(c.is_alphanumeric() || c == '-')) {
        return Some(format!("'{trimmed}' may hold only letters, digits and hyphens"));
    }
    None
}

/// The line (1-based, in the file) of top-level key `key` in the frontmatter whose first line
/// is file line `first`.
fn key_line(frontmatter: &str, first: u64, key: &str) -> Option<u64> {
    frontmatter
        .lines()
        .position(|l| {
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
                || l.strip_prefix(&format!("\"{key}\""))
                    .is_some_and(|rest| rest.trim_start().starts_with(':'))
        })
        .map(|i| first + i as u64)
}

fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// Reads a skill from the text of its `SKILL.md` in the directory named `directory`: the skill,
/// or every problem found, each with its line.
pub fn parse_skill(directory: &str, text: &str) -> Result<Skill, Vec<SkillProblem>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(vec![problem(
            Some(1),
            None,
            "SKILL.md must start with YAML frontmatter: a line '---'",
        )]);
    }
    let mut frontmatter = String::new();
    let mut closed_at = None;
    let mut offset = text.find('\n').map_or(text.len(), |i| i + 1);
    for (index, line) in lines.enumerate() {
        offset += line.len();
        if line.trim_end() == "---" {
            closed_at = Some(index as u64 + 2);
            break;
        }
        frontmatter.push_str(line);
    }
    let Some(closing_line) = closed_at else {
        return Err(vec![problem(
            Some(1),
            None,
            "the frontmatter is not closed with a line '---'",
        )]);
    };
    let body = text.get(offset..).unwrap_or_default().trim().to_owned();
    let parsed: Value = if frontmatter.trim().is_empty() {
        Value::Object(serde_json::Map::new())
    } else {
        match serde_saphyr::from_str::<Value>(&frontmatter) {
            Ok(value) => value,
            Err(e) => {
                let line = e.location().map(|l| l.line() + 1);
                let message = e.to_string();
                let message = message
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("invalid YAML")
                    .trim();
                return Err(vec![problem(
                    line,
                    None,
                    format!("invalid YAML in the frontmatter: {message}"),
                )]);
            }
        }
    };
    let Value::Object(fields) = parsed else {
        return Err(vec![problem(
            Some(2),
            None,
            "the frontmatter must be a YAML mapping of fields",
        )]);
    };
    let at = |key: &str| key_line(&frontmatter, 2, key);
    let mut problems = Vec::new();
    for key in fields.keys().filter(|k| !FIELDS.contains(&k.as_str())) {
        problems.push(problem(
            at(key),
            Some(key),
            format!(
                "unexpected field '{key}': only {} are allowed (put your own under metadata)",
                FIELDS.join(", ")
            ),
        ));
    }
    let name = match fields.get("name") {
        None => {
            problems.push(problem(
                Some(closing_line),
                Some("name"),
                "missing required field 'name'",
            ));
            None
        }
        Some(value) => match as_text(value) {
            None => {
                problems.push(problem(at("name"), Some("name"), "'name' must be a string"));
                None
            }
            Some(name) => {
                let name = name.trim().to_owned();
                if let Some(why) = name_problem(&name) {
                    problems.push(problem(at("name"), Some("name"), format!("name {why}")));
                } else if name != directory {
                    problems.push(problem(
                        at("name"),
                        Some("name"),
                        format!("name '{name}' must match its directory '{directory}'"),
                    ));
                }
                Some(name)
            }
        },
    };
    let description = match fields.get("description").map(as_text) {
        None => {
            problems.push(problem(
                Some(closing_line),
                Some("description"),
                "missing required field 'description'",
            ));
            None
        }
        Some(None) => {
            problems.push(problem(
                at("description"),
                Some("description"),
                "'description' must be a string",
            ));
            None
        }
        Some(Some(text)) if text.trim().is_empty() => {
            problems.push(problem(
                at("description"),
                Some("description"),
                "'description' must not be empty",
            ));
            None
        }
        Some(Some(text)) => {
            let count = text.chars().count();
            if count > MAX_DESCRIPTION_CHARS {
                problems.push(problem(
                    at("description"),
                    Some("description"),
                    format!("'description' is {count} characters; at most {MAX_DESCRIPTION_CHARS}"),
                ));
            }
            Some(text)
        }
    };
    let optional_text =
        |key: &str, limit: Option<usize>, problems: &mut Vec<SkillProblem>| match fields.get(key) {
            None => None,
            Some(value) => match as_text(value) {
                None => {
                    problems.push(problem(at(key), Some(key), format!("'{key}' must be a string")));
                    None
                }
                Some(text) => {
                    if let Some(limit) = limit
                        && text.chars().count() > limit
                    {
                        problems.push(problem(
                            at(key),
                            Some(key),
                            format!("'{key}' is {} characters; at most {limit}", text.chars().count()),
                        ));
                    }
                    Some(text)
                }
            },
        };
    let license = optional_text("license", None, &mut problems);
    let compatibility = optional_text("compatibility", Some(MAX_COMPATIBILITY_CHARS), &mut problems);
    let allowed_tools = optional_text("allowed-tools", None, &mut problems)
        .map(|t| t.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let metadata = match fields.get("metadata") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(map)) => {
            let mut metadata = BTreeMap::new();
            for (key, value) in map {
                match as_text(value) {
                    Some(text) => {
                        metadata.insert(key.clone(), text);
                    }
                    None => problems.push(problem(
                        at("metadata"),
                        Some("metadata"),
                        format!("metadata '{key}' must be a string"),
                    )),
                }
            }
            metadata
        }
        Some(_) => {
            problems.push(problem(
                at("metadata"),
                Some("metadata"),
                "'metadata' must be a mapping of strings",
            ));
            BTreeMap::new()
        }
    };
    match (name, description) {
        (Some(name), Some(description)) if problems.is_empty() => Ok(Skill {
            name,
            description,
            license,
            compatibility,
            metadata,
            allowed_tools,
            body,
        }),
        _ => Err(problems),
    }
}
