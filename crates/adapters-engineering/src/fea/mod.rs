//! `metaforge tool-server fea`: structural analysis with gmsh (meshing) and CalculiX (`ccx`,
//! linear static), each program run in a fresh sandbox per call.
//!
//! Tools (read-only: they compute, they change nothing):
//! - `fea.mesh` — a parametric solid (box, cylinder, plate with holes, L-bracket) meshed with
//!   second-order tetrahedra: node and element counts, the element size, the elements' quality
//!   (min and mean), its named faces;
//! - `fea.static` — a linear static analysis: material (by name from [`MATERIALS`], or given),
//!   fixed faces, forces or pressures (on flat faces, applied as their resultant) on faces,
//!   gravity → the largest von Mises stress (MPa), the largest
//!   displacement (mm), the reaction on each fixed face (N), the mass (kg) and the safety factor
//!   against yield.
//!
//! Units: millimetres, newtons, megapascals; densities in kg/m³. A part with no fixed face is
//! refused before anything runs ("no fixed face: the part can move freely"); a mesh or a solve
//! that fails comes back as a structured error naming the program's words.

pub mod calculix;
pub mod geometry;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_ports::{
    CallerClass, CallerContext, HostCallOutcome, PortError, ProgramVersion, QuantityKind, ToolDescriptor,
    ToolEvidence, ToolHost, ToolOutput,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::answer::{
    Refusal, SIMULATION_RESULT, answer, descriptor, millis, output_files, parse, quantity, sha256, tail,
    unknown_tool,
};
use crate::runner::{RunOutput, Runner};
use crate::workspace::{DesignWorkspace, no_workspace};
use calculix::{Job, Mesh};
use geometry::{MAX_ELEMENTS, STEP_FILE, Solid};

/// A material of the shipped table: name, Young's modulus (MPa), Poisson's ratio, yield
/// strength (MPa), density (kg/m³) — typical handbook values.
pub const MATERIALS: &[(&str, f64, f64, f64, f64)] = &[
    ("steel_s235", 210_000.0, 0.30, 235.0, 7_850.0),
    ("steel_s355", 210_000.0, 0.30, 355.0, 7_850.0),
    ("stainless_304", 193_000.0, 0.29, 215.0, 8_000.0),
    ("aluminium_6061_t6", 68_900.0, 0.33, 276.0, 2_700.0),
    ("titanium_6al4v", 113_800.0, 0.34, 880.0, 4_430.0),
    ("abs", 2_300.0, 0.35, 40.0, 1_050.0),
];

/// A material: a name from the table, or the values.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MaterialArgs {
    /// A name from the shipped table (steel_s235, steel_s355, stainless_304,
    /// aluminium_6061_t6, titanium_6al4v, abs); or give all four values.
    #[serde(default)]
    pub name: Option<String>,
    /// Young's modulus (MPa).
    #[serde(default)]
    pub youngs_modulus_mpa: Option<f64>,
    /// Poisson's ratio.
    #[serde(default)]
    pub poisson_ratio: Option<f64>,
    /// Yield strength (MPa).
    #[serde(default)]
    pub yield_strength_mpa: Option<f64>,
    /// Density (kg/m³).
    #[serde(default)]
    pub density_kg_m3: Option<f64>,
}

/// A force on one face (its total, shared by the face's nodes).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForceArgs {
    /// The face (a box: x_min…z_max; a cylinder: bottom, top, side).
    pub face: String,
    /// The total force (N) along x, y and z.
    pub force_n: [f64; 3],
}

/// A uniform pressure on one flat face.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PressureArgs {
    /// The face (flat faces only: a box's, a plate's sides and z faces, an L-bracket's).
    pub face: String,
    /// The pressure (MPa), positive pushing into the face.
    pub pressure_mpa: f64,
}

/// `fea.mesh`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MeshArgs {
    /// The solid.
    pub solid: Solid,
    /// The largest element edge (mm).
    pub element_size_mm: f64,
}

