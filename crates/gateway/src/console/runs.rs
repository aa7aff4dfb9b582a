//! Runs: the list with status, and a run's page — its flow-state graph (a node per phase in
//! execution order, coloured and labelled by status, the gate card on the gated node and
//! answerable there), each phase's activity or an explicit "not recorded", and the status
//! history. When the engine cannot be asked (`live: false`) the page says so in a banner and
//! every status reads `unknown` (FORGE-396): an outage never looks like a flow not yet started.
//! The page's script follows the run's notices and redraws the graph on each one.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use futures::StreamExt as _;
use maud::{Markup, html};
use metaforge_app::runs::views::{FlowStateView, GateView, PhaseView, RunStatusEntry};
use metaforge_app::runs::{RunFilter, RunService};
use metaforge_app::twin::{PhaseEvidence, phase_evidence};
use metaforge_ports::{DecisionSurface, GateDecisionKind};
use serde::Deserialize;

use super::ConsoleState;
use super::page::{self, Nav};
use super::session::{ConsoleUser, local_target};
use super::usage::bucket_cells;
use crate::error::ApiError;

/// The run service, taken by a handler as an argument; a gateway that serves no runs answers
/// the problem page naming why before the handler runs.
pub(crate) struct Runs(Arc<RunService>);

impl axum::extract::FromRequestParts<Arc<ConsoleState>> for Runs {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        console: &Arc<ConsoleState>,
    ) -> Result<Self, Response> {
        crate::runs::service(&console.gateway)
            .map(|runs| Self(Arc::clone(runs)))
            .map_err(|e| page::api_problem(&ConsoleUser::of(parts), &e))
    }
}

/// `GET /runs`: every run, newest first.
pub(crate) async fn list(Runs(runs): Runs, Extension(user): Extension<ConsoleUser>) -> Response {
    let mut all = match runs.list(RunFilter::default()).await {
        Ok(all) => all,
        Err(e) => return page::api_problem(&user, &ApiError::from(e)),
    };
    all.reverse();
    page::html(
        StatusCode::OK,
        page::shell(
            &user,
            Nav::Runs,
            "Runs",
            html! {
                @if all.is_empty() {
                    p { "No runs yet. A run starts from an approved flow version: " code { "POST /v1/runs" } " or the " code { "run.start" } " MCP tool." }
                } @else {
                    table {
                        thead { tr { th scope="col" { "Run" } th scope="col" { "Flow" } th scope="col" { "Engine" } th scope="col" { "Status" } th scope="col" { "Waiting at" } th scope="col" { "Updated" } } }
                        tbody {
                            @for run in &all {
                                tr {
                                    td { a href={ "/runs/" (run.id) } { (run.id) } }
                                    td { (run.flow_template_id) " " (run.flow_version) }
                                    td { (run.flow_engine.as_str()) }
                                    td { (page::badge(run.status.as_str())) }
                                    td { (run.approval_reason.as_deref().unwrap_or("")) }
                                    td { (page::when(&run.updated_at)) }
                                }
                            }
                        }
                    }
                }
            },
        ),
    )
}

/// The form answering a gate: one button per decision the gate allows now, a reason, and the
/// phase a rework goes back to.
pub(crate) fn gate_form(
    user: &ConsoleUser,
    run_id: &str,
    gate_phase: &str,
    allowed: &[String],
    return_to: &str,
) -> Markup {
    let allows = |d: &str| allowed.iter().any(|a| a == d);
    html! {
        form.gate method="post" action={ "/runs/" (run_id) "/gate" } {
            (page::csrf_field(user))
            input type="hidden" name="gate_phase" value=(gate_phase);
            input type="hidden" name="return_to" value=(return_to);
            label for={ "reason-" (run_id) } { "Reason" }
            textarea id={ "reason-" (run_id) } name="reason" rows="2" maxlength="4000" placeholder="Required for retry and rework" {}
            @if allows("rework") {
                label for={ "rework-" (run_id) } { "Rework back to phase" }
                input id={ "rework-" (run_id) } name="rework_phase" placeholder="an earlier phase id";
            }
            div.buttons {
                @for decision in ["approve", "reject", "retry", "rework"] {
                    @if allows(decision) {
                        button class=(decision) name="decision" value=(decision) { (decision[..1].to_uppercase()) (decision[1..]) }
                    }
                }
                @if allowed.is_empty() { span.small { "The gate allows no decision now." } }
            }
        }
    }
}

