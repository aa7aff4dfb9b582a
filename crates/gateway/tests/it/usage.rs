//! Usage summary and health: unknown is null, never zero; bad windows name the field.
#![expect(
    clippy::disallowed_methods,
    reason = "the test reads the wall clock to stamp usage events"
)]

use axum::http::StatusCode;
use metaforge_ports::{Billing, UsageEvent};

use super::common::{app_over, get, send, state};

fn event(model: &str, prompt: Option<u64>, cost: Option<f64>) -> UsageEvent {
    UsageEvent {
        run_id: Some("run-1".into()),
        role: Some("chat".into()),
        provider: "anthropic".into(),
        model: model.into(),
        prompt_tokens: prompt,
        completion_tokens: prompt.map(|p| p / 2),
        cost_usd: cost,
        billing: Billing::Metered,
        at: Some(chrono::Utc::now()),
        ..UsageEvent::default()
    }
}

#[tokio::test]
async fn the_summary_keeps_unknown_cost_null_and_counts_every_call() {
    let state = state();
    state
        .usage
        .record(event("claude-haiku-4-5-20251001", Some(1000), Some(0.002)))
        .await
        .unwrap();
    state
        .usage
        .record(event("mystery-model", None, None))
        .await
        .unwrap();
    let app = app_over(state.clone());
    let (status, _, body) = send(&app, get("/v1/runs/usage/summary?window_hours=24", None)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["window_hours"], 24);
    assert_eq!(body["totals"]["calls"], 2);
    assert_eq!(body["totals"]["calls_without_usage"], 1);
    assert_eq!(body["totals"]["cost_usd"], 0.002);
    assert!(body["totals"]["by_model"]["anthropic:mystery-model"]["cost_usd"].is_null());
}

#[tokio::test]
async fn an_empty_window_reports_null_cost_not_zero() {
    let app = app_over(state());
    let (status, _, body) = send(&app, get("/v1/runs/usage/summary", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["totals"]["calls"], 0);
    assert!(body["totals"]["cost_usd"].is_null(), "{body}");
    let (status, _, health) = send(&app, get("/health", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(health["status"], "ok");
    assert_eq!(health["ledgers"]["status"], "ok");
    assert_eq!(health["llm_usage_24h"]["available"], true);
    assert!(health["llm_usage_24h"]["totals"]["cost_usd"].is_null());
}

#[tokio::test]
async fn a_window_out_of_range_is_400_naming_it() {
    let app = app_over(state());
    for bad in ["0", "9000"] {
        let (status, _, body) = send(
            &app,
            get(&format!("/v1/runs/usage/summary?window_hours={bad}"), None),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(body["details"]["field"], "window_hours");
    }
}
