//! The solids `fea.*` meshes: parametric ones (a box, a cylinder, a plate with holes, an
//! L-bracket) whose faces have names; each becomes a gmsh script that meshes it with
//! second-order tetrahedra (C3D10) and exports every named face as a node set.

use schemars::JsonSchema;
use serde::Deserialize;

/// The largest dimension accepted (mm).
pub const MAX_DIMENSION_MM: f64 = 10_000.0;

/// The most elements a mesh may have (checked after meshing).
pub const MAX_ELEMENTS: usize = 400_000;

/// The most holes a plate may have.
pub const MAX_HOLES: usize = 20;

/// How much finer than the element size the mesh is at a hole's wall, where the stress
/// concentrates.
pub const HOLE_REFINEMENT: f64 = 4.0;

/// A through hole of a plate, on the z axis.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hole {
    /// Its centre's x (mm).
    pub x_mm: f64,
    /// Its centre's y (mm).
    pub y_mm: f64,
    /// Its diameter (mm).
    pub diameter_mm: f64,
}

/// A solid to mesh. Lengths are in millimetres.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Solid {
    /// A box from the origin: faces `x_min`, `x_max`, `y_min`, `y_max`, `z_min`, `z_max`.
    Box {
        /// Length along x (mm).
        x_mm: f64,
        /// Length along y (mm).
        y_mm: f64,
        /// Length along z (mm).
        z_mm: f64,
    },
    /// A cylinder on the z axis from the origin: faces `bottom`, `top`, `side`.
    Cylinder {
        /// Radius (mm).
        radius_mm: f64,
        /// Height along z (mm).
        height_mm: f64,
    },
    /// A plate from the origin, `thickness_mm` along z, with through holes: faces `x_min`,
    /// `x_max`, `y_min`, `y_max`, `z_min`, `z_max`, and `hole_1`, `hole_2`, … (each hole's
    /// wall, in the order given). The mesh is finer at the holes.
    PlateWithHoles {
        /// Length along x (mm).
        x_mm: f64,
        /// Length along y (mm).
        y_mm: f64,
        /// Thickness along z (mm).
        thickness_mm: f64,
        /// The holes (at most 20), each inside the plate, none touching another.
        holes: Vec<Hole>,
    },
    /// An L-bracket: a base along x (`base_length_mm` × `width_mm` × `thickness_mm`, lying on
    /// z = 0) and a wall rising along z at x = 0 (`wall_height_mm` tall, same width and
    /// thickness). Faces: `base_bottom` (z = 0), `base_end` (x = base length), `wall_back`
    /// (x = 0), `wall_top` (z = wall height), `y_min`, `y_max`.
    LBracket {
        /// The base's length along x (mm).
        base_length_mm: f64,
        /// The wall's height along z (mm).
        wall_height_mm: f64,
        /// The width along y (mm).
        width_mm: f64,
        /// The thickness of base and wall (mm).
        thickness_mm: f64,
    },
    /// A part from a STEP file in the server's workspace (`tool-server fea --workspace DIR`),
    /// read in millimetres. Its faces are `face_1`, `face_2`, … in the file's order; `fea.mesh`
    /// reports each one's area and centre, so a load can be put on the right one.
    Step {
        /// The file, relative to the workspace (`parts/bracket.step`).
        path: String,
    },
}

/// The file a STEP part is copied to in a run's scratch directory.
pub const STEP_FILE: &str = "part.step";

/// A named face: the box that holds it and, when it is flat, its area and outward normal.
struct Face {
    name: String,
    bounds: [f64; 6],
    flat: Option<(f64, [f64; 3])>,
}

fn face(name: &str, bounds: [f64; 6], flat: Option<(f64, [f64; 3])>) -> Face {
    Face {
        name: name.to_owned(),
        bounds,
        flat,
    }
}

