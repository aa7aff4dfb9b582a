//! The `metaforge` binary: one thin entry point for every MetaForge role and CLI command.
//!
//! Parsing and dispatch only; each command lives in its own module under `cmd`.

mod banner;
mod cmd;
mod ledger_engine;
mod ledgers;
mod listen;
mod local_processes;
mod providers_config;
mod runs_config;
#[cfg(feature = "temporal")]
mod runs_temporal;
mod settings;
mod skills;
mod system;
mod telemetry;
mod tool_servers;
mod twin_engine;

use clap::Parser;

/// mimalloc, not glibc malloc: a tool call or a proxied completion allocates and frees many
/// buffers of a few kilobytes, and glibc's consolidation of them was a tenth of the sidecar's
/// profile (issue 13).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cmd::run(cmd::Cli::parse())
}
