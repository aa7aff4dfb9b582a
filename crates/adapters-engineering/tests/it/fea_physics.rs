//! `fea.*` against gmsh and CalculiX in their sandboxes: a steel cantilever checked against beam
//! theory (tip deflection PL³/3EI, root stress Mc/I), and the refusals a user meets.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers outside #[test] fns: a tool that misbehaves must fail the test loudly"
)]

use std::path::PathBuf;
use std::time::Duration;

use metaforge_adapters_engineering::fea::FeaHost;
use metaforge_adapters_engineering::runner::Runner;
use metaforge_ports::{CallerClass, CallerContext, HostCallOutcome, InputChannel, QuantityKind, ToolHost};
use metaforge_sandbox::ResourceLimits;
use metaforge_test_support::{Peer, require};
use serde_json::{Value, json};

fn host() -> Option<FeaHost> {
    require(Peer::Bubblewrap)?;
    let (gmsh, ccx) = (require(Peer::Gmsh)?, require(Peer::Calculix)?);
    let runner = |program: PathBuf| {
        Runner::new(
            program,
            ResourceLimits::default(),
            Duration::from_secs(120),
            true,
            Some("/usr/bin:/bin"),
            &[PathBuf::from("/root")],
        )
        .unwrap()
    };
    Some(FeaHost::new(
        runner(gmsh),
        runner(ccx),
        ("4.8.4".to_owned(), "2.20".to_owned()),
    ))
}

async fn call(host: &FeaHost, tool: &str, arguments: Value) -> (Value, bool) {
    let caller = CallerContext {
        class: CallerClass::Local,
        session: None,
        input_channel: InputChannel::None,
        identity: None,
    };
    let outcome = host
        .call(&caller, tool, arguments.as_object().cloned().unwrap())
        .await
        .unwrap();
    let HostCallOutcome::Done(output) = outcome else {
        panic!("an fea tool never asks for input");
    };
    (output.structured.expect("structured result"), output.is_error)
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