impl Solid {
    /// The solid in words: `box 100×10×10 mm`, `cylinder r 5 mm × 40 mm`.
    pub fn describe(&self) -> String {
        match self {
            Self::Box { x_mm, y_mm, z_mm } => format!("box {x_mm}×{y_mm}×{z_mm} mm"),
            Self::Cylinder { radius_mm, height_mm } => format!("cylinder r {radius_mm} mm × {height_mm} mm"),
            Self::PlateWithHoles {
                x_mm,
                y_mm,
                thickness_mm,
                holes,
            } => format!(
                "plate {x_mm}×{y_mm}×{thickness_mm} mm with {} hole(s)",
                holes.len()
            ),
            Self::LBracket {
                base_length_mm,
                wall_height_mm,
                width_mm,
                thickness_mm,
            } => format!(
                "L-bracket {base_length_mm}×{wall_height_mm} mm, {width_mm} mm wide, {thickness_mm} mm thick"
            ),
            Self::Step { path } => format!("STEP part {path}"),
        }
    }

    /// Every named face known before meshing (none for a STEP part: its faces are read from
    /// the file when it is meshed).
    fn named_faces(&self) -> Vec<Face> {
        let eps = 1e-6;
        match self {
            Self::Step { .. } => Vec::new(),
            Self::Box { x_mm, y_mm, z_mm } => box_faces(*x_mm, *y_mm, *z_mm, &[]),
            Self::Cylinder { radius_mm, height_mm } => {
                let (r, h) = (*radius_mm, *height_mm);
                let end = std::f64::consts::PI * r * r;
                vec![
                    face(
                        "bottom",
                        [-r - eps, -r - eps, -eps, r + eps, r + eps, eps],
                        Some((end, [0.0, 0.0, -1.0])),
                    ),
                    face(
                        "top",
                        [-r - eps, -r - eps, h - eps, r + eps, r + eps, h + eps],
                        Some((end, [0.0, 0.0, 1.0])),
                    ),
                    face(
                        "side",
                        [-r - eps, -r - eps, -eps, r + eps, r + eps, h + eps],
                        None,
                    ),
                ]
            }
            Self::PlateWithHoles {
                x_mm,
                y_mm,
                thickness_mm,
                holes,
            } => {
                let t = *thickness_mm;
                let mut faces = box_faces(*x_mm, *y_mm, t, holes);
                for (i, hole) in holes.iter().enumerate() {
                    let r = hole.diameter_mm / 2.0;
                    faces.push(face(
                        &format!("hole_{}", i + 1),
                        [
                            hole.x_mm - r - eps,
                            hole.y_mm - r - eps,
                            -eps,
                            hole.x_mm + r + eps,
                            hole.y_mm + r + eps,
                            t + eps,
                        ],
                        None,
                    ));
                }
                faces
            }
            Self::LBracket {
                base_length_mm,
                wall_height_mm,
                width_mm,
                thickness_mm,
            } => {
                let (l, h, w, t) = (*base_length_mm, *wall_height_mm, *width_mm, *thickness_mm);
                let side = l * t + (h - t) * t;
                vec![
                    face(
                        "base_bottom",
                        [-eps, -eps, -eps, l + eps, w + eps, eps],
                        Some((l * w, [0.0, 0.0, -1.0])),
                    ),
                    face(
                        "base_end",
                        [l - eps, -eps, -eps, l + eps, w + eps, t + eps],
                        Some((t * w, [1.0, 0.0, 0.0])),
                    ),
                    face(
                        "wall_back",
                        [-eps, -eps, -eps, eps, w + eps, h + eps],
                        Some((h * w, [-1.0, 0.0, 0.0])),
                    ),
                    face(
                        "wall_top",
                        [-eps, -eps, h - eps, t + eps, w + eps, h + eps],
                        Some((t * w, [0.0, 0.0, 1.0])),
                    ),
                    face(
                        "y_min",
                        [-eps, -eps, -eps, l + eps, eps, h + eps],
                        Some((side, [0.0, -1.0, 0.0])),
                    ),
                    face(
                        "y_max",
                        [-eps, w - eps, -eps, l + eps, w + eps, h + eps],
                        Some((side, [0.0, 1.0, 0.0])),
                    ),
                ]
            }
        }
    }

    /// The names of its faces, for loads and supports.
    pub fn faces(&self) -> Vec<String> {
        self.named_faces().into_iter().map(|f| f.name).collect()
    }

    /// A flat face's area (mm²) and outward unit normal; `None` for a curved face or no face.
    pub fn flat_face(&self, name: &str) -> Option<(f64, [f64; 3])> {
        self.named_faces().into_iter().find(|f| f.name == name)?.flat
    }

