//! `fea.*` against gmsh and CalculiX in their sandboxes: a steel cantilever checked against beam
//! theory (tip deflection PL³/3EI, root stress Mc/I), and the refusals a user meets.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a tool that misbehaves must fail the test loudly"
)]

use std::path::PathBuf;
use std::time::Duration;

use metaforge_adapters_engineering::fea::FeaHost;
use metaforge_ports::{CallerClass, CallerContext, HostCallOutcome, InputChannel, QuantityKind, ToolHost};
use metaforge_sandbox::ResourceLimits;
use metaforge_test_support::{Peer, require};
use serde_json::{Value, json};

fn host() -> Option<FeaHost> {
    require(Peer::Bubblewrap)?;
    let (gmsh, ccx) = (require(Peer::Gmsh)?, require(Peer::Calculix)?);
    let runner = |program: PathBuf| {
        crate::host_call::sandboxed(program, ResourceLimits::default(), Duration::from_secs(120))
    };
    Some(FeaHost::new(
        runner(gmsh),
        runner(ccx),
        ("4.8.4".to_owned(), "2.20".to_owned()),
    ))
}

async fn call(host: &FeaHost, tool: &str, arguments: Value) -> (Value, bool) {
    let (value, output) = crate::host_call::call_host(host, tool, arguments).await;
    (value, output.is_error)
}

fn cantilever() -> Value {
    // Steel, 100 × 10 × 10 mm, fixed at x = 0, 100 N down at the free end.
    json!({
        "solid": {"kind": "box", "x_mm": 100, "y_mm": 10, "z_mm": 10},
        "element_size_mm": 2.5,
        "material": {"youngs_modulus_mpa": 210000, "poisson_ratio": 0.3,
                     "yield_strength_mpa": 235, "density_kg_m3": 7850},
        "fixed_faces": ["x_min"],
        "forces": [{"face": "x_max", "force_n": [0, -100, 0]}],
    })
}

#[tokio::test]
async fn a_steel_cantilever_deflects_and_stresses_as_beam_theory_says() {
    let Some(host) = host() else {
        return;
    };
    let (result, error) = call(&host, "fea.static", cantilever()).await;
    assert!(!error, "{result}");
    let (p, l, e) = (100.0_f64, 100.0_f64, 210_000.0_f64);
    let i = 10.0 * 10.0_f64.powi(3) / 12.0;
    let deflection = p * l.powi(3) / (3.0 * e * i);
    let stress = p * l * 5.0 / i;
    let tip = result["max_displacement_mm"].as_f64().unwrap();
    let root = result["max_von_mises_mpa"].as_f64().unwrap();
    println!(
        "cantilever at 2.5 mm C3D10: tip {tip:.5} mm (PL³/3EI = {deflection:.5} mm), root {root:.2} MPa (Mc/I = {stress:.2} MPa), \
         mesh {} elements, mass {} kg, safety factor {}",
        result["mesh"]["elements"], result["mass_kg"], result["safety_factor"]
    );
    assert!((tip - deflection).abs() / deflection < 0.05, "{result}");
    assert!((root - stress).abs() / stress < 0.10, "{result}");
    let reaction = &result["reaction_forces_n"]["x_min"];
    assert!(
        (reaction[1].as_f64().unwrap() - 100.0).abs() < 1e-6,
        "the support carries the load: {reaction}"
    );
    assert!(
        (result["mass_kg"].as_f64().unwrap() - 0.0785).abs() < 1e-6,
        "{result}"
    );
    let safety = result["safety_factor"].as_f64().unwrap();
    assert!((safety - 235.0 / root).abs() < 1e-9);
}

