//! One trace across the processes (issue 20, "One trace from intent to tool"): a gateway and a
//! remote sidecar with `OTEL_EXPORTER_OTLP_ENDPOINT` pointed at an OTLP/HTTP receiver this test
//! runs export their spans as `metaforge-gateway` and `metaforge-mcp`; a `traceparent` header on
//! an HTTP request parents the gateway's span, and a `traceparent` in a `tools/call`'s `_meta`
//! parents the sidecar's span and, through the request the sidecar makes, the gateway's — one
//! trace id in both processes. Without the variable nothing is exported (every other test).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::common::otlp::{Receiver, call_tool, exporting};
use crate::common::{KEY, http_raw, proposal_arguments, start_gateway, start_sidecar};

#[test]
fn a_callers_trace_context_joins_the_gateways_and_the_sidecars_spans_into_one_trace() {
    let receiver = Receiver::start();
    let gateway_home = tempfile::tempdir().expect("gateway home");
    let sidecar_home = tempfile::tempdir().expect("sidecar home");
    let (_gateway, gateway) = start_gateway(gateway_home.path(), &exporting(&receiver));
    let (_sidecar, sidecar) = start_sidecar(sidecar_home.path(), |command| {
        command
            .envs(exporting(&receiver))
            .env("METAFORGE_GATEWAY_URL", format!("http://{gateway}"))
            .env("METAFORGE_GATEWAY_API_KEY", format!("ops:{KEY}"))
            .stderr(std::process::Stdio::null());
    });

    // An HTTP hop: the caller's traceparent parents the gateway's request span.
    let over_http = "4bf92f3577b34da6a3ce929d0e0e4736";
    let (status, body) = http_raw(
        &gateway,
        "GET",
        "/v1/approvals",
        None,
        &[("traceparent", &format!("00-{over_http}-00f067aa0ba902b7-01"))],
    );
    assert_eq!(status, 200, "{body}");
    receiver.wait_for(
        "of metaforge-gateway in the HTTP caller's trace",
        |(service, trace, _)| service == "metaforge-gateway" && trace == over_http,
    );

    // An MCP hop: the traceparent in the tool call's _meta parents the sidecar's span, and the
    // request the sidecar makes to the gateway carries it on.
    let over_mcp = "0af7651916cd43dd8448eb211c80319c";
    let answer = call_tool(
        &sidecar,
        "flow.propose",
        Value::Object(proposal_arguments()),
        json!({"traceparent": format!("00-{over_mcp}-b7ad6b7169203331-01")}),
    );
    assert!(answer["result"].is_object(), "flow.propose answered {answer}");
    receiver.wait_for("of metaforge-mcp for the tool call", |(service, trace, name)| {
        service == "metaforge-mcp" && trace == over_mcp && name == "tools/call flow.propose"
    });
    receiver.wait_for(
        "of metaforge-gateway for the sidecar's request",
        |(service, trace, _)| service == "metaforge-gateway" && trace == over_mcp,
    );
    let services: BTreeSet<String> = receiver
        .spans
        .lock()
        .expect("spans")
        .iter()
        .filter(|(_, trace, _)| trace == over_mcp)
        .map(|(service, _, name)| format!("{service}: {name}"))
        .collect();
    println!("one trace {over_mcp} across the processes: {services:?}");
}
