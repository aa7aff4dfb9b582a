//! The stores record the trace of the work that wrote to them (issue 20, "one trace from intent
//! to tool"): a twin commit made inside a traced span keeps, as its `traceparent`, the context
//! of its own `commit <branch>` span — a child of the caller's, in the caller's trace — on the
//! embedded SQLite twin and on FalkorDB; with no trace recorded it keeps none. The Kafka bus's
//! headers are pinned in `kafka_contract` with the same recorder.
#![expect(
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a store that cannot be written fails the test"
)]

use metaforge_adapters_store::SqliteTwinStore;
use metaforge_ports::{TwinChangeSet, TwinCommitRequest, TwinNode, TwinNodeType, TwinStore};
use opentelemetry::trace::TracerProvider as _;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// The W3C context a test's caller works in: its trace id and its span id.
pub(crate) const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const PARENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

/// Records spans on this thread as an exporting process would (an OpenTelemetry layer and the
/// W3C propagator), until the guard drops.
pub(crate) fn recording() -> tracing::subscriber::DefaultGuard {
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("store-test")));
    tracing::subscriber::set_default(subscriber)
}

/// A span of the caller, in the trace [`PARENT`] names.
fn callers_span() -> tracing::Span {
    let span = tracing::info_span!("caller");
    let carrier = std::collections::HashMap::from([("traceparent".to_owned(), PARENT.to_owned())]);
    let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&carrier));
    span.set_parent(parent).expect("a valid parent");
    span
}

/// Asserts that `traceparent` is a child of [`PARENT`]: its trace, another span.
pub(crate) fn assert_child_of_parent(traceparent: Option<&str>) {
    let traceparent = traceparent.expect("a traceparent was recorded");
    let fields: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(fields.len(), 4, "{traceparent}");
    assert_eq!(fields[1], PARENT_TRACE, "the caller's trace: {traceparent}");
    assert_ne!(fields[2], PARENT_SPAN, "the store's own span: {traceparent}");
}

fn one_node_commit(id: &str, branch: &str) -> TwinCommitRequest {
    TwinCommitRequest {
        id: id.to_owned(),
        branch: branch.to_owned(),
        expected_head: None,
        message: format!("commit {id}"),
        author: "agent:mechanical".to_owned(),
        at: metaforge_test_support::contracts::t(1),
        changes: TwinChangeSet {
            upsert_nodes: vec![TwinNode::new(
                id,
                TwinNodeType::Constraint,
                serde_json::Map::new(),
            )],
            ..TwinChangeSet::default()
        },
    }
}

/// A commit in a traced span records its span's context, in the caller's trace, and reads it
/// back in the log; one made with no trace recorded keeps none.
pub(crate) async fn a_commit_keeps_the_trace_it_was_written_in(twin: &dyn TwinStore, ns: &str) {
    let untraced = twin
        .commit(one_node_commit(&format!("{ns}untraced"), "main"))
        .await
        .expect("an untraced commit");
    assert_eq!(untraced.traceparent, None, "no trace recorded, none kept");
    let traced = {
        let _recording = recording();
        twin.commit(one_node_commit(&format!("{ns}traced"), "main"))
            .instrument(callers_span())
            .await
            .expect("a traced commit")
    };
    assert_child_of_parent(traced.traceparent.as_deref());
    let log = twin.log("main").await.expect("log");
    assert_eq!(
        log.first().map(|c| (&c.id, &c.traceparent)),
        Some((&traced.id, &traced.traceparent)),
        "the log reads the traceparent back"
    );
    assert_eq!(log.get(1).map(|c| &c.traceparent), Some(&None));
}

#[tokio::test]
async fn a_sqlite_twin_commit_keeps_the_trace_it_was_written_in() {
    let dir = tempfile::tempdir().expect("dir");
    let twin = SqliteTwinStore::open(&dir.path().join("twin.db"))
        .await
        .expect("open");
    a_commit_keeps_the_trace_it_was_written_in(&twin, "").await;
}

#[cfg(feature = "falkordb")]
#[tokio::test]
async fn a_falkordb_twin_commit_keeps_the_trace_it_was_written_in() {
    let Some(server) = crate::support::start_falkordb() else {
        return;
    };
    let url = format!("falkor://127.0.0.1:{}", server.port);
    let twin = metaforge_adapters_store::FalkorTwinStore::connect(&url, "trace_twin")
        .await
        .expect("connect");
    a_commit_keeps_the_trace_it_was_written_in(&twin, "").await;
    twin.delete_graph().await.expect("delete graph");
}
