//! API keys, per-key rate limits and per-address throttling of failed authentication.
//!
//! Keys are required whenever the gateway binds anything but loopback; the identity a key maps to
//! is the approver recorded on every decision made with it, never a request field. A client
//! address that keeps presenting wrong keys has its wrong keys answered 429 for the rest of the
//! minute; a valid key is still admitted from it (see `metaforge_ports::auth_failures`).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use metaforge_ports::CallerClass;
use metaforge_ports::auth_failures::{AuthFailures, WrongKeyVerdict};
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

/// Names a key's identity may not take: the caller classes and the two transport identities, which
/// approval records carry in the same `caller` field as a person's identity.
pub const RESERVED_IDENTITIES: &[&str] = &[
    "local",
    "remote",
    "untrusted",
    "service",
    "client_task",
    ANONYMOUS,
];

/// The identity of an unauthenticated request to a public path (`/health` without a key).
pub const ANONYMOUS: &str = "anonymous";

/// Default wrong-key attempts a client address may make per minute before it is answered 429.
pub const DEFAULT_AUTH_FAILURES_PER_MINUTE: u32 = 20;

/// At most this many client addresses are tracked; past it, expired windows are purged first and,
/// if none has expired, the table starts afresh (bounded memory beats a perfect count).
const MAX_TRACKED_ADDRESSES: usize = 65_536;

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
        if RESERVED_IDENTITIES.contains(&identity) {
            return Err(AuthConfigError::InvalidKeyEntry {
                index: i + 1,
                reason: format!(
                    "'{identity}' is a caller class, not a person; approval records could not tell them apart (pick another identity)"
                ),
            });
        }
        if let Some(other) = keys
            .iter()
            .find(|k: &&ApiKey| k.key == key && k.identity != identity)
        {
            return Err(AuthConfigError::InvalidKeyEntry {
                index: i + 1,
                reason: format!(
                    "its key is also listed for '{}'; a key names one person (give '{identity}' a key of its own)",
                    other.identity
                ),
            });
        }
        keys.push(ApiKey {
            identity: identity.to_owned(),
            key: key.to_owned(),
        });
    }
    // A list that was set but holds no key (`", ,"`) must not start an open gateway.
    if keys.is_empty() && !raw.trim().is_empty() {
        return Err(AuthConfigError::InvalidKeyEntry {
            index: 1,
            reason: "the list holds no key, only commas and spaces (unset the variable for an open loopback gateway)"
                .into(),
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

impl Identity {
    /// True for a request to a public path that presented no key: it sees liveness only.
    pub fn is_anonymous(&self) -> bool {
        self.0 == ANONYMOUS
    }
}

/// The caller class the request's transport earns, inserted next to [`Identity`]: `local` on an
/// open loopback gateway (no keys configured), `remote` for a key-authenticated client. A request
/// body never sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportClass(pub CallerClass);

/// Counts wrong-key attempts per client address in fixed one-minute windows; the one instance
/// the binary builds is shared by the gateway and the MCP sidecar.
pub struct FailureThrottle {
    per_window: u32,
    window: Duration,
    entries: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl FailureThrottle {
    /// `per_minute` wrong keys per address are answered 401; every further one in the same
    /// minute 429.
    pub fn new(per_minute: NonZeroU32) -> Self {
        Self {
            per_window: per_minute.get(),
            window: Duration::from_secs(60),
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Records one wrong key at `now` and says how to answer it.
    fn record_failure(&self, ip: IpAddr, now: Instant) -> WrongKeyVerdict {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() >= MAX_TRACKED_ADDRESSES && !entries.contains_key(&ip) {
            let window = self.window;
            entries.retain(|_, (started, _)| now.saturating_duration_since(*started) < window);
            if entries.len() >= MAX_TRACKED_ADDRESSES {
                entries.clear();
            }
        }
        let entry = entries.entry(ip).or_insert((now, 0));
        if now.saturating_duration_since(entry.0) >= self.window {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
        if entry.1 <= self.per_window {
            return WrongKeyVerdict::Unauthorized;
        }
        WrongKeyVerdict::Throttled {
            retry_after_secs: self
                .window
                .saturating_sub(now.saturating_duration_since(entry.0))
                .as_secs()
                .max(1),
            just_now: entry.1 == self.per_window.saturating_add(1),
        }
    }
}

impl AuthFailures for FailureThrottle {
    fn wrong_key(&self, client: IpAddr) -> WrongKeyVerdict {
        let verdict = self.record_failure(client, Instant::now());
        if let WrongKeyVerdict::Throttled { just_now: true, .. } = verdict {
            tracing::warn!(
                event = "gateway_auth_throttled",
                client = %client,
                attempts = self.per_window,
                "too many wrong keys from one address: its wrong keys are answered 429 for the rest of the minute"
            );
        }
        let outcome = match verdict {
            WrongKeyVerdict::Unauthorized => "unauthorized",
            WrongKeyVerdict::Throttled { .. } => "throttled",
        };
        metrics::counter!("metaforge_gateway_auth_failures_total", "outcome" => outcome).increment(1);
        verdict
    }
}

/// Shared auth state: the key list, the per-identity limiter and the per-address failure throttle.
pub struct AuthState {
    keys: Vec<ApiKey>,
    limiter: Option<DefaultKeyedRateLimiter<String>>,
    failures: Option<Arc<FailureThrottle>>,
}

impl AuthState {
    /// Builds the auth state; `per_minute` of `None` disables rate limiting. Failed
    /// authentication is throttled at [`DEFAULT_AUTH_FAILURES_PER_MINUTE`] per client address
    /// (see [`AuthState::with_auth_failures_per_minute`]).
    pub fn new(keys: Vec<ApiKey>, per_minute: Option<NonZeroU32>) -> Self {
        let limiter = per_minute.map(|n| governor::RateLimiter::keyed(Quota::per_minute(n)));
        let failures =
            NonZeroU32::new(DEFAULT_AUTH_FAILURES_PER_MINUTE).map(|n| Arc::new(FailureThrottle::new(n)));
        Self {
            keys,
            limiter,
            failures,
        }
    }

    /// Wrong-key attempts a client address may make per minute before its further wrong keys
    /// are answered 429; `None` turns the throttle off.
    #[must_use]
    pub fn with_auth_failures_per_minute(mut self, per_minute: Option<NonZeroU32>) -> Self {
        self.failures = per_minute.map(|n| Arc::new(FailureThrottle::new(n)));
        self
    }

    /// The wrong-key throttle, for the MCP sidecar to share (one count per address across
    /// both doors).
    pub fn auth_failures(&self) -> Option<Arc<dyn AuthFailures>> {
        self.failures.clone().map(|f| f as Arc<dyn AuthFailures>)
    }

    /// Whether any key is configured (open loopback mode otherwise).
    pub fn keys_required(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The identity a key presented on the console's sign-in form authenticates as, under the
    /// same per-address throttle as a wrong key on the API (so the form is no faster a guessing
    /// oracle than a header).
    pub fn sign_in(&self, client: IpAddr, presented: &str) -> Result<String, SignInRefused> {
        if let Some(key) = self.identify(presented.trim()) {
            return Ok(key.identity.clone());
        }
        match self.wrong_key(client) {
            WrongKeyVerdict::Unauthorized => Err(SignInRefused::WrongKey),
            WrongKeyVerdict::Throttled { retry_after_secs, .. } => {
                Err(SignInRefused::Throttled { retry_after_secs })
            }
        }
    }

    /// How to answer a wrong key from `client` (401 when no throttle is configured).
    fn wrong_key(&self, client: IpAddr) -> WrongKeyVerdict {
        match &self.failures {
            Some(failures) => failures.wrong_key(client),
            None => {
                metrics::counter!("metaforge_gateway_auth_failures_total", "outcome" => "unauthorized")
                    .increment(1);
                WrongKeyVerdict::Unauthorized
            }
        }
    }

    fn identify(&self, presented: &str) -> Option<&ApiKey> {
        self.keys
            .iter()
            .find(|k| bool::from(k.key.as_bytes().ct_eq(presented.as_bytes())))
    }
}

/// Why a console sign-in was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignInRefused {
    /// No configured key matches.
    #[error("that key is not one of this gateway's keys")]
    WrongKey,
    /// The address used up its wrong-key attempts for this minute.
    #[error("too many failed sign-ins from this address; retry in {retry_after_secs}s")]
    Throttled {
        /// Seconds until the address may try again.
        retry_after_secs: u64,
    },
}

/// The client address of a request (public for the console's sign-in).
pub(crate) fn request_client(request: &Request) -> IpAddr {
    client_address(request)
}

/// The credential of an `Authorization` value: `Bearer <key>` with the scheme compared
/// case-insensitively (RFC 9110 §11.1); any other scheme presents an empty (invalid) key.
pub fn bearer_credential(value: &str) -> &str {
    let value = value.trim_start();
    match value.split_once([' ', '\t']) {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
        _ => "",
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
        keys.push(bearer_credential(value.to_str().unwrap_or_default()).to_owned());
    }
    keys
}

/// Paths reachable without a key (liveness only; a key, when presented, is checked and shows
/// the detail).
const PUBLIC_PATHS: &[&str] = &["/health"];

/// The peer address axum's connect info recorded; a router served without it (in-process tests)
/// counts every client as one address.
fn client_address(request: &Request) -> IpAddr {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |info| info.0.ip())
}

/// 429 for an address that used up its wrong-key attempts.
fn throttled(ip: IpAddr, secs: u64) -> Response {
    ApiError::new(
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        "auth_throttled",
        format!("too many failed authentication attempts from {ip}; retry in {secs}s"),
    )
    .with_retry_after(secs)
    .into_response()
}

/// Middleware: authenticates (401 JSON without a valid key; 429 once an address has failed too
/// often) and rate-limits per identity (429).
pub async fn authenticate(State(auth): State<Arc<AuthState>>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let presented = presented_keys(&request);
    let public = PUBLIC_PATHS.contains(&path.as_str());
    let (identity, class) = if !auth.keys_required() {
        (Identity("local".to_owned()), CallerClass::Local)
    } else if public && presented.is_empty() {
        (Identity(ANONYMOUS.to_owned()), CallerClass::Remote)
    } else {
        let identities: Option<Vec<&str>> = presented
            .iter()
            .map(|k| auth.identify(k).map(|key| key.identity.as_str()))
            .collect();
        match identities.as_deref() {
            Some([first, rest @ ..]) if rest.iter().all(|i| i == first) => {
                (Identity((*first).to_owned()), CallerClass::Remote)
            }
            // A request with no credential is not a guess: just 401.
            Some([]) => {
                metrics::counter!("metaforge_gateway_auth_failures_total", "outcome" => "unauthorized")
                    .increment(1);
                return ApiError::unauthorized().into_response();
            }
            _ => {
                let ip = client_address(&request);
                return match auth.wrong_key(ip) {
                    WrongKeyVerdict::Unauthorized => ApiError::unauthorized().into_response(),
                    WrongKeyVerdict::Throttled { retry_after_secs, .. } => throttled(ip, retry_after_secs),
                };
            }
        }
    };
    if let Some(limiter) = &auth.limiter
        && !public
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
    request.extensions_mut().insert(TransportClass(class));
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
        // Set but empty of keys, and one key for two people: refused, naming the entry.
        for (raw, entry, says) in [
            (", ,", 1, "holds no key"),
            (" , ", 1, "holds no key"),
            ("alice:sk-shared-1,bob:sk-shared-1", 2, "also listed for 'alice'"),
            ("alice:sk-shared-1,sk-shared-1", 2, "also listed for 'alice'"),
        ] {
            let err = parse_api_keys(raw).unwrap_err().to_string();
            assert!(
                err.contains(&format!("entry {entry} ")) && err.contains(says),
                "{raw:?}: {err}"
            );
        }
        // Unset (blank) is an open loopback gateway; one person may hold two keys (rotation).
        assert!(parse_api_keys("").unwrap().is_empty());
        assert_eq!(
            parse_api_keys("alice:sk-alice-old,alice:sk-alice-new")
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            parse_api_keys("alice:sk-alice-old,alice:sk-alice-old")
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn a_caller_class_is_not_an_identity_a_key_can_take() {
        for reserved in RESERVED_IDENTITIES {
            let err = parse_api_keys(&format!("{reserved}:sk-reserved-1")).unwrap_err();
            assert!(err.to_string().contains("caller class"), "{reserved}: {err}");
        }
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_other_schemes_present_nothing() {
        for value in [
            "Bearer k-1",
            "bearer k-1",
            "BEARER k-1",
            "bEaReR   k-1 ",
            "Bearer\tk-1",
        ] {
            assert_eq!(bearer_credential(value), "k-1", "{value:?}");
        }
        for value in ["Basic k-1", "Bearerk-1", "k-1", ""] {
            assert_eq!(bearer_credential(value), "", "{value:?}");
        }
    }

    #[test]
    fn an_address_is_throttled_after_its_failures_until_the_window_ends() {
        let throttle = FailureThrottle::new(NonZeroU32::new(3).unwrap());
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(throttle.record_failure(ip, t0), WrongKeyVerdict::Unauthorized);
        }
        assert_eq!(
            throttle.record_failure(ip, t0),
            WrongKeyVerdict::Throttled {
                retry_after_secs: 60,
                just_now: true
            },
            "the fourth wrong key in the minute is refused 429"
        );
        assert_eq!(
            throttle.record_failure(ip, t0 + Duration::from_secs(30)),
            WrongKeyVerdict::Throttled {
                retry_after_secs: 30,
                just_now: false
            }
        );
        assert_eq!(
            throttle.record_failure(other, t0),
            WrongKeyVerdict::Unauthorized,
            "per address"
        );
        assert_eq!(
            throttle.record_failure(ip, t0 + Duration::from_secs(61)),
            WrongKeyVerdict::Unauthorized,
            "a new window"
        );
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
