//! The approvals queue: everything awaiting a person in one list — held tool calls, flow
//! proposals and edits (their prose diff with relaxations marked, the rationale per operation,
//! who proposed), and gates (run, phase, check summary, deliverables found and missing) — each
//! answerable where it is listed, and the recent decisions with who made them and when.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use maud::{Markup, html};
use metaforge_domain::flow::is_relaxation;
use metaforge_ports::{ApprovalKind, ApprovalRecord, ApprovalStatus, DEFAULT_PENDING_PAGE};
use serde::Deserialize;
use serde_json::Value;

use super::ConsoleState;
use super::page::{self, Nav};
use super::session::{ConsoleUser, local_target};
use crate::error::ApiError;

/// How many decided holds the page lists under the queue.
const RECENT_DECIDED: usize = 50;

/// What the queue shows of a gate beyond its hold: the run's live view of the gated phase.
struct GateDetail {
    approval_reason: String,
    required: Vec<String>,
    found: Vec<String>,
    allowed: Vec<String>,
    live: bool,
}

async fn gate_details(console: &ConsoleState, pending: &[ApprovalRecord]) -> HashMap<String, GateDetail> {
    let mut details = HashMap::new();
    let Some(runs) = console.gateway.runs.as_ref() else {
        return details;
    };
    for hold in pending.iter().filter(|h| h.kind == ApprovalKind::Gate) {
        let Some(run_id) = hold.arguments.get("run_id").and_then(Value::as_str) else {
            continue;
        };
        let Ok(state) = runs.flow_state(run_id).await else {
            continue;
        };
        let phase = hold
            .arguments
            .get("phase")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let view = state.phases.iter().find(|p| p.id == phase);
        details.insert(
            hold.id.clone(),
            GateDetail {
                approval_reason: state.gate.as_ref().map_or_else(
                    || hold.reason.clone().unwrap_or_default(),
                    |g| g.approval_reason.clone(),
                ),
                required: view.map(|p| p.required_deliverables.clone()).unwrap_or_default(),
                found: view.map(|p| p.deliverables.clone()).unwrap_or_default(),
                allowed: state
                    .gate
                    .as_ref()
                    .map(|g| g.allowed.iter().map(|d| d.as_str().to_owned()).collect())
                    .unwrap_or_default(),
                live: state.live,
            },
        );
    }
    details
}

fn kind_label(kind: ApprovalKind) -> &'static str {
    match kind {
        ApprovalKind::ToolCall => "Tool call",
        ApprovalKind::DesignFlowProposal => "Flow proposal",
        ApprovalKind::DesignFlowVersion => "Flow edit",
        ApprovalKind::Gate => "Gate",
    }
}

fn asked_by(hold: &ApprovalRecord) -> Markup {
    html! {
        "asked by " b { (hold.requested_by.as_deref().unwrap_or(&hold.caller)) }
        @if hold.requested_by.is_some() { " (" (hold.caller) ")" }
        " · " (page::when(&hold.created_at))
        @if let Some(deadline) = &hold.deadline { " · deadline " (page::when(deadline)) }
    }
}

fn decide_form(user: &ConsoleUser, hold: &ApprovalRecord, return_to: &str) -> Markup {
    html! {
        form.decide method="post" action={ "/approvals/" (hold.id) } {
            (page::csrf_field(user))
            input type="hidden" name="return_to" value=(return_to);
            input name="note" aria-label="Reason (optional)" placeholder="Reason (optional)" maxlength="2000";
            button.approve name="decision" value="approve" { "Approve" }
            button.reject name="decision" value="reject" { "Reject" }
        }
    }
}

