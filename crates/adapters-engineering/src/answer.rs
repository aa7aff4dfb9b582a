//! What every engineering tool server answers with: its descriptors and argument parsing, and a
//! refusal as the error envelope a model reads (what went wrong, what to do), never a bare
//! protocol error for something the caller can fix.

use metaforge_ports::{
    EvidenceFile, FileText, HostCallOutcome, PortError, PortErrorKind, Quantity, QuantityKind,
    ToolDescriptor, ToolHints, ToolOutput,
};
use schemars::JsonSchema;
use serde_json::{Map, Value, json};

use crate::runner::{RunError, RunOutput};

/// A read: the tools compute, never change anything.
pub(crate) const READ_ONLY: ToolHints = ToolHints {
    read_only_hint: Some(true),
    destructive_hint: Some(false),
    idempotent_hint: Some(true),
    open_world_hint: Some(false),
};

/// A read-only tool's descriptor, its input schema generated from `T`.
pub(crate) fn descriptor<T: JsonSchema>(name: &str, title: &str, description: &str) -> ToolDescriptor {
    descriptor_with(name, title, description, schema_of::<T>(), READ_ONLY)
}

/// The input schema generated from `T` (without the document's own title and description).
pub(crate) fn schema_of<T: JsonSchema>() -> Value {
    let mut schema =
        serde_json::to_value(schemars::schema_for!(T)).unwrap_or_else(|_| json!({"type": "object"}));
    if let Some(root) = schema.as_object_mut() {
        root.remove("$schema");
        root.remove("title");
        root.remove("description");
    }
    schema
}

/// A tool's descriptor with its schema and hints.
pub(crate) fn descriptor_with(
    name: &str,
    title: &str,
    description: &str,
    input_schema: Value,
    hints: ToolHints,
) -> ToolDescriptor {
    ToolDescriptor {
        name: name.to_owned(),
        title: Some(title.to_owned()),
        description: description.to_owned(),
        input_schema,
        hints,
    }
}

/// The arguments of `tool` as its type; a mismatch is `Invalid`, naming the tool.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: Map<String, Value>,
) -> Result<T, PortError> {
    serde_json::from_value(Value::Object(arguments))
        .map_err(|e| PortError::new(PortErrorKind::Invalid, format!("{tool}: {e}")))
}

/// Why a tool call was refused or failed.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// An argument is out of range.
    Argument { field: String, message: String },
    /// A line of what the caller sent may not be run (a netlist's).
    Line {
        error: &'static str,
        line: usize,
        message: String,
    },
    /// The program ran and reported failure.
    Program {
        program: &'static str,
        error: &'static str,
        message: String,
        errors: Vec<String>,
        output: String,
    },
    /// The run could not be made, or took too long.
    Run(RunError),
    /// A modelling operation the program refused (`error` its code), naming the argument.
    Modelling {
        error: String,
        field: String,
        message: String,
    },
}

impl From<RunError> for Refusal {
    fn from(e: RunError) -> Self {
        Self::Run(e)
    }
}

impl Refusal {
    /// An argument out of range, naming it.
    pub(crate) fn argument(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Argument {
            field: field.into(),
            message: message.into(),
        }
    }

    /// `program` ran but gave no usable answer (`error`, said as `message`), with no error lines
    /// of its own to quote: the end of what it printed goes back instead.
    pub(crate) fn program(
        program: &'static str,
        error: &'static str,
        message: impl Into<String>,
        printed: &str,
    ) -> Self {
        Self::Program {
            program,
            error,
            message: message.into(),
            errors: Vec::new(),
            output: tail(printed),
        }
    }

