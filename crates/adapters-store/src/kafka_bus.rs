//! The event bus on Kafka (feature `kafka`). Additive, as the seed requires: every event is
//! dispatched in-process to every subscriber exactly as the in-process bus does, and is also
//! written to the topic `metaforge.<kind>` with a `trace-id` header and the W3C trace context
//! (`traceparent`, `tracestate`) of a producer span `publish metaforge.<kind>`, so a consumer's
//! work joins the publisher's trace. Consumer groups replay the log. When the broker is unreachable at start, [`start_event_bus`] falls back to the
//! in-process bus and logs the choice loudly.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::channel::mpsc::UnboundedReceiver;
use metaforge_ports::{BusEvent, EventBus, PortError, PortErrorKind, PublishReceipt};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tracing::Instrument as _;

use crate::event_bus::{InProcessEventBus, validate_kind};

/// The header carrying an event's trace id.
pub const TRACE_ID_HEADER: &str = "trace-id";

/// The W3C header a replayed event's [`BusEvent::traceparent`] is read from.
pub const TRACEPARENT_HEADER: &str = crate::trace::TRACEPARENT;

/// How long a broker may take to answer at start before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a produce may wait for the broker's acknowledgement.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The topic that holds events of `kind`.
pub fn topic_for(kind: &str) -> String {
    format!("metaforge.{kind}")
}

/// The Kafka event bus.
pub struct KafkaEventBus {
    bootstrap: String,
    producer: FutureProducer,
    admin: AdminClient<DefaultClientContext>,
    local: InProcessEventBus,
    topics: Mutex<HashSet<String>>,
}

fn kafka_error(kind: PortErrorKind, what: String, e: rdkafka::error::KafkaError) -> PortError {
    PortError::with_source(kind, what, e)
}

impl KafkaEventBus {
    /// Connects to `bootstrap` (`host:port[,host:port]`) and checks the broker answers. An
    /// unreachable broker is `Unavailable`.
    pub async fn connect(bootstrap: &str) -> Result<Self, PortError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", bootstrap)
            .set("message.timeout.ms", "10000")
            .set("socket.timeout.ms", "5000");
        let producer: FutureProducer = config.create().map_err(|e| {
            kafka_error(
                PortErrorKind::Invalid,
                format!("Kafka settings for {bootstrap}"),
                e,
            )
        })?;
        let admin: AdminClient<DefaultClientContext> = config.create().map_err(|e| {
            kafka_error(
                PortErrorKind::Invalid,
                format!("Kafka settings for {bootstrap}"),
                e,
            )
        })?;
        let probe = producer.clone();
        tokio::task::spawn_blocking(move || probe.client().fetch_metadata(None, CONNECT_TIMEOUT))
            .await
            .map_err(|e| PortError::with_source(PortErrorKind::Internal, "the Kafka probe task failed", e))?
            .map_err(|e| {
                kafka_error(
                    PortErrorKind::Unavailable,
                    format!("the Kafka broker at {bootstrap} is unreachable"),
                    e,
                )
            })?;
        Ok(Self {
            bootstrap: bootstrap.to_owned(),
            producer,
            admin,
            local: InProcessEventBus::new(),
            topics: Mutex::new(HashSet::new()),
        })
    }

    /// Creates the topic for `kind` once (an existing topic is fine).
    async fn ensure_topic(&self, topic: &str) -> Result<(), PortError> {
        if self
            .topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(topic)
        {
            return Ok(());
        }
        let new = NewTopic::new(topic, 1, TopicReplication::Fixed(1));
        let results = self
            .admin
            .create_topics([&new], &AdminOptions::new())
            .await
            .map_err(|e| {
                kafka_error(
                    PortErrorKind::Unavailable,
                    format!("could not create topic {topic}"),
                    e,
                )
            })?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => {
                    return Err(PortError::new(
                        PortErrorKind::Unavailable,
                        format!("could not create topic {name}: {code}"),
                    ));
                }
            }
        }
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(topic.to_owned());
        Ok(())
    }

    fn decode(message: &rdkafka::message::BorrowedMessage<'_>) -> Result<BusEvent, PortError> {
        let payload = message
            .payload()
            .ok_or_else(|| PortError::new(PortErrorKind::Corrupt, "a persisted event has no payload"))?;
        let mut event: BusEvent = serde_json::from_slice(payload).map_err(|e| {
            PortError::with_source(PortErrorKind::Corrupt, "a persisted event is not valid JSON", e)
        })?;
        if let Some(headers) = message.headers() {
            for header in headers.iter() {
                let Some(value) = header.value else {
                    continue;
                };
                match header.key {
                    TRACE_ID_HEADER => event.trace_id = String::from_utf8_lossy(value).into_owned(),
                    TRACEPARENT_HEADER => {
                        event.traceparent = Some(String::from_utf8_lossy(value).into_owned());
                    }
                    _ => {}
                }
            }
        }
        Ok(event)
    }
}

/// The producer span of one publish, `publish <topic>` (OpenTelemetry's messaging convention),
/// parented on the event's own trace context when it carries one, else on the current span.
fn producer_span(topic: &str, event: &BusEvent) -> tracing::Span {
    let span = tracing::info_span!(
        "event_publish",
        otel.name = %format_args!("publish {topic}"),
        otel.kind = "producer",
        messaging.system = "kafka",
        messaging.destination.name = %topic,
        messaging.message.id = %event.id,
    );
    if let Some(traceparent) = &event.traceparent {
        crate::trace::parent_on(&span, traceparent);
    }
    span
}

