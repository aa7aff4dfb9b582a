//! The W3C trace context a caller sends (`traceparent`, `tracestate`) parents the span of its
//! request, so the gateway's work joins the caller's trace (a sidecar's tool call, a harness, a
//! person's client). Without an OpenTelemetry layer installed (no
//! `OTEL_EXPORTER_OTLP_ENDPOINT`), the process's propagator is a no-op and this changes nothing.

use opentelemetry_http::HeaderExtractor;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Parents `span` on the trace context in `headers`, when they carry one.
pub(crate) fn join_callers_trace(span: &tracing::Span, headers: &axum::http::HeaderMap) {
    if !headers.contains_key("traceparent") {
        return;
    }
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&HeaderExtractor(headers))
    });
    // An invalid parent leaves the span a root of its own trace: the request still runs.
    let _ = span.set_parent(parent);
}
