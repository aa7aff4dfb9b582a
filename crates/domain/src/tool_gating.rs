//! Tool gating: whether a tool call runs, is held for a person, or is refused, by caller class
//! (gate declarations, MET-569 schema pre-validation, FORGE-222/490/487/584).
//!
//! Order of checks: the arguments are validated against the declared schema first (FORGE-222: a
//! person is never asked to approve a call that was always going to be rejected), then static gates,
//! then the caller class's bounds, then the "ask" tier. Anything unclassified counts as destructive.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The caller classes the rules decide by: the ports' type, so the sidecar's classification of a
/// connection is what the gate sees, with no mapping in between.
pub use metaforge_ports::tools::CallerClass;

/// Tools whose effect is a human decision. No agent may call them to answer its own approval;
/// the approver always comes from the decision record (FORGE-393/400).
pub const HUMAN_AUTHORITY_TOOLS: &[&str] = &[
    "twin.approve_design_loop",
    "twin.approve_engineering_change",
    "ect.approve",
    "flow.approve",
    "run.approve_gate",
    "approval.decide",
];

/// The one flow tool a client-task caller may call (it asks the person; it decides nothing).
pub const CLIENT_TASK_ALLOWED_ADMIN: &[&str] = &["flow.await_gate"];

/// Tool-name prefixes of project, flow and run administration.
pub const ADMIN_PREFIXES: &[&str] = &["project.", "flow.", "run."];

/// What a tool does to the world (MCP tool annotations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Annotation {
    /// Reads only.
    ReadOnly,
    /// Adds without changing what exists.
    Additive,
    /// Produces artefacts (e.g. in an adapter's workspace).
    Producing,
    /// Changes or deletes what exists. Unclassified tools count as this.
    #[default]
    Destructive,
}

impl Annotation {
    /// How the gating rules read a tool's MCP hints: read-only → `READ_ONLY`, explicitly
    /// non-destructive → `ADDITIVE`, anything else (absent hints included) → `DESTRUCTIVE`.
    pub fn from_hints(hints: &metaforge_ports::tools::ToolHints) -> Self {
        if hints.read_only_hint == Some(true) {
            Self::ReadOnly
        } else if hints.destructive_hint == Some(false) {
            Self::Additive
        } else {
            Self::Destructive
        }
    }
}

impl Annotation {
    /// Every class, laxest first.
    pub const ALL: [Self; 4] = [Self::ReadOnly, Self::Additive, Self::Producing, Self::Destructive];

    /// The name as serialised in a report (`read_only`, `additive`, `producing`, `destructive`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read_only",
            Self::Additive => "additive",
            Self::Producing => "producing",
            Self::Destructive => "destructive",
        }
    }

    /// What a server's own hints can say about a tool, least cautious first: it reads only; it
    /// writes but destroys nothing (additive, or producing: only its own scratch state — the
    /// hints cannot tell these apart, an operator can); it may destroy.
    fn strictness(self) -> u8 {
        match self {
            Self::ReadOnly => 0,
            Self::Additive | Self::Producing => 1,
            Self::Destructive => 2,
        }
    }

    /// The class of a tool whose servers-file entry declares it `declared`: an operator may
    /// classify what the server left unannotated, never make a tool laxer than the server said it
    /// is (a server that sets either hint has spoken; MCP's defaults fill the other).
    pub fn declared(server: &metaforge_ports::tools::ToolHints, declared: Self) -> Self {
        if server.read_only_hint.is_none() && server.destructive_hint.is_none() {
            return declared;
        }
        let own = Self::from_hints(server);
        if declared.strictness() >= own.strictness() {
            declared
        } else {
            own
        }
    }
}

/// A tool as the registry declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Full tool name.
    pub name: String,
    /// `native` or `mcp:<server>`.
    #[serde(default = "default_origin")]
    pub origin: String,
    /// The declared JSON schema of its arguments; `None` or a bare `{"type":"object"}` is not validated.
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// Static gates (twin_write, project_write) that must be satisfied.
    #[serde(default)]
    pub required_gates: Vec<String>,
    /// The "ask" tier: every call is held for a person.
    #[serde(default)]
    pub requires_approval: bool,
    /// What it does; absent = destructive.
    #[serde(default)]
    pub annotation: Annotation,
}

fn default_origin() -> String {
    "native".to_owned()
}

/// The caller and the scope it is bounded to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// The class.
    pub class: CallerClass,
    /// The run's project for service and client-task callers; a call naming another project is refused.
    #[serde(default)]
    pub project_id: Option<String>,
    /// Gates the operator has switched off (e.g. `twin_write` via METAFORGE_CHAT_TWIN_WRITES=0).
    #[serde(default)]
    pub disabled_gates: Vec<String>,
    /// An unattended design-flow turn (approval mode "forward", FORGE-490): nobody can answer an
    /// in-process hold, so a native `requires_approval` tool is refused rather than held.
    #[serde(default)]
    pub unattended: bool,
}

