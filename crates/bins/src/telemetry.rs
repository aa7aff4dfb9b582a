//! One trace from intent to tool (seed: "Trace Context Propagation"): with
//! `OTEL_EXPORTER_OTLP_ENDPOINT` set, every `tracing` span of the process is exported as an
//! OpenTelemetry span over OTLP/HTTP (protobuf, `<endpoint>/v1/traces`) under the service
//! `metaforge-<role>`, and the W3C trace context is the process's propagator, so a `traceparent`
//! a caller sends (an HTTP header, an MCP request's `_meta`) parents the spans of its work and the
//! hops this process makes carry it on. Unset, nothing is exported and nothing is propagated.
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! - **Traces** (issue 20, item 4, partly). With `OTEL_EXPORTER_OTLP_ENDPOINT` every process
//!   exports its `tracing` spans over OTLP/HTTP (`<url>/v1/traces`) as `metaforge-<role>`
//!   (`gateway`, `mcp`, `worker`, `up`, `llm`; `crates/bins/src/telemetry.rs`, installed by
//!   `system::init_logging` with its own level, `DEFAULT_LOG_FILTER`'s, whatever stderr shows), and
//!   the W3C trace context is the process's propagator; unset, there is no layer and the propagator
//!   is a no-op, so nothing below reads or adds anything. Hops that carry the context: an HTTP
//!   request into the gateway (`gateway::trace_context::join_callers_trace` parents the request
//!   span on `traceparent`), the gateway requests the sidecar and `metaforge chat` make
//!   (`adapters-gateway` `with_trace_context`), and MCP `tools/call` both ways (SEP-414 `_meta`:
//!   `adapters-mcp::trace_meta` — the served call's span `tools/call <tool>` is parented on the
//!   request's `_meta`, and the project's MCP client puts the current context in its requests').
//!   Kafka: every persisted event is sent from a producer span `publish metaforge.<kind>`
//!   (parented on `BusEvent::traceparent` when the publisher gives one, else on the current span)
//!   whose context goes in the record's `traceparent`/`tracestate` headers; a replay reads it back
//!   into `BusEvent::traceparent` (`adapters-store/src/kafka_bus.rs`). Temporal
//!   (`adapters-temporal/src/trace_context.rs`): a run's start puts the current context in the
//!   workflow's start header `_tracer-data` (a JSON map, the key and encoding of Temporal's own
//!   OpenTelemetry interceptors); the workflow interceptor `hand_on_trace_context` copies it into
//!   every activity it schedules and into a continue-as-new (it only copies a header that history
//!   holds, so replay is unchanged); `run_phase`/`complete_run` run in spans `<activity> <run>`
//!   parented on it, so the worker's phase work and the calls it makes join the request's trace;
//!   the workflow keeps the start `traceparent` (`DesignFlowSnapshot::traceparent`) and the
//!   gateway's follower publishes that run's notices under it. The embedded engine's run task runs
//!   in a span `design_flow_run` child of the request that started it. Twin commits: both twins
//!   write a commit in a span `commit <branch>` and keep that span's context as the commit's
//!   `traceparent` (`TwinCommit::traceparent`, in `GET /v1/twin/log`; SQLite `twin/0002`, a
//!   property of FalkorDB's commit node), so a deliverable can be traced to the phase and the
//!   request that wrote it. The store-side helpers are one module, `adapters-store/src/trace.rs`
//!   (the Kafka headers and the commits use it). Pinned by `crates/bins/tests/it/traces_process.rs`
//!   (gateway and sidecar), `adapters-store` `kafka_contract` and `traces` (a Kafka header and a
//!   commit on each twin, read back, in the caller's trace), and the cluster run (one run started
//!   with a `traceparent`: the gateway's request span, the worker's activity spans, the producer
//!   spans of its notices and their Kafka headers, its twin commits on FalkorDB and a sidecar
//!   `tools/call` in one trace).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// The exporter while the process runs: dropping it flushes the spans not yet sent.
#[derive(Debug, Default)]
pub(crate) struct Traces {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Traces {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(err) = provider.shutdown()
        {
            eprintln!("metaforge: OTEL_EXPORTER_OTLP_ENDPOINT: the last spans were not sent ({err})");
        }
    }
}

/// Where OTLP/HTTP takes traces under `endpoint` (the variable names the collector's base URL,
/// as the OpenTelemetry specification defines it).
fn traces_url(endpoint: &str) -> String {
    format!("{}/v1/traces", endpoint.trim_end_matches('/'))
}

/// The exporter for `endpoint` and the service `metaforge-<role>`, installed as the process's
/// propagator owner; `Err` names the variable when the endpoint is not a URL it can use.
pub(crate) fn exporter(
    endpoint: &str,
    role: &str,
) -> anyhow::Result<(Traces, opentelemetry_sdk::trace::Tracer)> {
    let url = traces_url(endpoint);
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(anyhow::anyhow!(
            "OTEL_EXPORTER_OTLP_ENDPOINT: '{endpoint}' is not an http(s) URL of an OTLP/HTTP collector"
        ));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .build()
        .map_err(|e| anyhow::anyhow!("OTEL_EXPORTER_OTLP_ENDPOINT: '{endpoint}': {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(format!("metaforge-{role}"))
                .build(),
        )
        .build();
    let tracer = provider.tracer("metaforge");
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    Ok((
        Traces {
            provider: Some(provider),
        },
        tracer,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_appended_to_the_collectors_base_url() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
    }

    #[test]
    fn an_endpoint_that_is_not_an_http_url_is_refused_naming_the_variable() {
        let err = exporter("collector:4317", "gateway")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{err}");
        assert!(err.contains("collector:4317"), "{err}");
    }
}
