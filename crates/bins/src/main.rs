//! The `metaforge` binary: one thin entry point for every MetaForge role and CLI command.
//!
//! Parsing and dispatch only; each command lives in its own module under `cmd`.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// MetaForge: a local-first control plane running AI agents over engineering tools, with humans
/// in the loop.
#[derive(Debug, Parser)]
#[command(name = "metaforge", version, about)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// Every top-level command.
#[derive(Debug, Subcommand)]
enum Command {
    /// Design flows: list the catalogue, validate, hash, diff and tailor flows.
    Flow(cmd::flow::FlowArgs),
    /// The MCP sidecar: `mcp serve [--stdio | --http 127.0.0.1:PORT]`.
    Mcp(cmd::mcp::McpArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Flow(args) => cmd::flow::run(args),
        Command::Mcp(args) => cmd::mcp::run(args),
    }
}