impl From<CallerClass> for Caller {
    fn from(class: CallerClass) -> Self {
        Self {
            class,
            project_id: None,
            disabled_gates: Vec::new(),
            unattended: false,
        }
    }
}

/// The three outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Run it now.
    Run,
    /// Park it in the approval ledger for a person.
    Hold,
    /// Do not run it and do not hold it.
    Refuse,
}

/// One argument problem, structured so the model can fix its call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArgumentError {
    /// JSON pointer into the arguments ("" for the root).
    pub path: String,
    /// The keyword that failed (required, type, enum, …).
    pub keyword: String,
    /// A human-readable message.
    pub message: String,
}

/// The gate's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateVerdict {
    /// run, hold or refuse.
    pub decision: Decision,
    /// Why, in one sentence.
    pub reason: String,
    /// Argument errors (non-empty only when validation refused the call).
    pub validation_errors: Vec<ArgumentError>,
}

fn is_permissive(schema: &Value) -> bool {
    match schema.as_object() {
        None => schema.is_null() || schema == &Value::Bool(true),
        Some(map) => {
            map.keys()
                .all(|k| k == "type" || k == "$schema" || k == "description" || k == "title")
                && map.get("type").is_none_or(|t| t == "object")
        }
    }
}

/// Validates arguments against a declared schema (required, type, enum and the rest of JSON
/// Schema). A permissive or absent schema is not validated; a schema that does not compile is
/// reported as an error at the root, so an undeclarable tool never runs unchecked.
///
/// Compiles the schema on every call; a caller that checks one tool's calls many times compiles
/// it once with [`ArgumentSchema::compile`].
pub fn validate_arguments(schema: Option<&Value>, arguments: &Value) -> Vec<ArgumentError> {
    ArgumentSchema::compile(schema).check(arguments)
}

/// A tool's input schema compiled once, so checking a call costs a walk of its arguments and
/// not a compilation of the schema (the sidecar checks every `tools/call` against it).
#[derive(Debug)]
pub struct ArgumentSchema(Compiled);

#[derive(Debug)]
enum Compiled {
    /// Absent or permissive: every argument object passes.
    Permissive,
    /// The schema's validator.
    Validator(Box<jsonschema::Validator>),
    /// The schema itself is invalid: every call is refused with this message.
    Invalid(String),
}

impl ArgumentSchema {
    /// Compiles `schema` (a schema that does not compile refuses every call, see
    /// [`validate_arguments`]).
    pub fn compile(schema: Option<&Value>) -> Self {
        let Some(schema) = schema.filter(|s| !is_permissive(s)) else {
            return Self(Compiled::Permissive);
        };
        match jsonschema::validator_for(schema) {
            Ok(validator) => Self(Compiled::Validator(Box::new(validator))),
            Err(e) => Self(Compiled::Invalid(format!(
                "the tool's declared input_schema is invalid: {e}"
            ))),
        }
    }

    /// Every problem `arguments` has against the schema (empty when they pass).
    pub fn check(&self, arguments: &Value) -> Vec<ArgumentError> {
        match &self.0 {
            Compiled::Permissive => Vec::new(),
            Compiled::Invalid(message) => vec![ArgumentError {
                path: String::new(),
                keyword: "schema".to_owned(),
                message: message.clone(),
            }],
            Compiled::Validator(validator) => validator
                .iter_errors(arguments)
                .map(|e| {
                    let keyword = e
                        .schema_path()
                        .as_str()
                        .rsplit('/')
                        .next()
                        .unwrap_or_default()
                        .to_owned();
                    ArgumentError {
                        path: e.instance_path().as_str().to_owned(),
                        keyword,
                        message: e.to_string(),
                    }
                })
                .collect(),
        }
    }
}

fn verdict(decision: Decision, reason: impl Into<String>) -> GateVerdict {
    GateVerdict {
        decision,
        reason: reason.into(),
        validation_errors: Vec::new(),
    }
}

/// Whether the tool is a human-authority tool.
pub fn is_human_authority(tool: &str) -> bool {
    HUMAN_AUTHORITY_TOOLS.contains(&tool)
}

fn is_admin(tool: &str) -> bool {
    ADMIN_PREFIXES.iter().any(|p| tool.starts_with(p)) && !CLIENT_TASK_ALLOWED_ADMIN.contains(&tool)
}

