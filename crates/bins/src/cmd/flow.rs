//! `metaforge flow …`: the design-flow catalogue, validation, hashing, diffing and tailoring,
//! over the same domain functions the gateway serves.
//!
//! Exit codes: 0 valid (or proposed), 1 invariant violations (or a result that is not a
//! proposal: invalid or needs_input), 2 unusable input — with a message naming the file and
//! `line:col` when the reader knows where it gave up.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use metaforge_domain::flow::{
    self, CatalogueEntry, DocumentError, Flow, FlowContext, OperationList, Syntax, TailorMode, TailorResult,
    TailorStatus, Violation,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Arguments of `metaforge flow`.
#[derive(Debug, Args)]
pub(crate) struct FlowArgs {
    /// The flow command.
    #[command(subcommand)]
    command: FlowCommand,
}

/// The `flow` subcommands.
#[derive(Debug, Subcommand)]
enum FlowCommand {
    /// List every built-in flow: label, version, phases, gates, deliverables, disciplines, and
    /// whether it passes its own invariants.
    List {
        /// Print the catalogue as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print one built-in flow (its YAML source, or JSON with --json).
    Show {
        /// Template id, e.g. design_v1.
        id: String,
        /// Print the parsed flow as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check a flow file against every invariant (exit 0 valid, 1 violations, 2 unusable input).
    Validate {
        /// The flow, YAML or JSON (by extension).
        file: PathBuf,
        /// A request context (manufacturing route, maturity, loads) to validate under.
        #[arg(long)]
        context: Option<PathBuf>,
        /// Print `{"valid": bool, "violations": [{"rule","phase","message"}]}`.
        #[arg(long)]
        json: bool,
    },
    /// Print the content hash (SHA-256 of the canonical JSON) of a flow file.
    Hash {
        /// The flow, YAML or JSON.
        file: PathBuf,
    },
    /// Print the prose diff of a flow against a base (a file, or a built-in template id).
    Diff {
        /// The base: a flow file, or a built-in template id.
        base: String,
        /// The changed flow.
        file: PathBuf,
        /// Print the lines as a JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Tailor a built-in template by an operations file under a request context.
    Tailor {
        /// Template id, e.g. mech_v1.
        #[arg(long)]
        template: String,
        /// Operations: a list of {op, phase, value?, rationale} (or {"operations": [...]}).
        #[arg(long)]
        ops: PathBuf,
        /// The request context; without one the required questions are returned.
        #[arg(long)]
        context: Option<PathBuf>,
        /// Caller-proposed mode: any bad operation refuses the proposal (default: lenient).
        #[arg(long)]
        strict: bool,
        /// Print the full result as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Input the command cannot use; always exit 2, nothing else printed to stdout.
#[derive(Debug, thiserror::Error)]
enum InputError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{error}")]
    Located { path: String, error: DocumentError },
    #[error("{path}: {error}")]
    Unlocated { path: String, error: DocumentError },
    #[error(transparent)]
    Template(#[from] flow::TemplateError),
    /// Over a size limit the gateway and the sidecar would refuse too (issue 12).
    #[error("{path}: {error}")]
    TooLarge {
        path: String,
        error: flow::SizeLimitError,
    },
    #[error("could not produce output: {0}")]
    Output(String),
}

/// Runs a `flow` subcommand and returns its exit code.
pub(crate) fn run(args: FlowArgs) -> ExitCode {
    let outcome = match args.command {
        FlowCommand::List { json } => list(json),
        FlowCommand::Show { id, json } => show(&id, json),
        FlowCommand::Validate { file, context, json } => validate(&file, context.as_deref(), json),
        FlowCommand::Hash { file } => hash(&file),
        FlowCommand::Diff { base, file, json } => diff(&base, &file, json),
        FlowCommand::Tailor {
            template,
            ops,
            context,
            strict,
            json,
        } => tailor(&template, &ops, context.as_deref(), strict, json),
    };
    match outcome {
        Ok(Verdict::Clean) => ExitCode::SUCCESS,
        Ok(Verdict::Violations) => ExitCode::from(1),
        Err(e) => {
            // Nothing useful can be done if stderr is gone; the exit code still says it failed.
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::from(2)
        }
    }
}

/// What a successful command found.
enum Verdict {
    Clean,
    Violations,
}

fn emit(text: &str) {
    // A closed pipe (e.g. `| head`) is not an error worth a panic or a non-zero exit.
    let _ = std::io::stdout().write_all(text.as_bytes());
}

fn to_json<T: Serialize>(value: &T) -> Result<String, InputError> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| InputError::Output(e.to_string()))
}

fn read_document<T: DeserializeOwned>(path: &Path) -> Result<T, InputError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
        path: shown.clone(),
        source,
    })?;
    flow::parse_document(&text, Syntax::from_file_name(&shown)).map_err(|error| {
        if error.position().is_some() {
            InputError::Located { path: shown, error }
        } else {
            InputError::Unlocated { path: shown, error }
        }
    })
}

