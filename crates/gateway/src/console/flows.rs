//! Flows: the catalogue, a template or a stored version drawn as its phases and gates, the
//! validation of a pasted edit (every violation listed), and the propose form (template,
//! operations, context questions) whose proposal lands in the approvals queue.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Form};
use maud::{Markup, html};
use metaforge_app::flow_validation::{ValidationError, validate_flow};
use metaforge_app::flows::ProposedBy;
use metaforge_domain::flow::{
    self, CatalogueEntry, Flow, FlowContext, Operation, Syntax, TailorStatus, is_relaxation, parse_document,
    questions_to_ask,
};
use serde::Deserialize;

use super::ConsoleState;
use super::page::{self, Nav};
use super::session::ConsoleUser;
use crate::error::ApiError;

/// The target maturities a proposal may name, as the wire spells them.
const MATURITIES: [&str; 4] = ["concept", "sim_validated", "physically_validated", "released"];

/// `GET /flows`: every flow, startable or not.
pub(crate) async fn catalogue(Extension(user): Extension<ConsoleUser>) -> Response {
    let entries = flow::catalogue();
    page::html(
        StatusCode::OK,
        page::shell(
            &user,
            Nav::Flows,
            "Flows",
            html! {
                p { a href="/flows/validate" { "Validate an edit" } " · " a href="/flows/propose" { "Propose a tailoring" } }
                table {
                    thead { tr { th scope="col" { "Flow" } th scope="col" { "Version" } th scope="col" { "Phases" } th scope="col" { "Gates" } th scope="col" { "Startable" } } }
                    tbody {
                        @for entry in &entries {
                            tr {
                                td { a href={ "/flows/templates/" (entry.id) } { (entry.title) } " " span.small { (entry.id) @if entry.default { " (default)" } } }
                                td { (entry.version) }
                                td { (entry.phases.len()) }
                                td { (entry.gates.len()) }
                                td { @if entry.startable { "yes" } @else { span.unknown { "no: " (entry.violations.len()) " violations" } } }
                            }
                        }
                    }
                }
            },
        ),
    )
}

fn phases_and_gates(entry: &CatalogueEntry) -> Markup {
    html! {
        @if let Some(error) = &entry.load_error { p.notice.error { (error) } }
        @if !entry.violations.is_empty() {
            h2 { "Why it cannot start" }
            ul { @for v in &entry.violations { li { code { (v.rule) } " " (v.message) } } }
        }
        h2 { "Phases" }
        ol.graph aria-label="Phases in execution order" {
            @for phase in &entry.phases {
                li.node {
                    div.nodehead { strong { (phase.title) } " " span.small { (phase.id) } }
                    @if !phase.disciplines.is_empty() { p.small { "Disciplines: " (phase.disciplines.join(", ")) } }
                    @if !phase.depends_on.is_empty() { p.small { "After: " (phase.depends_on.join(", ")) } }
                    @if let Some(condition) = &phase.condition { p.small { "Only when: " (condition) } }
                    @if !phase.required_deliverables.is_empty() { p.small { "Requires: " (phase.required_deliverables.join(", ")) } }
                    @if let Some(gate) = entry.gates.iter().find(|g| g.phase == phase.id) {
                        div.gatecard {
                            p { strong { "Gate " (gate.name) } @if gate.auto_approve { " · auto-approved checkpoint" } @else { " · a person answers it" } }
                            @if !gate.criteria.is_empty() { ul { @for c in &gate.criteria { li { (c) } } } }
                        }
                    }
                }
            }
        }
        @if let Some(hash) = &entry.content_hash { p.small { "Content hash " code { (hash) } } }
    }
}

