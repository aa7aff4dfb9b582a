//! `metaforge tool-server spice` and `tool-server fea` as a user reaches them: an entry in the
//! servers file, started by the gateway in its sandbox (each analysis then runs its program in a
//! sandbox nested in the server's), listed in `/health`, and called over MCP stdio with the
//! answer a textbook gives.

use std::sync::Arc;
use std::time::Duration;

use metaforge_adapters_mcp::{McpToolServer, ProtocolChoice, ServerConfig, ServerTransport, StdioLaunch};
use metaforge_ports::ToolSource;
use metaforge_test_support::{Peer, require};
use serde_json::{Map, Value, json};

use crate::common::{http, start_gateway};

/// `command args…` as a stdio MCP server in its sandbox, as the registry starts an entry: the
/// handshake era of 2025-11-25, a two-minute call limit, and `workspace` bound (writable or not)
/// when given.
fn stdio_server(
    name: &str,
    command: String,
    args: Vec<String>,
    home: &std::path::Path,
    workspace: Option<(&std::path::Path, bool)>,
) -> McpToolServer {
    let launch = Arc::new(StdioLaunch::new(
        [("PATH".to_owned(), metaforge_test_support::peers::path())],
        home.join("tool-servers"),
    ));
    let mut config = ServerConfig::new(
        name,
        ServerTransport::Stdio {
            command,
            args,
            env: Default::default(),
        },
    );
    config.protocol = ProtocolChoice::Initialize;
    config.call_timeout = Duration::from_secs(120);
    if let Some((workspace, writable)) = workspace {
        config.sandbox = metaforge_sandbox::Sandbox::On(metaforge_sandbox::SandboxOptions {
            workspace: Some(metaforge_sandbox::Workspace {
                path: workspace.to_path_buf(),
                writable,
            }),
            ..metaforge_sandbox::SandboxOptions::default()
        });
    }
    McpToolServer::new(config, launch)
}

/// `metaforge tool-server <name>` as a stdio MCP server in its sandbox, as the registry starts it.
fn tool_server(name: &str, home: &std::path::Path) -> McpToolServer {
    stdio_server(
        name,
        env!("CARGO_BIN_EXE_metaforge").to_owned(),
        vec!["tool-server".into(), name.into()],
        home,
        None,
    )
}

fn spice_entry() -> Value {
    json!({"command": env!("CARGO_BIN_EXE_metaforge"), "args": ["tool-server", "spice"],
           "domains": ["electronics", "simulation"]})
}

#[test]
fn the_gateway_starts_the_spice_server_in_its_sandbox_and_lists_its_five_tools() {
    if require(Peer::Bubblewrap).is_none() || require(Peer::Ngspice).is_none() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("mcp_servers.json"),
        json!({"mcpServers": {"spice": spice_entry()}}).to_string(),
    )
    .unwrap();
    let (_gateway, addr) = start_gateway(home.path(), &[]);
    let (_, health) = http(&addr, "GET", "/health", None);
    let spice = &health["mcp_servers"]["servers"]["spice"];
    println!("{spice}");
    assert_eq!(spice["status"], "ok", "{health}");
    assert_eq!(spice["tools"], 5, "{spice}");
    assert_eq!(spice["sandbox"], "on", "{spice}");
}

#[tokio::test]
async fn a_divider_simulated_through_the_sandboxed_server_over_mcp_sits_at_2_5_v() {
    if require(Peer::Bubblewrap).is_none() || require(Peer::Ngspice).is_none() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let server = tool_server("spice", home.path());
    let tools = server.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "spice.validate_netlist",
            "spice.op",
            "spice.dc",
            "spice.ac",
            "spice.transient"
        ]
    );
    assert!(tools.iter().all(|t| t.hints.read_only_hint == Some(true)));
    let arguments: Map<String, Value> =
        json!({"netlist": "divider\nV1 in 0 DC 5\nR1 in out 10k\nR2 out 0 10k\n"})
            .as_object()
            .cloned()
            .unwrap();
    let answer = server.call_tool("spice.op", arguments).await.unwrap();
    let result = answer.structured.clone().unwrap_or(Value::Null);
    println!("{result}");
    assert!(!answer.is_error, "{}", answer.text());
    let out = result["node_voltages_v"]["out"].as_f64().unwrap();
    assert!((out - 2.5).abs() < 1e-6, "v(out) = {out} V, theory 2.5 V");
    server.close().await;
}

