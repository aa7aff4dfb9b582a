//! Leases: a duty that must be done by exactly one process at a time among several sharing one
//! ledger (the embedded engine driving the runs of one run ledger), held for a bounded time and
//! renewed by its holder. The rule of who may take a lease lives here, once; every engine
//! (SQLite, PostgreSQL) reads the stored lease and writes the new one in one transaction that
//! excludes other writers, so two processes asking at once get one holder.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::error::{PortError, PortErrorKind};

/// The duty of driving every embedded-engine run of one run ledger.
pub const EMBEDDED_ENGINE_DUTY: &str = "embedded-flow-engine";

/// The duty a running process renews to show it is alive, one per process start: a hold that
/// process parked is orphaned only once this lapses (or the process is seen dead on its host),
/// so a gateway starting beside live ones leaves their holds alone.
#[must_use]
pub fn presence_duty(holder: &str) -> String {
    format!("process-presence/{holder}")
}

/// A duty, who holds it, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// What the lease is for ([`EMBEDDED_ENGINE_DUTY`]).
    pub duty: String,
    /// Who holds it: a process identity unique per start (host, pid and a random id).
    pub holder: String,
    /// When the holder took it (renewals keep this).
    pub acquired_at: Timestamp,
    /// When it lapses unless renewed; from then on anyone may take it.
    pub expires_at: Timestamp,
}

impl Lease {
    /// Whether `holder` holds the lease at `now`.
    #[must_use]
    pub fn is_held_by(&self, holder: &str, now: Timestamp) -> bool {
        self.holder == holder && now < self.expires_at
    }

    /// Whether `holder` may take (or renew) the lease at `now`: it is its own, or it lapsed.
    #[must_use]
    pub fn may_be_taken_by(&self, holder: &str, now: Timestamp) -> bool {
        self.holder == holder || now >= self.expires_at
    }

    /// The lease an acquisition stores: `current` renewed by its holder (keeping when it was
    /// taken), or a fresh lease for `holder` when there is none or it may be taken; `None`
    /// when someone else holds it at `now`.
    ///
    /// # Errors
    /// `Invalid` for an empty duty or holder, or a zero or unrepresentable `ttl`.
    pub fn next(
        current: Option<&Lease>,
        duty: &str,
        holder: &str,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<Option<Lease>, PortError> {
        check_request(duty, holder, ttl)?;
        let ttl =
            chrono::Duration::from_std(ttl).map_err(|_| invalid("lease.ttl", "is too long to represent"))?;
        let expires_at = now
            .checked_add_signed(ttl)
            .ok_or_else(|| invalid("lease.ttl", "is too long to represent"))?;
        Ok(match current {
            Some(lease) if !lease.may_be_taken_by(holder, now) => None,
            Some(lease) if lease.holder == holder && now < lease.expires_at => Some(Lease {
                expires_at,
                ..lease.clone()
            }),
            Some(_) | None => Some(Lease {
                duty: duty.to_owned(),
                holder: holder.to_owned(),
                acquired_at: now,
                expires_at,
            }),
        })
    }
}

fn invalid(field: &str, why: &str) -> PortError {
    PortError::new(PortErrorKind::Invalid, format!("{field}: {why}"))
}

fn check_request(duty: &str, holder: &str, ttl: Duration) -> Result<(), PortError> {
    if duty.trim().is_empty() {
        return Err(invalid("lease.duty", "must not be empty"));
    }
    if holder.trim().is_empty() {
        return Err(invalid("lease.holder", "must not be empty"));
    }
    if ttl.is_zero() {
        return Err(invalid("lease.ttl", "must be longer than zero"));
    }
    Ok(())
}

/// Where leases are kept: beside the ledger whose duty they guard, so every process sharing the
/// ledger sees the same holder.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes `duty` for `holder` until `now + ttl` when no one else holds it at `now`, or renews
    /// it when `holder` does ([`Lease::next`]). Returns the lease as stored afterwards: held by
    /// `holder` when it was taken, by the other holder otherwise.
    async fn acquire(
        &self,
        duty: &str,
        holder: &str,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<Lease, PortError>;

    /// Gives `duty` up at once when `holder` holds it (a graceful stop), so another process need
    /// not wait for it to lapse. Releasing a lease held by someone else changes nothing.
    async fn release(&self, duty: &str, holder: &str, now: Timestamp) -> Result<(), PortError>;

    /// The stored lease for `duty`, if one was ever taken.
    async fn lease(&self, duty: &str) -> Result<Option<Lease>, PortError>;
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(secs: i64) -> Timestamp {
        chrono::Utc.timestamp_opt(secs, 0).single().unwrap_or_default()
    }

    const TTL: Duration = Duration::from_secs(15);

    #[test]
    fn a_free_duty_is_taken_until_now_plus_ttl() {
        let lease = Lease::next(None, "d", "a", at(100), TTL);
        assert_eq!(
            lease
                .ok()
                .flatten()
                .map(|l| (l.holder, l.acquired_at, l.expires_at)),
            Some(("a".to_owned(), at(100), at(115)))
        );
    }

    #[test]
    fn a_lease_held_by_another_is_refused_until_it_lapses() {
        let held = Lease {
            duty: "d".into(),
            holder: "a".into(),
            acquired_at: at(100),
            expires_at: at(115),
        };
        assert_eq!(Lease::next(Some(&held), "d", "b", at(114), TTL).ok(), Some(None));
        let taken = Lease::next(Some(&held), "d", "b", at(115), TTL).ok().flatten();
        assert_eq!(
            taken.map(|l| (l.holder, l.acquired_at, l.expires_at)),
            Some(("b".to_owned(), at(115), at(130)))
        );
    }

    #[test]
    fn a_renewal_keeps_when_it_was_taken_and_a_lapsed_own_lease_starts_afresh() {
        let held = Lease {
            duty: "d".into(),
            holder: "a".into(),
            acquired_at: at(100),
            expires_at: at(115),
        };
        let renewed = Lease::next(Some(&held), "d", "a", at(110), TTL).ok().flatten();
        assert_eq!(
            renewed.map(|l| (l.acquired_at, l.expires_at)),
            Some((at(100), at(125)))
        );
        let retaken = Lease::next(Some(&held), "d", "a", at(120), TTL).ok().flatten();
        assert_eq!(
            retaken.map(|l| (l.acquired_at, l.expires_at)),
            Some((at(120), at(135)))
        );
    }

    #[test]
    fn an_empty_duty_or_holder_or_a_zero_ttl_is_invalid_naming_the_field() {
        for (duty, holder, ttl, field) in [
            ("", "a", TTL, "lease.duty"),
            ("d", " ", TTL, "lease.holder"),
            ("d", "a", Duration::ZERO, "lease.ttl"),
        ] {
            let err = Lease::next(None, duty, holder, at(0), ttl).err();
            assert_eq!(err.as_ref().map(|e| e.kind), Some(PortErrorKind::Invalid));
            assert!(err.is_some_and(|e| e.message.starts_with(field)), "{field}");
        }
    }

    #[test]
    fn is_held_by_needs_the_holder_and_an_unexpired_lease() {
        let held = Lease {
            duty: "d".into(),
            holder: "a".into(),
            acquired_at: at(100),
            expires_at: at(115),
        };
        assert!(held.is_held_by("a", at(114)));
        assert!(!held.is_held_by("a", at(115)));
        assert!(!held.is_held_by("b", at(110)));
    }
}
