//! Table + properties: usage normalisation, pricing, totals and the spend crossing
//! (FORGE-476/486), from `fixtures/rules/usage.json`.

use metaforge_domain::usage::{
    DEFAULT_RUN_SPEND_ALERT_USD, NormalizedUsage, PriceTable, RunSpendTracker, UsageTotals, normalize_usage,
    price_event,
};
use metaforge_ports::{ApiFamily, Billing, UsageEvent};
use proptest::prelude::*;
use serde_json::{Value, json};

/// One section of `fixtures/rules/usage.json` (`normalize`, `pricing`, `totals`, `spend`).
fn section(key: &str) -> Vec<Value> {
    metaforge_test_support::cases::section("usage", key)
}

fn close(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => (a - b).abs() < 1e-9,
        _ => false,
    }
}

#[test]
fn the_usage_fixture_has_at_least_twenty_cases() {
    let n: usize = ["normalize", "pricing", "totals", "spend"]
        .iter()
        .map(|k| section(k).len())
        .sum();
    assert!(n >= 20, "{n}");
}

#[test]
fn every_normalisation_case_holds() {
    let mut failures = Vec::new();
    for case in &section("normalize") {
        let name = case["name"].as_str().unwrap();
        let family: ApiFamily = serde_json::from_value(case["family"].clone()).unwrap();
        let got = normalize_usage(family, &case["raw"]);
        let want: NormalizedUsage = serde_json::from_value(case["expect"].clone()).unwrap();
        if got != want {
            failures.push(format!("{name}: got {got:?}, expected {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_pricing_case_holds() {
    let prices = PriceTable::shipped().unwrap();
    let mut failures = Vec::new();
    for case in &section("pricing") {
        let name = case["name"].as_str().unwrap();
        let event: UsageEvent = serde_json::from_value(case["event"].clone()).unwrap();
        let priced = price_event(&event, &prices);
        let want_cost = case["expect"]["cost_usd"].as_f64();
        let want_billing: Billing = serde_json::from_value(case["expect"]["billing"].clone()).unwrap();
        if !close(priced.cost_usd, want_cost) || priced.billing != want_billing {
            failures.push(format!(
                "{name}: got {:?}/{:?}, expected {want_cost:?}/{want_billing:?}",
                priced.cost_usd, priced.billing
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_totals_case_holds() {
    let prices = PriceTable::shipped().unwrap();
    let mut failures = Vec::new();
    for case in &section("totals") {
        let name = case["name"].as_str().unwrap();
        let events: Vec<UsageEvent> = serde_json::from_value(case["events"].clone()).unwrap();
        let priced: Vec<UsageEvent> = events.iter().map(|e| price_event(e, &prices)).collect();
        let totals = serde_json::to_value(UsageTotals::from_events(&priced)).unwrap();
        for (key, want) in case["expect"].as_object().unwrap() {
            if let Some(group) = key.strip_suffix("_calls") {
                for (k, n) in want.as_object().unwrap() {
                    let got = &totals[group][k]["calls"];
                    if got != n {
                        failures.push(format!("{name}: {group}.{k}.calls = {got}, expected {n}"));
                    }
                }
            } else if key == "cost_usd" {
                if !close(totals[key].as_f64(), want.as_f64()) {
                    failures.push(format!("{name}: cost_usd {} expected {want}", totals[key]));
                }
            } else if &totals[key] != want {
                failures.push(format!("{name}: {key} = {}, expected {want}", totals[key]));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_spend_crossing_case_holds() {
    let mut failures = Vec::new();
    for case in &section("spend") {
        let name = case["name"].as_str().unwrap();
        let threshold = case["threshold_usd"]
            .as_f64()
            .unwrap_or(DEFAULT_RUN_SPEND_ALERT_USD);
        let mut tracker = RunSpendTracker::new(threshold);
        let fired: Vec<usize> = case["events"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                let mut event: UsageEvent =
                    serde_json::from_value(json!({"provider": "anthropic", "model": "m"})).unwrap();
                event.run_id = e.get("run_id").and_then(Value::as_str).map(str::to_owned);
                event.cost_usd = e.get("cost_usd").and_then(Value::as_f64);
                if e.get("billing").and_then(Value::as_str) == Some("subscription") {
                    event.billing = Billing::Subscription;
                }
                tracker.record(&event).map(|_| i)
            })
            .collect();
        let want: Vec<usize> = serde_json::from_value(case["fires_at"].clone()).unwrap();
        if fired != want {
            failures.push(format!("{name}: fired at {fired:?}, expected {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_bad_price_table_names_the_position_or_the_model() {
    let err = PriceTable::from_json("{\"models\": {\n \"x\": {\"input\": }}}").unwrap_err();
    assert!(err.to_string().contains("line 2"), "{err}");
    let err = PriceTable::from_json(r#"{"models": {"x": {"input": -1, "output": 1}}}"#).unwrap_err();
    assert!(err.to_string().contains("'x'"), "{err}");
}

fn arb_event() -> impl Strategy<Value = UsageEvent> {
    (
        prop::sample::select(vec![
            "anthropic",
            "openai",
            "openai-codex",
            "gemini",
            "openrouter",
        ]),
        prop::sample::select(vec![
            "claude-haiku-4-5-20251001",
            "gpt-4o",
            "gpt-5",
            "unknown-model",
            "gemini-2.5-flash",
        ]),
        prop::option::of(0u64..1_000_000),
        prop::option::of(0u64..100_000),
        prop::option::of(prop::sample::select(vec!["a", "b"])),
        prop::option::of(prop::sample::select(vec!["chat", "phase_brain"])),
    )
        .prop_map(|(provider, model, prompt, completion, phase, role)| UsageEvent {
            provider: provider.to_owned(),
            model: model.to_owned(),
            prompt_tokens: prompt,
            completion_tokens: completion,
            phase: phase.map(str::to_owned),
            role: role.map(str::to_owned),
            ..UsageEvent::default()
        })
}

proptest! {
    #[test]
    fn totals_never_price_unpriced_calls_at_zero_and_never_drop_a_call(events in prop::collection::vec(arb_event(), 0..30)) {
        let prices = PriceTable::shipped().unwrap();
        let priced: Vec<UsageEvent> = events.iter().map(|e| price_event(e, &prices)).collect();
        let totals = UsageTotals::from_events(&priced);
        let t = &totals.total;
        prop_assert_eq!(t.calls, events.len() as u64);
        for breakdown in [&totals.by_phase, &totals.by_role, &totals.by_model] {
            prop_assert_eq!(breakdown.values().map(|b| b.calls).sum::<u64>(), t.calls);
        }
        let priced_calls = priced.iter().filter(|e| e.cost_usd.is_some()).count() as u64;
        prop_assert_eq!(priced_calls + t.calls_unpriced + t.calls_subscription, t.calls);
        if priced_calls == 0 {
            prop_assert_eq!(t.cost_usd, None);
        }
        for e in &priced {
            if e.billing == Billing::Subscription {
                prop_assert_eq!(e.cost_usd, None);
            }
            if e.prompt_tokens.is_none() || e.completion_tokens.is_none() || prices.price_for(&e.model).is_none() {
                prop_assert_eq!(e.cost_usd, None);
            }
        }
    }
}
