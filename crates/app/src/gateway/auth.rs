//! API keys and per-key rate limits.
//!
//! Keys are required whenever the gateway binds anything but loopback; the identity a key maps to
//! is the approver recorded on every decision made with it, never a request field.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use subtle::ConstantTimeEq;

use super::error::ApiError;

/// One accepted API key and the identity it authenticates as.
#[derive(Clone)]
pub struct ApiKey {
    /// Who the key belongs to; recorded as approver on decisions.
    pub identity: String,
    /// The secret.
    pub key: String,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("identity", &self.identity)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// Errors in the gateway's security configuration; the gateway refuses to start on any of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthConfigError {
    /// Binding off loopback without any key would expose every ledger unauthenticated.
    #[error("refusing to bind {0} without an API key: set METAFORGE_GATEWAY_API_KEY (required off loopback)")]
    KeyRequiredOffLoopback(SocketAddr),
    /// An entry of the key list is empty or malformed.
    #[error("METAFORGE_GATEWAY_API_KEY entry {index} is invalid: {reason}")]
    InvalidKeyEntry {
        /// 1-based position in the comma-separated list.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// Parses `identity:key,identity2:key2` (a bare `key` authenticates as `operator`).
pub fn parse_api_keys(raw: &str) -> Result<Vec<ApiKey>, AuthConfigError> {
    let mut keys = Vec::new();
    for (i, entry) in raw.split(',').map(str::trim).enumerate() {
        if entry.is_empty() {
            continue;
        }
        let (identity, key) = match entry.split_once(':') {
            Some((identity, key)) => (identity.trim(), key.trim()),
            None => ("operator", entry),
        };
        if identity.is_empty() || key.len() < 8 {
            return Err(AuthConfigError::InvalidKeyEntry {
                index: i + 1,
                reason: "expected identity:key with a key of at least 8 characters".into(),
            });
        }
        keys.push(ApiKey {
            identity: identity.to_owned(),
            key: key.to_owned(),
        });
    }
    Ok(keys)
}

/// Fails when the bind address is not loopback and no key is configured.
pub fn check_bind_policy(bind: SocketAddr, keys: &[ApiKey]) -> Result<(), AuthConfigError> {
    if !bind.ip().is_loopback() && keys.is_empty() {
        return Err(AuthConfigError::KeyRequiredOffLoopback(bind));
    }
    Ok(())
}

/// The authenticated caller of a request, inserted as a request extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity(pub String);

/// Shared auth state: the key list and the per-identity limiter.
pub struct AuthState {
    keys: Vec<ApiKey>,
    limiter: Option<DefaultKeyedRateLimiter<String>>,
}

impl AuthState {
    /// Builds the auth state; `per_minute` of `None` disables rate limiting.
    pub fn new(keys: Vec<ApiKey>, per_minute: Option<NonZeroU32>) -> Self {
        let limiter = per_minute.map(|n| governor::RateLimiter::keyed(Quota::per_minute(n)));
        Self { keys, limiter }
    }

    /// Whether any key is configured (open loopback mode otherwise).
    pub fn keys_required(&self) -> bool {
        !self.keys.is_empty()
    }

    fn identify(&self, presented: &str) -> Option<&ApiKey> {
        self.keys
            .iter()
            .find(|k| bool::from(k.key.as_bytes().ct_eq(presented.as_bytes())))
    }
}

/// Every key the request presents (`X-API-Key` and `Authorization: Bearer`). A request that
/// presents several must have every one valid and naming the same identity: a wrong credential is
/// never ignored because another header happened to be right.
fn presented_keys(request: &Request) -> Vec<String> {
    let headers = request.headers();
    let mut keys = Vec::new();
    for value in headers.get_all("x-api-key") {
        keys.push(value.to_str().map(|v| v.trim().to_owned()).unwrap_or_default());
    }
    for value in headers.get_all(axum::http::header::AUTHORIZATION) {
        let text = value.to_str().unwrap_or_default();
        let key = text
            .strip_prefix("Bearer ")
            .or_else(|| text.strip_prefix("bearer "))
            .unwrap_or("");
        keys.push(key.trim().to_owned());
    }
    keys
}

/// Paths reachable without a key (liveness only).
const PUBLIC_PATHS: &[&str] = &["/health"];

/// Middleware: authenticates (401 JSON without a valid key) and rate-limits per identity (429).
pub async fn authenticate(State(auth): State<Arc<AuthState>>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let identity = if !auth.keys_required() {
        Identity("local".to_owned())
    } else if PUBLIC_PATHS.contains(&path.as_str()) {
        Identity("anonymous".to_owned())
    } else {
        let presented = presented_keys(&request);
        let identities: Option<Vec<&str>> = presented
            .iter()
            .map(|k| auth.identify(k).map(|key| key.identity.as_str()))
            .collect();
        match identities.as_deref() {
            Some([first, rest @ ..]) if rest.iter().all(|i| i == first) => Identity((*first).to_owned()),
            _ => return ApiError::unauthorized().into_response(),
        }
    };
    if let Some(limiter) = &auth.limiter
        && !PUBLIC_PATHS.contains(&path.as_str())
        && let Err(not_until) = limiter.check_key(&identity.0)
    {
        let wait = not_until.wait_time_from(DefaultClock::default().now());
        let secs = wait.as_secs().max(1);
        return ApiError::new(
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!("rate limit exceeded for '{}'; retry in {secs}s", identity.0),
        )
        .with_retry_after(secs)
        .into_response();
    }
    request.extensions_mut().insert(identity);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_with_identities_and_a_bare_key_is_the_operator() {
        let keys = parse_api_keys("alice:sk-alice-123, sk-operator-1").unwrap();
        assert_eq!(keys[0].identity, "alice");
        assert_eq!(keys[0].key, "sk-alice-123");
        assert_eq!(keys[1].identity, "operator");
        assert!(parse_api_keys("bob:short").is_err());
    }

    #[test]
    fn off_loopback_bind_without_keys_is_refused() {
        let open: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert!(check_bind_policy(open, &[]).is_err());
        assert!(check_bind_policy(local, &[]).is_ok());
        let keys = parse_api_keys("ops:sk-operations").unwrap();
        assert!(check_bind_policy(open, &keys).is_ok());
    }
}