    /// Its volume (mm³), from its dimensions (`None` for a STEP part).
    pub fn volume_mm3(&self) -> Option<f64> {
        Some(match self {
            Self::Step { .. } => return None,
            Self::Box { x_mm, y_mm, z_mm } => x_mm * y_mm * z_mm,
            Self::Cylinder { radius_mm, height_mm } => {
                std::f64::consts::PI * radius_mm * radius_mm * height_mm
            }
            Self::PlateWithHoles {
                x_mm,
                y_mm,
                thickness_mm,
                holes,
            } => {
                let removed: f64 = holes
                    .iter()
                    .map(|h| std::f64::consts::PI * h.diameter_mm * h.diameter_mm / 4.0)
                    .sum();
                (x_mm * y_mm - removed) * thickness_mm
            }
            Self::LBracket {
                base_length_mm,
                wall_height_mm,
                width_mm,
                thickness_mm,
            } => (base_length_mm + wall_height_mm - thickness_mm) * width_mm * thickness_mm,
        })
    }

    /// Its smallest dimension (mm): what bounds how fine a mesh may be asked for (`None` for a
    /// STEP part).
    pub fn smallest_dimension_mm(&self) -> Option<f64> {
        Some(match self {
            Self::Step { .. } => return None,
            Self::Box { x_mm, y_mm, z_mm } => x_mm.min(*y_mm).min(*z_mm),
            Self::Cylinder { radius_mm, height_mm } => radius_mm.min(*height_mm),
            Self::PlateWithHoles {
                x_mm,
                y_mm,
                thickness_mm,
                holes,
            } => holes
                .iter()
                .map(|h| h.diameter_mm)
                .fold(x_mm.min(*y_mm).min(*thickness_mm), f64::min),
            Self::LBracket {
                base_length_mm,
                wall_height_mm,
                width_mm,
                thickness_mm,
            } => base_length_mm
                .min(*wall_height_mm)
                .min(*width_mm)
                .min(*thickness_mm),
        })
    }

    /// Refuses a solid that cannot be meshed, naming the field.
    ///
    /// # Errors
    /// `(field, why)` for a dimension that is not a positive number up to [`MAX_DIMENSION_MM`],
    /// a hole outside its plate or touching another, an L-bracket thicker than its legs.
    pub fn check(&self) -> Result<(), (String, String)> {
        let length = |field: &str, value: f64| {
            if value.is_finite() && value > 0.0 && value <= MAX_DIMENSION_MM {
                Ok(())
            } else {
                Err((
                    field.to_owned(),
                    format!("must be a length in (0, {MAX_DIMENSION_MM}] mm"),
                ))
            }
        };
        match self {
            Self::Step { path } => {
                let relative = std::path::Path::new(path);
                let inside = !path.is_empty()
                    && relative.is_relative()
                    && relative
                        .components()
                        .all(|c| matches!(c, std::path::Component::Normal(_)));
                if !inside {
                    return Err((
                        "solid.path".to_owned(),
                        "must be a path inside the workspace, relative and without ..".to_owned(),
                    ));
                }
                let lower = path.to_ascii_lowercase();
                if !(lower.ends_with(".step") || lower.ends_with(".stp")) {
                    return Err((
                        "solid.path".to_owned(),
                        "must name a .step or .stp file".to_owned(),
                    ));
                }
                Ok(())
            }
            Self::Box { x_mm, y_mm, z_mm } => {
                length("solid.x_mm", *x_mm)?;
                length("solid.y_mm", *y_mm)?;
                length("solid.z_mm", *z_mm)
            }
            Self::Cylinder { radius_mm, height_mm } => {
                length("solid.radius_mm", *radius_mm)?;
                length("solid.height_mm", *height_mm)
            }
            Self::PlateWithHoles {
                x_mm,
                y_mm,
                thickness_mm,
                holes,
            } => {
                length("solid.x_mm", *x_mm)?;
                length("solid.y_mm", *y_mm)?;
                length("solid.thickness_mm", *thickness_mm)?;
                if holes.len() > MAX_HOLES {
                    return Err(("solid.holes".to_owned(), format!("at most {MAX_HOLES} holes")));
                }
                for (i, hole) in holes.iter().enumerate() {
                    let field = format!("solid.holes[{i}]");
                    length(&format!("{field}.diameter_mm"), hole.diameter_mm)?;
                    let r = hole.diameter_mm / 2.0;
                    let inside = hole.x_mm - r > 0.0
                        && hole.x_mm + r < *x_mm
                        && hole.y_mm - r > 0.0
                        && hole.y_mm + r < *y_mm;
                    if !inside {
                        return Err((
                            field,
                            "the hole must lie inside the plate, clear of its edges".to_owned(),
                        ));
                    }
                    for (j, other) in holes.iter().enumerate().take(i) {
                        let gap = (hole.x_mm - other.x_mm).hypot(hole.y_mm - other.y_mm)
                            - r
                            - other.diameter_mm / 2.0;
                        if gap <= 0.0 {
                            return Err((field, format!("overlaps holes[{j}]")));
                        }
                    }
                }
                Ok(())
            }
            Self::LBracket {
                base_length_mm,
                wall_height_mm,
                width_mm,
                thickness_mm,
            } => {
                length("solid.base_length_mm", *base_length_mm)?;
                length("solid.wall_height_mm", *wall_height_mm)?;
                length("solid.width_mm", *width_mm)?;
                length("solid.thickness_mm", *thickness_mm)?;
                if thickness_mm >= base_length_mm || thickness_mm >= wall_height_mm {
                    return Err((
                        "solid.thickness_mm".to_owned(),
                        "must be less than the base length and the wall height".to_owned(),
                    ));
                }
                Ok(())
            }
        }
    }

