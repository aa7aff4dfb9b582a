//! `metaforge tool-server <name>`: MetaForge's own engineering tool servers, each an MCP server
//! on stdio (a servers-file entry `{"command": "metaforge", "args": ["tool-server", "spice"]}`
//! runs it in its sandbox like any other). Each analysis runs the engineering program in a fresh
//! sandbox of its own, nested in the server's.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use metaforge_adapters_engineering::runner::Runner;
use metaforge_adapters_engineering::spice::SpiceHost;
use metaforge_sandbox::ResourceLimits;

use crate::settings::Settings;

/// Which tool server to run.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ToolServerCommand {
    /// Circuit simulation with ngspice (`spice.validate_netlist`, `spice.op`, `spice.dc`,
    /// `spice.ac`, `spice.transient`), on stdio.
    Spice(SpiceArgs),
}

/// Options of `tool-server spice`.
#[derive(Debug, clap::Args)]
pub(crate) struct SpiceArgs {
    /// The ngspice program (default: `ngspice` on PATH).
    #[arg(long)]
    ngspice: Option<PathBuf>,
    /// CPU seconds one analysis may use.
    #[arg(long, default_value_t = 60)]
    cpu_seconds: u64,
    /// Address space one analysis may use, in MiB.
    #[arg(long, default_value_t = 2048)]
    memory_mb: u64,
    /// Wall-clock seconds one analysis may take.
    #[arg(long, default_value_t = 60)]
    wall_seconds: u64,
    /// Run ngspice without its per-analysis sandbox (only where bubblewrap cannot run; logged
    /// at WARN).
    #[arg(long)]
    no_program_sandbox: bool,
}

/// Runs `metaforge tool-server …`.
pub(crate) fn run(command: &ToolServerCommand, settings: &Settings) -> ExitCode {
    let _traces = crate::system::init_logging(&settings.log, "tool-server");
    match command {
        ToolServerCommand::Spice(args) => {
            crate::compose::run_serving("tool-server spice", spice(args, settings))
        }
    }
}

async fn spice(args: &SpiceArgs, settings: &Settings) -> Result<(), crate::compose::StartError> {
    use crate::compose::StartError;
    let path = settings.env().get("PATH");
    let ngspice = match &args.ngspice {
        Some(program) => program.clone(),
        None => std::env::split_paths(path.as_deref().unwrap_or("/usr/bin:/bin"))
            .map(|dir| dir.join("ngspice"))
            .find(|candidate| candidate.is_file())
            .ok_or_else(|| {
                StartError::config_text(
                    "ngspice is not on PATH: install it (`apt-get install ngspice`) or pass --ngspice",
                )
            })?,
    };
    let version = ngspice_version(&ngspice);
    if args.no_program_sandbox {
        tracing::warn!(event = "engineering_program_unsandboxed", program = %ngspice.display(), "ngspice runs WITHOUT its per-analysis sandbox (--no-program-sandbox)");
    }
    let limits = ResourceLimits {
        cpu_seconds: args.cpu_seconds,
        memory_mb: args.memory_mb,
        file_size_mb: 256,
        open_files: 256,
        processes: 64,
    };
    let homes: Vec<PathBuf> = [
        Some(PathBuf::from("/root")),
        settings.env().get("HOME").map(PathBuf::from),
    ]
    .into_iter()
    .flatten()
    .collect();
    let runner = Runner::new(
        ngspice,
        limits,
        Duration::from_secs(args.wall_seconds),
        !args.no_program_sandbox,
        path.as_deref(),
        &homes,
    )
    .map_err(StartError::config)?;
    tracing::info!(event = "tool_server_started", server = "spice", version = %version, "the spice tool server serves on stdio");
    metaforge_adapters_mcp::serve_stdio(Arc::new(SpiceHost::new(runner, version)))
        .await
        .map_err(StartError::runtime)
}

/// `ngspice-39` from `ngspice -v`, or `ngspice` when it cannot be read.
fn ngspice_version(program: &std::path::Path) -> String {
    std::process::Command::new(program)
        .arg("-v")
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
                l.split_whitespace()
                    .find(|w| w.starts_with("ngspice-"))
                    .map(str::to_owned)
            })
        })
        .unwrap_or_else(|| "ngspice".to_owned())
}
