//! A tool call on an engineering host as the registry makes it, for every test here: a local
//! caller, the arguments as JSON, and the answer (these tools never ask a person anything); and
//! the sandboxed runner each host is built on.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers: a tool that misbehaves must fail the test loudly"
)]

use std::path::PathBuf;
use std::time::Duration;

use metaforge_adapters_engineering::runner::Runner;
use metaforge_ports::{CallerClass, CallerContext, HostCallOutcome, InputChannel, ToolHost, ToolOutput};
use metaforge_sandbox::ResourceLimits;
use serde_json::Value;

/// `tool` called on `host` with `arguments`: its structured result and the whole answer.
pub(crate) async fn call_host(host: &dyn ToolHost, tool: &str, arguments: Value) -> (Value, ToolOutput) {
    let caller = CallerContext {
        class: CallerClass::Local,
        session: None,
        input_channel: InputChannel::None,
        identity: None,
    };
    let outcome = host
        .call(&caller, tool, arguments.as_object().cloned().unwrap())
        .await
        .unwrap();
    let HostCallOutcome::Done(output) = outcome else {
        panic!("{tool} asked for input; an engineering tool never does");
    };
    (output.structured.clone().expect("structured result"), output)
}

/// `program` run in its own sandbox with `limits` and at most `wall` of wall time, the system's
/// programs on `PATH` and root's key stores hidden (as the binary builds a tool server's).
pub(crate) fn sandboxed(program: PathBuf, limits: ResourceLimits, wall: Duration) -> Runner {
    Runner::new(
        program,
        limits,
        wall,
        true,
        Some("/usr/bin:/bin"),
        &[PathBuf::from("/root")],
    )
    .unwrap()
}