#[tokio::test]
async fn a_cantilever_solved_through_the_sandboxed_fea_server_over_mcp_matches_beam_theory() {
    if require(Peer::Bubblewrap).is_none()
        || require(Peer::Gmsh).is_none()
        || require(Peer::Calculix).is_none()
    {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let server = tool_server("fea", home.path());
    let tools = server.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["fea.mesh", "fea.static"]);
    let arguments: Map<String, Value> = json!({
        "solid": {"kind": "box", "x_mm": 100, "y_mm": 10, "z_mm": 10},
        "element_size_mm": 2.5,
        "material": {"name": "steel_s235"},
        "fixed_faces": ["x_min"],
        "forces": [{"face": "x_max", "force_n": [0, -100, 0]}],
    })
    .as_object()
    .cloned()
    .unwrap();
    let answer = server.call_tool("fea.static", arguments).await.unwrap();
    assert!(!answer.is_error, "{}", answer.text());
    let result = answer.structured.clone().unwrap_or(Value::Null);
    let tip = result["max_displacement_mm"].as_f64().unwrap();
    let theory = 100.0 * 100.0_f64.powi(3) / (3.0 * 210_000.0 * (10.0 * 1000.0 / 12.0));
    println!(
        "through MCP: tip {tip:.5} mm (theory {theory:.5}), {}",
        result["run"]
    );
    assert!((tip - theory).abs() / theory < 0.05, "{result}");
    assert_eq!(result["material"]["name"], "steel_s235");
    server.close().await;
}

#[test]
fn without_a_servers_file_the_gateway_offers_the_engineering_servers_whose_programs_are_installed() {
    if require(Peer::Bubblewrap).is_none()
        || require(Peer::Ngspice).is_none()
        || require(Peer::Gmsh).is_none()
        || require(Peer::Calculix).is_none()
    {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let (_gateway, addr) = start_gateway(
        home.path(),
        &[("METAFORGE_ENGINEERING_TOOL_SERVERS", "on".to_owned())],
    );
    let (_, health) = http(&addr, "GET", "/health", None);
    let servers = &health["mcp_servers"]["servers"];
    println!("{servers}");
    assert_eq!(
        servers["spice"],
        json!({"status": "ok", "tools": 5, "sandbox": "on", "classes": {"read_only": 5}}),
        "{servers}"
    );
    assert_eq!(
        servers["fea"],
        json!({"status": "ok", "tools": 2, "sandbox": "on", "classes": {"read_only": 2}}),
        "{servers}"
    );

    // An entry of the same name replaces the built-in one: disabled, it is not started.
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("mcp_servers.json"),
        json!({"mcpServers": {"spice": {"command": "metaforge", "args": ["tool-server", "spice"], "disabled": true}}})
            .to_string(),
    )
    .unwrap();
    let (_gateway, addr) = start_gateway(
        home.path(),
        &[("METAFORGE_ENGINEERING_TOOL_SERVERS", "on".to_owned())],
    );
    let (_, health) = http(&addr, "GET", "/health", None);
    let servers = &health["mcp_servers"]["servers"];
    assert_eq!(servers["spice"], json!({"status": "disabled"}), "{servers}");
    assert_eq!(servers["fea"]["status"], "ok", "{servers}");
}

