//! The `metaforge` binary: one thin entry point for every MetaForge role and CLI command.
//!
//! Parsing and dispatch only; each command lives in its own module under `cmd`.

mod banner;
mod cmd;
mod ledgers;
mod listen;
mod providers_config;
mod runs_config;
#[cfg(feature = "temporal")]
mod runs_temporal;
mod settings;
mod skills;
mod system;
mod tool_servers;

use clap::Parser;

fn main() -> std::process::ExitCode {
    cmd::run(cmd::Cli::parse())
}
