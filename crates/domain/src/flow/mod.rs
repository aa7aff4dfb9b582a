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
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## `crates/domain/src/flow` — design flows (FORGE-395/397/398/399/463/481)
//!
//! A flow is data: `fixtures/flows/{design_v1,mech_v1,hardware_v1}.yaml`, embedded with
//! `include_str!` so the domain stays IO-free and every consumer serves the same files.
//! `model` (serde, YAML via serde-saphyr or JSON, snake_case, unknown fields refused) ·
//! `document` (parse with `line:col`) · `templates` (`catalogue()`, `template(id)`) ·
//! `invariants` (`validate(flow, context)`, the ten rule ids; one graph per validation in
//! `graph`: iterative Tarjan components in topological order, producibility as bit sets moved along
//! the order, verification as one reverse pass) · `limits` (`MAX_PHASES` 1,000, `MAX_DEPENDENCIES`
//! and `MAX_DELIVERABLES` 10,000, `MAX_OPERATIONS` 200; `check_flow_size`, `check_operation_count`) · `freeze` (canonical JSON + SHA-256) ·
//! `versions` (`new_version`/`attach_approval`/`decide_version`/`verify_version` over
//! `FlowVersionRecord`) · `diff` (prose, relaxations shouted) · `context` (`FlowContext`,
//! `required_questions` asking by `QuestionId`, and `FlowContext::answer(QuestionId, value)` folding
//! a person's answer into the field that question names — the one place question ids meet context
//! fields; doors never edit the context as JSON) · `tailor` (`propose`/`tailor`, lenient and strict) · `generator` (the
//! server generator's prompt, `parse_answer` reading a model's text leniently, `tailor_generated`,
//! `questions_to_ask` with `source: server|model`). The CLI
//! (`metaforge flow …`, `crates/bins/src/cmd/flow.rs`) only reads files and prints.
//! **Invariants:**
//! - Every violation is reported at once as `{rule, phase, message}`, sorted by rule then phase, so
//!   the verdict does not depend on the order phases are listed in. "Before" means upstream in the
//!   `depends_on` graph; list order is presentation only — except in a flow where no phase carries
//!   `depends_on`, where list order is the sequence (`uses_list_order`). A conditional phase never counts as a
//!   producer or a verifier.
//! - Validation is linear in phases plus edges (producibility: times distinct required
//!   artifacts / 64); `crates/domain/tests/it/flow_scaling.rs` bounds 16k/500 phases at 100× (quadratic: 1,024×) and
//!   `crates/domain/tests/it/flow_graph_props.rs` checks the graph rules against their brute-force definition.
//!   Every server entry point checks the size limits first (422 `too_large` naming the limit, an
//!   MCP `invalid_arguments` error naming it, CLI exit 2) and runs validation on the blocking pool
//!   under `app::flow_validation::VALIDATION_DEADLINE` (503 `validation_timeout`).
//! - A shipped template passes every invariant; the catalogue lists a flow that does not as
//!   unstartable, never hides it. Golden hashes of the templates are pinned in
//!   `crates/domain/tests/it/flow_templates.rs`: editing a template means bumping its `version`.
//!   The tailoring stories in `fixtures/flows/cases/stories.json` (wall shelf, kitchen cabinet,
//!   quadcopter, robot arm; `crates/domain/tests/it/flow_stories.rs`) must stay possible: the release gate of
//!   `design_v1`/`mech_v1` sits on its own `release` phase, and `hardware_v1`'s mechanical design
//!   writes a BOM.
//! - The content hash is SHA-256 of canonical JSON (keys sorted, no whitespace). Fields added after
//!   the first templates (`label`, `condition`, `gate`, `model`, `items`) are omitted when unset, so
//!   older hashes keep verifying; a new optional field must follow the same rule.
//! - A version is created only for a valid flow that differs from its template; a decided version
//!   never changes (decide/attach refuse it); a version whose frozen text no longer matches its hash
//!   is `Corrupt` and is never served or run.
//! - Tailoring can drop a phase (shouted in the diff) but cannot remove a gate, a deliverable or
//!   enforcement: no operation expresses it. `add_route_selection` is server-only. Lenient mode
//!   (the server's generator) skips bad operations and says so; strict mode (caller-proposed)
//!   refuses the whole proposal listing every problem. Missing route, maturity or loads (or
//!   in_house without capabilities) yields `needs_input` and no flow. The result is validated with
//!   its context before it is returned.
//! - The generator's answer is data, never a flow: any text is read without panicking (prose, code
//!   fences, spelling variants); every entry of the model's list ends up applied or skipped exactly
//!   once, indexed by its position in the model's list; an unroutable `set_model` costs only that
//!   operation; an unknown template falls back to `design_v1` with a note; at most
//!   `MAX_MODEL_QUESTIONS` (3) model questions are kept (proptests in `tests/it/flow_props.rs`).

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