/// `fea.static`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StaticArgs {
    /// The solid.
    pub solid: Solid,
    /// The largest element edge (mm).
    pub element_size_mm: f64,
    /// The material.
    pub material: MaterialArgs,
    /// The faces fixed in every direction.
    pub fixed_faces: Vec<String>,
    /// Forces on faces.
    #[serde(default)]
    pub forces: Vec<ForceArgs>,
    /// Pressures on flat faces, each applied as its resultant (pressure × area, into the face)
    /// shared by the face's nodes.
    #[serde(default)]
    pub pressures: Vec<PressureArgs>,
    /// Gravity (m/s²) along x, y and z, e.g. [0, 0, -9.81].
    #[serde(default)]
    pub gravity_m_s2: Option<[f64; 3]>,
}

/// The structural tool server.
pub struct FeaHost {
    gmsh: Arc<Runner>,
    ccx: Arc<Runner>,
    versions: (String, String),
    /// Where STEP parts are read from (`--workspace`), when the server was given one.
    workspace: Option<DesignWorkspace>,
}

/// The largest STEP file read (bytes).
pub const MAX_STEP_BYTES: u64 = 64 * 1024 * 1024;

struct Material {
    name: String,
    youngs: f64,
    poisson: f64,
    yield_strength: f64,
    density: f64,
}

impl FeaHost {
    /// The tools over the `gmsh` and `ccx` runners; `versions` are theirs, reported with every
    /// result.
    pub fn new(gmsh: Runner, ccx: Runner, versions: (String, String)) -> Self {
        Self {
            gmsh: Arc::new(gmsh),
            ccx: Arc::new(ccx),
            versions,
            workspace: None,
        }
    }

    /// Reads STEP parts from `workspace` (the directory the server's sandbox binds).
    #[must_use]
    pub fn with_workspace(mut self, workspace: PathBuf) -> Self {
        self.workspace = Some(DesignWorkspace::new(workspace));
        self
    }

    /// The text of the STEP file at `path` in the workspace, refused naming `solid.path` when
    /// there is no workspace, the file is outside it, missing, too large or not text.
    fn step_text(&self, path: &str) -> Result<String, Refusal> {
        let workspace = self
            .workspace
            .as_ref()
            .ok_or_else(|| no_workspace("solid.path", "fea"))?;
        Ok(workspace.read("solid.path", path, MAX_STEP_BYTES)?.text)
    }

    async fn mesh(&self, solid: &Solid, size: f64) -> Result<(Mesh, RunOutput), Refusal> {
        solid
            .check()
            .map_err(|(field, why)| Refusal::argument(field, why))?;
        if !(size.is_finite() && size > 0.0) {
            return Err(Refusal::argument("element_size_mm", "must be a positive length"));
        }
        let too_fine = |volume: f64, smallest: f64| {
            volume / size.powi(3) * 6.0 > MAX_ELEMENTS as f64 || size < smallest / 200.0
        };
        if let (Some(volume), Some(smallest)) = (solid.volume_mm3(), solid.smallest_dimension_mm())
            && too_fine(volume, smallest)
        {
            return Err(too_many(size));
        }
        let script = solid.gmsh_script(size);
        let step = match solid {
            Solid::Step { path } => Some(self.step_text(path)?),
            Solid::Box { .. }
            | Solid::Cylinder { .. }
            | Solid::PlateWithHoles { .. }
            | Solid::LBracket { .. } => None,
        };
        let mut inputs: Vec<(&str, &str)> = vec![("part.geo", &script)];
        if let Some(text) = &step {
            inputs.push((STEP_FILE, text));
        }
        let run = self
            .gmsh
            .run(
                &inputs,
                &[
                    "-3".to_owned(),
                    "part.geo".to_owned(),
                    "-format".to_owned(),
                    "inp".to_owned(),
                    "-o".to_owned(),
                    "part.inp".to_owned(),
                ],
                &["part.inp"],
            )
            .await?;
        let Some(inp) = run.files.get("part.inp") else {
            return Err(Refusal::program(
                "gmsh",
                "mesh_failed",
                "gmsh wrote no mesh",
                &run.output,
            ));
        };
        let mesh = Mesh::from_gmsh(inp);
        if mesh.elements > MAX_ELEMENTS {
            return Err(too_many(size));
        }
        if mesh.elements == 0 {
            return Err(Refusal::program(
                "gmsh",
                "mesh_failed",
                "the mesh has no volume elements",
                &run.output,
            ));
        }
        Ok((mesh, run))
    }

