//! Tailoring a template to a project by a closed set of operations (FORGE-398, FORGE-463,
//! FORGE-481).
//!
//! Nobody writes a flow: a model (the server's generator, lenient) or a caller (strict) proposes
//! operations, and the server applies them to a versioned template. Tailoring may make a flow
//! stricter, never laxer: removing a gate, removing a deliverable or switching enforcement off is
//! not expressible. Dropping a whole phase is, and the diff shouts it. The invariants still run
//! on the result, with its context, before it is returned.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::context::{FlowContext, ManufacturingRoute, Question, required_questions};
use super::diff::prose_diff;
use super::freeze::content_hash;
use super::invariants::{Violation, upstream_of, validate};
use super::model::{Flow, Gate, Phase};
use super::templates::{TemplateError, template};

/// The operation kinds a model or caller may propose.
pub const OPERATION_KINDS: &[&str] = &[
    "drop_phase",
    "add_deliverable",
    "set_disciplines",
    "set_model",
    "declare_items",
    "set_dependencies",
    "set_condition",
];

/// The operation only the server may apply: a model cannot add phases.
pub const SERVER_ONLY_OPERATION: &str = "add_route_selection";

/// The id of the phase an undecided manufacturing route inserts.
pub const ROUTE_SELECTION_PHASE: &str = "route_selection";

/// Artifacts that make a phase a geometry phase (route selection goes in before the first one).
pub const GEOMETRY_ARTIFACTS: &[&str] = &["cad_model", "drawing"];

/// One proposed operation, as written by a model or a caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Operation {
    /// The operation kind (one of [`OPERATION_KINDS`]).
    pub op: String,
    /// The phase it applies to.
    #[serde(default)]
    pub phase: Option<String>,
    /// The operation's argument (a string or a list of strings, depending on the kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Why; an operation without one cannot be reviewed and is not applied.
    #[serde(default)]
    pub rationale: Option<String>,
}

/// An operations document: a bare list, or an object with an `operations` list.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum OperationList {
    /// `[ {op, phase, value, rationale}, … ]`
    Bare(Vec<Operation>),
    /// `{ "operations": [ … ] }`
    Wrapped {
        /// The operations.
        operations: Vec<Operation>,
    },
}

impl OperationList {
    /// The operations, whichever way they were written.
    pub fn into_operations(self) -> Vec<Operation> {
        match self {
            Self::Bare(ops) | Self::Wrapped { operations: ops } => ops,
        }
    }
}

/// Who proposed the operations, which decides how problems are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TailorMode {
    /// The server's own generator: bad operations are dropped and listed as skipped.
    Lenient,
    /// Caller-proposed: any bad operation refuses the whole proposal, listing every problem.
    Strict,
}

/// The outcome of a tailoring request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TailorStatus {
    /// A valid tailored flow, ready to be stored as a version and held for approval.
    Proposed,
    /// Required context is missing; the questions say what to ask. No flow is produced.
    NeedsInput,
    /// The operations were refused (strict) or the result breaks an invariant.
    Invalid,
}

impl TailorStatus {
    /// The snake_case name used in JSON and CLI output.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proposed => "proposed",
            Self::NeedsInput => "needs_input",
            Self::Invalid => "invalid",
        }
    }
}

/// An operation that changed the flow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AppliedOperation {
    /// Position in the submitted list; `None` for the server's own operation.
    pub index: Option<usize>,
    /// Operation kind.
    pub op: String,
    /// The phase it applied to.
    pub phase: String,
    /// Why it was proposed.
    pub rationale: String,
    /// Server-written basis: the manufacturing context the change was made under.
    pub basis: String,
}

/// An operation that was not applied, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OperationProblem {
    /// Position in the submitted list.
    pub index: usize,
    /// Operation kind as written.
    pub op: String,
    /// Phase as written.
    pub phase: Option<String>,
    /// What is wrong with it.
    pub reason: String,
}

