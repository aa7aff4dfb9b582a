//! `metaforge tool-server <name>` (`spice`, `fea`, `kicad`, `cad`): MetaForge's own engineering tool servers, each an MCP server
//! on stdio (a servers-file entry `{"command": "metaforge", "args": ["tool-server", "spice"]}`
//! runs it in its sandbox like any other). Each analysis runs the engineering program in a fresh
//! sandbox of its own, nested in the server's.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use metaforge_adapters_engineering::cad::{CadHost, SessionLimits};
use metaforge_adapters_engineering::fea::FeaHost;
use metaforge_adapters_engineering::kicad::KicadHost;
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
    /// Structural analysis with gmsh and CalculiX (`fea.mesh`, `fea.static`), on stdio.
    Fea(FeaArgs),
    /// KiCad boards and schematics, read-only (`kicad.board_info`, `kicad.drc`,
    /// `kicad.export_gerbers`, `kicad.export_drill`, `kicad.bom`, `kicad.netlist`, `kicad.erc`),
    /// on stdio.
    Kicad(KicadArgs),
    /// Parts modelled in FreeCAD, one sandboxed FreeCAD per session (`freecad.open_session`,
    /// sketches, pad, pocket, revolve, loft, sweep, fillet, chamfer, boolean, place,
    /// `freecad.import_step`, `freecad.export_model`, `freecad.measure`, …), on stdio.
    Cad(CadArgs),
}

/// Options of `tool-server cad`.
#[derive(Debug, clap::Args)]
pub(crate) struct CadArgs {
    /// The directory STEP files are imported from (the servers-file entry's `workspace`, which
    /// its sandbox binds read-only).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// FreeCAD without its window (default: `freecadcmd` on PATH).
    #[arg(long)]
    freecadcmd: Option<PathBuf>,
    /// Seconds a session may stay unused before it is closed.
    #[arg(long, default_value_t = 900)]
    idle_seconds: u64,
    /// The most sessions open at once.
    #[arg(long, default_value_t = 8)]
    max_sessions: usize,
    /// CPU seconds one session's FreeCAD may use in all.
    #[arg(long, default_value_t = 1800)]
    cpu_seconds: u64,
    /// Address space one session's FreeCAD may use, in MiB.
    #[arg(long, default_value_t = 4096)]
    memory_mb: u64,
    /// Wall-clock seconds one operation may take (the session is closed when it does not answer).
    #[arg(long, default_value_t = 120)]
    operation_seconds: u64,
    /// Also write every export to `<workspace>/exports/`, where a tool server reading the same
    /// workspace (`tool-server fea --workspace`) finds it; the entry's `workspace_access` must be
    /// "rw".
    #[arg(long, requires = "workspace")]
    write_exports: bool,
}

/// Options of `tool-server kicad`.
#[derive(Debug, clap::Args)]
pub(crate) struct KicadArgs {
    /// The directory boards and schematics are read from (the servers-file entry's
    /// `workspace`, which its sandbox binds read-only).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// The Python that has KiCad's `pcbnew` module (Debian's kicad installs it for the system
    /// Python).
    #[arg(long, default_value = "/usr/bin/python3")]
    python: PathBuf,
    /// CPU seconds one KiCad run may use.
    #[arg(long, default_value_t = 120)]
    cpu_seconds: u64,
    /// Address space one KiCad run may use, in MiB.
    #[arg(long, default_value_t = 4096)]
    memory_mb: u64,
    /// Wall-clock seconds one KiCad run may take.
    #[arg(long, default_value_t = 120)]
    wall_seconds: u64,
}

/// Options of `tool-server fea`.
#[derive(Debug, clap::Args)]
pub(crate) struct FeaArgs {
    /// CPU seconds one mesh or solve may use.
    #[arg(long, default_value_t = 300)]
    cpu_seconds: u64,
    /// Address space one mesh or solve may use, in MiB.
    #[arg(long, default_value_t = 4096)]
    memory_mb: u64,
    /// Wall-clock seconds one mesh or solve may take.
    #[arg(long, default_value_t = 300)]
    wall_seconds: u64,
    /// The directory STEP parts are read from (the servers-file entry's `workspace`, which its
    /// sandbox binds read-only).
    #[arg(long)]
    workspace: Option<PathBuf>,
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
        ToolServerCommand::Fea(args) => crate::compose::run_serving("tool-server fea", fea(args, settings)),
        ToolServerCommand::Kicad(args) => {
            crate::compose::run_serving("tool-server kicad", kicad(args, settings))
        }
        ToolServerCommand::Cad(args) => crate::compose::run_serving("tool-server cad", cad(args, settings)),
    }
}

