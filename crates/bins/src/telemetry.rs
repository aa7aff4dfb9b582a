//! One trace from intent to tool (seed: "Trace Context Propagation"): with
//! `OTEL_EXPORTER_OTLP_ENDPOINT` set, every `tracing` span of the process is exported as an
//! OpenTelemetry span over OTLP/HTTP (protobuf, `<endpoint>/v1/traces`) under the service
//! `metaforge-<role>`, and the W3C trace context is the process's propagator, so a `traceparent`
//! a caller sends (an HTTP header, an MCP request's `_meta`) parents the spans of its work and the
//! hops this process makes carry it on. Unset, nothing is exported and nothing is propagated.

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
) -> Result<(Traces, opentelemetry_sdk::trace::Tracer), String> {
    let url = traces_url(endpoint);
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!(
            "OTEL_EXPORTER_OTLP_ENDPOINT: '{endpoint}' is not an http(s) URL of an OTLP/HTTP collector"
        ));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .build()
        .map_err(|e| format!("OTEL_EXPORTER_OTLP_ENDPOINT: '{endpoint}': {e}"))?;
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
        let err = exporter("collector:4317", "gateway").err().unwrap_or_default();
        assert!(err.contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{err}");
        assert!(err.contains("collector:4317"), "{err}");
    }
}
