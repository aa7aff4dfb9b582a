//! The usage-store contract (FORGE-476): unknown stays unknown through a round trip.

use metaforge_ports::{Billing, PortErrorKind, UsageEvent, UsageStore};

use super::{kind_of, t};

fn event(run: Option<&str>, at_secs: i64) -> UsageEvent {
    UsageEvent {
        run_id: run.map(str::to_owned),
        phase: Some("design".into()),
        role: Some("phase_brain".into()),
        caller: Some("worker".into()),
        provider: "anthropic".into(),
        model: "claude-haiku-4-5-20251001".into(),
        prompt_tokens: Some(1200),
        completion_tokens: Some(300),
        cached_input_tokens: Some(1000),
        cache_write_tokens: Some(0),
        reasoning_tokens: None,
        cost_usd: Some(0.0042),
        billing: Billing::Metered,
        at: Some(t(at_secs)),
    }
}

/// Runs every usage-store rule against `store`.
pub async fn usage_store_contract(store: &dyn UsageStore) {
    let known = event(Some("run-1"), 0);
    let unknown = UsageEvent {
        prompt_tokens: None,
        completion_tokens: None,
        cached_input_tokens: None,
        cache_write_tokens: None,
        cost_usd: None,
        billing: Billing::Subscription,
        provider: "openai-codex".into(),
        model: "gpt-5-codex".into(),
        ..event(Some("run-1"), 60)
    };
    store.record(known.clone()).await.expect("record known");
    store.record(unknown.clone()).await.expect("record unknown");
    store
        .record(event(Some("run-2"), 3600))
        .await
        .expect("record run-2");
    store.record(event(None, 7200)).await.expect("record chat");

    let run1 = store.events_for_run("run-1").await.expect("run-1");
    assert_eq!(
        run1,
        vec![known, unknown.clone()],
        "events round-trip exactly, in order"
    );
    assert_eq!(
        run1[1].prompt_tokens, None,
        "unknown tokens stay unknown, never 0"
    );
    assert_eq!(run1[1].cost_usd, None, "unknown cost stays unknown, never 0");
    assert_eq!(run1[1].billing, Billing::Subscription);

    let window = store.events_since(t(3600)).await.expect("window");
    assert_eq!(window.len(), 2, "the trailing window includes its start");
    assert!(window.iter().all(|e| e.at.is_some_and(|at| at >= t(3600))));
    assert!(store.events_for_run("run-none").await.expect("none").is_empty());

    let mut no_time = event(Some("run-3"), 0);
    no_time.at = None;
    assert_eq!(
        kind_of(&store.record(no_time).await),
        Some(PortErrorKind::Invalid),
        "an event needs its time"
    );
    let mut negative = event(Some("run-3"), 0);
    negative.cost_usd = Some(-1.0);
    assert_eq!(
        kind_of(&store.record(negative).await),
        Some(PortErrorKind::Invalid)
    );
    let mut huge = event(Some("run-3"), 0);
    huge.prompt_tokens = Some(u64::MAX);
    assert_eq!(
        kind_of(&store.record(huge).await),
        Some(PortErrorKind::Invalid),
        "a count that cannot be stored is refused, not truncated"
    );
    assert!(
        store.events_for_run("run-3").await.expect("run-3").is_empty(),
        "refused events wrote nothing"
    );

    let mut bad = event(Some("run-4"), 0);
    bad.at = None;
    let batch = [event(Some("run-4"), 1), bad, event(Some("run-4"), 2)];
    assert_eq!(
        kind_of(&store.record_batch(&batch).await),
        Some(PortErrorKind::Invalid),
        "a batch with one bad event is refused"
    );
    assert!(
        store.events_for_run("run-4").await.expect("run-4").is_empty(),
        "a refused batch wrote nothing, not even its good events"
    );
    let batch: Vec<UsageEvent> = (0..300).map(|i| event(Some("run-5"), i)).collect();
    store.record_batch(&batch).await.expect("record a batch");
    assert_eq!(
        store.events_for_run("run-5").await.expect("run-5"),
        batch,
        "a batch lands whole, in order"
    );
}