fn list(json: bool) -> Result<Verdict, InputError> {
    let entries = flow::catalogue();
    if json {
        emit(&to_json(&entries)?);
    } else {
        let mut out = String::new();
        for entry in &entries {
            describe_entry(&mut out, entry);
        }
        emit(&out);
    }
    Ok(Verdict::Clean)
}

fn describe_entry(out: &mut String, entry: &CatalogueEntry) {
    let default = if entry.default { "  [default]" } else { "" };
    let startable = if entry.startable {
        "startable"
    } else {
        "UNSTARTABLE"
    };
    let _ = writeln!(
        out,
        "{}  {}  \"{}\"  v{}  {startable}{default}",
        entry.id, entry.title, entry.label, entry.version
    );
    let phases: Vec<String> = entry
        .phases
        .iter()
        .map(|p| {
            let gate = entry
                .gates
                .iter()
                .find(|g| g.phase == p.id)
                .map(|g| format!(" [{}]", short_gate(&g.name)))
                .unwrap_or_default();
            let conditional = if p.condition.is_some() { "?" } else { "" };
            format!("{}{conditional}{gate}", p.id)
        })
        .collect();
    let _ = writeln!(
        out,
        "    phases ({}):   {}",
        entry.phases.len(),
        phases.join(" → ")
    );
    for gate in &entry.gates {
        let who = if gate.auto_approve {
            "auto-approved"
        } else {
            "human"
        };
        let _ = writeln!(
            out,
            "    gate:          {} on {} ({who}) requires {}",
            gate.name,
            gate.phase,
            gate.required_deliverables.join(", ")
        );
    }
    let _ = writeln!(out, "    deliverables:  {}", entry.deliverables.join(", "));
    let _ = writeln!(out, "    disciplines:   {}", entry.disciplines.join(", "));
    if let Some(hash) = &entry.content_hash {
        let _ = writeln!(out, "    content hash:  {hash}");
    }
    if let Some(err) = &entry.load_error {
        let _ = writeln!(out, "    load error:    {err}");
    }
    for v in &entry.violations {
        let _ = writeln!(out, "    violation:     {}", violation_line(v));
    }
    out.push('\n');
}

fn short_gate(name: &str) -> String {
    flow::Gate {
        name: name.to_owned(),
        auto_approve: false,
        criteria: Vec::new(),
    }
    .short_name()
    .to_owned()
}

fn violation_line(v: &Violation) -> String {
    match &v.phase {
        Some(phase) => format!("[{}] phase '{phase}': {}", v.rule, v.message),
        None => format!("[{}] {}", v.rule, v.message),
    }
}

fn show(id: &str, json: bool) -> Result<Verdict, InputError> {
    if json {
        emit(&to_json(&flow::template(id)?)?);
    } else {
        emit(flow::template_source(id)?);
    }
    Ok(Verdict::Clean)
}

fn read_context(path: Option<&Path>) -> Result<Option<FlowContext>, InputError> {
    path.map(read_document::<FlowContext>).transpose()
}