    /// The envelope of `tool`'s refusal.
    fn envelope(&self, tool: &str) -> Value {
        match self {
            Self::Argument { field, message } => json!({
                "status": "error", "error": "invalid_arguments", "tool": tool,
                "validation_errors": [format!("{field}: {message}")],
                "hint": "fix the arguments and call again; nothing was run",
            }),
            Self::Line { error, line, message } => json!({
                "status": "error", "error": error, "tool": tool, "line": line, "message": message,
                "hint": "fix the line named and call again; nothing was run",
            }),
            Self::Program {
                program,
                error,
                message,
                errors,
                output,
            } => json!({
                "status": "error", "error": error, "tool": tool, "program": program,
                "message": message, "errors": errors, "output_tail": output,
            }),
            Self::Run(RunError::TimedOut(limit)) => json!({
                "status": "error", "error": "time_limit", "tool": tool,
                "message": format!("the run took longer than {:.1} s and was stopped", limit.as_secs_f64()),
                "hint": "compute less: fewer points, a shorter time span, a larger step or element size",
            }),
            Self::Run(e @ RunError::Start(_)) => json!({
                "status": "error", "error": "unavailable", "tool": tool, "message": e.to_string(),
            }),
            Self::Run(RunError::Ended(printed)) => json!({
                "status": "error", "error": "program_ended", "tool": tool,
                "message": "the program ended unexpectedly: its session is closed",
                "output_tail": tail(printed),
                "hint": "open a new session and repeat the steps; what the session held is gone",
            }),
            Self::Modelling {
                error,
                field,
                message,
            } => json!({
                "status": "error", "error": error, "tool": tool, "field": field, "message": message,
                "hint": "fix what the message names and call again; the session is unchanged",
            }),
        }
    }
}

/// A tool's answer: its result, or its refusal's envelope as a tool-level error.
pub(crate) fn answer(tool: &str, result: Result<ToolOutput, Refusal>) -> HostCallOutcome {
    HostCallOutcome::Done(match result {
        Ok(output) => output,
        Err(refusal) => ToolOutput::error(refusal.envelope(tool)),
    })
}

/// The deliverable an analysis is evidence for.
pub(crate) const SIMULATION_RESULT: &str = "simulation_result";

/// The most file text one result carries, all files together: a result is one line on the
/// server's stdout, and a client drops a line over 16 MiB (rmcp's bound), so the files with their
/// JSON escaping must stay well under it. A file past the budget is named by its hash and size
/// only.
pub(crate) const MAX_EVIDENCE_TEXT_BYTES: usize = 6 * 1024 * 1024;

/// The output files of `run` named in `wanted` (name, media type) that it wrote, in that order:
/// every one's entry for the evidence, and the texts that fit [`MAX_EVIDENCE_TEXT_BYTES`].
pub(crate) fn output_files(run: &RunOutput, wanted: &[(&str, &str)]) -> (Vec<EvidenceFile>, Vec<FileText>) {
    let mut entries = Vec::new();
    let mut texts = Vec::new();
    for (name, media_type) in wanted {
        if let Some(text) = run.files.get(*name) {
            let file = FileText {
                name: (*name).to_owned(),
                media_type: (*media_type).to_owned(),
                text: text.clone(),
            };
            entries.push(file.entry());
            let carried: usize = texts.iter().map(|t: &FileText| t.text.len()).sum();
            if carried + text.len() <= MAX_EVIDENCE_TEXT_BYTES {
                texts.push(file);
            }
        }
    }
    (entries, texts)
}

/// A quantity of the evidence.
pub(crate) fn quantity(name: impl Into<String>, kind: QuantityKind, value: f64, unit: &str) -> Quantity {
    Quantity {
        name: name.into(),
        kind,
        value,
        unit: unit.to_owned(),
    }
}

/// `NotFound` for a tool this server does not have.
pub(crate) fn unknown_tool(tool: &str) -> PortError {
    PortError::new(PortErrorKind::NotFound, format!("unknown tool: {tool}"))
}

/// The last 4000 bytes of a program's output (whole characters).
pub(crate) fn tail(text: &str) -> String {
    let start = text.len().saturating_sub(4000);
    let start = (start..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].to_owned()
}

/// How long a run took, in milliseconds.
pub(crate) fn millis(run: &RunOutput) -> u64 {
    u64::try_from(run.elapsed.as_millis()).unwrap_or(u64::MAX)
}

/// The hex SHA-256 of an input, so a result names exactly what was computed.
pub(crate) fn sha256(text: &str) -> String {
    metaforge_ports::sha256_hex(text)
}
