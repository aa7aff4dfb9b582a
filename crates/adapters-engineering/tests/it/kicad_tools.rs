//! `kicad.*` against KiCad 6's pcbnew in its sandbox, on Debian's demo boards (`kicad-demos`)
//! and a board made by KiCad with a deliberate clearance violation. The oracles are KiCad's own:
//! its DRC report file, its footprints on the board, and gerbv re-reading every exported file.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a tool that misbehaves must fail the test loudly"
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use metaforge_adapters_engineering::kicad::KicadHost;
use metaforge_ports::ToolOutput;
use metaforge_sandbox::ResourceLimits;
use metaforge_test_support::{Peer, require};
use serde_json::{Value, json};

/// A workspace holding the pic_programmer demo (board, project, both sheets) and the clearance
/// fixture.
fn workspace() -> Option<tempfile::TempDir> {
    let demos = require(Peer::Kicad)?;
    let dir = tempfile::tempdir().unwrap();
    let pic = demos.join("pic_programmer");
    std::fs::create_dir(dir.path().join("pic")).unwrap();
    for file in [
        "pic_programmer.kicad_pcb",
        "pic_programmer.kicad_pro",
        "pic_programmer.kicad_sch",
        "pic_sockets.kicad_sch",
    ] {
        std::fs::copy(pic.join(file), dir.path().join("pic").join(file)).unwrap();
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/kicad/clearance");
    std::fs::create_dir(dir.path().join("clearance")).unwrap();
    for file in ["clearance.kicad_pcb", "clearance.kicad_pro"] {
        std::fs::copy(fixture.join(file), dir.path().join("clearance").join(file)).unwrap();
    }
    Some(dir)
}

fn host(workspace: &Path) -> Option<KicadHost> {
    require(Peer::Bubblewrap)?;
    let runner = crate::host_call::sandboxed(
        PathBuf::from("/usr/bin/python3"),
        ResourceLimits {
            memory_mb: 4096,
            ..ResourceLimits::default()
        },
        Duration::from_secs(120),
    );
    Some(KicadHost::new(
        runner,
        Some(workspace.to_path_buf()),
        "6.0.11".to_owned(),
    ))
}

async fn call(host: &KicadHost, tool: &str, arguments: Value) -> (Value, ToolOutput) {
    crate::host_call::call_host(host, tool, arguments).await
}

/// Every evidence file of `output` with its text (name → text), each checked against its hash.
fn evidence_files(output: &ToolOutput) -> BTreeMap<String, String> {
    let evidence = output
        .evidence()
        .expect("evidence")
        .expect("well-formed evidence");
    evidence
        .files
        .iter()
        .map(|file| {
            let text = output
                .evidence_file_text(file)
                .expect("the file's text, matching its hash");
            (file.name.clone(), text.to_owned())
        })
        .collect()
}

/// KiCad's own report of `board`, written by a direct pcbnew call outside the server.
fn kicad_report(board: &Path) -> String {
    let out = tempfile::tempdir().unwrap();
    let report = out.path().join("drc.rpt");
    let status = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys, pcbnew; b = pcbnew.LoadBoard(sys.argv[1]); pcbnew.WriteDRCReport(b, sys.argv[2], pcbnew.EDA_UNITS_MILLIMETRES, True)",
        ])
        .arg(board)
        .arg(&report)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read_to_string(report).unwrap()
}