#[tokio::test]
async fn the_fea_server_given_a_workspace_meshes_and_solves_a_step_part_from_it_over_mcp() {
    if require(Peer::Bubblewrap).is_none() || require(Peer::Calculix).is_none() {
        return;
    }
    let Some(gmsh) = require(Peer::Gmsh) else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let workspace_path = workspace.path().canonicalize().unwrap();
    // A steel bar 100 × 10 × 10 mm as a STEP file, written by gmsh (OpenCASCADE).
    std::fs::write(
        workspace_path.join("bar.geo"),
        "SetFactory(\"OpenCASCADE\");\nBox(1) = {0, 0, 0, 100, 10, 10};\n",
    )
    .unwrap();
    let made = std::process::Command::new(gmsh)
        .current_dir(&workspace_path)
        .args(["-0", "bar.geo", "-o", "bar.step"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let server = workspace_server("fea", home.path(), &workspace_path);
    let args = |v: Value| -> Map<String, Value> { v.as_object().cloned().unwrap() };
    let solid = json!({"kind": "step", "path": "bar.step"});
    let mesh = server
        .call_tool("fea.mesh", args(json!({"solid": solid, "element_size_mm": 2.5})))
        .await
        .unwrap();
    assert!(!mesh.is_error, "{}", mesh.text());
    let mesh = mesh.structured.unwrap_or(Value::Null);
    let faces: Vec<String> = serde_json::from_value(mesh["faces"].clone()).unwrap();
    assert_eq!(faces.len(), 6, "{mesh}");
    let at_x = |x: f64| {
        faces
            .iter()
            .find(|f| {
                (mesh["face_geometry"][f.as_str()]["centre_mm"][0]
                    .as_f64()
                    .unwrap()
                    - x)
                    .abs()
                    < 1e-6
            })
            .unwrap()
            .clone()
    };
    let answer = server
        .call_tool(
            "fea.static",
            args(json!({"solid": solid, "element_size_mm": 2.5, "material": {"name": "steel_s235"},
                        "fixed_faces": [at_x(0.0)], "forces": [{"face": at_x(100.0), "force_n": [0, -100, 0]}]})),
        )
        .await
        .unwrap();
    assert!(!answer.is_error, "{}", answer.text());
    let result = answer.structured.unwrap_or(Value::Null);
    let tip = result["max_displacement_mm"].as_f64().unwrap();
    let theory = 100.0 * 100.0_f64.powi(3) / (3.0 * 210_000.0 * (10.0 * 1000.0 / 12.0));
    println!("STEP bar through MCP: tip {tip:.5} mm (theory {theory:.5})");
    assert!((tip - theory).abs() / theory < 0.05, "{result}");
    server.close().await;
}

/// `metaforge tool-server <name> --workspace DIR` as the entry a user writes: the server told its
/// workspace, its sandbox binding it read-only.
fn workspace_server(name: &str, home: &std::path::Path, workspace: &std::path::Path) -> McpToolServer {
    stdio_server(
        name,
        env!("CARGO_BIN_EXE_metaforge").to_owned(),
        vec![
            "tool-server".into(),
            name.into(),
            "--workspace".into(),
            workspace.display().to_string(),
        ],
        home,
        Some((workspace, false)),
    )
}

#[tokio::test]
async fn the_kicad_server_given_a_workspace_checks_a_board_from_it_over_mcp() {
    if require(Peer::Bubblewrap).is_none() || require(Peer::Kicad).is_none() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let workspace_path = workspace.path().canonicalize().unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/kicad/clearance");
    for file in ["clearance.kicad_pcb", "clearance.kicad_pro"] {
        std::fs::copy(fixture.join(file), workspace_path.join(file)).unwrap();
    }
    let server = workspace_server("kicad", home.path(), &workspace_path);
    let names: Vec<String> = server
        .list_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(
        names,
        [
            "kicad.board_info",
            "kicad.drc",
            "kicad.export_gerbers",
            "kicad.export_drill",
            "kicad.bom",
            "kicad.netlist",
            "kicad.erc"
        ]
    );
    let board = json!({"board": "clearance.kicad_pcb"})
        .as_object()
        .cloned()
        .unwrap();
    let started = std::time::Instant::now();
    let info = server.call_tool("kicad.board_info", board.clone()).await.unwrap();
    let cold = started.elapsed();
    assert!(!info.is_error, "{}", info.text());
    let info = info.structured.unwrap_or(Value::Null);
    assert_eq!(info["width_mm"], 30.0, "{info}");
    assert_eq!(info["tracks"], 2, "{info}");
    let started = std::time::Instant::now();
    let drc = server.call_tool("kicad.drc", board).await.unwrap();
    let warm = started.elapsed();
    let drc = drc.structured.unwrap_or(Value::Null);
    println!("kicad over MCP: board_info {cold:?} (first call), drc {warm:?}");
    assert_eq!(drc["passed"], false, "{drc}");
    let clearance = drc["violations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["kind"] == "clearance")
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(clearance["places"][1]["y_mm"], 10.3, "{drc}");
    assert_eq!(drc["evidence"]["sandbox"]["sandboxed"], true, "{drc}");
    server.close().await;
}

#[tokio::test]
async fn the_cad_server_models_and_exports_a_part_in_a_freecad_session_over_mcp() {
    if require(Peer::Bubblewrap).is_none() || require(Peer::Freecad).is_none() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let workspace_path = workspace.path().canonicalize().unwrap();
    let server = workspace_server("cad", home.path(), &workspace_path);
    let tools = server.list_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "freecad.open_session"));
    assert!(
        tools
            .iter()
            .all(|t| t.hints.read_only_hint == Some(false) && t.hints.destructive_hint == Some(false)),
        "authoring: the session's scratch only"
    );
    let args = |v: Value| -> Map<String, Value> { v.as_object().cloned().unwrap() };
    let call = |tool: &'static str, arguments: Value| {
        let server = &server;
        async move {
            let answer = server.call_tool(tool, args(arguments)).await.unwrap();
            assert!(!answer.is_error, "{tool}: {}", answer.text());
            answer.structured.unwrap_or(Value::Null)
        }
    };
    let started = std::time::Instant::now();
    let session = call("freecad.open_session", json!({})).await["session_id"].clone();
    let cold = started.elapsed();
    let sketch = call(
        "freecad.create_sketch",
        json!({"session_id": session, "plane": "XY", "loops": [{"circle": {"centre": [0.0, 0.0], "radius_mm": 10.0}}]}),
    )
    .await;
    let started = std::time::Instant::now();
    let pad = call(
        "freecad.pad_sketch",
        json!({"session_id": session, "sketch": sketch["sketch"], "length_mm": 20.0}),
    )
    .await;
    let warm = started.elapsed();
    let measured = call(
        "freecad.measure",
        json!({"session_id": session, "part": pad["part"], "density_kg_m3": 7850.0}),
    )
    .await;
    let cylinder = std::f64::consts::PI * 100.0 * 20.0;
    let volume = measured["volume_mm3"].as_f64().unwrap();
    println!(
        "cad over MCP: open_session {cold:?} (cold FreeCAD in a nested sandbox), pad {warm:?}; {volume:.3} mm³"
    );
    assert!((volume - cylinder).abs() / cylinder < 1e-9, "{measured}");
    let export = call(
        "freecad.export_model",
        json!({"session_id": session, "part": pad["part"], "format": "step", "name": "rod.step"}),
    )
    .await;
    assert_eq!(export["evidence"]["files"][0]["name"], "rod.step", "{export}");
    assert_eq!(export["evidence"]["sandbox"]["sandboxed"], true, "{export}");
    call("freecad.close_session", json!({"session_id": session})).await;
    server.close().await;
}

