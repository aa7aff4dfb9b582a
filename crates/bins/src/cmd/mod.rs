//! The CLI commands, one module each; `main` only parses and dispatches.

pub(crate) mod flow;
pub(crate) mod mcp;