fn string_list(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn proposal_body(hold: &ApprovalRecord) -> Markup {
    let args = &hold.arguments;
    let diff = string_list(args.get("diff"));
    let applied = args
        .get("applied")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let by = args.get("proposed_by").filter(|v| !v.is_null());
    let generated = args.get("generated_by").filter(|v| !v.is_null());
    html! {
        p {
            "Template " b { (args.get("template_id").and_then(Value::as_str).unwrap_or("?")) }
            @if let Some(version) = &hold.flow_version_id {
                " · version " a href={ "/flows/versions/" (version) } { (version) }
            }
            @if let Some(intent) = args.get("intent").and_then(Value::as_str) { " · intent: " (intent) }
        }
        @if let Some(by) = by { p.small { "proposed by " (by.get("client").and_then(Value::as_str).unwrap_or("?")) " with " (by.get("model").and_then(Value::as_str).unwrap_or("?")) } }
        @if let Some(generated) = generated { p.small { "generated by " (generated.get("provider").and_then(Value::as_str).unwrap_or("?")) ":" (generated.get("model").and_then(Value::as_str).unwrap_or("?")) } }
        @if diff.is_empty() {
            p.small { "No change against the template." }
        } @else {
            ul.diff aria-label="Changes against the template" {
                @for line in &diff {
                    @if is_relaxation(line) {
                        li.relax { strong { "Relaxes: " } (line) }
                    } @else {
                        li { (line) }
                    }
                }
            }
        }
        @if !applied.is_empty() {
            table {
                caption { "Operations and their rationale" }
                thead { tr { th scope="col" { "Operation" } th scope="col" { "Phase" } th scope="col" { "Rationale" } } }
                tbody {
                    @for op in &applied {
                        tr {
                            td { (op.get("op").and_then(Value::as_str).unwrap_or("?")) }
                            td { (op.get("phase").and_then(Value::as_str).unwrap_or("?")) }
                            td { (op.get("rationale").and_then(Value::as_str).unwrap_or("")) }
                        }
                    }
                }
            }
        }
    }
}

fn gate_body(user: &ConsoleUser, hold: &ApprovalRecord, detail: Option<&GateDetail>) -> Markup {
    let args = &hold.arguments;
    let run_id = args.get("run_id").and_then(Value::as_str).unwrap_or_default();
    let phase = args.get("phase").and_then(Value::as_str).unwrap_or_default();
    let findings = string_list(args.get("findings"));
    html! {
        p { "Run " a href={ "/runs/" (run_id) } { (run_id) } " · phase " b { (phase) } " · gate " b { (args.get("gate").and_then(Value::as_str).unwrap_or("?")) } }
        @match detail {
            Some(detail) => {
                p { (detail.approval_reason) }
                @if !detail.live { p.notice.error { "The run's engine could not be asked: what the phase recorded is unknown." } }
                p.small {
                    "Deliverables found: " (if detail.found.is_empty() { "none recorded".to_owned() } else { detail.found.join(", ") })
                    " · missing: "
                    @let missing: Vec<&String> = detail.required.iter().filter(|r| !detail.found.contains(r)).collect();
                    (if missing.is_empty() { "none".to_owned() } else { missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ") })
                }
                (super::runs::gate_form(user, run_id, phase, &detail.allowed, "/approvals"))
            }
            None => {
                @if let Some(reason) = &hold.reason { p { (reason) } }
                @if !findings.is_empty() { p.small { "Findings: " (findings.join("; ")) } }
                p { a href={ "/runs/" (run_id) } { "Answer it on the run" } }
            }
        }
    }
}

fn queue(
    user: &ConsoleUser,
    pending: &[ApprovalRecord],
    total: usize,
    gates: &HashMap<String, GateDetail>,
) -> Markup {
    html! {
        @if pending.is_empty() {
            p #queue-empty { "Nothing is waiting for a person." }
        } @else {
            @if total > pending.len() {
                p.small #queue-count {
                    (total) " waiting; the oldest " (pending.len()) " are shown. Each one decided brings in the next "
                    "(GET /v1/approvals?after=… pages through them all)."
                }
            } @else {
                p.small #queue-count { (pending.len()) " waiting." }
            }
            ol.queue {
                @for hold in pending {
                    li.item id={ "a-" (hold.id) } data-kind=(hold.kind.as_str()) {
                        div.head {
                            span.kind { (kind_label(hold.kind)) } " "
                            b.tool { (hold.tool) } " "
                            span.small { (asked_by(hold)) }
                        }
                        @match hold.kind {
                            ApprovalKind::ToolCall => {
                                (page::json_block(&hold.arguments))
                                (decide_form(user, hold, "/approvals"))
                            }
                            ApprovalKind::DesignFlowProposal | ApprovalKind::DesignFlowVersion => {
                                (proposal_body(hold))
                                (decide_form(user, hold, "/approvals"))
                            }
                            ApprovalKind::Gate => { (gate_body(user, hold, gates.get(&hold.id))) }
                        }
                    }
                }
            }
        }
    }
}

fn decided(recent: &[ApprovalRecord]) -> Markup {
    html! {
        @if recent.is_empty() {
            p { "No decisions yet." }
        } @else {
            table.decided {
                thead { tr { th scope="col" { "What" } th scope="col" { "Status" } th scope="col" { "Decided by" } th scope="col" { "When" } th scope="col" { "Reason" } } }
                tbody {
                    @for hold in recent {
                        tr id={ "d-" (hold.id) } {
                            td { (kind_label(hold.kind)) ": " (hold.tool) }
                            td { (page::badge(hold.status.as_str())) }
                            td { (hold.approver.as_deref().unwrap_or("—")) }
                            td { @if let Some(at) = &hold.decided_at { (page::when(at)) } @else { "—" } }
                            td { (hold.reason.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
        }
    }
}

/// `GET /approvals`: the queue and the recent decisions.
pub(crate) async fn page(
    State(console): State<Arc<ConsoleState>>,
    Extension(user): Extension<ConsoleUser>,
) -> Response {
    // The queue is read a page at a time: thousands of holds never make one page (issue 38
    // item 10), and the live queue re-fetches only this page.
    let (pending, total) = match console
        .gateway
        .approvals
        .pending_page(None, DEFAULT_PENDING_PAGE)
        .await
    {
        Ok(page) => (page.holds, page.total),
        Err(e) => return page::api_problem(&user, &ApiError::from(e)),
    };
    let recent: Vec<ApprovalRecord> = match console.gateway.approvals.list(true).await {
        Ok(all) => all
            .into_iter()
            .filter(|h| h.status != ApprovalStatus::AwaitingApproval)
            .take(RECENT_DECIDED)
            .collect(),
        Err(e) => return page::api_problem(&user, &ApiError::from(e)),
    };
    let gates = gate_details(&console, &pending).await;
    page::html(StatusCode::OK, render(&user, &pending, total, &gates, &recent))
}

fn render(
    user: &ConsoleUser,
    pending: &[ApprovalRecord],
    total: usize,
    gates: &HashMap<String, GateDetail>,
    recent: &[ApprovalRecord],
) -> Markup {
    page::shell(
        user,
        Nav::Approvals,
        "Approvals",
        html! {
            section aria-labelledby="waiting" {
                h2 #waiting { "Waiting for a person" }
                div #queue data-live="/approvals/queue" aria-live="polite" { (queue(user, pending, total, gates)) }
            }
            section aria-labelledby="recent" {
                h2 #recent { "Decided" }
                (decided(recent))
            }
        },
    )
}

/// The page as the route renders it for `items` pending holds (the page-weight bench).
pub(crate) fn render_for_bench(items: &[ApprovalRecord]) -> String {
    render(
        &ConsoleUser::for_bench(),
        items,
        items.len(),
        &HashMap::new(),
        &[],
    )
    .into_string()
}

/// `GET /approvals/queue`: the queue alone, which the page's script swaps in as holds arrive.
pub(crate) async fn queue_fragment(
    State(console): State<Arc<ConsoleState>>,
    Extension(user): Extension<ConsoleUser>,
) -> Response {
    match console
        .gateway
        .approvals
        .pending_page(None, DEFAULT_PENDING_PAGE)
        .await
    {
        Ok(page) => {
            let gates = gate_details(&console, &page.holds).await;
            page::fragment(queue(&user, &page.holds, page.total, &gates))
        }
        Err(e) => page::api_problem(&user, &ApiError::from(e)),
    }
}

/// A person's answer to a hold.
#[derive(Debug, Deserialize)]
pub(crate) struct DecisionForm {
    #[serde(default)]
    decision: String,
    #[serde(default)]
    note: Option<String>,
    #[serde(default)]
    return_to: Option<String>,
}

/// `POST /approvals/{id}`: approve or reject as the signed-in person; a hold decided already
/// answers 409 saying by whom and when.
pub(crate) async fn decide(
    State(console): State<Arc<ConsoleState>>,
    Extension(user): Extension<ConsoleUser>,
    Path(id): Path<String>,
    Form(form): Form<DecisionForm>,
) -> Response {
    let approve = match form.decision.as_str() {
        "approve" => true,
        "reject" => false,
        other => {
            return page::problem(
                &user,
                StatusCode::BAD_REQUEST,
                "Refused",
                &format!("decision must be approve or reject, not '{other}'; nothing was changed"),
            );
        }
    };
    let note = form.note.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty());
    let approvals = &console.gateway.approvals;
    match approvals.decide(&id, approve, user.who(), note).await {
        Ok(_) => Redirect::to(&local_target(form.return_to.as_deref(), "/approvals")).into_response(),
        Err(e) => {
            let error = ApiError::from(e);
            if error.status == StatusCode::CONFLICT
                && let Ok(hold) = approvals.get(&id).await
                && hold.status != ApprovalStatus::AwaitingApproval
            {
                return already_decided(&user, &hold);
            }
            page::api_problem(&user, &error)
        }
    }
}

/// The 409 page for a hold someone (or its deadline) already closed.
fn already_decided(user: &ConsoleUser, hold: &ApprovalRecord) -> Response {
    let by = hold.approver.as_deref().unwrap_or(match hold.status {
        ApprovalStatus::TimedOut => "its deadline",
        ApprovalStatus::Canceled => "its waiter",
        ApprovalStatus::Failed => "the gateway",
        ApprovalStatus::AwaitingApproval | ApprovalStatus::Approved | ApprovalStatus::Rejected => "someone",
    });
    let at = hold
        .decided_at
        .map(|t| t.format(" at %Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default();
    page::problem(
        user,
        StatusCode::CONFLICT,
        "Already decided",
        &format!(
            "Already decided by {by}{at}: {} ({}). Your answer was not recorded.",
            hold.status.as_str(),
            hold.reason.as_deref().unwrap_or("no reason given")
        ),
    )
}