    /// The gmsh script meshing it with second-order tetrahedra of at most `size_mm`, every face a
    /// named physical group saved as a node set (`FACE_<name>`), the volume `SOLID`.
    pub fn gmsh_script(&self, size_mm: f64) -> String {
        let eps = 1e-6;
        let mut geo = String::from("SetFactory(\"OpenCASCADE\");\n");
        match self {
            Self::Step { .. } => {
                // Every surface of the file, named by its tag, in millimetres.
                geo.push_str(&format!(
                    "Geometry.OCCTargetUnit = \"MM\";\nMerge \"{STEP_FILE}\";\nsurfaces() = Surface{{:}};\nFor i In {{0:#surfaces()-1}}\n  Physical Surface(Sprintf(\"FACE_face_%g\", surfaces(i))) = {{surfaces(i)}};\nEndFor\n"
                ));
            }
            Self::Box { x_mm, y_mm, z_mm } => {
                geo.push_str(&format!("Box(1) = {{0, 0, 0, {x_mm}, {y_mm}, {z_mm}}};\n"));
            }
            Self::Cylinder { radius_mm, height_mm } => {
                geo.push_str(&format!(
                    "Cylinder(1) = {{0, 0, 0, 0, 0, {height_mm}, {radius_mm}}};\n"
                ));
            }
            Self::PlateWithHoles {
                x_mm,
                y_mm,
                thickness_mm,
                holes,
            } => {
                let t = *thickness_mm;
                geo.push_str(&format!("Box(1) = {{0, 0, 0, {x_mm}, {y_mm}, {t}}};\n"));
                for (i, hole) in holes.iter().enumerate() {
                    geo.push_str(&format!(
                        "Cylinder({}) = {{{}, {}, {}, 0, 0, {}, {}}};\n",
                        i + 2,
                        hole.x_mm,
                        hole.y_mm,
                        -t,
                        3.0 * t,
                        hole.diameter_mm / 2.0
                    ));
                }
                if !holes.is_empty() {
                    geo.push_str(&format!(
                        "BooleanDifference{{ Volume{{1}}; Delete; }}{{ Volume{{2:{}}}; Delete; }}\n",
                        holes.len() + 1
                    ));
                }
            }
            Self::LBracket {
                base_length_mm,
                wall_height_mm,
                width_mm,
                thickness_mm,
            } => {
                geo.push_str(&format!(
                    "Box(1) = {{0, 0, 0, {base_length_mm}, {width_mm}, {thickness_mm}}};\nBox(2) = {{0, 0, 0, {thickness_mm}, {width_mm}, {wall_height_mm}}};\nBooleanUnion{{ Volume{{1}}; Delete; }}{{ Volume{{2}}; Delete; }}\n"
                ));
            }
        }
        geo.push_str("solid() = Volume{:};\nPhysical Volume(\"SOLID\") = {solid()};\n");
        for Face { name, bounds, .. } in self.named_faces() {
            let [x0, y0, z0, x1, y1, z1] = bounds;
            if name == "side" {
                // The side is every surface but the two ends.
                geo.push_str(&format!(
                    "sides() = Surface{{:}};\nends() = Surface In BoundingBox{{{x0}, {y0}, {z0}, {x1}, {y1}, {}}};\nends() += Surface In BoundingBox{{{x0}, {y0}, {}, {x1}, {y1}, {z1}}};\nsides() -= ends();\nPhysical Surface(\"FACE_side\") = {{sides()}};\n",
                    z0 + 2.0 * eps,
                    z1 - 2.0 * eps
                ));
            } else {
                geo.push_str(&format!(
                    "Physical Surface(\"FACE_{name}\") = Surface In BoundingBox{{{x0}, {y0}, {z0}, {x1}, {y1}, {z1}}};\n"
                ));
            }
        }
        if let Self::PlateWithHoles { holes, .. } = self
            && !holes.is_empty()
        {
            // Finer at the holes' walls, growing to the element size over a few hole radii.
            let smallest = holes.iter().map(|h| h.diameter_mm).fold(f64::INFINITY, f64::min);
            let near = size_mm / HOLE_REFINEMENT;
            geo.push_str("walls() = {};\n");
            for Face { bounds, .. } in self.named_faces().iter().filter(|f| f.name.starts_with("hole_")) {
                let [x0, y0, z0, x1, y1, z1] = bounds;
                geo.push_str(&format!(
                    "walls() += Surface In BoundingBox{{{x0}, {y0}, {z0}, {x1}, {y1}, {z1}}};\n"
                ));
            }
            geo.push_str(&format!(
                "Field[1] = Distance;\nField[1].SurfacesList = {{walls()}};\nField[1].Sampling = 40;\nField[2] = Threshold;\nField[2].InField = 1;\nField[2].SizeMin = {near};\nField[2].SizeMax = {size_mm};\nField[2].DistMin = 0;\nField[2].DistMax = {};\nBackground Field = 2;\n",
                2.0 * smallest
            ));
        }
        geo.push_str(&format!(
            "Mesh.CharacteristicLengthMax = {size_mm};\nMesh.ElementOrder = 2;\nMesh.SaveGroupsOfNodes = 1;\n"
        ));
        geo
    }
}