#[tokio::test]
async fn a_static_analysis_carries_its_evidence_quantities_programs_input_hash_sandbox_and_files() {
    let Some(host) = host() else {
        return;
    };
    let caller = CallerContext {
        class: CallerClass::Local,
        session: None,
        input_channel: InputChannel::None,
        identity: None,
    };
    let outcome = host
        .call(&caller, "fea.static", cantilever().as_object().cloned().unwrap())
        .await
        .unwrap();
    let HostCallOutcome::Done(output) = outcome else {
        panic!("an fea tool never asks for input");
    };
    let evidence = output.evidence().expect("fea.static carries evidence").unwrap();
    let result = output.structured.clone().unwrap();
    assert_eq!(
        (evidence.tool.as_str(), evidence.artifact.as_str()),
        ("fea.static", "simulation_result")
    );
    let by_name = |name: &str| evidence.quantities.iter().find(|q| q.name == name).unwrap();
    let stress = by_name("max_von_mises_stress");
    assert_eq!((stress.kind, stress.unit.as_str()), (QuantityKind::Stress, "MPa"));
    assert_eq!(Some(stress.value), result["max_von_mises_mpa"].as_f64());
    assert_eq!(
        Some(by_name("safety_factor").value),
        result["safety_factor"].as_f64()
    );
    assert!((by_name("reaction_force(x_min)").value - 100.0).abs() < 1e-6);
    let programs: Vec<(&str, &str)> = evidence
        .programs
        .iter()
        .map(|p| (p.name.as_str(), p.version.as_str()))
        .collect();
    assert_eq!(programs, [("gmsh", "4.8.4"), ("calculix", "2.20")]);
    assert_eq!(evidence.input_sha256.len(), 64);
    assert_eq!(
        Some(evidence.input_sha256.as_str()),
        result["run"]["input_sha256"].as_str()
    );
    assert!(evidence.sandbox.sandboxed);
    assert_eq!(evidence.sandbox.wall_seconds, 120);
    let names: Vec<&str> = evidence.files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["job.dat", "job.frd"]);
    let dat = output
        .evidence_file_text(&evidence.files[0])
        .expect("the .dat travels with its hash");
    assert!(dat.contains("displacements"), "{}", &dat[..dat.len().min(400)]);
    let frd = output
        .evidence_file_text(&evidence.files[1])
        .expect("the .frd travels with its hash");
    assert!(
        frd.contains("DISP") && frd.contains("STRESS"),
        "the .frd holds displacements and stresses"
    );
    println!(
        "fea.static evidence: {} quantities, files {:?} ({} and {} bytes)",
        evidence.quantities.len(),
        names,
        evidence.files[0].bytes,
        evidence.files[1].bytes
    );
}

#[tokio::test]
async fn a_part_with_no_fixed_face_is_refused_saying_it_can_move_freely() {
    let Some(host) = host() else {
        return;
    };
    let mut args = cantilever();
    args["fixed_faces"] = json!([]);
    let (result, error) = call(&host, "fea.static", args).await;
    assert!(error);
    assert!(
        result["validation_errors"][0]
            .as_str()
            .unwrap()
            .contains("no fixed face: the part can move freely"),
        "{result}"
    );
    let mut args = cantilever();
    args["fixed_faces"] = json!(["left"]);
    let (result, _) = call(&host, "fea.static", args).await;
    assert!(
        result["validation_errors"][0]
            .as_str()
            .unwrap()
            .contains("not a face"),
        "{result}"
    );
}

#[tokio::test]
async fn a_cylinder_meshes_with_its_three_named_faces() {
    let Some(host) = host() else {
        return;
    };
    let (result, error) = call(
        &host,
        "fea.mesh",
        json!({"solid": {"kind": "cylinder", "radius_mm": 5, "height_mm": 40}, "element_size_mm": 2}),
    )
    .await;
    assert!(!error, "{result}");
    println!("{result}");
    assert!(result["elements"].as_u64().unwrap() > 100);
    assert_eq!(result["faces"], json!(["bottom", "top", "side"]));
    // A cylinder standing on its bottom face under gravity: its own weight, reacted there.
    let (result, error) = call(
        &host,
        "fea.static",
        json!({"solid": {"kind": "cylinder", "radius_mm": 5, "height_mm": 40}, "element_size_mm": 2,
               "material": {"name": "aluminium_6061_t6"}, "fixed_faces": ["bottom"],
               "gravity_m_s2": [0, 0, -9.81]}),
    )
    .await;
    assert!(!error, "{result}");
    let weight = result["mass_kg"].as_f64().unwrap() * 9.81;
    let reaction = result["reaction_forces_n"]["bottom"][2].as_f64().unwrap();
    println!("cylinder under gravity: weight {weight:.5} N, reaction {reaction:.5} N");
    assert!((reaction - weight).abs() / weight < 0.02, "{result}");
}

#[tokio::test]
async fn a_plate_with_a_hole_in_tension_concentrates_stress_as_heywood_says() {
    let Some(host) = host() else {
        return;
    };
    // Steel plate 200 × 50 × 5 mm, a 10 mm hole in the middle (d/W = 0.2), pulled with 2 kN. The
    // peak is read at integration points, inside the hole's wall, so it sits a little under the
    // surface value.
    let (w, d, t, force) = (50.0_f64, 10.0_f64, 5.0_f64, 2000.0_f64);
    let plate = json!({"kind": "plate_with_holes", "x_mm": 200, "y_mm": w, "thickness_mm": t,
                       "holes": [{"x_mm": 100, "y_mm": 25, "diameter_mm": d}]});
    let (result, error) = call(
        &host,
        "fea.static",
        json!({"solid": plate, "element_size_mm": 4, "material": {"name": "steel_s355"},
               "fixed_faces": ["x_min"], "forces": [{"face": "x_max", "force_n": [force, 0, 0]}]}),
    )
    .await;
    assert!(!error, "{result}");
    // Heywood: Kt on the net section = 2 + (1 − d/W)³; the peak is Kt · F / ((W − d) t).
    let kt = 2.0 + (1.0 - d / w).powi(3);
    let peak = kt * force / ((w - d) * t);
    let stress = result["max_von_mises_mpa"].as_f64().unwrap();
    let volume = result["volume_mm3"].as_f64().unwrap();
    let exact = (200.0 * w - std::f64::consts::PI * d * d / 4.0) * t;
    println!(
        "plate with a hole: peak {stress:.2} MPa against Kt·σnet = {peak:.2} MPa (Kt {kt:.3}); volume {volume:.1} mm³ against {exact:.1}; mesh {}",
        result["mesh"]
    );
    assert!((stress - peak).abs() / peak < 0.10, "{result}");
    assert!((volume - exact).abs() / exact < 0.005, "{result}");
    assert!((result["reaction_forces_n"]["x_min"][0].as_f64().unwrap() + force).abs() < 1e-6);
}

