//! The Prometheus series of LLM usage (FORGE-476) and the per-run spend alarm.
//!
//! Every recorded call adds to `metaforge_llm_calls_total{role, provider, model, usage_reported}`,
//! `metaforge_llm_tokens_total{role, provider, model, kind}` (prompt, completion, cached_input —
//! only counts the provider reported; unknown is never added as 0) and
//! `metaforge_llm_cost_usd_total{role, provider, model}` (priced calls only; a Prometheus counter
//! with fractional dollars — see [`FloatCounterFamily`] for why it is not a `metrics` counter).
//! Per-run cost is not a
//! label (unbounded cardinality): when a run's accumulated priced spend first crosses the
//! threshold (`METAFORGE_RUN_SPEND_ALERT_USD`, default 5) the run id goes to the
//! `llm_run_spend_exceeded` log and `metaforge_llm_run_spend_exceeded_total{role}` is bumped once;
//! the `LlmRunawaySpendPerRun` alert fires on it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, LazyLock, Mutex};

use metaforge_domain::usage::{RunSpendTracker, UNATTRIBUTED};
use metaforge_ports::UsageEvent;

/// Calls recorded, by role, provider, model and whether the provider reported usage.
pub const LLM_CALLS_TOTAL: &str = "metaforge_llm_calls_total";
/// Tokens by role, provider, model and kind (prompt, completion, cached_input).
pub const LLM_TOKENS_TOTAL: &str = "metaforge_llm_tokens_total";
/// Priced spend in USD by role, provider and model: a Prometheus counter of fractional dollars.
pub const LLM_COST_USD_TOTAL: &str = "metaforge_llm_cost_usd_total";
/// Runs whose spend crossed the threshold, by role of the crossing call.
pub const LLM_RUN_SPEND_EXCEEDED_TOTAL: &str = "metaforge_llm_run_spend_exceeded_total";