/// What a tailoring request produced: everything a gateway, the sidecar or the CLI returns.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TailorResult {
    /// proposed, needs_input or invalid.
    pub status: TailorStatus,
    /// lenient or strict.
    pub mode: TailorMode,
    /// The template tailored.
    pub template_id: String,
    /// Its version.
    pub template_version: String,
    /// Operations applied, in order.
    pub applied: Vec<AppliedOperation>,
    /// Lenient mode: operations discarded or skipped, with reasons.
    pub skipped: Vec<OperationProblem>,
    /// Strict mode: the problems that refused the proposal.
    pub refused: Vec<OperationProblem>,
    /// Invariant violations of the tailored flow under its context.
    pub violations: Vec<Violation>,
    /// Required questions (non-empty exactly when status is needs_input).
    pub questions: Vec<Question>,
    /// Prose diff against the template.
    pub diff: Vec<String>,
    /// Content hash of the tailored flow, when proposed.
    pub content_hash: Option<String>,
    /// The tailored flow (absent for needs_input and strict refusals).
    pub flow: Option<Flow>,
}

/// A parsed, checked operation.
#[derive(Debug, Clone, PartialEq)]
enum Change {
    DropPhase,
    AddDeliverables(Vec<String>),
    SetDisciplines(Vec<String>),
    SetModel(String),
    DeclareItems(Vec<String>),
    SetDependencies(Vec<String>),
    SetCondition(String),
}

/// Tailors the built-in template `template_id`; an unknown template is an error in every mode.
pub fn propose(
    template_id: &str,
    operations: &[Operation],
    context: Option<&FlowContext>,
    mode: TailorMode,
) -> Result<TailorResult, TemplateError> {
    Ok(tailor(&template(template_id)?, operations, context, mode))
}

/// Applies `operations` to `base` under `context` in `mode`, inserts route selection when the
/// route is undecided, and validates the result with its context.
pub fn tailor(
    base: &Flow,
    operations: &[Operation],
    context: Option<&FlowContext>,
    mode: TailorMode,
) -> TailorResult {
    let mut result = TailorResult {
        status: TailorStatus::Invalid,
        mode,
        template_id: base.id.clone(),
        template_version: base.version.clone(),
        applied: Vec::new(),
        skipped: Vec::new(),
        refused: Vec::new(),
        violations: Vec::new(),
        questions: required_questions(context),
        diff: Vec::new(),
        content_hash: None,
        flow: None,
    };
    if !result.questions.is_empty() {
        result.status = TailorStatus::NeedsInput;
        return result;
    }
    let empty = FlowContext::default();
    let ctx = context.unwrap_or(&empty);
    let basis = ctx.basis();
    let mut flow = base.clone();
    let mut problems = Vec::new();
    for (index, operation) in operations.iter().enumerate() {
        let problem = |reason: String| OperationProblem {
            index,
            op: operation.op.clone(),
            phase: operation.phase.clone(),
            reason,
        };
        match check(operation, &flow) {
            Err(reason) => problems.push(problem(reason)),
            Ok((phase, change, rationale)) => {
                apply(&mut flow, &phase, change);
                result.applied.push(AppliedOperation {
                    index: Some(index),
                    op: operation.op.clone(),
                    phase,
                    rationale,
                    basis: basis.clone(),
                });
            }
        }
    }
    if mode == TailorMode::Strict && !problems.is_empty() {
        result.applied.clear();
        result.refused = problems;
        return result;
    }
    result.skipped = problems;
    if ctx.route() == Some(ManufacturingRoute::Undecided)
        && let Some(geometry) = add_route_selection(&mut flow)
    {
        result.applied.push(AppliedOperation {
            index: None,
            op: SERVER_ONLY_OPERATION.to_owned(),
            phase: ROUTE_SELECTION_PHASE.to_owned(),
            rationale: format!(
                "the manufacturing route is undecided: a person chooses it before the first geometry phase '{geometry}'"
            ),
            basis,
        });
    }
    result.violations = validate(&flow, context);
    result.diff = prose_diff(base, &flow);
    if result.violations.is_empty() {
        result.status = TailorStatus::Proposed;
        result.content_hash = content_hash(&flow).ok();
    }
    result.flow = Some(flow);
    result
}