/// `GET /flows/templates/{id}`.
pub(crate) async fn template(Extension(user): Extension<ConsoleUser>, Path(id): Path<String>) -> Response {
    let Some(entry) = flow::catalogue().into_iter().find(|e| e.id == id) else {
        return page::problem(
            &user,
            StatusCode::NOT_FOUND,
            "Not found",
            &format!("no flow template '{id}'"),
        );
    };
    page::html(
        StatusCode::OK,
        page::shell(
            &user,
            Nav::Flows,
            &format!("{} {}", entry.title, entry.version),
            html! {
                p { a href={ "/flows/validate?template=" (entry.id) } { "Validate an edit of it" } " · "
                    a href={ "/flows/propose?template=" (entry.id) } { "Propose a tailoring of it" } }
                (phases_and_gates(&entry))
            },
        ),
    )
}

/// `GET /flows/versions/{id}`: a stored version, verified against its hash.
pub(crate) async fn version(
    State(console): State<Arc<ConsoleState>>,
    Extension(user): Extension<ConsoleUser>,
    Path(id): Path<String>,
) -> Response {
    let record = match console.gateway.flows.version(&id).await {
        Ok(record) => record,
        Err(e) => return page::api_problem(&user, &ApiError::from(e)),
    };
    let flow = match flow::verify_version(&record) {
        Ok(flow) => flow,
        Err(e) => return page::problem(&user, StatusCode::CONFLICT, "Corrupt", &e.to_string()),
    };
    let entry = flow::templates::describe(&flow);
    page::html(
        StatusCode::OK,
        page::shell(
            &user,
            Nav::Flows,
            &format!("Flow version {id}"),
            html! {
                p { (record.template_id) " " (record.template_version) " · " (page::badge(record.status.as_str()))
                    @if let Some(approver) = &record.approver { " by " b { (approver) } }
                    @if let Some(at) = &record.decided_at { " at " (page::when(at)) }
                    @if let Some(approval) = &record.approval_id { " · approval " code { (approval) } } }
                (phases_and_gates(&entry))
            },
        ),
    )
}

/// `?template=` prefill.
#[derive(Debug, Deserialize)]
pub(crate) struct TemplateQuery {
    #[serde(default)]
    template: Option<String>,
}

fn template_text(id: &str) -> String {
    flow::template_source(id).map(str::to_owned).unwrap_or_default()
}

fn validate_form(user: &ConsoleUser, text: &str, result: Option<Markup>) -> Markup {
    html! {
        @if let Some(result) = result { section aria-label="Result" { (result) } }
        form method="post" action="/flows/validate" {
            (page::csrf_field(user))
            label for="flow" { "The edited flow (YAML or JSON)" }
            textarea #flow name="flow" rows="24" spellcheck="false" required { (text) }
            button type="submit" { "Validate" }
        }
        p.small { "Nothing is saved: this checks the edit against every invariant." }
    }
}

/// `GET /flows/validate`.
pub(crate) async fn validate_page(
    Extension(user): Extension<ConsoleUser>,
    Query(query): Query<TemplateQuery>,
) -> Response {
    let text = query.template.as_deref().map(template_text).unwrap_or_default();
    page::html(
        StatusCode::OK,
        page::shell(
            &user,
            Nav::Flows,
            "Validate an edit",
            validate_form(&user, &text, None),
        ),
    )
}

/// The pasted edit.
#[derive(Debug, Deserialize)]
pub(crate) struct ValidateForm {
    #[serde(default)]
    flow: String,
}

/// `POST /flows/validate`: every violation at once; a document that does not parse names its
/// line and column.
pub(crate) async fn validate(
    Extension(user): Extension<ConsoleUser>,
    Form(form): Form<ValidateForm>,
) -> Response {
    let parsed: Result<Flow, _> = parse_document(&form.flow, Syntax::Yaml);
    let (status, result) = match parsed {
        Err(e) => (
            StatusCode::BAD_REQUEST,
            html! { p.notice.error role="alert" {
                "The flow does not parse"
                @if let Some((line, column)) = e.position() { " at line " (line) ", column " (column) }
                ": " (e.to_string())
            } },
        ),
        Ok(flow) => match validate_flow(flow, None).await {
            Ok(report) if report.valid => (
                StatusCode::OK,
                html! { p.notice.ok role="status" { "Valid: the edit keeps every invariant." } },
            ),
            Ok(report) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                html! {
                    p.notice.error role="alert" { (report.violations.len()) " violations:" }
                    ul.violations { @for v in &report.violations { li { code { (v.rule) } @if let Some(phase) = &v.phase { " (phase " (phase) ")" } " " (v.message) } } }
                },
            ),
            Err(ValidationError::TooLarge(limit)) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                html! { p.notice.error role="alert" { "Too large: " (limit.field) " has " (limit.actual) "; at most " (limit.max) "." } },
            ),
            Err(e @ (ValidationError::DeadlineExceeded(_) | ValidationError::Failed(_))) => (
                StatusCode::SERVICE_UNAVAILABLE,
                html! { p.notice.error role="alert" { (e.to_string()) } },
            ),
        },
    };
    page::html(
        status,
        page::shell(
            &user,
            Nav::Flows,
            "Validate an edit",
            validate_form(&user, &form.flow, Some(result)),
        ),
    )
}