fn gate_card(user: &ConsoleUser, run_id: &str, gate: &GateView, evidence: &GateEvidence) -> Markup {
    let allowed: Vec<String> = gate.allowed.iter().map(|d| d.as_str().to_owned()).collect();
    html! {
        div.gatecard role="group" aria-label={ "Gate " (gate.gate) } {
            p { strong { "Gate " (gate.gate) } " · opened " (page::when(&gate.opened_at))
                @if let Some(deadline) = &gate.deadline { " · expires " (page::when(deadline)) } }
            p { (gate.approval_reason) }
            @if !gate.ready { p.notice.error { "Not ready: " (gate.findings.join("; ")) } }
            (evidence_block(evidence))
            (gate_form(user, run_id, &gate.phase, &allowed, &format!("/runs/{run_id}")))
        }
    }
}

/// What the tools computed for the gated phase, as recorded in the twin.
enum GateEvidence {
    /// The gateway composes no twin.
    NoTwin,
    /// Reading it failed.
    Failed(String),
    /// The evidence recorded (possibly none).
    Found(Vec<PhaseEvidence>),
}

/// The evidence of `state`'s open gate, read from the twin.
async fn gate_evidence(console: &ConsoleState, state: &FlowStateView) -> GateEvidence {
    let Some(gate) = &state.gate else {
        return GateEvidence::Found(Vec::new());
    };
    let Some(twin) = &console.gateway.twin else {
        return GateEvidence::NoTwin;
    };
    match phase_evidence(twin, &state.run_id, &gate.phase).await {
        Ok(found) => GateEvidence::Found(found),
        Err(e) => GateEvidence::Failed(e.to_string()),
    }
}

/// A number as a person reads it: four significant digits.
fn figure(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return value.to_string();
    }
    let digits = 3 - value.abs().log10().floor() as i32;
    format!("{:.*}", usize::try_from(digits.max(0)).unwrap_or(0), value)
}

/// Bytes as a person reads them.
fn size(bytes: u64) -> String {
    match bytes {
        0..1_000 => format!("{bytes} B"),
        1_000..1_000_000 => format!("{:.1} kB", bytes as f64 / 1e3),
        _ => format!("{:.1} MB", bytes as f64 / 1e6),
    }
}

fn evidence_block(evidence: &GateEvidence) -> Markup {
    html! {
        @match evidence {
            GateEvidence::NoTwin => { p.small { "Evidence: unknown (this gateway composes no twin)" } }
            GateEvidence::Failed(why) => { p.notice.error { "Evidence could not be read: " (why) } }
            GateEvidence::Found(found) if found.is_empty() => { p.small { "Evidence: no tool result was recorded for this phase" } }
            GateEvidence::Found(found) => {
                @for item in found {
                    @let e = &item.evidence;
                    @let programs = e.programs.iter().map(|p| format!("{} {}", p.name, p.version)).collect::<Vec<_>>().join(", ");
                    section.evidence aria-label={ "Evidence: " (e.title) } {
                        p { strong { (e.title) } }
                        table.mini {
                            caption.small { "Computed by " code { (e.tool) } " (" (programs) "), input sha256 " code { (e.input_sha256.get(..16).unwrap_or(&e.input_sha256)) "…" } }
                            thead { tr { th scope="col" { "Quantity" } th scope="col" { "Value" } } }
                            tbody {
                                @for q in &e.quantities {
                                    tr { td { (q.name) } td { (figure(q.value)) @if !q.unit.is_empty() { " " (q.unit) } } }
                                }
                            }
                        }
                        p.small {
                            "Sandbox: " @if e.sandbox.sandboxed { "on" } @else { "OFF" }
                            " · " (e.sandbox.cpu_seconds) " CPU s · " (e.sandbox.memory_mb) " MiB · " (e.sandbox.wall_seconds) " s wall · no network"
                        }
                        p.small {
                            "Files: "
                            @for (i, file) in e.files.iter().enumerate() {
                                @if i > 0 { ", " }
                                (file.name) " (" (size(file.bytes)) ", sha256 " code { (file.sha256.get(..12).unwrap_or(&file.sha256)) "…" } ")"
                            }
                            @if e.files.is_empty() { "none" }
                            " · twin node " a href={ "/v1/twin/nodes/" (item.node_id) "?branch=" (item.branch) } { (item.node_id) }
                        }
                    }
                }
            }
        }
    }
}