/// Checks one operation against the current flow: `(phase, change, rationale)` or the reason
/// it cannot be applied.
fn check(operation: &Operation, flow: &Flow) -> Result<(String, Change, String), String> {
    let kind = operation.op.trim();
    if kind == SERVER_ONLY_OPERATION {
        return Err(format!(
            "'{SERVER_ONLY_OPERATION}' is server-only: phases cannot be added by a proposal"
        ));
    }
    if !OPERATION_KINDS.contains(&kind) {
        return Err(format!(
            "unknown operation '{kind}' (allowed: {})",
            OPERATION_KINDS.join(", ")
        ));
    }
    let rationale = operation
        .rationale
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| {
            "operation has no rationale; a change nobody can explain cannot be reviewed".to_owned()
        })?;
    let phase = operation
        .phase
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| "operation names no phase".to_owned())?;
    if flow.phase(phase).is_none() {
        return Err(format!("unknown phase '{phase}'"));
    }
    let value = operation.value.as_ref();
    let change = match kind {
        "drop_phase" => Change::DropPhase,
        "add_deliverable" => Change::AddDeliverables(non_empty(string_list(value, "add_deliverable")?)?),
        "set_disciplines" => Change::SetDisciplines(non_empty(string_list(value, "set_disciplines")?)?),
        "declare_items" => Change::DeclareItems(non_empty(string_list(value, "declare_items")?)?),
        "set_model" => Change::SetModel(single_string(value, "set_model")?),
        "set_condition" => Change::SetCondition(single_string(value, "set_condition")?),
        "set_dependencies" => {
            let deps = string_list(value, "set_dependencies")?;
            for dep in &deps {
                if dep == phase {
                    return Err(format!("phase '{phase}' cannot depend on itself"));
                }
                if flow.phase(dep).is_none() {
                    return Err(format!("set_dependencies names unknown phase '{dep}'"));
                }
            }
            Change::SetDependencies(deps)
        }
        other => return Err(format!("unknown operation '{other}'")),
    };
    Ok((phase.to_owned(), change, rationale.to_owned()))
}

fn string_list(value: Option<&Value>, kind: &str) -> Result<Vec<String>, String> {
    let bad = || format!("{kind} needs a value that is a string or a list of strings");
    let mut out: Vec<String> = Vec::new();
    let mut push = |s: &str| {
        let s = s.trim();
        if !s.is_empty() && !out.iter().any(|o| o == s) {
            out.push(s.to_owned());
        }
    };
    match value {
        Some(Value::String(s)) => push(s),
        Some(Value::Array(items)) => {
            for item in items {
                push(item.as_str().ok_or_else(bad)?);
            }
        }
        _ => return Err(bad()),
    }
    Ok(out)
}

fn non_empty(items: Vec<String>) -> Result<Vec<String>, String> {
    if items.is_empty() {
        Err("the value lists nothing".to_owned())
    } else {
        Ok(items)
    }
}

fn single_string(value: Option<&Value>, kind: &str) -> Result<String, String> {
    match value {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        _ => Err(format!("{kind} needs a non-empty string value")),
    }
}

fn push_unique(into: &mut Vec<String>, items: &[String]) {
    for item in items {
        if !into.contains(item) {
            into.push(item.clone());
        }
    }
}

