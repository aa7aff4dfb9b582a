//! The Prometheus series of LLM usage (FORGE-476) and the per-run spend alarm.
//!
//! Every recorded call adds to `metaforge_llm_calls_total{role, provider, model, usage_reported}`,
//! `metaforge_llm_tokens_total{role, provider, model, kind}` (prompt, completion, cached_input —
//! only counts the provider reported; unknown is never added as 0) and
//! `metaforge_llm_cost_usd_total{role, provider, model}` (priced calls only). Per-run cost is not a
//! label (unbounded cardinality): when a run's accumulated priced spend first crosses the
//! threshold (`METAFORGE_RUN_SPEND_ALERT_USD`, default 5) the run id goes to the
//! `llm_run_spend_exceeded` log and `metaforge_llm_run_spend_exceeded_total{role}` is bumped once;
//! the `LlmRunawaySpendPerRun` alert fires on it.

use std::sync::Mutex;

use metaforge_domain::usage::{RunSpendTracker, UNATTRIBUTED};
use metaforge_ports::UsageEvent;

/// Calls recorded, by role, provider, model and whether the provider reported usage.
pub const LLM_CALLS_TOTAL: &str = "metaforge_llm_calls_total";
/// Tokens by role, provider, model and kind (prompt, completion, cached_input).
pub const LLM_TOKENS_TOTAL: &str = "metaforge_llm_tokens_total";
/// Priced spend in USD by role, provider and model. A float that only grows: exported as a
/// Prometheus gauge (the `metrics` counters are integral), read with `increase()` like a counter.
pub const LLM_COST_USD_TOTAL: &str = "metaforge_llm_cost_usd_total";
/// Runs whose spend crossed the threshold, by role of the crossing call.
pub const LLM_RUN_SPEND_EXCEEDED_TOTAL: &str = "metaforge_llm_run_spend_exceeded_total";

/// The usage series and the spend alarm; one per process (the tracker remembers which runs have
/// already fired, so a run alerts once).
#[derive(Debug)]
pub struct UsageMetrics {
    spend: Mutex<RunSpendTracker>,
}

impl UsageMetrics {
    /// Series and a spend alarm at `threshold_usd` per run.
    pub fn new(threshold_usd: f64) -> Self {
        Self {
            spend: Mutex::new(RunSpendTracker::new(threshold_usd)),
        }
    }