fn activity(state: &FlowStateView, phase: &PhaseView) -> Markup {
    let known = state.live;
    let usage = state.usage.as_ref().and_then(|u| u.by_phase.get(&phase.id));
    html! {
        dl.activity {
            dt { "Deliverables" }
            dd {
                @if !known { "unknown (the engine was not asked)" }
                @else if phase.deliverables.is_empty() { "none recorded" }
                @else { (phase.deliverables.join(", ")) }
                @if !phase.required_deliverables.is_empty() { span.small { " · required: " (phase.required_deliverables.join(", ")) } }
            }
            dt { "Model usage" }
            dd {
                @match (usage, &state.usage_unavailable) {
                    (Some(bucket), _) => { table.mini { tbody { tr { (bucket_cells(bucket)) } } } }
                    (None, Some(why)) => { "unknown: " (why) }
                    (None, None) => { "no model calls recorded for this phase" }
                }
            }
            dt { "Tool calls" }
            dd { "not recorded: a run's phase turns do not write their tool calls to the run ledger yet" }
            @if let Some(summary) = &phase.summary { dt { "Summary" } dd { (summary) } }
        }
    }
}

fn graph(
    user: &ConsoleUser,
    state: &FlowStateView,
    history: &[RunStatusEntry],
    evidence: &GateEvidence,
) -> Markup {
    html! {
        @if !state.live {
            div.banner role="alert" {
                strong { "Live state unavailable. " }
                (state.reason.as_deref().unwrap_or("the engine could not be asked"))
                " Every status below reads unknown until the engine answers; the phases still list."
            }
        }
        p { "Status " (page::badge(&state.status)) " · " (state.flow_template_id) " " (state.flow_version)
            " · version " a href={ "/flows/versions/" (state.flow_version_id) } { (state.flow_version_id) }
            " · engine " (state.flow_engine.as_str()) }
        @if let Some(error) = &state.error { p.notice.error { (error) } }
        @if let Some(why) = &state.phases_unavailable { p.notice.error { "No phases: " (why) } }
        ol.graph aria-label="Flow state, one node per phase in execution order" {
            @for phase in &state.phases {
                li class={ "node s-" (phase.status) } data-phase=(phase.id) {
                    div.nodehead {
                        strong { (phase.title) } " "
                        span.small { (phase.id) }
                        " " (page::badge(&phase.status))
                        @if let Some(attempt) = phase.attempt.filter(|a| *a > 0) { span.small { " attempt " (attempt) } }
                    }
                    @if let Some(gate) = &phase.gate {
                        p.small { "Gate " (gate) @if phase.auto_approve { " (auto-approved checkpoint)" } }
                    }
                    @if let Some(open) = state.gate.as_ref().filter(|g| g.phase == phase.id) {
                        (gate_card(user, &state.run_id, open, evidence))
                    }
                    details {
                        summary { "Activity" }
                        (activity(state, phase))
                    }
                }
            }
        }
        h2 { "History" }
        ol.history {
            @for entry in history {
                li { (page::when(&entry.at)) " " (page::badge(entry.status.as_str())) " " (entry.reason.as_deref().unwrap_or("")) }
            }
        }
    }
}

/// `GET /runs/{id}`: the run's page.
pub(crate) async fn page(
    State(console): State<Arc<ConsoleState>>,
    Runs(runs): Runs,
    Extension(user): Extension<ConsoleUser>,
    Path(id): Path<String>,
) -> Response {
    let detail = match runs.get(&id).await {
        Ok(detail) => detail,
        Err(e) => return page::api_problem(&user, &ApiError::from(e)),
    };
    let state = match runs.flow_state(&id).await {
        Ok(state) => state,
        Err(e) => return page::api_problem(&user, &ApiError::from(e)),
    };
    let terminal = detail.run.status.is_terminal();
    let evidence = gate_evidence(&console, &state).await;
    page::html(
        StatusCode::OK,
        page::shell(
            &user,
            Nav::Runs,
            &format!("Run {id}"),
            html! {
                div #flow-graph data-live={ "/runs/" (id) "/graph" } data-events={ "/runs/" (id) "/live" } aria-live="polite" {
                    (graph(&user, &state, &detail.history, &evidence))
                }
                @if !terminal {
                    h2 { "Stop the run" }
                    form method="post" action={ "/runs/" (id) "/cancel" } {
                        (page::csrf_field(&user))
                        label for="cancel-reason" { "Reason" }
                        input #cancel-reason name="reason" maxlength="2000";
                        button.reject type="submit" { "Cancel run" }
                    }
                }
            },
        ),
    )
}

