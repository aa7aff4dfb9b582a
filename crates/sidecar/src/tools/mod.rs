//! The sidecar's tools, one module per role: the flow reads (`flow.list`, `flow.validate`), the
//! one `flow.propose`, `flow.version` with its markdown resource, `approvals.list`, the `twin.*`
//! family (writes and reads of the digital twin, sharing one module), and the run family
//! (`flow.start_run`, `flow.status`, `flow.await_gate`, `run.*`, `phase.*`, their resource and
//! prompt, sharing one module).
//!
//! Each tool parses its arguments into its type from [`crate::args`] and declares the schema
//! generated from that type; its body returns [`crate::envelope::ToolError`], and
//! [`crate::envelope::at_boundary`] turns an argument error into the MCP envelope once.

pub mod approvals_list;
pub mod flow_read;
pub mod propose;
pub mod runs;
pub mod twin;
pub mod version;

use std::sync::OnceLock;

use metaforge_ports::ToolHints;
use schemars::JsonSchema;
use serde_json::Value;

/// A read: never held, changes nothing.
pub(crate) fn read_only() -> ToolHints {
    ToolHints {
        read_only_hint: Some(true),
        destructive_hint: Some(false),
        idempotent_hint: Some(true),
        open_world_hint: Some(false),
    }
}

/// `T`'s generated input schema, built once per tool (the descriptor is read on every call).
pub(crate) fn schema_once<T: JsonSchema>(cell: &'static OnceLock<Value>) -> Value {
    cell.get_or_init(crate::args::input_schema::<T>).clone()
}
