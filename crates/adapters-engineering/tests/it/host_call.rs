//! A tool call on an engineering host as the registry makes it, for every test here: a local
//! caller, the arguments as JSON, and the answer (these tools never ask a person anything).

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers: a tool that misbehaves must fail the test loudly"
)]

use metaforge_ports::{CallerClass, CallerContext, HostCallOutcome, InputChannel, ToolHost, ToolOutput};
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