    async fn mesh_tool(&self, args: MeshArgs) -> Result<Value, Refusal> {
        let (mesh, run) = self.mesh(&args.solid, args.element_size_mm).await?;
        Ok(json!({
            "nodes": mesh.nodes,
            "elements": mesh.elements,
            "element_type": "C3D10 (second-order tetrahedron)",
            "element_size_mm": args.element_size_mm,
            "quality": mesh.quality.map(|(min, mean)| json!({
                "measure": "mean ratio of the corner tetrahedron (1 regular, 0 flat)",
                "min": min, "mean": mean,
            })),
            "faces": faces_of(&args.solid, &mesh),
            "face_geometry": mesh.face_names().iter().filter_map(|face| {
                let (area, centre) = mesh.face_area_centre(&face_set(face))?;
                Some((face.clone(), json!({"area_mm2": area, "centre_mm": centre})))
            }).collect::<Map<String, Value>>(),
            "volume_mm3": args.solid.volume_mm3(),
            "run": {"program": "gmsh", "version": self.versions.0, "elapsed_ms": millis(&run)},
        }))
    }

    fn material(args: &MaterialArgs) -> Result<Material, Refusal> {
        if let Some(name) = &args.name {
            let Some((name, youngs, poisson, yield_strength, density)) =
                MATERIALS.iter().find(|m| m.0 == name.as_str())
            else {
                return Err(Refusal::argument(
                    "material.name",
                    format!(
                        "{name} is not in the table ({}); or give youngs_modulus_mpa, poisson_ratio, yield_strength_mpa and density_kg_m3",
                        MATERIALS.iter().map(|m| m.0).collect::<Vec<_>>().join(", ")
                    ),
                ));
            };
            return Ok(Material {
                name: (*name).to_owned(),
                youngs: *youngs,
                poisson: *poisson,
                yield_strength: *yield_strength,
                density: *density,
            });
        }
        let (Some(youngs), Some(poisson), Some(yield_strength), Some(density)) = (
            args.youngs_modulus_mpa,
            args.poisson_ratio,
            args.yield_strength_mpa,
            args.density_kg_m3,
        ) else {
            return Err(Refusal::argument(
                "material",
                "give a name from the table, or youngs_modulus_mpa, poisson_ratio, yield_strength_mpa and density_kg_m3",
            ));
        };
        if !(youngs > 0.0 && (0.0..0.5).contains(&poisson) && yield_strength > 0.0 && density > 0.0) {
            return Err(Refusal::argument(
                "material",
                "need E > 0, 0 <= nu < 0.5, yield > 0 and density > 0",
            ));
        }
        Ok(Material {
            name: "custom".to_owned(),
            youngs,
            poisson,
            yield_strength,
            density,
        })
    }