/// The record headers of an event: its trace id, and the current span's W3C context.
fn record_headers(event: &BusEvent) -> OwnedHeaders {
    let context = crate::trace::current_fields();
    let mut headers = OwnedHeaders::new().insert(Header {
        key: TRACE_ID_HEADER,
        value: Some(event.trace_id.as_str()),
    });
    for (key, value) in &context {
        headers = headers.insert(Header {
            key: key.as_str(),
            value: Some(value.as_str()),
        });
    }
    headers
}

impl KafkaEventBus {
    /// Writes one event to its topic, inside the producer span.
    async fn persist(&self, mut event: BusEvent, topic: String) -> Result<(), PortError> {
        self.ensure_topic(&topic).await?;
        let headers = record_headers(&event);
        // The body carries the context the headers do, so a reader of either sees one trace.
        event.traceparent = headers
            .iter()
            .find(|h| h.key == TRACEPARENT_HEADER)
            .and_then(|h| h.value)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .or(event.traceparent);
        let body = serde_json::to_vec(&event)
            .map_err(|e| PortError::with_source(PortErrorKind::Invalid, "the event cannot be encoded", e))?;
        let record = FutureRecord::to(&topic)
            .key(event.id.as_str())
            .payload(&body)
            .headers(headers);
        self.producer.send(record, SEND_TIMEOUT).await.map_err(|(e, _)| {
            kafka_error(
                PortErrorKind::Unavailable,
                format!(
                    "event {} was delivered in-process but not persisted to {topic}",
                    event.id
                ),
                e,
            )
        })?;
        Ok(())
    }
}

/// The event bus for a deployment: Kafka when `bootstrap` is given and the broker answers,
/// otherwise the in-process bus — and when Kafka was asked for but is unreachable, an error-level
/// `event_bus_kafka_unavailable` log says so, since events will then not be persisted.
pub async fn start_event_bus(bootstrap: Option<&str>) -> Arc<dyn EventBus> {
    let Some(bootstrap) = bootstrap else {
        return Arc::new(InProcessEventBus::new());
    };
    match KafkaEventBus::connect(bootstrap).await {
        Ok(bus) => {
            tracing::info!(
                event = "event_bus_kafka_connected",
                bootstrap,
                "events persist to Kafka"
            );
            Arc::new(bus)
        }
        Err(err) => {
            tracing::error!(
                event = "event_bus_kafka_unavailable",
                bootstrap,
                error = %err,
                "KAFKA_BOOTSTRAP_SERVERS is set but the broker is unreachable: falling back to the \
                 in-process event bus; events will NOT be persisted or replayable"
            );
            Arc::new(InProcessEventBus::new())
        }
    }
}

#[async_trait]
impl EventBus for KafkaEventBus {
    async fn publish(&self, event: BusEvent) -> Result<PublishReceipt, PortError> {
        validate_kind(&event.kind)?;
        // Dispatch semantics are the in-process bus's; Kafka only adds the durable log.
        let delivered = self.local.dispatch(&event);
        let topic = topic_for(&event.kind);
        let span = producer_span(&topic, &event);
        self.persist(event, topic).instrument(span).await?;
        Ok(PublishReceipt {
            delivered,
            persisted: true,
        })
    }

    fn subscribe(&self, kind: &str) -> Result<UnboundedReceiver<BusEvent>, PortError> {
        self.local.subscribe(kind)
    }

    fn is_durable(&self) -> bool {
        true
    }

    async fn replay(
        &self,
        kind: &str,
        group: &str,
        max: usize,
        wait_ms: u64,
    ) -> Result<Vec<BusEvent>, PortError> {
        validate_kind(kind)?;
        if group.trim().is_empty() {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                "replay.group: must not be empty",
            ));
        }
        let topic = topic_for(kind);
        self.ensure_topic(&topic).await?;
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", "6000")
            .create()
            .map_err(|e| kafka_error(PortErrorKind::Invalid, "Kafka consumer settings".into(), e))?;
        tokio::task::spawn_blocking(move || {
            consumer.subscribe(&[&topic]).map_err(|e| {
                kafka_error(
                    PortErrorKind::Unavailable,
                    format!("could not subscribe to {topic}"),
                    e,
                )
            })?;
            let mut out = Vec::new();
            let first_deadline = Instant::now() + Duration::from_millis(wait_ms);
            let mut idle_until: Option<Instant> = None;
            while out.len() < max {
                let now = Instant::now();
                let deadline = idle_until.unwrap_or(first_deadline);
                if now >= deadline {
                    break;
                }
                match consumer.poll(deadline - now) {
                    None => {}
                    Some(Err(e)) => {
                        return Err(kafka_error(
                            PortErrorKind::Unavailable,
                            format!("reading {topic} failed"),
                            e,
                        ));
                    }
                    Some(Ok(message)) => {
                        out.push(Self::decode(&message)?);
                        // After the first event, stop once the log is quiet for a moment.
                        idle_until = Some(Instant::now() + Duration::from_millis(1500));
                    }
                }
            }
            if !out.is_empty() {
                consumer.commit_consumer_state(CommitMode::Sync).map_err(|e| {
                    kafka_error(
                        PortErrorKind::Unavailable,
                        format!("committing the group offset on {topic} failed"),
                        e,
                    )
                })?;
            }
            consumer.unsubscribe();
            Ok(out)
        })
        .await
        .map_err(|e| PortError::with_source(PortErrorKind::Internal, "the Kafka replay task failed", e))?
    }
}