async fn spice(args: &SpiceArgs, settings: &Settings) -> Result<(), crate::compose::StartError> {
    use crate::compose::StartError;
    let path = settings.env().get("PATH");
    let ngspice = program_on_path(
        args.ngspice.as_ref(),
        path.as_deref(),
        "ngspice",
        "install it (`apt-get install ngspice`) or pass --ngspice",
    )?;
    let version = program_version(&ngspice, "-v", "ngspice-");
    if args.no_program_sandbox {
        tracing::warn!(event = "engineering_program_unsandboxed", program = %ngspice.display(), "ngspice runs WITHOUT its per-analysis sandbox (--no-program-sandbox)");
    }
    let limits = program_limits(args.cpu_seconds, args.memory_mb, 256);
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

async fn fea(args: &FeaArgs, settings: &Settings) -> Result<(), crate::compose::StartError> {
    use crate::compose::StartError;
    let path = settings.env().get("PATH");
    let find = |name: &str| {
        program_on_path(
            None,
            path.as_deref(),
            name,
            "install it (`apt-get install gmsh calculix-ccx`)",
        )
    };
    let (gmsh, ccx) = (find("gmsh")?, find("ccx")?);
    let limits = program_limits(args.cpu_seconds, args.memory_mb, 1024);
    let versions = (
        program_version(&gmsh, "--version", ""),
        format!("ccx {}", program_version(&ccx, "-v", "2.")),
    );
    let runner = |program: PathBuf| {
        Runner::new(
            program,
            limits,
            Duration::from_secs(args.wall_seconds),
            true,
            path.as_deref(),
            &user_homes(settings),
        )
        .map_err(StartError::config)
    };
    let mut host = FeaHost::new(runner(gmsh)?, runner(ccx)?, versions);
    if let Some(workspace) = &args.workspace {
        host = host.with_workspace(workspace.clone());
    }
    tracing::info!(
        event = "tool_server_started",
        server = "fea",
        "the fea tool server serves on stdio"
    );
    metaforge_adapters_mcp::serve_stdio(Arc::new(host))
        .await
        .map_err(StartError::runtime)
}

async fn kicad(args: &KicadArgs, settings: &Settings) -> Result<(), crate::compose::StartError> {
    use crate::compose::StartError;
    let version = std::process::Command::new(&args.python)
        .args(["-c", "import pcbnew; print(pcbnew.Version())"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .ok_or_else(|| {
            StartError::config_text(format!(
                "{} cannot import KiCad's pcbnew module: install KiCad (`apt-get install --no-install-recommends kicad`) or pass --python",
                args.python.display()
            ))
        })?;
    let limits = program_limits(args.cpu_seconds, args.memory_mb, 512);
    let runner = Runner::new(
        args.python.clone(),
        limits,
        Duration::from_secs(args.wall_seconds),
        true,
        settings.env().get("PATH").as_deref(),
        &user_homes(settings),
    )
    .map_err(StartError::config)?;
    tracing::info!(event = "tool_server_started", server = "kicad", version = %version, "the kicad tool server serves on stdio");
    metaforge_adapters_mcp::serve_stdio(Arc::new(KicadHost::new(runner, args.workspace.clone(), version)))
        .await
        .map_err(StartError::runtime)
}

async fn cad(args: &CadArgs, settings: &Settings) -> Result<(), crate::compose::StartError> {
    use crate::compose::StartError;
    let path = settings.env().get("PATH");
    let freecadcmd = program_on_path(
        args.freecadcmd.as_ref(),
        path.as_deref(),
        "freecadcmd",
        "install FreeCAD (`apt-get install --no-install-recommends freecad`) or pass --freecadcmd",
    )?;
    let limits = program_limits(args.cpu_seconds, args.memory_mb, 512);
    let operation = Duration::from_secs(args.operation_seconds);
    let runner = Runner::new(
        freecadcmd,
        limits,
        operation,
        true,
        path.as_deref(),
        &user_homes(settings),
    )
    .map_err(StartError::config)?;
    let mut host = CadHost::new(
        runner,
        args.workspace.clone(),
        SessionLimits {
            idle: Duration::from_secs(args.idle_seconds),
            max_sessions: args.max_sessions,
            start_wait: Duration::from_secs(60),
            operation_wait: operation,
        },
    );
    if let (true, Some(workspace)) = (args.write_exports, &args.workspace) {
        host = host.with_exports_in_workspace(workspace.clone());
    }
    let host = Arc::new(host);
    host.reap_idle_sessions();
    tracing::info!(
        event = "tool_server_started",
        server = "cad",
        "the cad tool server serves on stdio"
    );
    metaforge_adapters_mcp::serve_stdio(host)
        .await
        .map_err(StartError::runtime)
}

/// `given`, else `name` found on `path`; refused saying how to `install` it.
fn program_on_path(
    given: Option<&PathBuf>,
    path: Option<&str>,
    name: &str,
    install: &str,
) -> Result<PathBuf, crate::compose::StartError> {
    if let Some(program) = given {
        return Ok(program.clone());
    }
    std::env::split_paths(path.unwrap_or("/usr/bin:/bin"))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| crate::compose::StartError::config_text(format!("{name} is not on PATH: {install}")))
}

/// The limits of one program run (or session): the caller's CPU and memory, files up to
/// `file_size_mb`.
fn program_limits(cpu_seconds: u64, memory_mb: u64, file_size_mb: u64) -> ResourceLimits {
    ResourceLimits {
        cpu_seconds,
        memory_mb,
        file_size_mb,
        open_files: 256,
        processes: 64,
    }
}

/// The users' homes whose key stores every program sandbox hides.
fn user_homes(settings: &Settings) -> Vec<PathBuf> {
    [
        Some(PathBuf::from("/root")),
        settings.env().get("HOME").map(PathBuf::from),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The first word of `program flag`'s output that starts with `prefix` (`ngspice-39`, `2.20`),
/// or the program's name when it cannot be read.
fn program_version(program: &std::path::Path, flag: &str, prefix: &str) -> String {
    let name = program
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    std::process::Command::new(program)
        .arg(flag)
        .output()
        .ok()
        .and_then(|out| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            text.split_whitespace()
                .find(|w| w.starts_with(prefix) && w.chars().any(|c| c.is_ascii_digit()))
                .map(|w| w.trim_end_matches([',', ':']).to_owned())
        })
        .unwrap_or(name)
}
