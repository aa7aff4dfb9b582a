//! The server's flow generator (FORGE-398, FORGE-463, FORGE-468): the prompt it sends, the
//! lenient reading of what the model answers, and the tailoring that follows.
//!
//! The model never writes a flow. It names a template and proposes operations from the closed
//! set; the server applies them leniently (a bad operation is skipped with its reason, so a model
//! that misremembers one phase id does not lose the changes it got right) and then runs every
//! invariant with the request's context. A phase model that cannot be routed costs only that
//! `set_model` operation, never the proposal. The model may also add at most
//! [`MAX_MODEL_QUESTIONS`] product-specific questions; the required questions stay the server's.
//!
//! Pure: the app crate makes the call through the provider pipeline and hands the answer's text
//! here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::context::{FlowContext, ManufacturingRoute, Question, TargetMaturity};
use super::model::Flow;
use super::tailor::{Operation, OperationProblem, TailorMode, TailorResult, tailor};
use super::templates::{DEFAULT_TEMPLATE_ID, TEMPLATE_SOURCES, template};

/// The routing role every generator call is made (and its tokens attributed) under.
pub const GENERATOR_ROLE: &str = "flow_generator";

/// At most this many product-specific questions from the model are kept.
pub const MAX_MODEL_QUESTIONS: usize = 3;

/// The operations the generator is told about (the seed's closed set for a model).
const PROMPT_OPERATIONS: &[(&str, &str)] = &[
    (
        "drop_phase",
        "the phase does not apply to this product at all (no value)",
    ),
    (
        "add_deliverable",
        "value: an artifact name or a list of them; the phase's gate then demands it",
    ),
    (
        "set_disciplines",
        "value: the list of disciplines the phase fans out into",
    ),
    (
        "set_model",
        "value: \"provider:model\" the phase runs on (only when the phase needs a different model)",
    ),
    ("declare_items", "value: the list of named parts the phase writes"),
];

/// Where a question comes from: the server's required set, or the model's product-specific
/// additions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum QuestionSource {
    /// MetaForge's own deterministic questions (FORGE-463).
    Server,
    /// A product-specific question the generator model added.
    Model,
}

/// A question as the person sees it, whoever asked it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AskedQuestion {
    /// Stable id: the server's ids, or `model_1` … for the model's.
    pub id: String,
    /// The question, for a person.
    pub question: String,
    /// Why it matters.
    pub why: String,
    /// choice, list_group or text.
    pub answer_type: String,
    /// The allowed answers, for choices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<String>>,
    /// The request field the answer goes in.
    pub field: String,
    /// server or model.
    pub source: QuestionSource,
}

impl From<&Question> for AskedQuestion {
    fn from(q: &Question) -> Self {
        Self {
            id: q.id.as_str().to_owned(),
            question: q.question.to_owned(),
            why: q.why.to_owned(),
            answer_type: q.answer_type.to_owned(),
            options: q
                .options
                .as_ref()
                .map(|o| o.iter().map(|s| (*s).to_owned()).collect()),
            field: q.field.to_owned(),
            source: QuestionSource::Server,
        }
    }
}

/// The ids of the model's product-specific questions start with this (`model_1` …); their answers
/// refine the intent rather than fill a context field.
pub const MODEL_QUESTION_PREFIX: &str = "model_";

/// A product-specific question the model asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelQuestion {
    /// The question.
    pub question: String,
    /// Why the model asks it, when it said.
    pub why: Option<String>,
}

impl ModelQuestion {
    /// The question as asked: numbered `model_<n>`, free text, answered in the intent.
    pub fn asked(&self, number: usize) -> AskedQuestion {
        AskedQuestion {
            id: format!("{MODEL_QUESTION_PREFIX}{number}"),
            question: self.question.clone(),
            why: self
                .why
                .clone()
                .unwrap_or_else(|| "The generator asks this about your product.".to_owned()),
            answer_type: "text".to_owned(),
            options: None,
            field: "intent".to_owned(),
            source: QuestionSource::Model,
        }
    }
}

