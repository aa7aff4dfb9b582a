//! How often and how long the pipeline retries one provider before falling to the next.

use std::time::Duration;

use metaforge_ports::{ProviderError, ProviderErrorKind};

/// Retry rules for one candidate (`api_max_retries` + exponential backoff with jitter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt on a retryable failure (0 = try once).
    pub api_max_retries: u32,
    /// First backoff; doubled on each further retry.
    pub base_backoff: Duration,
    /// Longest computed backoff.
    pub max_backoff: Duration,
    /// Longest wait a provider's Retry-After may impose.
    pub retry_after_cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            api_max_retries: 2,
            base_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            retry_after_cap: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Whether `err` is worth another try at the same provider: 429, 500/502/503/504/529,
    /// timeouts and connection failures. Everything else falls through at once.
    pub fn is_retryable(err: &ProviderError) -> bool {
        match err.kind {
            ProviderErrorKind::RateLimit
            | ProviderErrorKind::Overloaded
            | ProviderErrorKind::Timeout
            | ProviderErrorKind::Transport => true,
            ProviderErrorKind::Server => {
                matches!(err.status, None | Some(500 | 502 | 503 | 504 | 529))
            }
            ProviderErrorKind::Auth
            | ProviderErrorKind::BadRequest
            | ProviderErrorKind::ModelNotFound
            | ProviderErrorKind::ContextLength
            | ProviderErrorKind::CapabilityUnsupported => false,
        }
    }

    /// The wait before retry number `retry` (0-based): the provider's Retry-After when it sent
    /// one (capped), else `base * 2^retry` capped at `max_backoff`, with jitter in [½, 1]×.
    pub fn backoff(&self, retry: u32, retry_after: Option<Duration>, jitter_unit: f64) -> Duration {
        if let Some(asked) = retry_after {
            return asked.min(self.retry_after_cap);
        }
        let factor = 2u32.saturating_pow(retry.min(16));
        let full = self.base_backoff.saturating_mul(factor).min(self.max_backoff);
        let unit = jitter_unit.clamp(0.0, 1.0);
        full.mul_f64(0.5 + 0.5 * unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn err(kind: ProviderErrorKind, status: Option<u16>) -> ProviderError {
        ProviderError {
            kind,
            status,
            retry_after: None,
            provider_message: String::new(),
        }
    }

    #[test]
    fn retryable_statuses_are_exactly_the_seed_list() {
        let table = [
            (ProviderErrorKind::RateLimit, Some(429), true),
            (ProviderErrorKind::Server, Some(500), true),
            (ProviderErrorKind::Server, Some(502), true),
            (ProviderErrorKind::Server, Some(503), true),
            (ProviderErrorKind::Server, Some(504), true),
            (ProviderErrorKind::Overloaded, Some(529), true),
            (ProviderErrorKind::Server, Some(501), false),
            (ProviderErrorKind::Timeout, None, true),
            (ProviderErrorKind::Transport, None, true),
            (ProviderErrorKind::Auth, Some(401), false),
            (ProviderErrorKind::BadRequest, Some(400), false),
            (ProviderErrorKind::ModelNotFound, Some(404), false),
            (ProviderErrorKind::ContextLength, Some(400), false),
            (ProviderErrorKind::CapabilityUnsupported, None, false),
        ];
        for (kind, status, expected) in table {
            assert_eq!(
                RetryPolicy::is_retryable(&err(kind, status)),
                expected,
                "{kind:?} {status:?}"
            );
        }
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let policy = RetryPolicy {
            retry_after_cap: Duration::from_secs(5),
            ..RetryPolicy::default()
        };
        assert_eq!(
            policy.backoff(0, Some(Duration::from_secs(2)), 0.0),
            Duration::from_secs(2)
        );
        assert_eq!(
            policy.backoff(0, Some(Duration::from_secs(60)), 0.0),
            Duration::from_secs(5)
        );
    }

    proptest! {
        #[test]
        fn backoff_stays_within_half_and_full_exponential_bound(retry in 0u32..40, unit in 0.0f64..=1.0) {
            let policy = RetryPolicy::default();
            let full = policy.base_backoff.saturating_mul(2u32.saturating_pow(retry.min(16))).min(policy.max_backoff);
            let wait = policy.backoff(retry, None, unit);
            prop_assert!(wait <= full);
            prop_assert!(wait >= full / 2);
        }
    }
}