    async fn static_tool(&self, args: StaticArgs) -> Result<ToolOutput, Refusal> {
        if args.fixed_faces.is_empty() {
            return Err(Refusal::argument(
                "fixed_faces",
                "no fixed face: the part can move freely; fix at least one face",
            ));
        }
        // A parametric solid's faces are known now; a STEP part's once it is meshed.
        let known = args.solid.faces();
        if !known.is_empty() {
            check_faces(&args, &known)?;
        }
        if args.forces.is_empty() && args.pressures.is_empty() && args.gravity_m_s2.is_none() {
            return Err(Refusal::argument(
                "forces",
                "no load: give forces or pressures on faces, or gravity",
            ));
        }
        let mut loads: Vec<(String, [f64; 3])> =
            args.forces.iter().map(|f| (f.face.clone(), f.force_n)).collect();
        for pressure in &args.pressures {
            if !pressure.pressure_mpa.is_finite() {
                return Err(Refusal::argument("pressures.pressure_mpa", "must be a number"));
            }
            let Some((area, normal)) = args.solid.flat_face(&pressure.face) else {
                let why = match &args.solid {
                    Solid::Step { .. } => format!(
                        "{} is a STEP part's face: give its force instead (pressure × the area fea.mesh reports)",
                        pressure.face
                    ),
                    Solid::Box { .. }
                    | Solid::Cylinder { .. }
                    | Solid::PlateWithHoles { .. }
                    | Solid::LBracket { .. } => format!(
                        "{} is curved: a pressure goes on a flat face; give a force on it instead",
                        pressure.face
                    ),
                };
                return Err(Refusal::argument("pressures.face", why));
            };
            let total = pressure.pressure_mpa * area;
            loads.push((pressure.face.clone(), normal.map(|n| -n * total)));
        }
        let material = Self::material(&args.material)?;
        let (mesh, _) = self.mesh(&args.solid, args.element_size_mm).await?;
        if known.is_empty() {
            check_faces(&args, &mesh.face_names())?;
        }
        let set = face_set;
        let job = Job {
            youngs_mpa: material.youngs,
            poisson: material.poisson,
            density_kg_m3: material.density,
            fixed: args.fixed_faces.iter().map(|f| set(f)).collect(),
            forces: loads.iter().map(|(face, force)| (set(face), *force)).collect(),
            gravity: args.gravity_m_s2,
        };
        let input = job.input(&mesh);
        let run = self
            .ccx
            .run(
                &[("mesh.inp", &mesh.text), ("job.inp", &input)],
                &["-i".to_owned(), "job".to_owned()],
                &["job.dat", "job.frd"],
            )
            .await?;
        let dat = run.files.get("job.dat").map_or("", String::as_str);
        let Some(results) = calculix::read_dat(dat) else {
            let singular = run.output.contains("singular") || run.output.contains("zero pivot");
            return Err(Refusal::Program {
                program: "calculix",
                error: if singular {
                    "singular_system"
                } else {
                    "solve_failed"
                },
                message: if singular {
                    "the stiffness matrix is singular: the part is not held against every rigid-body motion"
                        .to_owned()
                } else {
                    "CalculiX produced no results".to_owned()
                },
                errors: Vec::new(),
                output: tail(&run.output),
            });
        };
        // The mesh and the job together are what CalculiX solved.
        let input_sha256 = sha256(&format!("{}{input}", mesh.text));
        let safety_factor = material.yield_strength / results.max_von_mises_mpa;
        let volume = results.volume_mm3.or(args.solid.volume_mm3()).unwrap_or(f64::NAN);
        let mass_kg = volume * 1e-9 * material.density;
        let reactions: Map<String, Value> = args
            .fixed_faces
            .iter()
            .map(|face| {
                let key = set(face).to_ascii_lowercase();
                (face.clone(), json!(results.reactions_n.get(&key)))
            })
            .collect();
        let value = json!({
            "analysis": "linear_static",
            "max_von_mises_mpa": results.max_von_mises_mpa,
            "max_von_mises_element": results.max_von_mises_element,
            "max_displacement_mm": results.max_displacement_mm,
            "reaction_forces_n": reactions,
            "mass_kg": mass_kg,
            "volume_mm3": volume,
            "safety_factor": safety_factor,
            "material": {
                "name": material.name, "youngs_modulus_mpa": material.youngs,
                "poisson_ratio": material.poisson, "yield_strength_mpa": material.yield_strength,
                "density_kg_m3": material.density,
            },
            "mesh": {"nodes": mesh.nodes, "elements": mesh.elements, "element_size_mm": args.element_size_mm,
                     "quality_min": mesh.quality.map(|q| q.0), "quality_mean": mesh.quality.map(|q| q.1)},
            "units": {"stress": "MPa", "displacement": "mm", "force": "N", "mass": "kg"},
            "run": {
                "programs": [["gmsh", self.versions.0], ["calculix", self.versions.1]],
                "input_sha256": input_sha256,
                "elapsed_ms": millis(&run),
            },
        });
        let (files, texts) = output_files(&run, &[("job.dat", "text/plain"), ("job.frd", "text/plain")]);
        let mut quantities = vec![
            quantity(
                "max_von_mises_stress",
                QuantityKind::Stress,
                results.max_von_mises_mpa,
                "MPa",
            ),
            quantity(
                "max_displacement",
                QuantityKind::Displacement,
                results.max_displacement_mm,
                "mm",
            ),
            quantity("mass", QuantityKind::Mass, mass_kg, "kg"),
            quantity("safety_factor", QuantityKind::SafetyFactor, safety_factor, ""),
        ];
        for face in &args.fixed_faces {
            if let Some(force) = results.reactions_n.get(&set(face).to_ascii_lowercase()) {
                let magnitude = force.iter().map(|f| f * f).sum::<f64>().sqrt();
                quantities.push(quantity(
                    format!("reaction_force({face})"),
                    QuantityKind::Force,
                    magnitude,
                    "N",
                ));
            }
        }
        let evidence = ToolEvidence {
            tool: "fea.static".to_owned(),
            artifact: SIMULATION_RESULT.to_owned(),
            title: format!(
                "Linear static analysis: {}, {}",
                args.solid.describe(),
                material.name
            ),
            programs: vec![
                ProgramVersion {
                    name: "gmsh".to_owned(),
                    version: self.versions.0.clone(),
                },
                ProgramVersion {
                    name: "calculix".to_owned(),
                    version: self.versions.1.clone(),
                },
            ],
            input_sha256,
            sandbox: self.ccx.sandbox_report(),
            quantities,
            files,
        };
        Ok(ToolOutput::with_evidence(value, &evidence, &texts))
    }
}

