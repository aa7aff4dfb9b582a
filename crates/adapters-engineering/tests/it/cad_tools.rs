//! `freecad.*` against FreeCAD 0.20 in its sandbox, one FreeCAD per session. The oracles are
//! geometry nobody here wrote: the volume of an extruded L with a hole through it, of a cylinder
//! (πr²h) and a frustum (h/3·(A₁ + A₂ + √(A₁A₂))), and a STEP file's volume after FreeCAD wrote
//! it and read it back in a fresh session.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a tool that misbehaves must fail the test loudly"
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use metaforge_adapters_engineering::cad::{CadHost, SessionLimits};
use metaforge_ports::ToolOutput;
use metaforge_sandbox::ResourceLimits;
use metaforge_test_support::{Peer, require};
use serde_json::{Value, json};

fn host(workspace: &Path, limits: SessionLimits) -> Option<CadHost> {
    require(Peer::Bubblewrap)?;
    let freecad = require(Peer::Freecad)?;
    let runner = crate::host_call::sandboxed(
        freecad,
        ResourceLimits {
            cpu_seconds: 600,
            memory_mb: 4096,
            ..ResourceLimits::default()
        },
        Duration::from_secs(120),
    );
    Some(CadHost::new(runner, Some(workspace.to_path_buf()), limits))
}

async fn call(host: &CadHost, tool: &str, arguments: Value) -> (Value, ToolOutput) {
    crate::host_call::call_host(host, tool, arguments).await
}

async fn ok(host: &CadHost, tool: &str, arguments: Value) -> Value {
    let (value, output) = call(host, tool, arguments).await;
    assert!(!output.is_error, "{tool}: {value}");
    value
}

