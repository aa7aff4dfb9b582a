//! A clock tests move by hand and an id generator that counts, so contract suites are
//! deterministic and can cross deadlines without sleeping.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use metaforge_ports::{Clock, IdGen, Timestamp};

/// A clock that only moves when told to.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Timestamp>,
}

impl ManualClock {
    /// A clock pinned at `start`.
    pub fn at(start: Timestamp) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// A clock pinned at 2026-01-01T00:00:00Z.
    pub fn fixed() -> Self {
        Self::at(
            chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
                .map(|t| t.with_timezone(&chrono::Utc))
                .unwrap_or_default(),
        )
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: chrono::Duration) {
        let mut now = self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Ids `prefix-000001`, `prefix-000002`, … in order.
#[derive(Debug)]
pub struct SequentialIds {
    prefix: String,
    next: AtomicU64,
}

impl SequentialIds {
    /// A generator with the given prefix.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            next: AtomicU64::new(1),
        }
    }
}

impl IdGen for SequentialIds {
    fn new_id(&self) -> String {
        format!("{}-{:06}", self.prefix, self.next.fetch_add(1, Ordering::SeqCst))
    }
}