/// What the propose form sends.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ProposeForm {
    #[serde(default)]
    template: String,
    #[serde(default)]
    operations: String,
    #[serde(default)]
    intent: String,
    #[serde(default)]
    loads_and_use: String,
    #[serde(default)]
    target_maturity: String,
    #[serde(default)]
    manufacturing_context: String,
}

fn propose_form(user: &ConsoleUser, form: &ProposeForm, result: Option<Markup>) -> Markup {
    let entries = flow::catalogue();
    html! {
        @if let Some(result) = result { section aria-label="Result" { (result) } }
        form method="post" action="/flows/propose" {
            (page::csrf_field(user))
            label for="template" { "Template" }
            select #template name="template" {
                @for entry in &entries {
                    option value=(entry.id) selected[entry.id == form.template] { (entry.title) " (" (entry.id) ")" }
                }
            }
            label for="intent" { "What is being made" }
            input #intent name="intent" value=(form.intent) maxlength="2000";
            label for="operations" { "Operations (a JSON list; each with op, phase and rationale)" }
            textarea #operations name="operations" rows="10" spellcheck="false" { (form.operations) }
            fieldset {
                legend { "Context" }
                label for="loads" { "Loads and use (\"unknown\" is an answer)" }
                input #loads name="loads_and_use" value=(form.loads_and_use);
                label for="maturity" { "Target maturity" }
                select #maturity name="target_maturity" {
                    option value="" selected[form.target_maturity.is_empty()] { "not said" }
                    @for m in MATURITIES { option value=(m) selected[form.target_maturity == m] { (m.replace('_', " ")) } }
                }
                label for="manufacturing" { "Manufacturing context (JSON, optional)" }
                textarea #manufacturing name="manufacturing_context" rows="4" spellcheck="false" { (form.manufacturing_context) }
            }
            button type="submit" { "Propose" }
        }
        p.small { "A proposal is stored and held for a person; nothing runs until it is approved." }
    }
}

/// `GET /flows/propose`.
pub(crate) async fn propose_page(
    Extension(user): Extension<ConsoleUser>,
    Query(query): Query<TemplateQuery>,
) -> Response {
    let form = ProposeForm {
        template: query
            .template
            .unwrap_or_else(|| flow::DEFAULT_TEMPLATE_ID.to_owned()),
        operations: "[]".to_owned(),
        ..ProposeForm::default()
    };
    page::html(
        StatusCode::OK,
        page::shell(
            &user,
            Nav::Flows,
            "Propose a tailoring",
            propose_form(&user, &form, None),
        ),
    )
}

fn refusal(message: &str) -> Markup {
    html! { p.notice.error role="alert" { (message) } }
}