/// Decides one call.
///
/// * Invalid arguments → refuse (before any hold), with the errors.
/// * Unattended (forward mode): a native `requires_approval` tool → refuse (log
///   `approval_tool_refused_unattended`); MCP tools are forwarded to the sidecar's policy.
/// * A declared gate the operator disabled → refuse.
/// * service / client_task (the design-flow worker's bounds): project/flow/run administration
///   (except `flow.await_gate`), human-authority tools, destructive tools and calls naming another
///   project are refused; everything else runs without a per-call hold.
/// * Human-authority tools → hold for every other caller (a person decides, never the agent).
/// * Read-only tools run for everyone.
/// * local: the "ask" tier (`requires_approval`) and destructive tools hold, other writes run.
/// * remote and untrusted: every write is held for a person.
pub fn decide(tool: &ToolSpec, caller: &Caller, arguments: &Value) -> GateVerdict {
    decide_with_schema(
        tool,
        &ArgumentSchema::compile(tool.input_schema.as_ref()),
        caller,
        arguments,
    )
}

/// [`decide`] with the tool's input schema compiled already (`schema` must be
/// `tool.input_schema` compiled): the same rules, for a host that decides many calls of one tool.
pub fn decide_with_schema(
    tool: &ToolSpec,
    schema: &ArgumentSchema,
    caller: &Caller,
    arguments: &Value,
) -> GateVerdict {
    let errors = schema.check(arguments);
    if !errors.is_empty() {
        return GateVerdict {
            decision: Decision::Refuse,
            reason: format!(
                "invalid_arguments: {} argument error(s) for '{}'; the call was NOT executed",
                errors.len(),
                tool.name
            ),
            validation_errors: errors,
        };
    }
    if let Some(gate) = tool
        .required_gates
        .iter()
        .find(|g| caller.disabled_gates.contains(g))
    {
        return verdict(
            Decision::Refuse,
            format!(
                "gate '{gate}' is disabled on this deployment, so '{}' cannot run",
                tool.name
            ),
        );
    }
    let name = tool.name.as_str();
    if caller.unattended && tool.requires_approval && tool.origin == "native" {
        return verdict(
            Decision::Refuse,
            format!("'{name}' requires approval and is not available in an unattended design-flow turn"),
        );
    }
    match caller.class {
        CallerClass::Service | CallerClass::ClientTask => {
            let who = caller.class.as_str();
            if is_human_authority(name) {
                return verdict(
                    Decision::Refuse,
                    format!("'{name}' is a human-authority tool; a {who} caller may not call it"),
                );
            }
            if is_admin(name) {
                return verdict(
                    Decision::Refuse,
                    format!(
                        "'{name}' is project, flow or run administration, outside a {who} caller's bounds"
                    ),
                );
            }
            if tool.annotation == Annotation::Destructive {
                return verdict(
                    Decision::Refuse,
                    format!("'{name}' is destructive (or unclassified), outside a {who} caller's bounds"),
                );
            }
            let named = arguments.get("project_id").and_then(Value::as_str);
            match (named, caller.project_id.as_deref()) {
                (Some(asked), Some(own)) if asked != own => verdict(
                    Decision::Refuse,
                    format!("'{name}' names project '{asked}', outside the run's project '{own}'"),
                ),
                (Some(asked), None) => verdict(
                    Decision::Refuse,
                    format!("'{name}' names project '{asked}' and the {who} caller's project is unknown"),
                ),
                _ => verdict(
                    Decision::Run,
                    format!("in-scope call by a {who} caller on an approved run"),
                ),
            }
        }
        CallerClass::Local | CallerClass::Remote | CallerClass::Untrusted => {
            let who = caller.class.as_str();
            if is_human_authority(name) {
                return verdict(
                    Decision::Hold,
                    format!("'{name}' is a human-authority tool; a person decides it"),
                );
            }
            if tool.annotation == Annotation::ReadOnly && !tool.requires_approval {
                return verdict(Decision::Run, format!("'{name}' is read-only"));
            }
            // Authoring in the server's own scratch workspace (a CAD session) changes nothing of
            // the person's: ungated like a read (seed: "freecad.* / cadquery.* authoring stay
            // ungated").
            if tool.annotation == Annotation::Producing && !tool.requires_approval {
                return verdict(
                    Decision::Run,
                    format!("'{name}' produces only in its server's own workspace"),
                );
            }
            if tool.requires_approval {
                return verdict(
                    Decision::Hold,
                    format!("'{name}' requires approval for every call"),
                );
            }
            match caller.class {
                CallerClass::Local if tool.annotation == Annotation::Destructive => verdict(
                    Decision::Hold,
                    format!("'{name}' is destructive (or unclassified); a person confirms it"),
                ),
                CallerClass::Local => verdict(
                    Decision::Run,
                    format!("'{name}' is a non-destructive write by a local caller"),
                ),
                CallerClass::Remote
                | CallerClass::Untrusted
                | CallerClass::Service
                | CallerClass::ClientTask => verdict(
                    Decision::Hold,
                    format!("'{name}' writes; a {who} caller's writes are held for a person"),
                ),
            }
        }
    }
}

