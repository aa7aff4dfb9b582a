//! CLI subcommands, one module per command group.

pub(crate) mod llm;