/// The server's required questions followed by the model's (already capped), in that order.
pub fn questions_to_ask(required: &[Question], model: &[ModelQuestion]) -> Vec<AskedQuestion> {
    required
        .iter()
        .map(AskedQuestion::from)
        .chain(model.iter().enumerate().map(|(i, q)| q.asked(i + 1)))
        .collect()
}

/// The two parts of a generator prompt: the stable rules (cacheable) and this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratorPrompt {
    /// Rules, templates and the answer format; identical for every request of a build.
    pub system: String,
    /// The intent and context of this request.
    pub user: String,
}

/// What the generator is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptPurpose {
    /// The context is complete: propose operations (and optional questions).
    Tailor,
    /// The server is still asking its required questions: only product-specific questions.
    QuestionsOnly,
}

/// Builds the generator prompt for `intent` under `context`. With [`PromptPurpose::QuestionsOnly`]
/// the prompt lists the server's open questions so the model does not repeat them.
pub fn generator_prompt(
    intent: &str,
    context: &FlowContext,
    requirements: Option<&Value>,
    purpose: PromptPurpose,
    open_questions: &[Question],
) -> GeneratorPrompt {
    GeneratorPrompt {
        system: system_prompt(),
        user: user_prompt(intent, context, requirements, purpose, open_questions),
    }
}

fn system_prompt() -> String {
    let mut out = String::from(
        "You tailor a MetaForge design flow to one hardware project. You do not write a flow: you \
         name one of the templates below and propose operations from a closed set; the server \
         applies them to that versioned template and checks the result.\n\n",
    );
    out.push_str("Templates (phase id: title [disciplines] -> artifacts it produces; gate):\n");
    for (id, _) in TEMPLATE_SOURCES {
        let Ok(flow) = template(id) else { continue };
        describe_template(&flow, &mut out);
    }
    out.push_str("\nOperations, each an object {\"op\", \"phase\", \"value\", \"rationale\"}:\n");
    for (op, effect) in PROMPT_OPERATIONS {
        out.push_str(&format!("- {op}: {effect}\n"));
    }
    out.push_str(
        "\nRules:\n\
         1. Every operation carries a rationale saying why, for the person who approves it; an operation without one is discarded.\n\
         2. You cannot add phases, remove a gate, remove a deliverable or switch enforcement off. Tailoring makes a flow stricter, never laxer. Drop a phase only when it does not apply to this product at all.\n\
         3. The flow is manufacturing-led: derive process and material choices from the stated manufacturing context (route, processes, machines, stock materials). Never assume equipment or materials the person did not state.\n\
         4. Do not choose a manufacturing route. When it is undecided the server adds a gated route-selection phase itself.\n\
         5. When the loads are unknown, keep every simulation and verification phase: nothing may replace them.\n\
         6. You may add at most three product-specific questions. Never ask about the route, the capabilities, the target maturity or the loads: the server asks those.\n\
         7. Answer with one JSON object and nothing else:\n\
         {\"template\": \"<template id>\", \"operations\": [{\"op\": \"drop_phase\", \"phase\": \"<phase id>\", \"rationale\": \"<why>\"}], \"questions\": [{\"question\": \"<question>\", \"why\": \"<why it matters>\"}]}\n",
    );
    out
}

fn describe_template(flow: &Flow, out: &mut String) {
    out.push_str(&format!("* {} — {} ({})\n", flow.id, flow.title, flow.label));
    for phase in &flow.phases {
        let gate = phase.gate.as_ref().map_or_else(String::new, |g| {
            format!("; gate '{}'{}", g.name, if g.is_human() { "" } else { " (auto)" })
        });
        let condition = phase
            .condition
            .as_deref()
            .map_or_else(String::new, |c| format!("; only when {c}"));
        out.push_str(&format!(
            "  - {}: {} [{}] -> [{}]{gate}{condition}\n",
            phase.id,
            phase.title,
            phase.disciplines.join(", "),
            phase.expected_artifacts.join(", "),
        ));
    }
}