/// A family of Prometheus counters whose values are fractional (dollars).
///
/// Why not a `metrics` counter: `metrics` 0.24 counters take `u64` only (`increment(u64)`,
/// `absolute(u64)`), and the Prometheus exporter renders them as integers — recording micro-dollars
/// would change the seed's unit, and a gauge is the wrong type (`rate()` and `increase()` on a
/// gauge do not handle resets). The Prometheus text format itself defines counter samples as
/// floats, so this family keeps each series' running total as an `f64` that only grows (a
/// negative, NaN or infinite amount is refused) and renders it with `# TYPE … counter`, appended to
/// the exporter's text by [`crate::exposition::Exposition::render`].
#[derive(Debug)]
pub struct FloatCounterFamily {
    name: &'static str,
    help: &'static str,
    series: Mutex<BTreeMap<Vec<(&'static str, String)>, f64>>,
}

impl FloatCounterFamily {
    /// An empty family named `name`.
    pub fn new(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    /// Adds `amount` to the series with these labels; false (nothing added) when the amount is
    /// negative, NaN or infinite, because a counter never goes down.
    pub fn add(&self, labels: &[(&'static str, &str)], amount: f64) -> bool {
        if !amount.is_finite() || amount < 0.0 {
            return false;
        }
        let key: Vec<(&'static str, String)> = labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        match self.series.lock() {
            Ok(mut series) => {
                *series.entry(key).or_insert(0.0) += amount;
                true
            }
            Err(_) => false,
        }
    }

    /// The running total of one series; `None` when nothing was added to it.
    pub fn value(&self, labels: &[(&'static str, &str)]) -> Option<f64> {
        let key: Vec<(&'static str, String)> = labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        self.series.lock().ok()?.get(&key).copied()
    }

    /// Appends the family in the Prometheus text format (HELP, TYPE counter, one sample per
    /// series; label values escaped). Nothing when no series exists yet.
    pub fn render_into(&self, out: &mut String) {
        let Ok(series) = self.series.lock() else {
            return;
        };
        if series.is_empty() {
            return;
        }
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} counter", self.name);
        for (labels, value) in series.iter() {
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                .collect();
            let _ = writeln!(out, "{}{{{}}} {value}", self.name, labels.join(","));
        }
    }
}

/// A label value as the text format needs it: backslash, double quote and newline escaped.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The process's `metaforge_llm_cost_usd_total` (process-wide, like the `metrics` recorder).
static LLM_COST: LazyLock<Arc<FloatCounterFamily>> = LazyLock::new(|| {
    Arc::new(FloatCounterFamily::new(
        LLM_COST_USD_TOTAL,
        "Priced LLM spend in USD by role, provider and model.",
    ))
});

/// The process's cost counter family, rendered on `/metrics`.
pub fn llm_cost_family() -> Arc<FloatCounterFamily> {
    Arc::clone(&LLM_COST)
}

/// The usage series and the spend alarm; one per process (the tracker remembers which runs have
/// already fired, so a run alerts once).
#[derive(Debug)]
pub struct UsageMetrics {
    spend: Mutex<RunSpendTracker>,
    cost: Arc<FloatCounterFamily>,
}

impl UsageMetrics {
    /// Series and a spend alarm at `threshold_usd` per run; cost goes to the process's family.
    pub fn new(threshold_usd: f64) -> Self {
        Self::with_cost_family(threshold_usd, llm_cost_family())
    }

    /// Like [`UsageMetrics::new`], with cost added to `cost` (tests read their own family).
    pub fn with_cost_family(threshold_usd: f64, cost: Arc<FloatCounterFamily>) -> Self {
        metrics::describe_counter!(
            LLM_CALLS_TOTAL,
            "LLM calls by role, provider, model and whether the provider reported usage."
        );
        metrics::describe_counter!(
            LLM_TOKENS_TOTAL,
            "Reported LLM tokens by role, provider, model and kind (prompt, completion, cached_input)."
        );
        metrics::describe_counter!(
            LLM_RUN_SPEND_EXCEEDED_TOTAL,
            "Runs whose priced spend crossed METAFORGE_RUN_SPEND_ALERT_USD, by role of the crossing call."
        );
        Self {
            spend: Mutex::new(RunSpendTracker::new(threshold_usd)),
            cost,
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
        if let Some(cost) = event.cost_usd {
            self.cost.add(
                &[
                    ("role", role.as_str()),
                    ("provider", event.provider.as_str()),
                    ("model", event.model.as_str()),
                ],
                cost,
            );
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
        let cost = Arc::new(FloatCounterFamily::new(LLM_COST_USD_TOTAL, "test"));
        metrics::with_local_recorder(&recorder, || {
            let usage = UsageMetrics::with_cost_family(5.0, Arc::clone(&cost));
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
        assert!(
            !got.keys().any(|(name, _)| name == LLM_COST_USD_TOTAL),
            "cost is not a gauge in the recorder"
        );
        let series = [
            ("role", "phase_brain"),
            ("provider", "anthropic"),
            ("model", "claude-opus-4-8"),
        ];
        assert_eq!(cost.value(&series), Some(9.0));
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

    #[test]
    fn the_cost_counter_adds_fractional_dollars_refuses_decreases_and_renders_as_a_counter() {
        let cost = FloatCounterFamily::new(LLM_COST_USD_TOTAL, "Priced LLM spend in USD.");
        let mut empty = String::new();
        cost.render_into(&mut empty);
        assert_eq!(empty, "", "no series, no lines");
        let series = [("role", "chat"), ("provider", "openai"), ("model", "gpt-4o-mini")];
        assert!(cost.add(&series, 0.000_15));
        assert!(cost.add(&series, 0.000_25));
        assert!(!cost.add(&series, -1.0), "a counter never goes down");
        assert!(!cost.add(&series, f64::NAN));
        assert!(!cost.add(&series, f64::INFINITY));
        assert!(cost.add(&[("role", "a\"b\\c\nd"), ("provider", "p"), ("model", "m")], 1.5));
        let mut text = String::from("metaforge_other 1");
        cost.render_into(&mut text);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "metaforge_other 1");
        assert_eq!(
            lines[1],
            "# HELP metaforge_llm_cost_usd_total Priced LLM spend in USD."
        );
        assert_eq!(lines[2], "# TYPE metaforge_llm_cost_usd_total counter");
        assert_eq!(
            lines[3],
            "metaforge_llm_cost_usd_total{role=\"a\\\"b\\\\c\\nd\",provider=\"p\",model=\"m\"} 1.5"
        );
        let chat = lines[4];
        assert!(
            chat.starts_with(
                "metaforge_llm_cost_usd_total{role=\"chat\",provider=\"openai\",model=\"gpt-4o-mini\"} "
            ),
            "{chat}"
        );
        let value: f64 = chat.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((value - 0.0004).abs() < 1e-12, "{value}");
    }
}