#[tokio::test]
async fn drc_of_a_demo_board_lists_the_violations_kicads_own_report_lists() {
    let Some(dir) = workspace() else { return };
    let Some(host) = host(dir.path()) else { return };
    let (result, output) = call(
        &host,
        "kicad.drc",
        json!({"board": "pic/pic_programmer.kicad_pcb"}),
    )
    .await;
    println!("{result:#}");
    assert!(!output.is_error, "{result}");
    let oracle = kicad_report(&dir.path().join("pic/pic_programmer.kicad_pcb"));
    // Every `[code]:` line of KiCad's report, in order, is one violation of the result.
    let expected: Vec<&str> = oracle
        .lines()
        .filter_map(|l| l.trim().strip_prefix('['))
        .filter_map(|l| l.split(']').next())
        .collect();
    let kinds: Vec<&str> = result["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, expected);
    assert!(
        !expected.is_empty(),
        "the demo board has violations in KiCad 6.0.11"
    );
    assert_eq!(result["counts"]["violations"], expected.len());
    // The report itself is evidence.
    let texts = evidence_files(&output);
    assert!(texts["out/drc.rpt"].contains("** Found"));
}

#[tokio::test]
async fn a_clearance_violation_is_reported_at_its_tracks_and_an_exclusion_is_honoured() {
    let Some(dir) = workspace() else { return };
    let Some(host) = host(dir.path()) else { return };
    let board = json!({"board": "clearance/clearance.kicad_pcb"});
    let (result, _) = call(&host, "kicad.drc", board.clone()).await;
    println!("{result:#}");
    let clearance: Vec<&Value> = result["violations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["kind"] == "clearance")
        .collect();
    assert_eq!(clearance.len(), 1, "{result}");
    let violation = clearance[0];
    assert!(
        violation["description"]
            .as_str()
            .unwrap()
            .contains("actual 0.0500 mm"),
        "the tracks are 0.30 mm apart centre to centre and 0.25 mm wide: {violation}"
    );
    let ys: Vec<f64> = violation["places"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["y_mm"].as_f64().unwrap())
        .collect();
    assert_eq!(ys, [10.0, 10.3]);
    for place in violation["places"].as_array().unwrap() {
        let x = place["x_mm"].as_f64().unwrap();
        assert!((10.0..=20.0).contains(&x), "{place}");
    }
    assert_eq!(result["passed"], false);
    assert_eq!(violation["excluded"], false);

    // A person excludes it in the project: listed as excluded, no longer counted as an error.
    let project_file = dir.path().join("clearance/clearance.kicad_pro");
    let mut project: Value = serde_json::from_str(&std::fs::read_to_string(&project_file).unwrap()).unwrap();
    project["board"]["design_settings"]["drc_exclusions"] = json!([
        "clearance|10000000|10000000|00000000-0000-0000-0000-000000000000|00000000-0000-0000-0000-000000000000"
    ]);
    std::fs::write(&project_file, project.to_string()).unwrap();
    let (result, _) = call(&host, "kicad.drc", board).await;
    let violation = result["violations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["kind"] == "clearance")
        .unwrap()
        .clone();
    assert_eq!(violation["excluded"], true, "{result}");
    assert_eq!(result["counts"]["excluded"], 1);
    assert_eq!(result["counts"]["errors"], 0, "{result}");
    assert_eq!(result["passed"], true, "only dangling-track warnings are left");
}

/// gerbv reads `file` and writes it back out: it parses as RS-274X or Excellon.
fn gerbv_reads(file: &Path, format: &str) -> bool {
    let out = tempfile::tempdir().unwrap();
    let exported = out.path().join("again");
    let status = std::process::Command::new("/usr/bin/gerbv")
        .args(["-x", format, "-o"])
        .arg(&exported)
        .arg(file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    status.success() && std::fs::metadata(&exported).is_ok_and(|m| m.len() > 0)
}

#[tokio::test]
async fn gerbers_for_every_copper_layer_and_the_drill_files_parse_in_gerbv() {
    let Some(dir) = workspace() else { return };
    let Some(host) = host(dir.path()) else { return };
    if require(Peer::Gerbv).is_none() {
        return;
    }
    let board = json!({"board": "pic/pic_programmer.kicad_pcb"});
    let (info, _) = call(&host, "kicad.board_info", board.clone()).await;
    println!("{info:#}");
    assert_eq!(info["copper_layers"], json!(["F.Cu", "B.Cu"]));
    assert_eq!(info["footprints"], 63);
    assert!(
        (info["width_mm"].as_f64().unwrap() - 160.02).abs() < 0.01,
        "the outline's centre line: {info}"
    );
    assert_eq!(info["outline_closed"], true);

    let (gerbers, output) = call(&host, "kicad.export_gerbers", board.clone()).await;
    println!("{gerbers:#}");
    assert!(!output.is_error, "{gerbers}");
    let layers: Vec<&str> = gerbers["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["layer"].as_str().unwrap())
        .collect();
    for layer in ["F.Cu", "B.Cu", "Edge.Cuts"] {
        assert!(layers.contains(&layer), "{layers:?}");
    }
    let scratch = tempfile::tempdir().unwrap();
    let texts = evidence_files(&output);
    assert_eq!(texts.len(), layers.len(), "every Gerber comes back as evidence");
    for (name, text) in &texts {
        let path = scratch.path().join(name.trim_start_matches("out/"));
        std::fs::write(&path, text).unwrap();
        assert!(gerbv_reads(&path, "rs274x"), "gerbv cannot read {name}");
    }

    let (drill, output) = call(&host, "kicad.export_drill", board).await;
    println!("{drill:#}");
    assert_eq!(drill["plated_pad_holes"], 239, "{drill}");
    assert_eq!(drill["via_holes"], 6, "{drill}");
    let files = evidence_files(&output);
    assert!(files.keys().any(|name| name.ends_with("-PTH.drl")), "{drill}");
    for (name, text) in &files {
        let path = scratch.path().join(name.trim_start_matches("out/"));
        std::fs::write(&path, text).unwrap();
        assert!(gerbv_reads(&path, "drill"), "gerbv cannot read {name}");
    }
}

#[tokio::test]
async fn the_bom_quantities_equal_the_parts_kicad_placed_per_value_and_footprint() {
    let Some(dir) = workspace() else { return };
    let Some(host) = host(dir.path()) else { return };
    let (bom, output) = call(
        &host,
        "kicad.bom",
        json!({"schematic": "pic/pic_programmer.kicad_sch"}),
    )
    .await;
    assert!(!output.is_error, "{bom}");
    println!(
        "{} lines, {} parts, {} sheets",
        bom["lines"], bom["parts"], bom["sheets"]
    );
    assert_eq!(bom["sheets"], 2);
    // The oracle: the footprints KiCad placed on the board from this schematic, grouped the
    // same way, read by pcbnew outside the server.
    let listed = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys, json, pcbnew; b = pcbnew.LoadBoard(sys.argv[1]); print(json.dumps([[f.GetValue(), str(f.GetFPID().GetUniStringLibId()), f.GetReference()] for f in b.GetFootprints()]))",
        ])
        .arg(dir.path().join("pic/pic_programmer.kicad_pcb"))
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    let placed: Vec<(String, String, String)> = serde_json::from_slice(&listed.stdout).unwrap();
    let mut expected: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (value, footprint, _) in &placed {
        *expected.entry((value.clone(), footprint.clone())).or_default() += 1;
    }
    let got: BTreeMap<(String, String), usize> = bom["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let quantity = g["quantity"].as_u64().unwrap() as usize;
            assert_eq!(g["references"].as_array().unwrap().len(), quantity);
            (
                (
                    g["value"].as_str().unwrap().to_owned(),
                    g["footprint"].as_str().unwrap().to_owned(),
                ),
                quantity,
            )
        })
        .collect();
    assert_eq!(got, expected);
}

#[tokio::test]
async fn the_netlist_names_each_net_with_its_pads_and_erc_says_why_it_cannot_run() {
    let Some(dir) = workspace() else { return };
    let Some(host) = host(dir.path()) else { return };
    let (netlist, _) = call(
        &host,
        "kicad.netlist",
        json!({"board": "pic/pic_programmer.kicad_pcb"}),
    )
    .await;
    let nets = netlist["nets"].as_array().unwrap();
    let clock = nets.iter().find(|n| n["name"] == "/CLOCK-RB6").unwrap();
    assert_eq!(
        clock["pads"],
        json!(["P2.27", "P3.39", "R13.2", "U1.6", "U5.12", "U6.6"])
    );

    let (erc, output) = call(
        &host,
        "kicad.erc",
        json!({"schematic": "pic/pic_programmer.kicad_sch"}),
    )
    .await;
    assert!(output.is_error);
    assert_eq!(erc["error"], "erc_unavailable");
    assert!(erc["message"].as_str().unwrap().contains("kicad-cli"), "{erc}");
}

#[tokio::test]
async fn a_file_outside_the_workspace_or_of_the_wrong_kind_is_refused_by_name() {
    let Some(dir) = workspace() else { return };
    let Some(host) = host(dir.path()) else { return };
    for (tool, arguments, field, words) in [
        (
            "kicad.drc",
            json!({"board": "../../etc/passwd.kicad_pcb"}),
            "board",
            "No such file",
        ),
        (
            "kicad.drc",
            json!({"board": "pic/pic_programmer.kicad_sch"}),
            "board",
            "not a KiCad board",
        ),
        (
            "kicad.bom",
            json!({"schematic": "pic/pic_programmer.kicad_pcb"}),
            "schematic",
            "not a KiCad schematic",
        ),
        (
            "kicad.bom",
            json!({"schematic": "pic/pic_sockets.kicad_sch"}),
            "schematic",
            "no symbol_instances",
        ),
        (
            "kicad.export_gerbers",
            json!({"board": "pic/pic_programmer.kicad_pcb", "layers": ["In7.Cu"]}),
            "layers",
            "In7.Cu",
        ),
    ] {
        let (envelope, output) = call(&host, tool, arguments).await;
        assert!(output.is_error, "{envelope}");
        assert_eq!(envelope["error"], "invalid_arguments", "{envelope}");
        let message = envelope["validation_errors"][0].as_str().unwrap();
        assert!(message.starts_with(field) && message.contains(words), "{message}");
    }
    // Escaping by a link is refused too.
    std::os::unix::fs::symlink("/etc/hostname", dir.path().join("escape.kicad_pcb")).unwrap();
    let (envelope, _) = call(&host, "kicad.drc", json!({"board": "escape.kicad_pcb"})).await;
    assert!(
        envelope["validation_errors"][0]
            .as_str()
            .unwrap()
            .contains("outside the workspace"),
        "{envelope}"
    );
}