    /// Adds one recorded call to the series; bumps the spend alarm when its run first crosses.
    pub fn observe(&self, event: &UsageEvent) {
        let role = event.role.clone().unwrap_or_else(|| UNATTRIBUTED.to_owned());
        let reported = event.prompt_tokens.is_some() || event.completion_tokens.is_some();
        metrics::counter!(
            LLM_CALLS_TOTAL,
            "role" => role.clone(),
            "provider" => event.provider.clone(),
            "model" => event.model.clone(),
            "usage_reported" => if reported { "true" } else { "false" },
        )
        .increment(1);
        for (kind, tokens) in [
            ("prompt", event.prompt_tokens),
            ("completion", event.completion_tokens),
            ("cached_input", event.cached_input_tokens),
        ] {
            if let Some(tokens) = tokens {
                metrics::counter!(
                    LLM_TOKENS_TOTAL,
                    "role" => role.clone(),
                    "provider" => event.provider.clone(),
                    "model" => event.model.clone(),
                    "kind" => kind,
                )
                .increment(tokens);
            }
        }
        if let Some(cost) = event.cost_usd.filter(|c| c.is_finite() && *c >= 0.0) {
            metrics::gauge!(
                LLM_COST_USD_TOTAL,
                "role" => role.clone(),
                "provider" => event.provider.clone(),
                "model" => event.model.clone(),
            )
            .increment(cost);
        }
        let crossing = match self.spend.lock() {
            Ok(mut tracker) => tracker.record(event),
            Err(_) => {
                tracing::error!(
                    event = "llm_run_spend_untracked",
                    "the spend tracker is poisoned; run spend is not watched"
                );
                None
            }
        };
        if let Some(crossing) = crossing {
            tracing::warn!(
                event = "llm_run_spend_exceeded",
                run_id = %crossing.run_id,
                role = crossing.role.as_deref().unwrap_or(UNATTRIBUTED),
                spend_usd = crossing.spend_usd,
                threshold_usd = crossing.threshold_usd,
                "a run's model spend crossed the per-run threshold"
            );
            metrics::counter!(LLM_RUN_SPEND_EXCEEDED_TOTAL, "role" => role).increment(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use metaforge_ports::Billing;

    /// The recorder's snapshot as (name, sorted labels) → value text.
    fn series(
        snapshotter: &metrics_util::debugging::Snapshotter,
    ) -> BTreeMap<(String, Vec<(String, String)>), String> {
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let mut labels: Vec<(String, String)> = key
                    .key()
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                labels.sort();
                ((key.key().name().to_owned(), labels), format!("{value:?}"))
            })
            .collect()
    }

    fn event(run: Option<&str>, prompt: Option<u64>, cost: Option<f64>) -> UsageEvent {
        UsageEvent {
            run_id: run.map(str::to_owned),
            role: Some("phase_brain".into()),
            provider: "anthropic".into(),
            model: "claude-opus-4-8".into(),
            prompt_tokens: prompt,
            completion_tokens: prompt.map(|p| p / 10),
            cost_usd: cost,
            billing: Billing::Metered,
            ..UsageEvent::default()
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn calls_tokens_and_cost_are_counted_and_a_run_crossing_the_threshold_alarms_once() {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let usage = UsageMetrics::new(5.0);
            usage.observe(&event(Some("run-1"), Some(1000), Some(3.0)));
            usage.observe(&event(Some("run-1"), Some(1000), Some(3.0)));
            usage.observe(&event(Some("run-1"), Some(1000), Some(3.0)));
            usage.observe(&event(None, None, None));
        });
        let got = series(&snapshotter);
        let call = |reported: &str| {
            (
                LLM_CALLS_TOTAL.to_owned(),
                labels(&[
                    ("role", "phase_brain"),
                    ("provider", "anthropic"),
                    ("model", "claude-opus-4-8"),
                    ("usage_reported", reported),
                ]),
            )
        };
        assert_eq!(
            got.get(&call("true")).map(String::as_str),
            Some("Counter(3)"),
            "{got:?}"
        );
        assert_eq!(got.get(&call("false")).map(String::as_str), Some("Counter(1)"));
        let prompt = (
            LLM_TOKENS_TOTAL.to_owned(),
            labels(&[
                ("role", "phase_brain"),
                ("provider", "anthropic"),
                ("model", "claude-opus-4-8"),
                ("kind", "prompt"),
            ]),
        );
        assert_eq!(got.get(&prompt).map(String::as_str), Some("Counter(3000)"));
        let cached = (
            LLM_TOKENS_TOTAL.to_owned(),
            labels(&[
                ("role", "phase_brain"),
                ("provider", "anthropic"),
                ("model", "claude-opus-4-8"),
                ("kind", "cached_input"),
            ]),
        );
        assert!(!got.contains_key(&cached), "unknown counts are never added as 0");
        let cost = (
            LLM_COST_USD_TOTAL.to_owned(),
            labels(&[
                ("role", "phase_brain"),
                ("provider", "anthropic"),
                ("model", "claude-opus-4-8"),
            ]),
        );
        assert_eq!(got.get(&cost).map(String::as_str), Some("Gauge(9.0)"));
        let exceeded = (
            LLM_RUN_SPEND_EXCEEDED_TOTAL.to_owned(),
            labels(&[("role", "phase_brain")]),
        );
        assert_eq!(
            got.get(&exceeded).map(String::as_str),
            Some("Counter(1)"),
            "run-1 crossed 5 USD once (at 6) and fired once, not again at 9"
        );
    }
}