/// The envelope a refused-as-invalid call returns to the model, so it can fix its call without a
/// half-applied side effect (MET-569).
pub fn invalid_arguments_envelope(tool: &str, errors: &[ArgumentError]) -> Value {
    serde_json::json!({
        "status": "error",
        "error": "invalid_arguments",
        "tool": tool,
        "validation_errors": errors,
        "hint": "Fix the arguments to match the tool's input_schema and call it again; this call was NOT executed.",
    })
}

/// The server's own words from a tool that ran and failed: its structured content, else its text
/// parsed as JSON, else the text itself, whichever keeps the most of what the server said
/// (MET-569: the payload survives under `details`).
pub fn server_error_payload(output: &metaforge_ports::tools::ToolOutput) -> Value {
    if let Some(structured) = &output.structured {
        return structured.clone();
    }
    let text = output.text();
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// The envelope a tool that ran and reported a failure returns to the model: the server's own
/// payload kept under `details`, so the model can tell "stop trying" from "fix the argument".
pub fn tool_error_envelope(tool: &str, output: &metaforge_ports::tools::ToolOutput) -> Value {
    serde_json::json!({
        "status": "error",
        "error": "tool_error",
        "tool": tool,
        "details": server_error_payload(output),
    })
}

/// The envelope a call that did not reach a result returns (timeout, unknown tool, refused
/// arguments at the server): the port error's kind as a code, and its message.
pub fn call_failed_envelope(tool: &str, error: &metaforge_ports::PortError) -> Value {
    use metaforge_ports::PortErrorKind;
    let code = match error.kind {
        PortErrorKind::NotFound => "not_found",
        PortErrorKind::Invalid => "invalid_arguments",
        PortErrorKind::Unavailable => "unavailable",
        PortErrorKind::Conflict => "conflict",
        PortErrorKind::Corrupt => "corrupt",
        PortErrorKind::Internal => "internal",
    };
    serde_json::json!({
        "status": "error",
        "error": code,
        "tool": tool,
        "message": error.message,
    })
}

/// The same-turn duplicate guard's key: the tool and its arguments with object keys sorted, so
/// `{"a":1,"b":2}` and `{"b":2,"a":1}` are the same call (MET-569).
pub fn canonical_call_key(tool: &str, arguments: &Value) -> String {
    format!("{tool}:{}", metaforge_ports::canonical::canonical_json(arguments))
}

#[cfg(test)]
mod declared_class_tests {
    use super::*;
    use metaforge_ports::tools::ToolHints;

    fn hints(read_only: Option<bool>, destructive: Option<bool>) -> ToolHints {
        ToolHints {
            read_only_hint: read_only,
            destructive_hint: destructive,
            idempotent_hint: None,
            open_world_hint: None,
        }
    }

    #[test]
    fn a_declared_class_fills_a_silent_server_and_never_loosens_one_that_spoke() {
        use Annotation::{Additive, Destructive, Producing, ReadOnly};
        let table = [
            // (the server's hints, declared, effective)
            (hints(None, None), ReadOnly, ReadOnly),
            (hints(None, None), Producing, Producing),
            (hints(None, None), Destructive, Destructive),
            (hints(Some(true), None), Destructive, Destructive),
            (hints(Some(true), None), ReadOnly, ReadOnly),
            (hints(Some(true), Some(false)), Producing, Producing),
            (hints(Some(false), Some(false)), ReadOnly, Additive),
            (hints(Some(false), Some(false)), Producing, Producing),
            (hints(Some(false), None), Producing, Destructive),
            (hints(None, Some(true)), ReadOnly, Destructive),
        ];
        for (server, declared, effective) in table {
            assert_eq!(
                Annotation::declared(&server, declared),
                effective,
                "{server:?} declared {declared:?}"
            );
        }
    }

    #[test]
    fn a_producing_tool_runs_for_every_chat_caller_and_an_additive_one_is_held_for_a_remote_one() {
        let tool = |annotation| ToolSpec {
            name: "cad.freecad.pad_sketch".to_owned(),
            origin: "mcp:cad".to_owned(),
            input_schema: None,
            required_gates: Vec::new(),
            requires_approval: false,
            annotation,
        };
        let arguments = serde_json::json!({});
        for class in [CallerClass::Local, CallerClass::Remote, CallerClass::Untrusted] {
            let decided = decide(&tool(Annotation::Producing), &Caller::from(class), &arguments);
            assert_eq!(decided.decision, Decision::Run, "{class:?}: {}", decided.reason);
        }
        let decided = decide(
            &tool(Annotation::Additive),
            &Caller::from(CallerClass::Remote),
            &arguments,
        );
        assert_eq!(decided.decision, Decision::Hold, "{}", decided.reason);
    }
}
