//! The command line: one `Command` variant per subcommand, each in its own module.

pub(crate) mod chat;
pub(crate) mod check;
pub(crate) mod config;
pub(crate) mod flow;
pub(crate) mod llm;
pub(crate) mod mcp;
pub(crate) mod replay;
pub(crate) mod serve;
pub(crate) mod skills;
pub(crate) mod tool_server;
pub(crate) mod worker;

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

/// What `--help` of the serving commands says about configuration: the variables people set
/// first, and where the full table is.
const SERVING_CONFIGURATION: &str = "\
Configuration (environment; every variable, its default and effect: README.md, section Configuration):
  METAFORGE_HOME                 where the ledgers live (default ~/.metaforge; created 0700)
  METAFORGE_GATEWAY_API_KEY      people's keys, \"alice:sk-…,bob:sk-…\" (required off loopback)
  OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, …   a provider's key (`metaforge providers list`)
  METAFORGE_ROUTE_<ROLE>         provider:model for a role, e.g. METAFORGE_ROUTE_CHAT=openai:gpt-4o-mini
  METAFORGE_MODEL_ROUTES_PATH    a routes file instead of per-role variables
  METAFORGE_LOG, METAFORGE_LOG_FORMAT   what is logged (e.g. debug) and how (text or json)";

/// Every subcommand.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Design flows: list the catalogue, validate, hash, diff and tailor flows.
    Flow(flow::FlowArgs),
    /// Run one deterministic harness rule on JSON input and print the verdict as JSON.
    Check(check::CheckArgs),
    /// Serve the HTTP gateway (design flows, approvals, metrics) on embedded defaults.
    #[command(after_help = SERVING_CONFIGURATION)]
    Gateway(crate::compose::GatewayArgs),
    /// Everything in one process: the gateway and the HTTP MCP sidecar, one ledger. Keeps the
    /// terminal; stop it with Ctrl-C.
    #[command(after_help = SERVING_CONFIGURATION)]
    Up(serve::UpArgs),
    /// The Temporal design-flow worker (feature `temporal`): polls `metaforge-design-flows` on
    /// `TEMPORAL_HOST` (default 127.0.0.1:7233) and runs phases with the same brains the
    /// embedded engine builds. Stop it with Ctrl-C.
    #[command(after_help = SERVING_CONFIGURATION)]
    Worker(crate::compose::GatewayArgs),
    /// Check recorded Temporal histories of design-flow runs (files, or `--run` fetched from
    /// `TEMPORAL_HOST`) against this build's workflow with Temporal's replayer (feature
    /// `temporal`): exit 1 names each history this build would decide differently.
    Replay(replay::ReplayArgs),
    /// Call a model through the provider pipeline.
    #[command(subcommand)]
    Llm(llm::LlmCommand),
    /// Inspect the provider registry.
    #[command(subcommand)]
    Providers(llm::ProvidersCommand),
    /// Chat with the agent through a gateway's chat threads: the reply streams, tool calls show
    /// as they run, a held call is answered inline.
    Chat(chat::ChatArgs),
    /// Search every chat thread's messages.
    #[command(subcommand)]
    Sessions(chat::SessionsCommand),
    /// Skills (SKILL.md playbooks): list the catalogue, show one, validate a directory, start a
    /// new one.
    #[command(subcommand)]
    Skills(skills::SkillsCommand),
    /// Configuration: every variable MetaForge reads (`config variables`), and this
    /// environment checked the way every command checks it at start (`config check`).
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// The MCP sidecar: `mcp serve [--stdio | --http 127.0.0.1:PORT]`.
    #[command(after_help = SERVING_CONFIGURATION)]
    Mcp(mcp::McpArgs),
    /// MetaForge's own engineering tool servers, each an MCP server on stdio:
    /// `tool-server spice` (ngspice circuit simulation), `tool-server fea` (gmsh + CalculiX),
    /// `tool-server kicad` (KiCad boards and schematics, read-only), `tool-server cad` (FreeCAD).
    #[command(subcommand)]
    ToolServer(tool_server::ToolServerCommand),
}

/// Runs the parsed command and returns the process exit code. The environment is read and
/// checked once, here, for every command: a bad variable refuses the command (exit 2) with
/// every problem named, before anything is opened or written.
pub(crate) fn run(cli: Cli) -> ExitCode {
    // The rule commands read no variable: a serving variable that is wrong must not stop a CI
    // pipeline from validating flows.
    match cli.command {
        Command::Flow(args) => return flow::run(args),
        Command::Check(args) => return check::run(&args),
        Command::Config(config::ConfigCommand::Variables) => return config::variables(),
        _ => {}
    }
    let settings = match crate::settings::Settings::from_env(crate::system::environment()) {
        Ok(settings) => settings,
        Err(err) => {
            for problem in &err.problems {
                eprintln!("metaforge: configuration: {problem}");
            }
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Flow(_) | Command::Check(_) => ExitCode::SUCCESS,
        Command::Gateway(args) => serve::run(&args, &settings),
        Command::Up(args) => serve::run_up(&args, &settings),
        Command::Worker(args) => worker::run(&args, &settings),
        Command::Replay(args) => replay::run(&args, &settings),
        Command::Llm(command) => llm::run_llm(command, &settings),
        Command::Providers(command) => llm::run_providers(command, &settings),
        Command::Config(command) => config::run(&command, &settings),
        Command::Mcp(args) => mcp::run(args, &settings),
        Command::Chat(args) => chat::run(&args, &settings),
        Command::Sessions(command) => chat::run_sessions(&command, &settings),
        Command::Skills(command) => skills::run(&command, &settings),
        Command::ToolServer(command) => tool_server::run(&command, &settings),
    }
}

/// What a build without the `temporal` feature says when `what` (a command, an option) needs it.
#[cfg(not(feature = "temporal"))]
pub(crate) fn without_temporal(what: &str) -> String {
    format!(
        "{what}: this metaforge was built without the Temporal engine; build it with \
         `cargo build --release -p metaforge-bins --features temporal`"
    )
}
