//! The W3C trace context as the stores record it: the current span's propagator fields, for a
//! Kafka record's headers and a twin commit's `traceparent`, so what a store keeps can be
//! joined to the trace of the work that wrote it. Without an OpenTelemetry layer installed (no
//! `OTEL_EXPORTER_OTLP_ENDPOINT`) the propagator is a no-op and nothing is recorded.

use std::collections::HashMap;

use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The W3C field a trace is identified by.
pub(crate) const TRACEPARENT: &str = "traceparent";

/// The propagator's fields (`traceparent`, `tracestate`) for the current span; empty when no
/// trace is being recorded.
pub(crate) fn current_fields() -> HashMap<String, String> {
    let mut fields = HashMap::new();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&tracing::Span::current().context(), &mut fields);
    });
    fields
}

/// The current span's `traceparent`, if a trace is being recorded.
pub(crate) fn current_traceparent() -> Option<String> {
    current_fields().remove(TRACEPARENT)
}

/// Parents `span` on the trace a `traceparent` names (an unreadable one changes nothing).
#[cfg(feature = "kafka")]
pub(crate) fn parent_on(span: &tracing::Span, traceparent: &str) {
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&carrier));
    // An unreadable parent leaves the span where it is: the work still happens.
    let _ = span.set_parent(parent);
}

/// The span a twin commit is written in, `commit <branch>`; the commit records its context.
pub(crate) fn commit_span(branch: &str) -> tracing::Span {
    tracing::info_span!(
        "twin_commit",
        otel.name = %format_args!("commit {branch}"),
        otel.kind = "client",
        branch,
    )
}
