//! The event-bus contract: in-process dispatch to every subscriber, kind validation, and — for a
//! durable bus — replay through consumer groups.

use futures::StreamExt;
use metaforge_ports::{BusEvent, EventBus, PortErrorKind};

use super::{kind_of, t};

fn event(id: &str, kind: &str, n: i64) -> BusEvent {
    BusEvent {
        id: id.to_owned(),
        kind: kind.to_owned(),
        trace_id: format!("trace-{id}"),
        payload: serde_json::json!({"n": n, "node": "n-1"}),
        at: t(n),
        traceparent: None,
    }
}

/// Runs every event-bus rule against `bus`. `kind_prefix` keeps topics unique per run on a
/// shared broker.
pub async fn event_bus_contract(bus: &dyn EventBus, kind_prefix: &str) {
    let deposit = format!("{kind_prefix}.twin.deposit");
    let other = format!("{kind_prefix}.run.status");
    let mut first = bus.subscribe(&deposit).expect("subscribe 1");
    let mut second = bus.subscribe(&deposit).expect("subscribe 2");
    let mut unrelated = bus.subscribe(&other).expect("subscribe other");

    let e1 = event("e-1", &deposit, 1);
    let receipt = bus.publish(e1.clone()).await.expect("publish e-1");
    assert_eq!(receipt.delivered, 2, "every subscriber of the kind receives it");
    assert_eq!(
        receipt.persisted,
        bus.is_durable(),
        "a durable bus persists every event"
    );
    assert_eq!(first.next().await, Some(e1.clone()));
    assert_eq!(second.next().await, Some(e1.clone()));
    assert!(
        unrelated.try_recv().is_err(),
        "other kinds' subscribers receive nothing"
    );

    drop(second);
    let e2 = event("e-2", &deposit, 2);
    assert_eq!(
        bus.publish(e2.clone()).await.expect("publish e-2").delivered,
        1,
        "a dropped receiver is unsubscribed"
    );
    assert_eq!(first.next().await, Some(e2.clone()));

    assert_eq!(
        kind_of(&bus.publish(event("e-3", "Bad Kind!", 3)).await),
        Some(PortErrorKind::Invalid)
    );
    assert!(matches!(bus.subscribe(""), Err(e) if e.kind == PortErrorKind::Invalid));
    assert!(first.try_recv().is_err(), "a refused event is not dispatched");

    if bus.is_durable() {
        let group = format!("{kind_prefix}-group-a");
        let replayed = bus.replay(&deposit, &group, 10, 20_000).await.expect("replay");
        assert_eq!(
            replayed,
            vec![e1.clone(), e2.clone()],
            "the log holds every event, in order, with its trace id"
        );
        let e4 = event("e-4", &deposit, 4);
        bus.publish(e4.clone()).await.expect("publish e-4");
        let resumed = bus.replay(&deposit, &group, 10, 20_000).await.expect("resume");
        assert_eq!(
            resumed,
            vec![e4.clone()],
            "a consumer group resumes after its last commit"
        );
        let fresh = bus
            .replay(&deposit, &format!("{kind_prefix}-group-b"), 10, 20_000)
            .await
            .expect("group b");
        assert_eq!(fresh, vec![e1, e2, e4], "each group reads the whole log");
    } else {
        assert_eq!(
            kind_of(&bus.replay(&deposit, "g", 10, 10).await),
            Some(PortErrorKind::Unavailable),
            "a non-durable bus cannot replay"
        );
    }
}