fn validate(file: &Path, context: Option<&Path>, json: bool) -> Result<Verdict, InputError> {
    let flow: Flow = read_document(file)?;
    flow::check_flow_size(&flow).map_err(|error| InputError::TooLarge {
        path: file.display().to_string(),
        error,
    })?;
    let context = read_context(context)?;
    let report = flow::validation_report(&flow, context.as_ref());
    if json {
        emit(&to_json(&report)?);
    } else if report.valid {
        emit(&format!(
            "{}: valid ({} v{}, {} phases)\n",
            file.display(),
            flow.id,
            flow.version,
            flow.phases.len()
        ));
    } else {
        let mut out = format!("{}: {} violation(s)\n", file.display(), report.violations.len());
        for v in &report.violations {
            let _ = writeln!(out, "  {}", violation_line(v));
        }
        emit(&out);
    }
    Ok(if report.valid {
        Verdict::Clean
    } else {
        Verdict::Violations
    })
}

fn hash(file: &Path) -> Result<Verdict, InputError> {
    let flow: Flow = read_document(file)?;
    let hash = flow::content_hash(&flow).map_err(|e| InputError::Output(e.to_string()))?;
    emit(&format!("{hash}\n"));
    Ok(Verdict::Clean)
}

fn diff(base: &str, file: &Path, json: bool) -> Result<Verdict, InputError> {
    let base_path = Path::new(base);
    let base_flow: Flow = if base_path.exists() {
        read_document(base_path)?
    } else {
        flow::template(base)?
    };
    let changed: Flow = read_document(file)?;
    let lines = flow::prose_diff(&base_flow, &changed);
    if json {
        emit(&to_json(&lines)?);
    } else if lines.is_empty() {
        emit("no changes\n");
    } else {
        emit(&(lines.join("\n") + "\n"));
    }
    Ok(Verdict::Clean)
}

fn tailor(
    template: &str,
    ops: &Path,
    context: Option<&Path>,
    strict: bool,
    json: bool,
) -> Result<Verdict, InputError> {
    let base = flow::template(template)?;
    let operations = read_document::<OperationList>(ops)?.into_operations();
    flow::check_operation_count(operations.len()).map_err(|error| InputError::TooLarge {
        path: ops.display().to_string(),
        error,
    })?;
    let context = read_context(context)?;
    let mode = if strict {
        TailorMode::Strict
    } else {
        TailorMode::Lenient
    };
    let result = flow::tailor(&base, &operations, context.as_ref(), mode);
    if json {
        emit(&to_json(&result)?);
    } else {
        emit(&describe_result(&result));
    }
    Ok(if result.status == TailorStatus::Proposed {
        Verdict::Clean
    } else {
        Verdict::Violations
    })
}

fn describe_result(result: &TailorResult) -> String {
    let mut out = String::new();
    let status = result.status.as_str();
    let _ = writeln!(
        out,
        "status: {status}  (template {} v{})",
        result.template_id, result.template_version
    );
    for q in &result.questions {
        let options = q
            .options
            .as_ref()
            .map(|o| format!(" [{}]", o.join("|")))
            .unwrap_or_default();
        let _ = writeln!(out, "question {} → {}{options}: {}", q.id, q.field, q.question);
    }
    for a in &result.applied {
        let _ = writeln!(out, "applied: {} on '{}' — {}", a.op, a.phase, a.rationale);
    }
    for s in result.skipped.iter().chain(&result.refused) {
        let verb = if result.refused.is_empty() {
            "skipped"
        } else {
            "refused"
        };
        let _ = writeln!(out, "{verb}: #{} {}: {}", s.index, s.op, s.reason);
    }
    for v in &result.violations {
        let _ = writeln!(out, "violation: {}", violation_line(v));
    }
    if !result.diff.is_empty() {
        let _ = writeln!(out, "diff:");
        for line in &result.diff {
            let _ = writeln!(out, "  {line}");
        }
    }
    if let Some(flow) = &result.flow {
        let ids: Vec<&str> = flow.phases.iter().map(|p| p.id.as_str()).collect();
        let _ = writeln!(out, "phases: {}", ids.join(" → "));
    }
    if let Some(hash) = &result.content_hash {
        let _ = writeln!(out, "content hash: {hash}");
    }
    out
}
