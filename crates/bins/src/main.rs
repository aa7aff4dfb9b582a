//! The `metaforge` binary: one thin entry point for every MetaForge role and CLI command.

fn main() {}
