//! The adapter → domain seam for cost accounting: each hand-written cache-token fixture (one or
//! more per family) goes through the family adapter's parser, then the domain's per-family
//! normalisation, and must give the hand-computed counts; priced calls get a non-zero cost.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns may panic"
)]

#[path = "../../../adapters-llm/tests/support/cache_cases.rs"]
mod cache_cases;

use cache_cases::{cases, parse};
use metaforge_domain::usage::{PriceTable, normalize_usage, price_event};
use metaforge_ports::UsageEvent;

#[tokio::test]
async fn every_cache_fixture_normalises_to_its_hand_computed_counts() {
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let raw = parse(&case).await.usage.unwrap();
        let counts = serde_json::to_value(normalize_usage(raw.family, &raw.raw)).unwrap();
        assert_eq!(counts, case["normalized"], "{name}");
    }
}

#[tokio::test]
async fn cached_tokens_are_priced_at_the_cached_rate_never_as_zero() {
    let prices = PriceTable::shipped().unwrap();
    let case = cases()
        .into_iter()
        .find(|c| c["name"] == "anthropic_sse_cache_read_and_write")
        .unwrap();
    let raw = parse(&case).await.usage.unwrap();
    let n = normalize_usage(raw.family, &raw.raw);
    let event = UsageEvent {
        provider: "anthropic".into(),
        model: "claude-sonnet-4-5".into(),
        prompt_tokens: n.prompt_tokens,
        completion_tokens: n.completion_tokens,
        cached_input_tokens: n.cached_input_tokens,
        cache_write_tokens: n.cache_write_tokens,
        ..UsageEvent::default()
    };
    let cost = price_event(&event, &prices).cost_usd.unwrap();
    // 25 uncached × $3 + 8000 cached × $0.30 + 1200 writes × $3.75 + 150 out × $15, per 1M.
    let expected = (25.0 * 3.0 + 8000.0 * 0.3 + 1200.0 * 3.75 + 150.0 * 15.0) / 1e6;
    assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
}