async fn open(host: &CadHost) -> String {
    ok(host, "freecad.open_session", json!({})).await["session_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A closed polyline loop through `points`, back to the first.
fn polyline(points: &[[f64; 2]]) -> Value {
    let mut segments: Vec<Value> = points[1..].iter().map(|p| json!({"line_to": p})).collect();
    segments.push(json!({"line_to": points[0]}));
    json!({"start": points[0], "segments": segments})
}

#[tokio::test]
async fn a_bracket_modelled_in_a_session_measures_its_geometry_and_survives_a_step_round_trip() {
    let workspace = tempfile::tempdir().unwrap();
    let Some(host) = host(workspace.path(), SessionLimits::default()) else {
        return;
    };
    let cold = Instant::now();
    let session = open(&host).await;
    let cold = cold.elapsed();
    // An L-bracket's profile on the XZ plane: a base 60 × 5 and a wall 5 × 40, padded 30 mm
    // along y; a 6 mm hole through the base.
    let sketch = ok(
        &host,
        "freecad.create_sketch",
        json!({"session_id": session, "plane": "XZ",
               "loops": [polyline(&[[0.0, 0.0], [60.0, 0.0], [60.0, 5.0], [5.0, 5.0], [5.0, 40.0], [0.0, 40.0]])]}),
    )
    .await;
    let profile_area = 60.0 * 5.0 + 5.0 * 35.0;
    assert!(
        (sketch["area_mm2"].as_f64().unwrap() - profile_area).abs() < 1e-6,
        "{sketch}"
    );
    let mut warm = Vec::new();
    let started = Instant::now();
    let pad = ok(
        &host,
        "freecad.pad_sketch",
        json!({"session_id": session, "sketch": sketch["sketch"], "length_mm": 30.0}),
    )
    .await;
    warm.push(started.elapsed());
    let hole = ok(
        &host,
        "freecad.create_sketch",
        json!({"session_id": session, "plane": "XY", "offset_mm": 5.0,
               "loops": [{"circle": {"centre": [40.0, 15.0], "radius_mm": 3.0}}]}),
    )
    .await;
    let started = Instant::now();
    let pocket = ok(
        &host,
        "freecad.pocket_sketch",
        json!({"session_id": session, "part": pad["part"], "sketch": hole["sketch"], "through_all": true, "reversed": true}),
    )
    .await;
    warm.push(started.elapsed());
    let started = Instant::now();
    let measured = ok(
        &host,
        "freecad.measure",
        json!({"session_id": session, "part": pocket["part"], "density_kg_m3": 2700.0}),
    )
    .await;
    warm.push(started.elapsed());
    let expected = profile_area * 30.0 - std::f64::consts::PI * 9.0 * 5.0;
    let volume = measured["volume_mm3"].as_f64().unwrap();
    println!(
        "bracket: {volume:.3} mm³ (geometry: {expected:.3}), mass {} kg",
        measured["mass_kg"]
    );
    assert!((volume - expected).abs() / expected < 1e-9, "{measured}");
    let mass = measured["mass_kg"].as_f64().unwrap();
    assert!((mass - volume * 1e-9 * 2700.0).abs() < 1e-12, "{measured}");
    assert_eq!(measured["bounding_box_mm"]["size"], json!([60.0, 30.0, 40.0]));
    assert_eq!(measured["evidence"]["quantities"][0]["unit"], "kg");

    // Exported as STEP, re-imported in a fresh session from the workspace: the same volume.
    let (export, output) = call(
        &host,
        "freecad.export_model",
        json!({"session_id": session, "part": pocket["part"], "format": "step", "name": "bracket.step"}),
    )
    .await;
    assert!(!output.is_error, "{export}");
    let evidence = output.evidence().unwrap().unwrap();
    let step = output.evidence_file_text(&evidence.files[0]).unwrap();
    assert!(step.starts_with("ISO-10303-21;"), "a STEP file");
    std::fs::write(workspace.path().join("bracket.step"), step).unwrap();
    let again = open(&host).await;
    let imported = ok(
        &host,
        "freecad.import_step",
        json!({"session_id": again, "path": "bracket.step"}),
    )
    .await;
    let reread = ok(
        &host,
        "freecad.measure",
        json!({"session_id": again, "part": imported["part"]}),
    )
    .await["volume_mm3"]
        .as_f64()
        .unwrap();
    println!("bracket after STEP: {reread:.3} mm³");
    assert!(
        (reread - volume).abs() / volume < 1e-3,
        "within 0.1 %: {reread} vs {volume}"
    );

    // STL with its tolerance.
    let (stl, output) = call(
        &host,
        "freecad.export_model",
        json!({"session_id": session, "part": pocket["part"], "format": "stl", "name": "bracket.stl", "tolerance_mm": 0.05}),
    )
    .await;
    assert!(!output.is_error, "{stl}");
    assert!(stl["facets"].as_u64().unwrap() > 12, "{stl}");
    warm.sort();
    println!(
        "freecad timings: open_session (cold FreeCAD) {cold:?}; warm operations median {:?}",
        warm[warm.len() / 2]
    );
    for id in [&session, &again] {
        ok(&host, "freecad.close_session", json!({"session_id": id})).await;
    }
}

#[tokio::test]
async fn revolve_loft_and_sweep_make_the_solids_geometry_says() {
    let workspace = tempfile::tempdir().unwrap();
    let Some(host) = host(workspace.path(), SessionLimits::default()) else {
        return;
    };
    let session = open(&host).await;
    let volume = |v: &Value| v["volume_mm3"].as_f64().unwrap();
    // A 10 × 20 rectangle on XZ beside the z axis, revolved a full turn: a cylinder r 10, h 20.
    let rect = ok(
        &host,
        "freecad.create_sketch",
        json!({"session_id": session, "plane": "XZ", "loops": [polyline(&[[0.0, 0.0], [10.0, 0.0], [10.0, 20.0], [0.0, 20.0]])]}),
    )
    .await;
    let turned = ok(
        &host,
        "freecad.revolve_sketch",
        json!({"session_id": session, "sketch": rect["sketch"], "axis_direction": [0, 0, 1]}),
    )
    .await;
    let cylinder = std::f64::consts::PI * 100.0 * 20.0;
    assert!((volume(&turned) - cylinder).abs() / cylinder < 1e-6, "{turned}");
    // A loft from a 20 mm square at z 0 to a 10 mm square at z 30: a square frustum.
    let bottom = ok(
        &host,
        "freecad.create_sketch",
        json!({"session_id": session, "plane": "XY", "loops": [polyline(&[[-10.0, -10.0], [10.0, -10.0], [10.0, 10.0], [-10.0, 10.0]])]}),
    )
    .await;
    let top = ok(
        &host,
        "freecad.create_sketch",
        json!({"session_id": session, "plane": "XY", "offset_mm": 30.0, "loops": [polyline(&[[-5.0, -5.0], [5.0, -5.0], [5.0, 5.0], [-5.0, 5.0]])]}),
    )
    .await;
    let loft = ok(
        &host,
        "freecad.loft_sketches",
        json!({"session_id": session, "sketches": [bottom["sketch"], top["sketch"]], "ruled": true}),
    )
    .await;
    let frustum = 30.0 / 3.0 * (400.0 + 100.0 + (400.0_f64 * 100.0).sqrt());
    assert!((volume(&loft) - frustum).abs() / frustum < 1e-6, "{loft}");
    // A 4 mm circle swept 50 mm along a straight path: a cylinder r 4, h 50.
    let circle = ok(
        &host,
        "freecad.create_sketch",
        json!({"session_id": session, "plane": "XY", "loops": [{"circle": {"centre": [0.0, 0.0], "radius_mm": 4.0}}]}),
    )
    .await;
    let path = ok(
        &host,
        "freecad.create_sketch",
        json!({"session_id": session, "plane": "XZ", "closed": false,
               "loops": [{"start": [0.0, 0.0], "segments": [{"line_to": [0.0, 50.0]}]}]}),
    )
    .await;
    let swept = ok(
        &host,
        "freecad.sweep_sketch",
        json!({"session_id": session, "sketch": circle["sketch"], "path": path["sketch"]}),
    )
    .await;
    let rod = std::f64::consts::PI * 16.0 * 50.0;
    assert!((volume(&swept) - rod).abs() / rod < 1e-6, "{swept}");
    // The rod cut from the frustum, then the corners of a box filleted: volumes shrink.
    let cut = ok(
        &host,
        "freecad.boolean",
        json!({"session_id": session, "operation": "cut", "base": loft["part"], "tool": swept["part"]}),
    )
    .await;
    let through = std::f64::consts::PI * 16.0 * 30.0;
    assert!(
        (volume(&cut) - (frustum - through)).abs() / frustum < 1e-6,
        "{cut}"
    );
    // A 20 × 20 × 10 box: its four vertical edges filleted r 2 lose 4·(r² − πr²/4)·10; chamfered
    // 1 mm they lose 4·(1²/2)·10; a placed copy moves its bounding box.
    let square = ok(
        &host,
        "freecad.create_sketch",
        json!({"session_id": session, "plane": "XY", "loops": [polyline(&[[0.0, 0.0], [20.0, 0.0], [20.0, 20.0], [0.0, 20.0]])]}),
    )
    .await;
    let block = ok(
        &host,
        "freecad.pad_sketch",
        json!({"session_id": session, "sketch": square["sketch"], "length_mm": 10.0}),
    )
    .await;
    let rounded = ok(
        &host,
        "freecad.fillet_edges",
        json!({"session_id": session, "part": block["part"], "radius_mm": 2.0, "edges": {"parallel_to": "z"}}),
    )
    .await;
    let filleted = 4000.0 - 4.0 * (4.0 - std::f64::consts::PI) * 10.0;
    assert!((volume(&rounded) - filleted).abs() < 1e-6, "{rounded}");
    let bevelled = ok(
        &host,
        "freecad.chamfer_edges",
        json!({"session_id": session, "part": block["part"], "size_mm": 1.0, "edges": {"parallel_to": "z"}}),
    )
    .await;
    assert!((volume(&bevelled) - (4000.0 - 20.0)).abs() < 1e-6, "{bevelled}");
    let moved = ok(
        &host,
        "freecad.place",
        json!({"session_id": session, "part": block["part"], "translate_mm": [100.0, 0.0, 0.0],
               "rotate": {"axis": [0, 0, 1], "angle_deg": 90.0}}),
    )
    .await;
    let placed = ok(
        &host,
        "freecad.measure",
        json!({"session_id": session, "part": moved["part"]}),
    )
    .await;
    let min = placed["bounding_box_mm"]["min"].as_array().unwrap();
    assert!(
        (min[0].as_f64().unwrap() - 80.0).abs() < 1e-9,
        "turned a quarter about z, then moved 100 in x: {placed}"
    );
    let objects = ok(&host, "freecad.list_objects", json!({"session_id": session})).await;
    assert_eq!(
        objects["objects"].as_array().unwrap().len(),
        6 + 8,
        "six sketches, eight parts: {objects}"
    );
}

#[tokio::test]
async fn a_user_error_names_what_to_fix_and_leaves_the_session_as_it_was() {
    let workspace = tempfile::tempdir().unwrap();
    let Some(host) = host(workspace.path(), SessionLimits::default()) else {
        return;
    };
    let (unknown, output) = call(
        &host,
        "freecad.pad_sketch",
        json!({"session_id": "session_999", "sketch": "sketch_1", "length_mm": 5.0}),
    )
    .await;
    assert!(output.is_error);
    assert!(
        unknown["validation_errors"][0]
            .as_str()
            .unwrap()
            .starts_with("session_id: session_999 is no open session"),
        "{unknown}"
    );
    let session = open(&host).await;
    let (open_profile, output) = call(
        &host,
        "freecad.create_sketch",
        json!({"session_id": session, "plane": "XY",
               "loops": [{"start": [0.0, 0.0], "segments": [{"line_to": [10.0, 0.0]}, {"line_to": [10.0, 10.0]}]}]}),
    )
    .await;
    assert!(output.is_error);
    assert_eq!(open_profile["error"], "profile_not_closed", "{open_profile}");
    assert_eq!(open_profile["field"], "loops[0]");
    assert!(
        open_profile["message"]
            .as_str()
            .unwrap()
            .contains("14.1421 mm from its start"),
        "{open_profile}"
    );
    let (no_part, _) = call(
        &host,
        "freecad.measure",
        json!({"session_id": session, "part": "part_7"}),
    )
    .await;
    assert_eq!(no_part["error"], "unknown_part", "{no_part}");
    let (joints, _) = call(&host, "freecad.list_joints", json!({"session_id": session})).await;
    assert_eq!(joints["error"], "joints_unavailable", "{joints}");
    let (outside, _) = call(
        &host,
        "freecad.import_step",
        json!({"session_id": session, "path": "../../etc/passwd"}),
    )
    .await;
    assert_eq!(outside["error"], "invalid_arguments", "{outside}");
    // The session still works after every refusal.
    let objects = ok(&host, "freecad.list_objects", json!({"session_id": session})).await;
    assert_eq!(objects["objects"], json!([]));
}

#[tokio::test]
async fn an_idle_session_is_closed_and_says_so_when_used_again() {
    let workspace = tempfile::tempdir().unwrap();
    let limits = SessionLimits {
        idle: Duration::from_millis(300),
        ..SessionLimits::default()
    };
    let Some(host) = host(workspace.path(), limits) else {
        return;
    };
    let session = open(&host).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    host.close_idle().await;
    let (closed, output) = call(&host, "freecad.list_objects", json!({"session_id": session})).await;
    assert!(output.is_error);
    assert!(
        closed["validation_errors"][0]
            .as_str()
            .unwrap()
            .contains("is no open session (open: none)"),
        "{closed}"
    );
}

#[tokio::test]
async fn a_freecad_that_dies_before_greeting_is_reported_with_what_it_printed() {
    let workspace = tempfile::tempdir().unwrap();
    if require(Peer::Bubblewrap).is_none() {
        return;
    }
    // The driver run by a Python without FreeCAD: it dies importing it.
    let runner = crate::host_call::sandboxed(
        PathBuf::from("/usr/bin/python3"),
        ResourceLimits::default(),
        Duration::from_secs(30),
    );
    let host = CadHost::new(
        runner,
        Some(workspace.path().to_path_buf()),
        SessionLimits::default(),
    );
    let (failed, output) = call(&host, "freecad.open_session", json!({})).await;
    assert!(output.is_error);
    assert_eq!(failed["error"], "program_ended", "{failed}");
    assert!(
        failed["output_tail"]
            .as_str()
            .unwrap()
            .contains("No module named 'FreeCAD'"),
        "{failed}"
    );
}