fn user_prompt(
    intent: &str,
    context: &FlowContext,
    requirements: Option<&Value>,
    purpose: PromptPurpose,
    open_questions: &[Question],
) -> String {
    let mc = context.manufacturing_context.clone().unwrap_or_default();
    let route = match mc.route {
        None => "not stated",
        Some(ManufacturingRoute::InHouse) => "in house",
        Some(ManufacturingRoute::Vendor) => "vendor",
        Some(ManufacturingRoute::Undecided) => "undecided",
    };
    let maturity = match context.target_maturity {
        None => "not stated",
        Some(TargetMaturity::Concept) => "concept",
        Some(TargetMaturity::SimValidated) => "validated in simulation",
        Some(TargetMaturity::PhysicallyValidated) => "validated physically",
        Some(TargetMaturity::Released) => "released",
    };
    let list = |items: &[String]| {
        if items.is_empty() {
            "none stated".to_owned()
        } else {
            items.join("; ")
        }
    };
    let mut out = format!("Intent: {}\n", intent.trim());
    out.push_str(&format!("Manufacturing route: {route}\n"));
    out.push_str(&format!("Processes: {}\n", list(&mc.processes)));
    out.push_str(&format!("Machines: {}\n", list(&mc.machines)));
    out.push_str(&format!("Stock materials: {}\n", list(&mc.stock_materials)));
    if let Some(quantity) = mc.production_quantity {
        out.push_str(&format!("Production quantity: {quantity}\n"));
    }
    out.push_str(&format!("Target maturity: {maturity}\n"));
    let loads = context.loads_and_use.as_deref().map_or("not stated", str::trim);
    out.push_str(&format!(
        "Loads and use: {loads}{}\n",
        if context.loads_unknown() { " (unknown)" } else { "" }
    ));
    if let Some(budget) = &context.budget {
        out.push_str(&format!("Budget: {}\n", value_text(budget)));
    }
    match requirements {
        Some(r) => out.push_str(&format!("Requirements: {}\n", value_text(r))),
        None => out.push_str("Requirements: none sent yet (the requirements phase records them)\n"),
    }
    if purpose == PromptPurpose::QuestionsOnly {
        out.push_str(
            "\nThe context is incomplete, so the server is asking the person these questions first:\n",
        );
        for q in open_questions {
            out.push_str(&format!("- {}\n", q.question));
        }
        out.push_str(
            "Do not propose operations now. Answer {\"operations\": [], \"questions\": [...]} with at most three product-specific questions that are not the ones above, or none.\n",
        );
    }
    out
}

fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What the model answered, read leniently.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GeneratorAnswer {
    /// The template the model named, as written.
    pub template: Option<String>,
    /// The operations, each with its position in the model's list.
    pub operations: Vec<(usize, Operation)>,
    /// List entries that were not operations at all, with why.
    pub malformed: Vec<OperationProblem>,
    /// Product-specific questions, capped at [`MAX_MODEL_QUESTIONS`].
    pub questions: Vec<ModelQuestion>,
}

/// Why a model's answer could not be read as a proposal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The text holds no JSON object or list.
    #[error("the generator's answer holds no JSON proposal")]
    NoJson,
    /// JSON was found but it is neither an operation list nor an object with one.
    #[error("the generator's answer is JSON but not a proposal: {0}")]
    NotAProposal(String),
}