fn apply(flow: &mut Flow, phase_id: &str, change: Change) {
    match change {
        Change::DropPhase => drop_phase(flow, phase_id),
        Change::AddDeliverables(wanted) => {
            let produced_upstream = upstream_artifacts(flow, phase_id);
            if let Some(phase) = flow.phase_mut(phase_id) {
                push_unique(&mut phase.required_deliverables, &wanted);
                // The phase is expected to write what its own gate now demands, unless an
                // unconditional upstream phase already produces it.
                let missing: Vec<String> = wanted
                    .into_iter()
                    .filter(|w| !produced_upstream.contains(w))
                    .collect();
                push_unique(&mut phase.expected_artifacts, &missing);
            }
        }
        Change::SetDisciplines(disciplines) => {
            if let Some(phase) = flow.phase_mut(phase_id) {
                phase.disciplines = disciplines;
            }
        }
        Change::SetModel(model) => {
            if let Some(phase) = flow.phase_mut(phase_id) {
                phase.model = Some(model);
            }
        }
        Change::DeclareItems(items) => {
            if let Some(phase) = flow.phase_mut(phase_id) {
                push_unique(&mut phase.items, &items);
            }
        }
        Change::SetDependencies(deps) => {
            if let Some(phase) = flow.phase_mut(phase_id) {
                phase.depends_on = deps;
            }
        }
        Change::SetCondition(condition) => {
            if let Some(phase) = flow.phase_mut(phase_id) {
                phase.condition = Some(condition);
            }
        }
    }
}

/// Artifacts produced by unconditional phases upstream of `phase_id` (upstream as the
/// invariants read it: [`upstream_of`]).
fn upstream_artifacts(flow: &Flow, phase_id: &str) -> Vec<String> {
    let upstream = upstream_of(flow, phase_id);
    let mut artifacts = Vec::new();
    for p in &flow.phases {
        if p.id != phase_id && p.condition.is_none() && upstream.contains(p.id.as_str()) {
            push_unique(&mut artifacts, &p.expected_artifacts);
        }
    }
    artifacts
}

/// Removes a phase; whatever depended on it now depends on what it depended on, so the graph
/// stays connected and the drop is the only change.
fn drop_phase(flow: &mut Flow, phase_id: &str) {
    let inherited = flow
        .phase(phase_id)
        .map(|p| p.depends_on.clone())
        .unwrap_or_default();
    flow.phases.retain(|p| p.id != phase_id);
    for phase in &mut flow.phases {
        if phase.depends_on.iter().any(|d| d == phase_id) {
            let mut rewired = Vec::new();
            for dep in std::mem::take(&mut phase.depends_on) {
                if dep == phase_id {
                    push_unique(&mut rewired, &inherited);
                } else if !rewired.contains(&dep) {
                    rewired.push(dep);
                }
            }
            rewired.retain(|d| d != &phase.id);
            phase.depends_on = rewired;
        }
    }
}

/// Inserts the human-gated `route_selection` phase immediately before the first geometry phase
/// (first in list order producing or demanding a cad_model or drawing). Returns that phase's id,
/// or `None` when the flow has no geometry phase or already selects a route.
pub fn add_route_selection(flow: &mut Flow) -> Option<String> {
    if flow.phase(ROUTE_SELECTION_PHASE).is_some() {
        return None;
    }
    let position = flow
        .phases
        .iter()
        .position(|p| GEOMETRY_ARTIFACTS.iter().any(|a| p.commits(a)))?;
    let geometry = flow.phases.get_mut(position)?;
    let geometry_id = geometry.id.clone();
    let depends_on = std::mem::replace(&mut geometry.depends_on, vec![ROUTE_SELECTION_PHASE.to_owned()]);
    let decision = "manufacturing_route_decision".to_owned();
    flow.phases.insert(
        position,
        Phase {
            id: ROUTE_SELECTION_PHASE.to_owned(),
            title: "Manufacturing Route Selection".to_owned(),
            disciplines: vec!["manufacturing".to_owned()],
            depends_on,
            condition: None,
            expected_artifacts: vec![decision.clone()],
            required_deliverables: vec![decision],
            enforce_deliverables: true,
            gate: Some(Gate {
                name: "Manufacturing Route Selection".to_owned(),
                auto_approve: false,
                criteria: vec![
                    "The manufacturing route (in house or vendor) is chosen and justified".to_owned(),
                    "Process and material choices follow from the chosen route's capabilities".to_owned(),
                ],
            }),
            model: None,
            items: Vec::new(),
        },
    );
    Some(geometry_id)
}
