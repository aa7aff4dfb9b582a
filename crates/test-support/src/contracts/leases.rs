//! The lease contract (issue 20): one holder per duty at a time, renewals by the holder, a lapsed
//! or released lease taken by the next asker, and one winner among racing askers.

use std::time::Duration;

use metaforge_ports::{LeaseStore, PortErrorKind};

use super::{kind_of, t};

const TTL: Duration = Duration::from_secs(15);

/// Runs every lease rule against `leases`.
pub async fn lease_store_contract(leases: &dyn LeaseStore) {
    assert_eq!(leases.lease("engine").await.expect("read"), None, "no lease yet");

    let taken = leases.acquire("engine", "a", t(0), TTL).await.expect("take");
    assert_eq!(
        (taken.holder.as_str(), taken.acquired_at, taken.expires_at),
        ("a", t(0), t(15)),
        "a free duty is taken until now + ttl"
    );
    let refused = leases.acquire("engine", "b", t(5), TTL).await.expect("ask");
    assert_eq!(refused.holder, "a", "another's unexpired lease is not taken");
    let renewed = leases.acquire("engine", "a", t(10), TTL).await.expect("renew");
    assert_eq!(
        (renewed.acquired_at, renewed.expires_at),
        (t(0), t(25)),
        "a renewal extends the lease and keeps when it was taken"
    );
    assert_eq!(leases.lease("engine").await.expect("read"), Some(renewed));

    let after_lapse = leases
        .acquire("engine", "b", t(25), TTL)
        .await
        .expect("take over");
    assert_eq!(
        (after_lapse.holder.as_str(), after_lapse.acquired_at),
        ("b", t(25)),
        "a lapsed lease goes to the next asker"
    );
    leases
        .release("engine", "a", t(26))
        .await
        .expect("release by a non-holder");
    assert_eq!(
        leases.lease("engine").await.expect("read").map(|l| l.expires_at),
        Some(t(40)),
        "releasing another's lease changes nothing"
    );
    leases.release("engine", "b", t(30)).await.expect("release");
    let after_release = leases.acquire("engine", "a", t(30), TTL).await.expect("take");
    assert_eq!(after_release.holder, "a", "a released lease is free at once");

    let other = leases
        .acquire("alarms", "b", t(30), TTL)
        .await
        .expect("other duty");
    assert_eq!(other.holder, "b", "duties are independent");

    assert_eq!(
        kind_of(&leases.acquire("engine", "", t(31), TTL).await),
        Some(PortErrorKind::Invalid)
    );
    assert_eq!(
        kind_of(&leases.acquire("engine", "a", t(31), Duration::ZERO).await),
        Some(PortErrorKind::Invalid)
    );

    // Ten askers at once for a free duty: exactly one holds it.
    let askers = (0..10).map(|n| {
        let holder = format!("racer-{n}");
        async move {
            let lease = leases.acquire("race", &holder, t(100), TTL).await.expect("ask");
            lease.holder == holder
        }
    });
    let won = futures::future::join_all(askers).await;
    assert_eq!(
        won.iter().filter(|w| **w).count(),
        1,
        "one of ten racing askers holds it: {won:?}"
    );
}
