//! The `metaforge` binary: one thin entry point for every MetaForge role and CLI command.

mod cmd;

use clap::Parser;

fn main() -> std::process::ExitCode {
    cmd::run(cmd::Cli::parse())
}