#[tokio::test]
async fn an_l_bracket_carries_its_load_to_the_wall_and_weighs_what_its_volume_says() {
    let Some(host) = host() else {
        return;
    };
    let bracket = json!({"kind": "l_bracket", "base_length_mm": 60, "wall_height_mm": 40,
                         "width_mm": 20, "thickness_mm": 5});
    let (mesh, error) = call(&host, "fea.mesh", json!({"solid": bracket, "element_size_mm": 3})).await;
    assert!(!error, "{mesh}");
    assert_eq!(
        mesh["faces"],
        json!([
            "base_bottom",
            "base_end",
            "wall_back",
            "wall_top",
            "y_min",
            "y_max"
        ])
    );
    let (min, mean) = (
        mesh["quality"]["min"].as_f64().unwrap(),
        mesh["quality"]["mean"].as_f64().unwrap(),
    );
    println!(
        "L-bracket mesh: {} elements, quality min {min:.3} mean {mean:.3}",
        mesh["elements"]
    );
    assert!(min > 0.05 && mean > 0.6 && mean <= 1.0, "{mesh}");
    let (result, error) = call(
        &host,
        "fea.static",
        json!({"solid": bracket, "element_size_mm": 3, "material": {"name": "aluminium_6061_t6"},
               "fixed_faces": ["wall_back"], "forces": [{"face": "base_end", "force_n": [0, 0, -150]}]}),
    )
    .await;
    assert!(!error, "{result}");
    let reaction = result["reaction_forces_n"]["wall_back"][2].as_f64().unwrap();
    let volume = (60.0 + 40.0 - 5.0) * 20.0 * 5.0;
    let mass = result["mass_kg"].as_f64().unwrap();
    println!(
        "L-bracket: reaction {reaction:.4} N for 150 N, mass {mass:.5} kg (ρV = {:.5}), stress {} MPa, deflection {} mm",
        volume * 1e-9 * 2700.0,
        result["max_von_mises_mpa"],
        result["max_displacement_mm"]
    );
    assert!((reaction - 150.0).abs() < 1e-6, "{result}");
    assert!((mass - volume * 1e-9 * 2700.0).abs() / mass < 0.005, "{result}");
}