/// Every face a static job names must be one of `faces`.
fn check_faces(args: &StaticArgs, faces: &[String]) -> Result<(), Refusal> {
    for (field, face) in args
        .fixed_faces
        .iter()
        .map(|f| ("fixed_faces", f))
        .chain(args.forces.iter().map(|f| ("forces.face", &f.face)))
        .chain(args.pressures.iter().map(|p| ("pressures.face", &p.face)))
    {
        if !faces.iter().any(|f| f == face) {
            return Err(Refusal::argument(
                field,
                format!("{face} is not a face of this solid ({})", faces.join(", ")),
            ));
        }
    }
    Ok(())
}

/// The refusal of an element size that would make too many elements.
fn too_many(size: f64) -> Refusal {
    Refusal::argument(
        "element_size_mm",
        format!("{size} mm would make more than {MAX_ELEMENTS} elements: use a larger size"),
    )
}

/// The node set of a named face: `FACE_<NAME>`.
fn face_set(face: &str) -> String {
    format!("FACE_{}", face.to_ascii_uppercase())
}

/// A solid's faces: its named ones, or a STEP part's as meshed.
fn faces_of(solid: &Solid, mesh: &Mesh) -> Vec<String> {
    match solid {
        Solid::Step { .. } => mesh.face_names(),
        Solid::Box { .. }
        | Solid::Cylinder { .. }
        | Solid::PlateWithHoles { .. }
        | Solid::LBracket { .. } => solid.faces(),
    }
}

#[async_trait]
impl ToolHost for FeaHost {
    fn tools(&self, _caller: CallerClass) -> Vec<ToolDescriptor> {
        vec![
            descriptor::<MeshArgs>(
                "fea.mesh",
                "Mesh a solid",
                "Mesh a parametric solid (box, cylinder, plate with holes, L-bracket; millimetres) with second-order tetrahedra (gmsh): node and element counts, element quality (min and mean) and its named faces.",
            ),
            descriptor::<StaticArgs>(
                "fea.static",
                "Linear static analysis",
                "Linear static FEA (gmsh + CalculiX) of a box, cylinder, plate with holes or L-bracket: material, fixed faces, forces or pressures on faces, gravity → max von Mises stress (MPa), max displacement (mm), reactions (N), mass (kg), safety factor against yield.",
            ),
        ]
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        let result = match tool {
            "fea.mesh" => self
                .mesh_tool(parse(tool, arguments)?)
                .await
                .map(ToolOutput::json),
            "fea.static" => self.static_tool(parse(tool, arguments)?).await,
            other => return Err(unknown_tool(other)),
        };
        Ok(answer(tool, result))
    }
}
