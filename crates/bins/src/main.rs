//! The `metaforge` binary: one thin entry point for every MetaForge role and CLI command.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// MetaForge command line.
#[derive(Debug, Parser)]
#[command(name = "metaforge", version, about = "MetaForge control plane")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Call a model through the provider pipeline.
    #[command(subcommand)]
    Llm(cmd::llm::LlmCommand),
    /// Inspect the provider registry.
    #[command(subcommand)]
    Providers(cmd::llm::ProvidersCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Llm(command) => cmd::llm::run_llm(command),
        Command::Providers(command) => cmd::llm::run_providers(command),
    }
}
