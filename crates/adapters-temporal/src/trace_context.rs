//! The W3C trace context across Temporal (seed: "Trace Context Propagation"): the request that
//! starts a run puts its context in the workflow's start header, the workflow hands it on in
//! the header of every activity it schedules (and of a continue-as-new), and each activity's
//! span is parented on it, so the worker's phase work, the gateway calls it makes and the MCP
//! tools they reach join the trace of the request that started the run.
//!
//! The header is `_tracer-data`, a JSON map of the propagator's fields, as Temporal's own
//! OpenTelemetry interceptors write it, so a workflow started by another SDK's traced client
//! joins its trace too. The workflow side only copies a header it was given: it reads no clock
//! and creates no span, so replay is unchanged. Without an OpenTelemetry layer (no
//! `OTEL_EXPORTER_OTLP_ENDPOINT`), the propagator is a no-op and no header is written.

use std::cell::RefCell;
use std::collections::HashMap;

use temporalio_common::protos::temporal::api::common::v1::{Header, Payload};
use temporalio_sdk::WorkflowContextView;
use temporalio_sdk::activities::ActivityContext;
use temporalio_sdk::workflow_interceptors::{
    CancellableWorkflowOutboundFuture, ContinueAsNewInput, ContinueAsNewResult, ExecuteWorkflowInput,
    ExecuteWorkflowResult, ScheduleActivityInput, ScheduleActivityResult, SyncWorkflowInterceptorContext,
    WorkflowInterceptor, WorkflowInterceptorConstructor, WorkflowInterceptorContext,
    WorkflowInterceptorFuture, WorkflowNext,
};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The header key Temporal's OpenTelemetry interceptors carry the trace context under.
pub const TRACE_HEADER: &str = "_tracer-data";

/// The W3C field a run's trace is identified by.
const TRACEPARENT: &str = "traceparent";

/// The propagator's fields as a JSON payload, the encoding every Temporal SDK reads.
fn payload_of(fields: &HashMap<String, String>) -> Option<Payload> {
    let data = serde_json::to_vec(fields).ok()?;
    Some(Payload {
        metadata: HashMap::from([("encoding".to_owned(), b"json/plain".to_vec())]),
        data,
        external_payloads: Vec::new(),
    })
}

/// The propagator's fields out of a header's payload (`None` when it is not a JSON map).
fn fields_of(payload: &Payload) -> Option<HashMap<String, String>> {
    serde_json::from_slice(&payload.data).ok()
}

/// The start header carrying the current span's trace context; `None` when no trace is being
/// recorded.
pub(crate) fn current_header() -> Option<Header> {
    let mut fields = HashMap::new();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&tracing::Span::current().context(), &mut fields);
    });
    if fields.is_empty() {
        return None;
    }
    let payload = payload_of(&fields)?;
    Some(Header {
        fields: HashMap::from([(TRACE_HEADER.to_owned(), payload)]),
    })
}

/// The `traceparent` a header map carries, if any.
pub(crate) fn traceparent_of(headers: &HashMap<String, Payload>) -> Option<String> {
    headers
        .get(TRACE_HEADER)
        .and_then(fields_of)
        .and_then(|mut fields| fields.remove(TRACEPARENT))
}

/// The span an activity runs in, `<activity> <run>`, parented on the trace context of the
/// activity's header when it carries one.
pub(crate) fn activity_span(ctx: &ActivityContext, activity: &'static str, run_id: &str) -> tracing::Span {
    let span = tracing::info_span!(
        "temporal_activity",
        otel.name = %format_args!("{activity} {run_id}"),
        otel.kind = "server",
        activity,
        run_id,
    );
    if let Some(fields) = ctx.headers().get(TRACE_HEADER).and_then(fields_of) {
        let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&fields));
        // An unreadable parent leaves the span a root of its own trace: the work still runs.
        let _ = span.set_parent(parent);
    }
    span
}

/// The workflow interceptor that hands the start header on. One is built per workflow
/// execution, so the header it keeps is that run's.
#[derive(Default)]
struct HandOn {
    start: RefCell<Option<Payload>>,
}

impl HandOn {
    fn add_to(&self, headers: &mut HashMap<String, Payload>) {
        if let Some(payload) = self.start.borrow().as_ref() {
            headers
                .entry(TRACE_HEADER.to_owned())
                .or_insert_with(|| payload.clone());
        }
    }
}

impl WorkflowInterceptor for HandOn {
    fn execute<'a>(
        &'a self,
        _ctx: WorkflowInterceptorContext,
        input: ExecuteWorkflowInput,
        next: WorkflowNext<'a, ExecuteWorkflowInput, WorkflowInterceptorFuture<'a, ExecuteWorkflowResult>>,
    ) -> WorkflowInterceptorFuture<'a, ExecuteWorkflowResult> {
        if let Some(payload) = input.headers().get(TRACE_HEADER) {
            *self.start.borrow_mut() = Some(payload.clone());
        }
        next.run(input)
    }

    fn schedule_activity(
        &self,
        _ctx: WorkflowInterceptorContext,
        mut input: ScheduleActivityInput,
        next: WorkflowNext<
            'static,
            ScheduleActivityInput,
            CancellableWorkflowOutboundFuture<ScheduleActivityResult>,
        >,
    ) -> CancellableWorkflowOutboundFuture<ScheduleActivityResult> {
        self.add_to(input.headers_mut());
        next.run(input)
    }

    fn continue_as_new(
        &self,
        _ctx: SyncWorkflowInterceptorContext,
        mut input: ContinueAsNewInput,
        next: WorkflowNext<'static, ContinueAsNewInput, ContinueAsNewResult>,
    ) -> ContinueAsNewResult {
        self.add_to(input.headers_mut());
        next.run(input)
    }
}

/// The interceptor a worker (and the replayer) registers for the design-flow workflow.
pub fn hand_on_trace_context() -> WorkflowInterceptorConstructor {
    WorkflowInterceptorConstructor::new(|_ctx: &WorkflowContextView| HandOn::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_payload_reads_back_the_fields_it_was_written_with() {
        let fields = HashMap::from([(
            TRACEPARENT.to_owned(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned(),
        )]);
        let payload = payload_of(&fields).unwrap_or_default();
        assert_eq!(
            payload.metadata.get("encoding").map(Vec::as_slice),
            Some(b"json/plain".as_slice())
        );
        let headers = HashMap::from([(TRACE_HEADER.to_owned(), payload)]);
        assert_eq!(
            traceparent_of(&headers).as_deref(),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
    }

    #[test]
    fn a_header_that_is_not_a_json_map_carries_no_traceparent() {
        let headers = HashMap::from([(
            TRACE_HEADER.to_owned(),
            Payload {
                data: b"not json".to_vec(),
                ..Payload::default()
            },
        )]);
        assert_eq!(traceparent_of(&headers), None);
    }
}
