//! Usage: calls, tokens and cost over a trailing window, by role, by model and by run. Totals
//! come from the domain's rule (`UsageTotals`): a count or cost nobody reported reads `unknown`,
//! never 0, and a cost over unpriced calls says it is a lower bound.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use metaforge_domain::usage::{UsageBucket, UsageTotals};
use metaforge_ports::UsageEvent;
use serde::Deserialize;

use super::ConsoleState;
use super::page::{self, Nav};
use super::session::ConsoleUser;
use crate::error::ApiError;
use crate::usage::MAX_WINDOW_HOURS;

/// The window asked for.
#[derive(Debug, Deserialize)]
pub(crate) struct WindowQuery {
    #[serde(default)]
    hours: Option<String>,
}

/// The cells of one bucket: calls, prompt and completion tokens, cost.
pub(crate) fn bucket_cells(bucket: &UsageBucket) -> Markup {
    html! {
        td { (bucket.calls) }
        td { (page::maybe(bucket.prompt_tokens)) }
        td { (page::maybe(bucket.completion_tokens)) }
        td {
            @match bucket.cost_usd {
                Some(cost) => { "$" (format!("{cost:.6}")) @if bucket.calls_unpriced > 0 { span.small { " + " (bucket.calls_unpriced) " unpriced (unknown)" } } }
                None => { span.unknown { "unknown" } @if bucket.calls_subscription > 0 { span.small { " (" (bucket.calls_subscription) " on subscription)" } } }
            }
        }
    }
}

fn table(caption: &str, key: &str, rows: &BTreeMap<String, UsageBucket>) -> Markup {
    html! {
        table {
            caption { (caption) }
            thead { tr { th scope="col" { (key) } th scope="col" { "Calls" } th scope="col" { "Prompt tokens" } th scope="col" { "Completion tokens" } th scope="col" { "Cost" } } }
            tbody {
                @if rows.is_empty() { tr { td colspan="5" { "No calls in this window." } } }
                @for (name, bucket) in rows { tr { th scope="row" { (name) } (bucket_cells(bucket)) } }
            }
        }
    }
}

/// Per run: the same rule as every other breakdown, applied to each run's events.
fn by_run(events: &[UsageEvent]) -> BTreeMap<String, UsageBucket> {
    let mut groups: BTreeMap<String, Vec<&UsageEvent>> = BTreeMap::new();
    for event in events {
        let key = event
            .run_id
            .clone()
            .unwrap_or_else(|| metaforge_domain::usage::UNATTRIBUTED.to_owned());
        groups.entry(key).or_default().push(event);
    }
    groups
        .into_iter()
        .map(|(run, events)| (run, UsageTotals::from_events(events).total))
        .collect()
}

/// `GET /usage?hours=N`.
pub(crate) async fn page(
    State(console): State<Arc<ConsoleState>>,
    Extension(user): Extension<ConsoleUser>,
    Query(query): Query<WindowQuery>,
) -> Response {
    let hours = match query.hours.as_deref().map(str::trim).filter(|h| !h.is_empty()) {
        None => 24,
        Some(text) => match text.parse::<u32>() {
            Ok(h) if (1..=MAX_WINDOW_HOURS).contains(&h) => h,
            _ => {
                return page::problem(
                    &user,
                    StatusCode::BAD_REQUEST,
                    "Refused",
                    &format!("hours must be a whole number from 1 to {MAX_WINDOW_HOURS}, not '{text}'"),
                );
            }
        },
    };
    let since = console.gateway.clock.now() - chrono::Duration::hours(i64::from(hours));
    let events = match console.gateway.usage.events_since(since).await {
        Ok(events) => events,
        Err(e) => return page::api_problem(&user, &ApiError::from(e)),
    };
    let totals = UsageTotals::from_events(&events);
    let mut total = BTreeMap::new();
    total.insert("all calls".to_owned(), totals.total.clone());
    page::html(
        StatusCode::OK,
        page::shell(
            &user,
            Nav::Usage,
            "Usage",
            html! {
                form method="get" action="/usage" {
                    label for="hours" { "Window (hours)" }
                    input #hours name="hours" type="number" min="1" max=(MAX_WINDOW_HOURS) value=(hours);
                    button type="submit" { "Show" }
                }
                p.small { "Since " (page::when(&since)) ". Unknown counts and costs read unknown: a provider that reported nothing is not a provider that used nothing." }
                (table("Total", "Scope", &total))
                (table("By role", "Role", &totals.by_role))
                (table("By model", "Provider:model", &totals.by_model))
                (table("By run", "Run", &by_run(&events)))
            },
        ),
    )
}
