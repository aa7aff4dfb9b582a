//! The solids `fea.*` meshes: parametric ones (a box, a cylinder) whose faces have names, or a
//! STEP file; each becomes a gmsh script that meshes it with second-order tetrahedra (C3D10) and
//! exports every named face as a node set.

use schemars::JsonSchema;
use serde::Deserialize;

/// The largest dimension accepted (mm).
pub const MAX_DIMENSION_MM: f64 = 10_000.0;

/// The most elements a mesh may have (checked after meshing).
pub const MAX_ELEMENTS: usize = 400_000;

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
}

impl Solid {
    /// The solid in words: `box 100×10×10 mm`, `cylinder r 5 mm × 40 mm`.
    pub fn describe(&self) -> String {
        match self {
            Self::Box { x_mm, y_mm, z_mm } => format!("box {x_mm}×{y_mm}×{z_mm} mm"),
            Self::Cylinder { radius_mm, height_mm } => format!("cylinder r {radius_mm} mm × {height_mm} mm"),
        }
    }

    /// The names of its faces, for loads and supports.
    pub fn faces(&self) -> &'static [&'static str] {
        match self {
            Self::Box { .. } => &["x_min", "x_max", "y_min", "y_max", "z_min", "z_max"],
            Self::Cylinder { .. } => &["bottom", "top", "side"],
        }
    }

    /// Its volume (mm³), from its dimensions.
    pub fn volume_mm3(&self) -> f64 {
        match self {
            Self::Box { x_mm, y_mm, z_mm } => x_mm * y_mm * z_mm,
            Self::Cylinder { radius_mm, height_mm } => {
                std::f64::consts::PI * radius_mm * radius_mm * height_mm
            }
        }
    }

    /// Refuses a solid that cannot be meshed, naming the field.
    ///
    /// # Errors
    /// `(field, why)` for a dimension that is not a positive number up to [`MAX_DIMENSION_MM`].
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let dims: Vec<(&'static str, f64)> = match self {
            Self::Box { x_mm, y_mm, z_mm } => vec![
                ("solid.x_mm", *x_mm),
                ("solid.y_mm", *y_mm),
                ("solid.z_mm", *z_mm),
            ],
            Self::Cylinder { radius_mm, height_mm } => {
                vec![("solid.radius_mm", *radius_mm), ("solid.height_mm", *height_mm)]
            }
        };
        for (field, value) in dims {
            if !(value.is_finite() && value > 0.0 && value <= MAX_DIMENSION_MM) {
                return Err((field, format!("must be a length in (0, {MAX_DIMENSION_MM}] mm")));
            }
        }
        Ok(())
    }

    /// The gmsh script meshing it with second-order tetrahedra of at most `size_mm`, every face a
    /// named physical group saved as a node set (`FACE_<name>`), the volume `SOLID`.
    pub fn gmsh_script(&self, size_mm: f64) -> String {
        let eps = 1e-6;
        let mut geo = String::from("SetFactory(\"OpenCASCADE\");\n");
        let faces: Vec<(&str, [f64; 6])> = match self {
            Self::Box { x_mm, y_mm, z_mm } => {
                geo.push_str(&format!("Box(1) = {{0, 0, 0, {x_mm}, {y_mm}, {z_mm}}};\n"));
                let (x, y, z) = (*x_mm, *y_mm, *z_mm);
                vec![
                    ("x_min", [-eps, -eps, -eps, eps, y + eps, z + eps]),
                    ("x_max", [x - eps, -eps, -eps, x + eps, y + eps, z + eps]),
                    ("y_min", [-eps, -eps, -eps, x + eps, eps, z + eps]),
                    ("y_max", [-eps, y - eps, -eps, x + eps, y + eps, z + eps]),
                    ("z_min", [-eps, -eps, -eps, x + eps, y + eps, eps]),
                    ("z_max", [-eps, -eps, z - eps, x + eps, y + eps, z + eps]),
                ]
            }
            Self::Cylinder { radius_mm, height_mm } => {
                geo.push_str(&format!(
                    "Cylinder(1) = {{0, 0, 0, 0, 0, {height_mm}, {radius_mm}}};\n"
                ));
                let (r, h) = (*radius_mm, *height_mm);
                vec![
                    ("bottom", [-r - eps, -r - eps, -eps, r + eps, r + eps, eps]),
                    ("top", [-r - eps, -r - eps, h - eps, r + eps, r + eps, h + eps]),
                    ("side", [-r - eps, -r - eps, -eps, r + eps, r + eps, h + eps]),
                ]
            }
        };
        geo.push_str("Physical Volume(\"SOLID\") = {1};\n");
        for (name, [x0, y0, z0, x1, y1, z1]) in &faces {
            if *name == "side" {
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
        geo.push_str(&format!(
            "Mesh.CharacteristicLengthMax = {size_mm};\nMesh.ElementOrder = 2;\nMesh.SaveGroupsOfNodes = 1;\n"
        ));
        geo
    }
}
