//! Issue 12: validation never stalls the gateway. While two maximum-size flows (MAX_PHASES
//! phases in one dependency cycle, MAX_DEPENDENCIES edges, MAX_DELIVERABLES deliverables) are
//! validated over and over by two clients, `/health` on the real binary keeps answering in under
//! 100 ms: validation runs on the blocking pool, not on the async workers.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a peer that cannot start must fail the test loudly"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use metaforge_domain::flow::{MAX_DELIVERABLES, MAX_DEPENDENCIES, MAX_PHASES, check_flow_size};
use serde_json::{Value, json};

use crate::common::{http, start_gateway};

/// A flow exactly at every size limit: each phase depends on the ten before it (wrapping, so the
/// whole flow is one cycle) and produces five artifacts and requires five others.
fn maximum_flow() -> Value {
    let fan = MAX_DEPENDENCIES / MAX_PHASES;
    let per_side = MAX_DELIVERABLES / MAX_PHASES / 2;
    let phases: Vec<Value> = (0..MAX_PHASES)
        .map(|i| {
            let deps: Vec<String> = (1..=fan)
                .map(|k| format!("p{}", (i + MAX_PHASES - k) % MAX_PHASES))
                .collect();
            let made: Vec<String> = (0..per_side).map(|k| format!("a{i}_{k}")).collect();
            let wanted: Vec<String> = (0..per_side)
                .map(|k| format!("a{}_{k}", (i + MAX_PHASES - 1) % MAX_PHASES))
                .collect();
            json!({"id": format!("p{i}"), "title": format!("Phase {i}"), "depends_on": deps,
                   "expected_artifacts": made, "required_deliverables": wanted,
                   "gate": {"name": format!("G{i} Release Review")}})
        })
        .collect();
    let flow = json!({"id": "max", "version": "1", "title": "Maximum flow", "phases": phases});
    let parsed = serde_json::from_value(flow.clone()).unwrap();
    assert_eq!(
        check_flow_size(&parsed),
        Ok(()),
        "the flow is at the limits, not over"
    );
    flow
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

#[test]
fn health_answers_in_under_100_ms_while_two_maximum_size_flows_are_validated() {
    let home = tempfile::tempdir().expect("tempdir");
    let (_gateway, gw) = start_gateway(home.path(), &[]);
    let body = Arc::new(json!({"flow": maximum_flow()}));
    let stop = Arc::new(AtomicBool::new(false));
    let validated = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (gw, body, stop, validated) = (gw.clone(), body.clone(), stop.clone(), validated.clone());
            std::thread::spawn(move || {
                let mut slowest = Duration::ZERO;
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let (status, report) = http(&gw, "POST", "/v1/design-flows/validate", Some(&body));
                    slowest = slowest.max(started.elapsed());
                    assert_eq!(status, 200, "{report}");
                    assert_eq!(report["valid"], false, "one big cycle is never valid");
                    validated.fetch_add(1, Ordering::Relaxed);
                }
                slowest
            })
        })
        .collect();
    // Let both validators get going, then probe /health while they run.
    while validated.load(Ordering::Relaxed) < 2 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut latencies = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let (status, _) = http(&gw, "GET", "/health", None);
        latencies.push(started.elapsed());
        assert_eq!(status, 200);
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let slowest: Vec<Duration> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let typical = median(latencies.clone());
    let worst = latencies.iter().max().copied().unwrap_or_default();
    eprintln!(
        "/health under load: median {typical:?}, worst {worst:?} over {} probes; {} validations, slowest {slowest:?}",
        latencies.len(),
        validated.load(Ordering::Relaxed)
    );
    assert!(
        typical < Duration::from_millis(100),
        "median /health {typical:?}: {latencies:?}"
    );
}
