//! The sidecar's tools, one module per role: the flow reads (`flow.list`, `flow.validate`), the
//! one `flow.propose`, `flow.version` with its markdown resource, `approvals.list`, the `twin.*`
//! family (writes and reads of the digital twin, sharing one module), and the run family
//! (`flow.start_run`, `flow.status`, `flow.await_gate`, `run.*`, `phase.*`, their resource and
//! prompt, sharing one module).
//!
//! Each tool is a [`crate::typed::TypedTool`]: it names its argument type from [`crate::args`]
//! (whose generated schema it declares), its hints and its gate, and runs on parsed arguments,
//! returning [`crate::envelope::ToolError`]; the one blanket impl turns an argument error into the
//! MCP envelope. The twin's writes share their own steps (`twin::write`).

pub mod approvals_list;
pub mod flow_read;
pub mod propose;
pub mod runs;
pub mod twin;
pub mod version;