#[tokio::test]
async fn a_pressure_on_a_cantilever_deflects_it_as_ql4_over_8ei_says() {
    let Some(host) = host() else {
        return;
    };
    // 0.1 MPa on the 100 × 10 mm top face: q = 1 N/mm along the span.
    let mut args = cantilever();
    args["forces"] = json!([]);
    args["pressures"] = json!([{"face": "y_max", "pressure_mpa": 0.1}]);
    let (result, error) = call(&host, "fea.static", args).await;
    assert!(!error, "{result}");
    let (q, l, e) = (1.0_f64, 100.0_f64, 210_000.0_f64);
    let i = 10.0 * 10.0_f64.powi(3) / 12.0;
    let expected = q * l.powi(4) / (8.0 * e * i);
    let tip = result["max_displacement_mm"].as_f64().unwrap();
    let reaction = result["reaction_forces_n"]["x_min"][1].as_f64().unwrap();
    println!(
        "pressure cantilever: tip {tip:.5} mm against qL⁴/8EI = {expected:.5} mm, reaction {reaction:.4} N"
    );
    assert!((tip - expected).abs() / expected < 0.05, "{result}");
    assert!((reaction - 100.0).abs() < 1e-6, "{result}");
    // A pressure goes on a flat face only.
    let (refused, error) = call(
        &host,
        "fea.static",
        json!({"solid": {"kind": "cylinder", "radius_mm": 5, "height_mm": 40}, "element_size_mm": 2,
               "material": {"name": "abs"}, "fixed_faces": ["bottom"],
               "pressures": [{"face": "side", "pressure_mpa": 1}]}),
    )
    .await;
    assert!(error);
    assert!(
        refused["validation_errors"][0]
            .as_str()
            .unwrap()
            .contains("curved"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_hole_outside_its_plate_is_refused_naming_it() {
    let Some(host) = host() else {
        return;
    };
    let (result, error) = call(
        &host,
        "fea.mesh",
        json!({"solid": {"kind": "plate_with_holes", "x_mm": 50, "y_mm": 50, "thickness_mm": 2,
                         "holes": [{"x_mm": 48, "y_mm": 25, "diameter_mm": 10}]}, "element_size_mm": 2}),
    )
    .await;
    assert!(error);
    assert!(
        result["validation_errors"][0]
            .as_str()
            .unwrap()
            .starts_with("solid.holes[0]: "),
        "{result}"
    );
}

/// A steel bar 100 × 10 × 10 mm as a STEP file, written by gmsh (OpenCASCADE) into `dir`.
fn bar_step(dir: &std::path::Path) {
    let gmsh = require(Peer::Gmsh).unwrap();
    std::fs::write(
        dir.join("bar.geo"),
        "SetFactory(\"OpenCASCADE\");\nBox(1) = {0, 0, 0, 100, 10, 10};\n",
    )
    .unwrap();
    let status = std::process::Command::new(gmsh)
        .current_dir(dir)
        .args(["-0", "bar.geo", "-o", "bar.step"])
        .output()
        .unwrap();
    assert!(
        status.status.success() && dir.join("bar.step").is_file(),
        "{status:?}"
    );
}

#[tokio::test]
async fn a_step_part_from_the_workspace_meshes_with_its_faces_and_bends_as_beam_theory_says() {
    let Some(host) = host() else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();
    bar_step(workspace.path());
    let host = host.with_workspace(workspace.path().to_path_buf());
    let solid = json!({"kind": "step", "path": "bar.step"});
    let (mesh, error) = call(&host, "fea.mesh", json!({"solid": solid, "element_size_mm": 2.5})).await;
    assert!(!error, "{mesh}");
    let faces: Vec<String> = serde_json::from_value(mesh["faces"].clone()).unwrap();
    assert_eq!(faces.len(), 6, "{mesh}");
    // Which face is which, from the centres fea.mesh reports.
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
    let (root, tip) = (at_x(0.0), at_x(100.0));
    let area = mesh["face_geometry"][root.as_str()]["area_mm2"].as_f64().unwrap();
    assert!((area - 100.0).abs() < 1e-6, "the end face is 10 × 10 mm: {area}");
    let (result, error) = call(
        &host,
        "fea.static",
        json!({"solid": solid, "element_size_mm": 2.5, "material": {"name": "steel_s235"},
               "fixed_faces": [root], "forces": [{"face": tip, "force_n": [0, -100, 0]}]}),
    )
    .await;
    assert!(!error, "{result}");
    let deflection = 100.0 * 100.0_f64.powi(3) / (3.0 * 210_000.0 * (10.0 * 10.0_f64.powi(3) / 12.0));
    let measured = result["max_displacement_mm"].as_f64().unwrap();
    println!(
        "STEP bar: faces {faces:?}, tip {measured:.5} mm against PL³/3EI = {deflection:.5} mm, volume {} mm³",
        result["volume_mm3"]
    );
    assert!((measured - deflection).abs() / deflection < 0.05, "{result}");
    assert!(
        (result["volume_mm3"].as_f64().unwrap() - 10_000.0).abs() < 1.0,
        "{result}"
    );
    // A face the part does not have, and a path out of the workspace, are refused by name.
    let (refused, _) = call(
        &host,
        "fea.static",
        json!({"solid": solid, "element_size_mm": 2.5, "material": {"name": "steel_s235"},
               "fixed_faces": ["face_99"], "forces": [{"face": tip, "force_n": [0, -100, 0]}]}),
    )
    .await;
    assert!(
        refused["validation_errors"][0]
            .as_str()
            .unwrap()
            .contains("face_99 is not a face"),
        "{refused}"
    );
    let (refused, _) = call(
        &host,
        "fea.mesh",
        json!({"solid": {"kind": "step", "path": "../bar.step"}, "element_size_mm": 2.5}),
    )
    .await;
    assert!(
        refused["validation_errors"][0]
            .as_str()
            .unwrap()
            .starts_with("solid.path: "),
        "{refused}"
    );
}

#[tokio::test]
async fn a_step_part_without_a_workspace_is_refused_saying_how_to_give_one() {
    let Some(host) = host() else {
        return;
    };
    let (refused, error) = call(
        &host,
        "fea.mesh",
        json!({"solid": {"kind": "step", "path": "bar.step"}, "element_size_mm": 2.5}),
    )
    .await;
    assert!(error);
    assert!(
        refused["validation_errors"][0]
            .as_str()
            .unwrap()
            .contains("no workspace"),
        "{refused}"
    );
}