/// Reads the model's answer leniently: prose around the JSON, code fences, a bare operation list,
/// `operation`/`reason` spellings and non-object entries are all tolerated; entries that are not
/// operations are listed in `malformed`. Questions beyond [`MAX_MODEL_QUESTIONS`] are dropped.
pub fn parse_answer(text: &str) -> Result<GeneratorAnswer, AnswerError> {
    let value = first_json(text).ok_or(AnswerError::NoJson)?;
    let (template, operations, questions) = match &value {
        Value::Array(items) => (None, Some(items.as_slice()), None),
        Value::Object(map) => {
            let template = ["template", "template_id", "templateId"]
                .iter()
                .find_map(|k| map.get(*k))
                .and_then(Value::as_str)
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty());
            let operations = map.get("operations").and_then(Value::as_array).map(Vec::as_slice);
            let questions = map.get("questions").and_then(Value::as_array).map(Vec::as_slice);
            if template.is_none() && operations.is_none() && questions.is_none() {
                return Err(AnswerError::NotAProposal(
                    "it has no template, operations or questions".to_owned(),
                ));
            }
            (template, operations, questions)
        }
        _ => {
            return Err(AnswerError::NotAProposal(
                "it is neither an object nor a list".to_owned(),
            ));
        }
    };
    let mut answer = GeneratorAnswer {
        template,
        ..GeneratorAnswer::default()
    };
    for (index, entry) in operations.unwrap_or_default().iter().enumerate() {
        match operation_from(entry) {
            Ok(op) => answer.operations.push((index, op)),
            Err(reason) => answer.malformed.push(OperationProblem {
                index,
                op: entry
                    .get("op")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                phase: entry.get("phase").and_then(Value::as_str).map(str::to_owned),
                reason,
            }),
        }
    }
    for entry in questions.unwrap_or_default() {
        if answer.questions.len() == MAX_MODEL_QUESTIONS {
            break;
        }
        let question = match entry {
            Value::String(s) => Some(ModelQuestion {
                question: s.trim().to_owned(),
                why: None,
            }),
            Value::Object(map) => ["question", "text"]
                .iter()
                .find_map(|k| map.get(*k))
                .and_then(Value::as_str)
                .map(|q| ModelQuestion {
                    question: q.trim().to_owned(),
                    why: map
                        .get("why")
                        .and_then(Value::as_str)
                        .map(|w| w.trim().to_owned())
                        .filter(|w| !w.is_empty()),
                }),
            _ => None,
        };
        if let Some(q) = question
            && !q.question.is_empty()
            && !answer.questions.iter().any(|seen| seen.question == q.question)
        {
            answer.questions.push(q);
        }
    }
    Ok(answer)
}

