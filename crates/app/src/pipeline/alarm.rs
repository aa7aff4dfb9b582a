//! Falling back is an alarm (FORGE-468): every time a role is served by anything other than its
//! primary, a `harness_provider_fallback` log line and a counter increment make it visible.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub use metaforge_domain::routing::FallbackReason;
use serde::Serialize;

/// The counter's exact name from the seed.
pub const FALLBACK_COUNTER: &str = "metaforge_harness_provider_fallback_total";
/// The log event's exact name from the seed.
pub const FALLBACK_EVENT: &str = "harness_provider_fallback";

/// One fallback occurrence, as the providers view shows `last_fallback`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FallbackRecord {
    /// Routing role.
    pub role: String,
    /// Configured primary provider.
    pub primary: String,
    /// Configured primary model.
    pub primary_model: String,
    /// Provider that served.
    pub fallback: String,
    /// Model that served.
    pub fallback_model: String,
    /// Why.
    pub reason: FallbackReason,
    /// The primary's error (or why it was dropped).
    pub primary_error: String,
}

/// Process-lifetime fallback state: the last occurrence and the count.
#[derive(Debug, Default)]
pub struct FallbackAlarm {
    last: Mutex<Option<FallbackRecord>>,
    count: AtomicU64,
}

impl FallbackAlarm {
    /// A fresh alarm with no occurrence.
    pub fn new() -> Self {
        Self::default()
    }

    /// Logs, counts and remembers one fallback.
    pub fn raise(&self, record: FallbackRecord) {
        let fields = (
            record.role.as_str(),
            record.primary.as_str(),
            record.primary_model.as_str(),
            record.fallback.as_str(),
            record.fallback_model.as_str(),
            record.reason.as_str(),
            record.primary_error.as_str(),
        );
        let (role, primary, primary_model, fallback, fallback_model, reason, primary_error) = fields;
        if !record.reason.is_alarm() {
            tracing::info!(
                role,
                primary,
                primary_model,
                fallback,
                fallback_model,
                reason,
                primary_error,
                "harness_provider_fallback"
            );
        } else {
            tracing::warn!(
                role,
                primary,
                primary_model,
                fallback,
                fallback_model,
                reason,
                primary_error,
                "harness_provider_fallback"
            );
        }
        metrics::counter!(
            FALLBACK_COUNTER,
            "primary" => record.primary.clone(),
            "fallback" => record.fallback.clone(),
            "role" => record.role.clone(),
            "reason" => reason,
        )
        .increment(1);
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last.lock() {
            *last = Some(record);
        }
    }

    /// The last fallback, for `last_fallback` in the providers view.
    pub fn last_fallback(&self) -> Option<FallbackRecord> {
        self.last.lock().ok().and_then(|l| l.clone())
    }

    /// Fallbacks since process start.
    pub fn fallback_count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}
