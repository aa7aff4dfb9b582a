//! The W3C trace context on MCP requests (SEP-414: `traceparent` and `tracestate` in a request's
//! `_meta`): a `tools/call` this process serves runs in a span parented on the caller's context,
//! and one it sends carries the current span's, so a harness's tool call, the sidecar's work
//! and the gateway requests it causes are one trace. Without an OpenTelemetry layer installed
//! (no `OTEL_EXPORTER_OTLP_ENDPOINT`), the propagator is a no-op: nothing is read or added.

use opentelemetry::propagation::{Extractor, Injector};
use rmcp::model::{MetaObject, RequestMetaObject};
use serde_json::{Map, Value};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Reads the propagator's fields out of a `_meta` object.
struct MetaExtractor<'a>(&'a Map<String, Value>);

impl Extractor for MetaExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// Writes the propagator's fields into a `_meta` object.
struct MetaInjector<'a>(&'a mut Map<String, Value>);

impl Injector for MetaInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), Value::String(value));
    }
}

/// The span a served `tools/call` of `tool` runs in, parented on the trace context of the
/// request's `_meta` when it carries one.
pub(crate) fn tool_call_span(meta: &MetaObject, tool: &str) -> tracing::Span {
    let span = tracing::info_span!(
        "mcp_tool_call",
        otel.name = %format_args!("tools/call {tool}"),
        otel.kind = "server",
        tool
    );
    if meta.get_traceparent().is_some() {
        let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.extract(&MetaExtractor(&meta.0))
        });
        // An invalid parent leaves the span a root of its own trace: the call still runs.
        let _ = span.set_parent(parent);
    }
    span
}

/// The `_meta` that carries the current span's trace context on a request this process sends;
/// `None` when no trace is being recorded.
pub(crate) fn current_trace_meta() -> Option<RequestMetaObject> {
    let context = tracing::Span::current().context();
    let mut fields = Map::new();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut MetaInjector(&mut fields));
    });
    (!fields.is_empty()).then(|| RequestMetaObject(MetaObject(fields)))
}