/// `GET /runs/{id}/graph`: the graph alone, redrawn by the page's script on each notice.
pub(crate) async fn graph_fragment(
    State(console): State<Arc<ConsoleState>>,
    Runs(runs): Runs,
    Extension(user): Extension<ConsoleUser>,
    Path(id): Path<String>,
) -> Response {
    let detail = match runs.get(&id).await {
        Ok(detail) => detail,
        Err(e) => return page::api_problem(&user, &ApiError::from(e)),
    };
    match runs.flow_state(&id).await {
        Ok(state) => {
            let evidence = gate_evidence(&console, &state).await;
            page::fragment(graph(&user, &state, &detail.history, &evidence))
        }
        Err(e) => page::api_problem(&user, &ApiError::from(e)),
    }
}

/// `GET /runs/{id}/live`: the run's notices as SSE (event `notice`), for the page's script.
pub(crate) async fn live(
    Runs(runs): Runs,
    Extension(user): Extension<ConsoleUser>,
    Path(id): Path<String>,
) -> Response {
    match runs.events(&id, None).await {
        Ok(notices) => {
            let events = notices.map(|notice| {
                let data = serde_json::to_string(&notice).unwrap_or_else(|_| "{}".to_owned());
                Ok::<Event, Infallible>(Event::default().event("notice").data(data))
            });
            Sse::new(events).keep_alive(KeepAlive::default()).into_response()
        }
        Err(e) => page::api_problem(&user, &ApiError::from(e)),
    }
}

/// A person's answer to the run's gate.
#[derive(Debug, Deserialize)]
pub(crate) struct GateForm {
    #[serde(default)]
    decision: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    rework_phase: Option<String>,
    #[serde(default)]
    gate_phase: Option<String>,
    #[serde(default)]
    return_to: Option<String>,
}

/// `POST /runs/{id}/gate`: answers the gate as the signed-in person through the run's state
/// machine (which alone decides what the gate allows); a refusal is shown with its reason.
pub(crate) async fn answer(
    Runs(runs): Runs,
    Extension(user): Extension<ConsoleUser>,
    Path(id): Path<String>,
    Form(form): Form<GateForm>,
) -> Response {
    let decision = match form.decision.as_str() {
        "approve" => GateDecisionKind::Approve,
        "reject" => GateDecisionKind::Reject,
        "retry" => GateDecisionKind::Retry,
        "rework" => GateDecisionKind::Rework,
        other => {
            return page::problem(
                &user,
                StatusCode::BAD_REQUEST,
                "Refused",
                &format!(
                    "decision must be approve, reject, retry or rework, not '{other}'; nothing was changed"
                ),
            );
        }
    };
    let reason = form.reason.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
    let phase = match decision {
        GateDecisionKind::Rework => Some(form.rework_phase.unwrap_or_default()),
        GateDecisionKind::Approve | GateDecisionKind::Reject | GateDecisionKind::Retry => None,
    };
    let request = metaforge_api::GateDecisionBody {
        decision: decision.into(),
        reason,
        phase,
        gate_phase: form.gate_phase,
        surface: Some(DecisionSurface::Api.into()),
    };
    match runs.answer_gate(&id, request, user.who()).await {
        Ok(_) => {
            Redirect::to(&local_target(form.return_to.as_deref(), &format!("/runs/{id}"))).into_response()
        }
        Err(e) => page::api_problem(&user, &ApiError::from(e)),
    }
}

/// The cancel form.
#[derive(Debug, Deserialize)]
pub(crate) struct CancelForm {
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /runs/{id}/cancel`: stops the run as the signed-in person.
pub(crate) async fn cancel(
    Runs(runs): Runs,
    Extension(user): Extension<ConsoleUser>,
    Path(id): Path<String>,
    Form(form): Form<CancelForm>,
) -> Response {
    match runs.cancel(&id, user.who(), form.reason).await {
        Ok(_) => Redirect::to(&format!("/runs/{id}")).into_response(),
        Err(e) => page::api_problem(&user, &ApiError::from(e)),
    }
}
