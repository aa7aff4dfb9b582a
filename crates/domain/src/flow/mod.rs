//! Design flows: the data that says which phases a piece of hardware work goes through, which
//! gates a person answers and which deliverables each gate demands — and the rules that keep a
//! flow honest while it is tailored, edited, frozen and approved.
//!
//! Code map:
//! - [`model`]: the serde data model (YAML and JSON, snake_case).
//! - [`document`]: reading YAML/JSON text with the line and column of a problem.
//! - [`templates`]: the built-in templates (embedded `fixtures/flows/*.yaml`) and the catalogue.
//! - [`invariants`]: the server-enforced rules, all violations at once, in one topological pass.
//! - [`limits`]: the size limits every entry point checks before validating.
//! - [`freeze`]: canonical JSON and its SHA-256.
//! - [`versions`]: immutable frozen versions held for approval.
//! - [`diff`]: the prose diff a reviewer reads, relaxations shouted.
//! - [`context`]: the tailoring context and the questions asked when it is incomplete.
//! - [`tailor`]: the closed operation set, lenient and strict.
//! - [`generator`]: the server generator's prompt, the lenient reading of its answer, and the
//!   model's product-specific questions.
//!
//! ```
//! use metaforge_domain::flow::{
//!     FlowContext, QuestionId, TailorMode, TailorStatus, catalogue, propose, template, validate,
//! };
//!
//! let mech = template("mech_v1")?;
//! assert!(validate(&mech, None).is_empty());
//! assert!(catalogue().iter().all(|entry| entry.startable));
//!
//! // Without a context the server asks before it tailors.
//! let asked = propose("mech_v1", &[], None, TailorMode::Strict)?;
//! assert_eq!(asked.status, TailorStatus::NeedsInput);
//! assert_eq!(asked.questions[0].id, QuestionId::ManufacturingRoute);
//!
//! // The person's answer goes back by the same id, into the field the question names.
//! let mut context = FlowContext::default();
//! context.answer(QuestionId::ManufacturingRoute, &serde_json::json!("vendor"))?;
//! assert!(context.route().is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod context;
pub mod diff;
pub mod document;
pub mod freeze;
pub mod generator;
mod graph;
pub mod invariants;
pub mod limits;
pub mod model;
pub mod provenance;
pub mod tailor;
pub mod templates;
pub mod versions;

use serde::Serialize;

pub use context::{
    ContextAnswerError, FlowContext, ManufacturingContext, ManufacturingRoute, Question, QuestionId,
    TargetMaturity, UnknownQuestion, required_questions,
};
pub use diff::{is_relaxation, prose_diff};
pub use document::{DocumentError, Syntax, parse_document};
pub use freeze::{FreezeError, content_hash, freeze, sha256_hex, thaw};
pub use generator::{
    AnswerError, AskedQuestion, GENERATOR_ROLE, GeneratedTailoring, GeneratorAnswer, GeneratorPrompt,
    MAX_MODEL_QUESTIONS, MODEL_QUESTION_PREFIX, ModelQuestion, PromptPurpose, QuestionSource,
    generator_prompt, parse_answer, questions_to_ask, tailor_generated,
};
pub use invariants::{RULES, Violation, execution_order, is_valid, uses_list_order, validate};
pub use limits::{
    MAX_DELIVERABLES, MAX_DEPENDENCIES, MAX_OPERATIONS, MAX_PHASES, SizeLimitError, check_flow_size,
    check_operation_count,
};
pub use model::{Flow, Gate, Phase};
pub use provenance::{GeneratedBy, ProposedBy};
pub use tailor::{
    AppliedOperation, Operation, OperationList, OperationProblem, TailorMode, TailorResult, TailorStatus,
    propose, tailor,
};
pub use templates::{
    CatalogueEntry, DEFAULT_TEMPLATE_ID, TemplateError, catalogue, template, template_source,
};
pub use versions::{
    TEMPLATE_APPROVER, VersionDecision, VersionError, attach_approval, decide_version, new_version,
    template_version, template_version_id, verify_version,
};

/// The answer to "is this flow valid?", exactly as `POST /v1/design-flows/validate` and
/// `metaforge flow validate --json` return it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ValidationReport {
    /// True when there are no violations.
    pub valid: bool,
    /// Every violation, `{rule, phase, message}`.
    pub violations: Vec<Violation>,
}

/// Validates `flow` under an optional context and wraps the verdict for the wire.
pub fn validation_report(flow: &Flow, context: Option<&FlowContext>) -> ValidationReport {
    let violations = validate(flow, context);
    ValidationReport {
        valid: violations.is_empty(),
        violations,
    }
}