/// A box's six faces; `holes` through z take their area off the z faces.
fn box_faces(x: f64, y: f64, z: f64, holes: &[Hole]) -> Vec<Face> {
    let eps = 1e-6;
    let removed: f64 = holes
        .iter()
        .map(|h| std::f64::consts::PI * h.diameter_mm * h.diameter_mm / 4.0)
        .sum();
    vec![
        face(
            "x_min",
            [-eps, -eps, -eps, eps, y + eps, z + eps],
            Some((y * z, [-1.0, 0.0, 0.0])),
        ),
        face(
            "x_max",
            [x - eps, -eps, -eps, x + eps, y + eps, z + eps],
            Some((y * z, [1.0, 0.0, 0.0])),
        ),
        face(
            "y_min",
            [-eps, -eps, -eps, x + eps, eps, z + eps],
            Some((x * z, [0.0, -1.0, 0.0])),
        ),
        face(
            "y_max",
            [-eps, y - eps, -eps, x + eps, y + eps, z + eps],
            Some((x * z, [0.0, 1.0, 0.0])),
        ),
        face(
            "z_min",
            [-eps, -eps, -eps, x + eps, y + eps, eps],
            Some((x * y - removed, [0.0, 0.0, -1.0])),
        ),
        face(
            "z_max",
            [-eps, -eps, z - eps, x + eps, y + eps, z + eps],
            Some((x * y - removed, [0.0, 0.0, 1.0])),
        ),
    ]
}