fn operation_from(entry: &Value) -> Result<Operation, String> {
    let Value::Object(map) = entry else {
        return Err("the entry is not an object".to_owned());
    };
    let text = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| map.get(*k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let op = text(&["op", "operation", "type"]).ok_or_else(|| "the entry names no op".to_owned())?;
    Ok(Operation {
        op,
        phase: text(&["phase", "phase_id", "phaseId"]),
        value: ["value", "values"].iter().find_map(|k| map.get(*k)).cloned(),
        rationale: text(&["rationale", "reason", "why"]),
    })
}

/// The first JSON object or list in `text`: the whole text, else each `{`/`[` in turn until one
/// parses (so prose and code fences around it do not matter).
fn first_json(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(value @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str::<Value>(trimmed) {
        return Some(value);
    }
    for (start, ch) in trimmed.char_indices() {
        if ch != '{' && ch != '[' {
            continue;
        }
        let Some(rest) = trimmed.get(start..) else {
            continue;
        };
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        if let Some(Ok(value @ (Value::Object(_) | Value::Array(_)))) = values.next() {
            return Some(value);
        }
    }
    None
}

/// The generator's tailoring: the result plus what the reviewer should know about how the
/// model's answer was read.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratedTailoring {
    /// The lenient tailoring, with `skipped` covering malformed entries and unroutable models.
    pub result: TailorResult,
    /// Notes for the reviewer (e.g. an unknown template replaced by the default).
    pub notes: Vec<String>,
    /// The model's product-specific questions.
    pub questions: Vec<ModelQuestion>,
}

/// Applies the model's answer leniently under `context`. An unknown template falls back to the
/// default (noted); a `set_model` whose route cannot work is dropped, not the proposal; indices
/// in `applied` and `skipped` are positions in the model's own list.
pub fn tailor_generated(answer: &GeneratorAnswer, context: Option<&FlowContext>) -> GeneratedTailoring {
    let mut notes = Vec::new();
    let base = match answer.template.as_deref().map(template) {
        Some(Ok(flow)) => flow,
        named => {
            if let (Some(Err(_)), Some(name)) = (&named, answer.template.as_deref()) {
                notes.push(format!(
                    "the generator named template '{name}', which does not exist; {DEFAULT_TEMPLATE_ID} was tailored instead"
                ));
            } else {
                notes.push(format!(
                    "the generator named no template; {DEFAULT_TEMPLATE_ID} was tailored"
                ));
            }
            match template(DEFAULT_TEMPLATE_ID) {
                Ok(flow) => flow,
                Err(err) => {
                    // The embedded default always parses (pinned by tests); stay total anyway.
                    notes.push(err.to_string());
                    Flow {
                        id: DEFAULT_TEMPLATE_ID.to_owned(),
                        version: String::new(),
                        title: String::new(),
                        label: String::new(),
                        phases: Vec::new(),
                    }
                }
            }
        }
    };
    let mut kept: Vec<(usize, Operation)> = answer.operations.clone();
    let mut unroutable: Vec<OperationProblem> = Vec::new();
    let result = loop {
        let ops: Vec<Operation> = kept.iter().map(|(_, op)| op.clone()).collect();
        let mut result = tailor(&base, &ops, context, TailorMode::Lenient);
        let bad_models: Vec<(String, String)> = result
            .violations
            .iter()
            .filter(|v| v.rule == "phase-model-routable")
            .filter_map(|v| v.phase.clone().map(|p| (p, v.message.clone())))
            .collect();
        let position = kept.iter().rposition(|(_, op)| {
            op.op.trim() == "set_model"
                && bad_models
                    .iter()
                    .any(|(phase, _)| op.phase.as_deref().map(str::trim) == Some(phase.as_str()))
        });
        if let Some(position) = position {
            let (index, op) = kept.remove(position);
            let reason = bad_models
                .iter()
                .find(|(phase, _)| op.phase.as_deref().map(str::trim) == Some(phase.as_str()))
                .map_or_else(
                    || "the phase model is not routable".to_owned(),
                    |(_, m)| m.clone(),
                );
            unroutable.push(OperationProblem {
                index,
                op: op.op.clone(),
                phase: op.phase.clone(),
                reason,
            });
            continue;
        }
        // Report positions in the model's list, not in the filtered one.
        for applied in &mut result.applied {
            applied.index = applied.index.and_then(|i| kept.get(i).map(|(orig, _)| *orig));
        }
        for skipped in &mut result.skipped {
            if let Some((orig, _)) = kept.get(skipped.index) {
                skipped.index = *orig;
            }
        }
        break result;
    };
    let mut result = result;
    result.skipped.extend(answer.malformed.iter().cloned());
    result.skipped.extend(unroutable);
    result.skipped.sort_by_key(|p| p.index);
    GeneratedTailoring {
        result,
        notes,
        questions: answer.questions.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{ManufacturingContext, TailorStatus};

    fn complete_context() -> FlowContext {
        FlowContext {
            manufacturing_context: Some(ManufacturingContext {
                route: Some(ManufacturingRoute::InHouse),
                processes: vec!["FDM printing".into()],
                machines: vec!["Prusa MK4, 250x210x220 mm".into()],
                stock_materials: vec!["PETG".into()],
                production_quantity: Some(2),
            }),
            target_maturity: Some(TargetMaturity::PhysicallyValidated),
            loads_and_use: Some("holds 5 kg of books".into()),
            budget: None,
        }
    }

    #[test]
    fn answer_wrapped_in_prose_and_fences_is_read() {
        let text = "Sure! Here is my proposal:\n```json\n{\"template\": \"mech_v1\", \"operations\": [{\"op\": \"drop_phase\", \"phase\": \"feasibility\", \"rationale\": \"simple part\"}]}\n```\nHope it helps.";
        let answer = parse_answer(text).unwrap();
        assert_eq!(answer.template.as_deref(), Some("mech_v1"));
        assert_eq!(answer.operations.len(), 1);
        assert_eq!(answer.operations[0].1.op, "drop_phase");
    }

    #[test]
    fn answer_without_json_is_an_error() {
        assert_eq!(parse_answer("I cannot help with that."), Err(AnswerError::NoJson));
        assert!(matches!(
            parse_answer("{\"hello\": 1}"),
            Err(AnswerError::NotAProposal(_))
        ));
    }

    #[test]
    fn model_questions_are_capped_at_three_and_deduplicated() {
        let answer = parse_answer(
            r#"{"operations": [], "questions": ["a?", "a?", {"question": "b?", "why": "w"}, "c?", "d?"]}"#,
        )
        .unwrap();
        let asked: Vec<&str> = answer.questions.iter().map(|q| q.question.as_str()).collect();
        assert_eq!(asked, ["a?", "b?", "c?"]);
        let listed = questions_to_ask(&[], &answer.questions);
        assert_eq!(listed[1].id, "model_2");
        assert_eq!(listed[1].source, QuestionSource::Model);
        assert_eq!(listed[1].why, "w");
    }

    #[test]
    fn unroutable_phase_model_drops_only_that_operation() {
        let answer = parse_answer(
            r#"{"template": "mech_v1", "operations": [
                {"op": "set_model", "phase": "design", "value": "anthropic:gpt-4o", "rationale": "strong model"},
                {"op": "add_deliverable", "phase": "design", "value": "drawing", "rationale": "the shop needs a drawing"},
                "not an op"
            ]}"#,
        )
        .unwrap();
        let ctx = complete_context();
        let generated = tailor_generated(&answer, Some(&ctx));
        let result = &generated.result;
        assert_eq!(result.status, TailorStatus::Proposed, "{:?}", result.violations);
        assert_eq!(result.applied.len(), 1);
        assert_eq!(result.applied[0].op, "add_deliverable");
        assert_eq!(result.applied[0].index, Some(1));
        let skipped: Vec<(usize, &str)> = result.skipped.iter().map(|p| (p.index, p.op.as_str())).collect();
        assert_eq!(skipped, [(0, "set_model"), (2, "")]);
        assert!(result.skipped[0].reason.contains("not routable"));
    }

    #[test]
    fn unknown_template_falls_back_to_the_default_with_a_note() {
        let answer = parse_answer(r#"{"template": "shelf_v9", "operations": []}"#).unwrap();
        let ctx = complete_context();
        let generated = tailor_generated(&answer, Some(&ctx));
        assert_eq!(generated.result.template_id, DEFAULT_TEMPLATE_ID);
        assert!(generated.notes[0].contains("shelf_v9"));
    }

    #[test]
    fn prompt_carries_the_context_and_the_rules() {
        let ctx = complete_context();
        let prompt = generator_prompt("A wall shelf", &ctx, None, PromptPurpose::Tailor, &[]);
        assert!(prompt.user.contains("Prusa MK4"));
        assert!(prompt.user.contains("Requirements: none sent yet"));
        assert!(prompt.system.contains("derive process and material choices"));
        assert!(prompt.system.contains("mech_v1"));
        assert!(prompt.system.contains("at most three product-specific questions"));
        let asking = generator_prompt(
            "A wall shelf",
            &FlowContext::default(),
            None,
            PromptPurpose::QuestionsOnly,
            &crate::flow::required_questions(None),
        );
        assert!(asking.user.contains("Do not propose operations now"));
        assert!(asking.user.contains("How will it be made"));
    }
}