/// The community `spicebridge` server (PyPI) as a servers-file entry would start it: its venv's
/// script, in the registry's sandbox (the venv read-only like the rest of the filesystem, no
/// network, no secrets).
fn spicebridge(home: &std::path::Path, script: &std::path::Path) -> McpToolServer {
    stdio_server(
        "spicebridge",
        script.display().to_string(),
        Vec::new(),
        home,
        None,
    )
}

#[tokio::test]
async fn a_community_spice_server_simulates_a_divider_in_the_sandbox() {
    if require(Peer::Bubblewrap).is_none() || require(Peer::Ngspice).is_none() {
        return;
    }
    let Some(script) = require(Peer::Spicebridge) else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let server = spicebridge(home.path(), &script);
    let tools = server.list_tools().await.unwrap();
    println!("spicebridge lists {} tools", tools.len());
    assert!(tools.iter().any(|t| t.name == "create_circuit"));
    let args = |v: Value| -> Map<String, Value> { v.as_object().cloned().unwrap() };
    let created = server
        .call_tool(
            "create_circuit",
            args(json!({"netlist": "divider\nV1 in 0 DC 5\nR1 in out 10k\nR2 out 0 10k\n.end\n"})),
        )
        .await
        .unwrap();
    let created = created
        .structured
        .clone()
        .unwrap_or_else(|| serde_json::from_str(&created.text()).unwrap_or(Value::Null));
    println!("{created}");
    let id = created["circuit_id"].as_str().unwrap().to_owned();
    let op = server
        .call_tool("run_dc_op", args(json!({"circuit_id": id})))
        .await
        .unwrap();
    assert!(!op.is_error, "{}", op.text());
    let op = op
        .structured
        .clone()
        .unwrap_or_else(|| serde_json::from_str(&op.text()).unwrap_or(Value::Null));
    println!("spicebridge in the sandbox: {}", op["results"]["nodes"]);
    // The textbook divider: 5 V over two equal resistors.
    assert_eq!(op["results"]["nodes"]["v(out)"], 2.5, "{op}");
    assert_eq!(op["results"]["nodes"]["i(v1)"], -0.00025, "{op}");
    server.close().await;
}