/// Reads the form into the service's inputs; a field that does not parse is named.
fn parse_proposal(form: &ProposeForm) -> Result<(Vec<Operation>, FlowContext), String> {
    let operations: Vec<Operation> = if form.operations.trim().is_empty() {
        Vec::new()
    } else {
        let mut de = serde_json::Deserializer::from_str(&form.operations);
        serde_path_to_error::deserialize(&mut de).map_err(|e| {
            format!(
                "operations{}: {}",
                if e.path().to_string() == "." {
                    String::new()
                } else {
                    format!(" at {}", e.path())
                },
                e.inner()
            )
        })?
    };
    let target_maturity = match form.target_maturity.trim() {
        "" => None,
        m => Some(
            serde_json::from_value(serde_json::Value::String(m.to_owned())).map_err(|_| {
                format!(
                    "target_maturity must be one of {}, not '{m}'",
                    MATURITIES.join(", ")
                )
            })?,
        ),
    };
    let manufacturing_context = match form.manufacturing_context.trim() {
        "" => None,
        text => Some(serde_json::from_str(text).map_err(|e| format!("manufacturing_context: {e}"))?),
    };
    let loads = form.loads_and_use.trim();
    Ok((
        operations,
        FlowContext {
            manufacturing_context,
            target_maturity,
            loads_and_use: (!loads.is_empty()).then(|| loads.to_owned()),
            budget: None,
        },
    ))
}

/// `POST /flows/propose`: applies the operations strictly as the signed-in person; the
/// proposal is held in the approvals queue, or the questions to answer first are listed.
pub(crate) async fn propose(
    State(console): State<Arc<ConsoleState>>,
    Extension(user): Extension<ConsoleUser>,
    Form(form): Form<ProposeForm>,
) -> Response {
    let render = |status, result| {
        page::html(
            status,
            page::shell(
                &user,
                Nav::Flows,
                "Propose a tailoring",
                propose_form(&user, &form, Some(result)),
            ),
        )
    };
    let (operations, context) = match parse_proposal(&form) {
        Ok(parsed) => parsed,
        Err(message) => return render(StatusCode::BAD_REQUEST, refusal(&message)),
    };
    let intent = Some(form.intent.trim()).filter(|i| !i.is_empty());
    let proposed_by = Some(ProposedBy {
        client: Some("metaforge-console".to_owned()),
        model: None,
    });
    let outcome = console
        .gateway
        .flows
        .propose_from_caller(
            form.template.trim(),
            &operations,
            Some(&context),
            proposed_by,
            intent,
            metaforge_app::flows::Requester {
                caller: user.who(),
                identity: Some(user.who()),
            },
        )
        .await;
    match outcome {
        Err(e) => {
            let error = crate::flows::flow_error(e);
            let listed = |key: &str| {
                error
                    .body
                    .details
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .and_then(serde_json::Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            };
            let (violations, refused) = (listed("violations"), listed("refused"));
            render(
                error.status,
                html! {
                    (refusal(&format!("Not proposed: {} ({})", error.body.message, error.body.error)))
                    @if !refused.is_empty() { ul.violations { @for r in &refused { li { (r.get("op").and_then(|v| v.as_str()).unwrap_or("?")) ": " (r.get("reason").and_then(|v| v.as_str()).unwrap_or("")) } } } }
                    @if !violations.is_empty() { ul.violations { @for v in &violations { li { code { (v.get("rule").and_then(|v| v.as_str()).unwrap_or("?")) } " " (v.get("message").and_then(|v| v.as_str()).unwrap_or("")) } } } }
                },
            )
        }
        Ok(outcome) if outcome.result.status == TailorStatus::NeedsInput => {
            let questions = questions_to_ask(&outcome.result.questions, &[]);
            render(
                StatusCode::OK,
                html! {
                    p.notice role="status" { "Answer these first; nothing was stored:" }
                    ul { @for q in &questions { li { strong { (q.question) } " " span.small { (q.why) } } } }
                },
            )
        }
        Ok(outcome) => render(
            StatusCode::CREATED,
            html! {
                p.notice.ok role="status" { "Proposed and held for a person." }
                p {
                    @if let Some(approval) = &outcome.approval_id { "Approval " a href={ "/approvals#a-" (approval) } { (approval) } }
                    @if let Some(version) = &outcome.version { " · version " a href={ "/flows/versions/" (version.id) } { (version.id) } }
                }
                ul.diff { @for line in &outcome.result.diff { @if is_relaxation(line) { li.relax { strong { "Relaxes: " } (line) } } @else { li { (line) } } } }
            },
        ),
    }
}
