//! The command line: one `Command` variant per subcommand, each in its own module.

pub(crate) mod check;
pub(crate) mod flow;
pub(crate) mod llm;
pub(crate) mod mcp;
pub(crate) mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// MetaForge: a local-first control plane that runs AI agents over engineering tools with humans
/// in the loop.
#[derive(Debug, Parser)]
#[command(name = "metaforge", version, about)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Every subcommand.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Design flows: list the catalogue, validate, hash, diff and tailor flows.
    Flow(flow::FlowArgs),
    /// Run one deterministic harness rule on JSON input and print the verdict as JSON.
    Check(check::CheckArgs),
    /// Serve the HTTP gateway (design flows, approvals, metrics) on embedded defaults.
    Gateway(serve::GatewayArgs),
    /// Everything in one process: the gateway and the HTTP MCP sidecar, one ledger.
    Up(serve::UpArgs),
    /// Call a model through the provider pipeline.
    #[command(subcommand)]
    Llm(llm::LlmCommand),
    /// Inspect the provider registry.
    #[command(subcommand)]
    Providers(llm::ProvidersCommand),
    /// The MCP sidecar: `mcp serve [--stdio | --http 127.0.0.1:PORT]`.
    Mcp(mcp::McpArgs),
}

/// Runs the parsed command and returns the process exit code.
pub(crate) fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Flow(args) => flow::run(args),
        Command::Check(args) => check::run(&args),
        Command::Gateway(args) => serve::run(&args),
        Command::Up(args) => serve::run_up(&args),
        Command::Llm(command) => llm::run_llm(command),
        Command::Providers(command) => llm::run_providers(command),
        Command::Mcp(args) => mcp::run(args),
    }
}