#[tokio::test]
async fn a_bar_modelled_in_freecad_is_meshed_and_solved_by_the_fea_server_from_the_shared_workspace() {
    if require(Peer::Bubblewrap).is_none()
        || require(Peer::Freecad).is_none()
        || require(Peer::Gmsh).is_none()
        || require(Peer::Calculix).is_none()
    {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let workspace_path = workspace.path().canonicalize().unwrap();
    // The CAD entry binds the project writable and shares its exports; fea reads the same
    // directory read-only.
    let cad = stdio_server(
        "cad",
        env!("CARGO_BIN_EXE_metaforge").to_owned(),
        vec![
            "tool-server".into(),
            "cad".into(),
            "--workspace".into(),
            workspace_path.display().to_string(),
            "--write-exports".into(),
        ],
        home.path(),
        Some((&workspace_path, true)),
    );
    let fea = workspace_server("fea", home.path(), &workspace_path);
    let args = |v: Value| -> Map<String, Value> { v.as_object().cloned().unwrap() };
    let ok = |answer: metaforge_ports::ToolOutput| {
        assert!(!answer.is_error, "{}", answer.text());
        answer.structured.unwrap_or(Value::Null)
    };
    let session = ok(cad
        .call_tool("freecad.open_session", args(json!({})))
        .await
        .unwrap())["session_id"]
        .clone();
    let sketch = ok(cad
        .call_tool(
            "freecad.create_sketch",
            args(
                json!({"session_id": session, "plane": "XY", "loops": [{"start": [0, 0], "segments": [
                {"line_to": [100, 0]}, {"line_to": [100, 10]}, {"line_to": [0, 10]}, {"line_to": [0, 0]}]}]}),
            ),
        )
        .await
        .unwrap());
    let bar = ok(cad
        .call_tool(
            "freecad.pad_sketch",
            args(json!({"session_id": session, "sketch": sketch["sketch"], "length_mm": 10})),
        )
        .await
        .unwrap());
    let measured = ok(cad
        .call_tool(
            "freecad.measure",
            args(json!({"session_id": session, "part": bar["part"], "density_kg_m3": 7850})),
        )
        .await
        .unwrap());
    let exported = ok(cad
        .call_tool(
            "freecad.export_model",
            args(json!({"session_id": session, "part": bar["part"], "format": "step", "name": "bar.step"})),
        )
        .await
        .unwrap());
    assert_eq!(exported["workspace_path"], "exports/bar.step", "{exported}");
    assert!(workspace_path.join("exports/bar.step").is_file());
    // The fea server meshes the part FreeCAD made and bends it as a cantilever.
    let solid = json!({"kind": "step", "path": "exports/bar.step"});
    let mesh = ok(fea
        .call_tool("fea.mesh", args(json!({"solid": solid, "element_size_mm": 2.5})))
        .await
        .unwrap());
    let at_x = |x: f64| {
        let faces = mesh["face_geometry"].as_object().unwrap();
        faces
            .iter()
            .find(|(_, g)| (g["centre_mm"][0].as_f64().unwrap() - x).abs() < 1e-6)
            .map(|(name, _)| name.clone())
            .unwrap()
    };
    let result = ok(fea
        .call_tool(
            "fea.static",
            args(json!({"solid": solid, "element_size_mm": 2.5, "material": {"name": "steel_s235"},
                        "fixed_faces": [at_x(0.0)], "forces": [{"face": at_x(100.0), "force_n": [0, -100, 0]}]})),
        )
        .await
        .unwrap());
    let tip = result["max_displacement_mm"].as_f64().unwrap();
    let theory = 100.0 * 100.0_f64.powi(3) / (3.0 * 210_000.0 * (10.0 * 1000.0 / 12.0));
    let mass = result["mass_kg"].as_f64().unwrap();
    println!(
        "FreeCAD bar → fea: tip {tip:.5} mm (PL³/3EI {theory:.5}); mass {mass:.5} kg (FreeCAD {:.5} kg)",
        measured["mass_kg"].as_f64().unwrap()
    );
    assert!((tip - theory).abs() / theory < 0.05, "{result}");
    assert!(
        (mass - measured["mass_kg"].as_f64().unwrap()).abs() < 1e-6,
        "{result}"
    );
    cad.close().await;
    fea.close().await;
}
