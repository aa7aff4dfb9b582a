//! CalculiX's side: the mesh gmsh wrote, kept to what a static step needs (nodes, the C3D10
//! elements, the face node sets); the job (`*MATERIAL`, `*BOUNDARY`, `*CLOAD`, `*DLOAD GRAV`,
//! what to print); and the `.dat` file read back (displacements, stresses, reactions, volume).

use std::collections::BTreeMap;

/// The mesh gmsh exported, reduced to nodes, the volume elements and the node sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Mesh {
    /// The `.inp` text CalculiX includes.
    pub text: String,
    /// How many nodes.
    pub nodes: usize,
    /// How many volume elements.
    pub elements: usize,
    /// Each node set (a named face) by name, its node ids.
    pub node_sets: BTreeMap<String, Vec<u64>>,
    /// Each named face's six-node surface triangles (corners, then midsides), by node set name.
    pub face_triangles: BTreeMap<String, Vec<[u64; 6]>>,
    /// Every node's coordinates (mm).
    pub coordinates: std::collections::HashMap<u64, [f64; 3]>,
    /// The elements' shape quality, smallest and mean ([`mean_ratio`] of each element's four
    /// corners: 1 for a regular tetrahedron, towards 0 for a sliver); `None` with no element.
    pub quality: Option<(f64, f64)>,
}

/// The mean-ratio quality of a tetrahedron with corners `p`: 12·(3V)^(2/3) / Σ lᵢⱼ², 1 for a
/// regular tetrahedron and 0 for a flat one (Liu & Joe's measure).
pub fn mean_ratio(p: [[f64; 3]; 4]) -> f64 {
    let sub = |a: [f64; 3], b: [f64; 3]| [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
    let (a, b, c) = (sub(p[1], p[0]), sub(p[2], p[0]), sub(p[3], p[0]));
    let volume = (a[0] * (b[1] * c[2] - b[2] * c[1]) - a[1] * (b[0] * c[2] - b[2] * c[0])
        + a[2] * (b[0] * c[1] - b[1] * c[0]))
        .abs()
        / 6.0;
    let mut squares = 0.0;
    for i in 0..4 {
        for j in (i + 1)..4 {
            let d = sub(p[i], p[j]);
            squares += d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
        }
    }
    if squares > 0.0 {
        12.0 * (3.0 * volume).powf(2.0 / 3.0) / squares
    } else {
        0.0
    }
}

impl Mesh {
    /// Keeps `*NODE`, the `C3D10` element blocks (as `ELSET=SOLID`) and the `*NSET`s of an `.inp`
    /// gmsh wrote; its surface elements would be read as plane-stress elements without a section.
    pub fn from_gmsh(inp: &str) -> Self {
        let mut text = String::new();
        let mut nodes = 0;
        let mut elements = 0;
        let mut node_sets = BTreeMap::new();
        let mut coordinates: std::collections::HashMap<u64, [f64; 3]> = std::collections::HashMap::new();
        let mut triangles: std::collections::HashMap<u64, [u64; 6]> = std::collections::HashMap::new();
        let mut face_elements: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let (mut worst, mut sum) = (f64::INFINITY, 0.0);
        for block in blocks(inp) {
            let head = block.lines().next().unwrap_or_default().to_ascii_uppercase();
            let data = block
                .lines()
                .skip(1)
                .filter(|l| !l.trim().is_empty() && !l.starts_with("**"));
            if head.starts_with("*NODE") && !head.starts_with("*NODE PRINT") {
                for line in data {
                    let fields: Vec<f64> = line.split(',').filter_map(|f| f.trim().parse().ok()).collect();
                    if let [id, x, y, z] = fields[..] {
                        coordinates.insert(id as u64, [x, y, z]);
                    }
                    nodes += 1;
                }
                text.push_str(block);
            } else if head.starts_with("*ELEMENT") && head.contains("C3D10") {
                for line in data {
                    let ids: Vec<u64> = line.split(',').filter_map(|f| f.trim().parse().ok()).collect();
                    let corners: Option<Vec<[f64; 3]>> = ids
                        .get(1..5)
                        .map(|c| c.iter().filter_map(|id| coordinates.get(id).copied()).collect());
                    if let Some(&[a, b, c, d]) = corners.as_deref() {
                        let q = mean_ratio([a, b, c, d]);
                        worst = f64::min(worst, q);
                        sum += q;
                    }
                    elements += 1;
                }
                text.push_str("*ELEMENT, TYPE=C3D10, ELSET=SOLID\n");
                text.extend(block.lines().skip(1).map(|l| format!("{l}\n")));
            } else if head.starts_with("*ELEMENT") && head.contains("CPS6") {
                for line in data {
                    let ids: Vec<u64> = line.split(',').filter_map(|f| f.trim().parse().ok()).collect();
                    if let [id, a, b, c, d, e, f] = ids[..] {
                        triangles.insert(id, [a, b, c, d, e, f]);
                    }
                }
            } else if let Some(name) = head
                .strip_prefix("*ELSET,ELSET=")
                .filter(|n| n.starts_with("FACE_"))
            {
                let ids = data
                    .flat_map(|l| {
                        l.split(',')
                            .filter_map(|n| n.trim().parse().ok())
                            .collect::<Vec<u64>>()
                    })
                    .collect();
                face_elements.insert(name.trim().to_owned(), ids);
            } else if let Some(name) = head.strip_prefix("*NSET,NSET=") {
                let ids: Vec<u64> = data
                    .flat_map(|l| {
                        l.split(',')
                            .map(str::trim)
                            .filter_map(|n| n.parse().ok())
                            .collect::<Vec<u64>>()
                    })
                    .collect();
                node_sets.insert(name.trim().to_owned(), ids);
                text.push_str(block);
            }
        }
        let face_triangles = face_elements
            .into_iter()
            .map(|(name, ids)| {
                (
                    name,
                    ids.iter().filter_map(|id| triangles.get(id).copied()).collect(),
                )
            })
            .collect();
        Self {
            text,
            nodes,
            elements,
            node_sets,
            face_triangles,
            coordinates,
            quality: (elements > 0 && worst.is_finite()).then(|| (worst, sum / elements as f64)),
        }
    }
}

impl Mesh {
    /// The named faces the mesh holds (`FACE_<NAME>` node sets), lower-case, in numeric order
    /// of their trailing number where they have one (`face_2` before `face_10`).
    pub fn face_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .node_sets
            .keys()
            .filter_map(|set| set.strip_prefix("FACE_"))
            .map(str::to_ascii_lowercase)
            .collect();
        names.sort_by_key(|name| {
            let number = name.rsplit('_').next().and_then(|n| n.parse::<u64>().ok());
            (number.is_none(), number, name.clone())
        });
        names
    }

    /// A face's area (mm²) and its area-weighted centre (mm), from its surface triangles.
    pub fn face_area_centre(&self, set: &str) -> Option<(f64, [f64; 3])> {
        let triangles = self.face_triangles.get(set).filter(|t| !t.is_empty())?;
        let (mut area, mut moment) = (0.0, [0.0; 3]);
        for triangle in triangles {
            let corner = |i: usize| self.coordinates.get(&triangle[i]).copied().unwrap_or_default();
            let (a, b, c) = (corner(0), corner(1), corner(2));
            let piece = triangle_area(a, b, c);
            area += piece;
            for axis in 0..3 {
                moment[axis] += piece * (a[axis] + b[axis] + c[axis]) / 3.0;
            }
        }
        (area > 0.0).then(|| (area, moment.map(|m| m / area)))
    }

    /// How a uniform traction on the face `set` is shared among its nodes: for each six-node
    /// triangle, a third of its area to each midside node and none to its corners (the
    /// consistent loads of a quadratic triangle). A face without triangles shares equally.
    pub fn face_weights(&self, set: &str) -> Vec<(u64, f64)> {
        let Some(triangles) = self.face_triangles.get(set).filter(|t| !t.is_empty()) else {
            return self
                .node_sets
                .get(set)
                .map(|ids| ids.iter().map(|id| (*id, 1.0)).collect())
                .unwrap_or_default();
        };
        let mut weights: BTreeMap<u64, f64> = BTreeMap::new();
        for triangle in triangles {
            let corner = |i: usize| self.coordinates.get(&triangle[i]).copied().unwrap_or_default();
            let area = triangle_area(corner(0), corner(1), corner(2));
            for midside in &triangle[3..] {
                *weights.entry(*midside).or_insert(0.0) += area / 3.0;
            }
        }
        weights.into_iter().collect()
    }
}

/// The area of the triangle `a b c`.
fn triangle_area(a: [f64; 3], b: [f64; 3], c: [f64; 3]) -> f64 {
    let (u, v) = (
        [b[0] - a[0], b[1] - a[1], b[2] - a[2]],
        [c[0] - a[0], c[1] - a[1], c[2] - a[2]],
    );
    let cross = [
        u[1] * v[2] - u[2] * v[1],
        u[2] * v[0] - u[0] * v[2],
        u[0] * v[1] - u[1] * v[0],
    ];
    0.5 * (cross[0] * cross[0] + cross[1] * cross[1] + cross[2] * cross[2]).sqrt()
}

/// The blocks of an `.inp` file: each keyword line with the data lines after it.
fn blocks(inp: &str) -> Vec<&str> {
    let mut starts: Vec<usize> = inp
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .filter(|&i| inp[i..].starts_with('*') && !inp[i..].starts_with("**"))
        .collect();
    if inp.starts_with('*') {
        starts.insert(0, 0);
    }
    starts
        .iter()
        .enumerate()
        .map(|(k, &start)| &inp[start..starts.get(k + 1).copied().unwrap_or(inp.len())])
        .collect()
}

/// What a static job holds besides the mesh.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Young's modulus (MPa).
    pub youngs_mpa: f64,
    /// Poisson's ratio.
    pub poisson: f64,
    /// Density (kg/m³).
    pub density_kg_m3: f64,
    /// The node sets fixed in every direction.
    pub fixed: Vec<String>,
    /// Forces: the node set and the total force on it (N, x y z), shared equally by its nodes
    /// (a pressure on a flat face arrives here as its resultant, pressure × area).
    pub forces: Vec<(String, [f64; 3])>,
    /// Gravity (m/s², x y z), if any.
    pub gravity: Option<[f64; 3]>,
}

impl Job {
    /// The CalculiX input (units mm, N, MPa, t/mm³) including `mesh.inp`.
    pub fn input(&self, mesh: &Mesh) -> String {
        let mut job = format!(
            // CalculiX reads numbers from fields of at most 20 characters: nine significant
            // digits fit.
            "*INCLUDE, INPUT=mesh.inp\n*MATERIAL, NAME=MAT\n*ELASTIC\n{:.9e}, {:.9e}\n*DENSITY\n{:.9e}\n*SOLID SECTION, ELSET=SOLID, MATERIAL=MAT\n*BOUNDARY\n",
            self.youngs_mpa,
            self.poisson,
            self.density_kg_m3 * 1e-12
        );
        for set in &self.fixed {
            job.push_str(&format!("{set}, 1, 3\n"));
        }
        job.push_str("*STEP\n*STATIC\n");
        let mut loads: BTreeMap<u64, [f64; 3]> = BTreeMap::new();
        // A load on a fixed node would go straight into the support: each force goes to its
        // face's free nodes only (scaled back to the whole force), so the reactions carry all
        // of it.
        let fixed: std::collections::BTreeSet<u64> = self
            .fixed
            .iter()
            .filter_map(|set| mesh.node_sets.get(set))
            .flatten()
            .copied()
            .collect();
        for (set, force) in &self.forces {
            let weights: Vec<(u64, f64)> = mesh
                .face_weights(set)
                .into_iter()
                .filter(|(id, _)| !fixed.contains(id))
                .collect();
            let total: f64 = weights.iter().map(|(_, w)| w).sum();
            if total <= 0.0 {
                continue;
            }
            for (id, weight) in weights {
                let load = loads.entry(id).or_insert([0.0; 3]);
                for axis in 0..3 {
                    load[axis] += force[axis] * weight / total;
                }
            }
        }
        if !loads.is_empty() {
            job.push_str("*CLOAD\n");
            for (id, load) in &loads {
                for (axis, value) in load.iter().enumerate() {
                    if *value != 0.0 {
                        job.push_str(&format!("{id}, {}, {value:.9e}\n", axis + 1));
                    }
                }
            }
        }
        if let Some(g) = self.gravity {
            let magnitude = (g[0] * g[0] + g[1] * g[1] + g[2] * g[2]).sqrt();
            if magnitude > 0.0 {
                // mm/s² along the unit direction.
                job.push_str(&format!(
                    "*DLOAD\nSOLID, GRAV, {:.9e}, {:.9e}, {:.9e}, {:.9e}\n",
                    magnitude * 1000.0,
                    g[0] / magnitude,
                    g[1] / magnitude,
                    g[2] / magnitude
                ));
            }
        }
        // The `.frd` (for a post-processor) and the `.dat` (read back here) both keep the results.
        job.push_str("*NODE FILE\nU\n*EL FILE\nS\n*NODE PRINT, NSET=SOLID\nU\n");
        for set in &self.fixed {
            job.push_str(&format!("*NODE PRINT, NSET={set}, TOTALS=ONLY\nRF\n"));
        }
        job.push_str("*EL PRINT, ELSET=SOLID\nS\n*EL PRINT, ELSET=SOLID, TOTALS=ONLY\nEVOL\n*END STEP\n");
        job
    }
}

/// What a static step's `.dat` file says.
#[derive(Debug, Clone, PartialEq)]
pub struct Results {
    /// The largest displacement magnitude (mm) and its node.
    pub max_displacement_mm: f64,
    /// The largest von Mises stress at an integration point (MPa) and its element.
    pub max_von_mises_mpa: f64,
    /// Where that stress is: the element.
    pub max_von_mises_element: u64,
    /// The reaction force on each fixed set (N, x y z).
    pub reactions_n: BTreeMap<String, [f64; 3]>,
    /// The volume CalculiX integrated (mm³).
    pub volume_mm3: Option<f64>,
}

/// Reads a `.dat` file; `None` when it holds no displacements or stresses (the step failed).
pub fn read_dat(dat: &str) -> Option<Results> {
    let mut max_displacement_mm = f64::NAN;
    let mut max_von_mises_mpa = f64::NAN;
    let mut max_von_mises_element = 0;
    let mut reactions_n = BTreeMap::new();
    let mut volume_mm3 = None;
    let mut section = "";
    let mut set = String::new();
    for line in dat.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if trimmed.starts_with("displacements") {
            section = "u";
            continue;
        }
        if trimmed.starts_with("stresses") {
            section = "s";
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("total force (fx,fy,fz) for set ") {
            section = "rf";
            set = rest.split_whitespace().next().unwrap_or_default().to_owned();
            continue;
        }
        if trimmed.starts_with("total volume") {
            section = "v";
            continue;
        }
        let numbers: Vec<f64> = trimmed
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .collect();
        match section {
            "u" if numbers.len() == 4 => {
                let d = (numbers[1].powi(2) + numbers[2].powi(2) + numbers[3].powi(2)).sqrt();
                if max_displacement_mm.is_nan() || d > max_displacement_mm {
                    max_displacement_mm = d;
                }
            }
            "s" if numbers.len() == 8 => {
                let [xx, yy, zz, xy, xz, yz] = [
                    numbers[2], numbers[3], numbers[4], numbers[5], numbers[6], numbers[7],
                ];
                let vm = (0.5 * ((xx - yy).powi(2) + (yy - zz).powi(2) + (zz - xx).powi(2))
                    + 3.0 * (xy * xy + xz * xz + yz * yz))
                    .sqrt();
                if max_von_mises_mpa.is_nan() || vm > max_von_mises_mpa {
                    max_von_mises_mpa = vm;
                    max_von_mises_element = numbers[0] as u64;
                }
            }
            "rf" if numbers.len() == 3 => {
                reactions_n.insert(set.to_ascii_lowercase(), [numbers[0], numbers[1], numbers[2]]);
            }
            "v" if numbers.len() == 1 => volume_mm3 = Some(numbers[0]),
            _ => {}
        }
    }
    if max_displacement_mm.is_nan() || max_von_mises_mpa.is_nan() {
        return None;
    }
    Some(Results {
        max_displacement_mm,
        max_von_mises_mpa,
        max_von_mises_element,
        reactions_n,
        volume_mm3,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dat_file_gives_the_largest_displacement_stress_reaction_and_volume() {
        let dat = "\n displacements (vx,vy,vz) for set SOLID and time  0.1E+01\n\n         1  0.0 -3.0E-01  4.0E-01\n         2  0.0 -1.0E-01  0.0\n\n total force (fx,fy,fz) for set FACE_X_MIN and time  0.1E+01\n\n        0.0  1.0E+02  0.0\n\n stresses (elem, integ.pnt.,sxx,syy,szz,sxy,sxz,syz) for set SOLID and time  0.1E+01\n\n      7   1  6.0E+01  0.0  0.0  0.0  0.0  0.0\n      8   2  1.0E+01  0.0  0.0  0.0  0.0  0.0\n\n total volume for set SOLID and time  0.1E+01\n\n        1.0E+04\n";
        let r = read_dat(dat).unwrap();
        assert!((r.max_displacement_mm - 0.5).abs() < 1e-12);
        assert!(
            (r.max_von_mises_mpa - 60.0).abs() < 1e-9,
            "uniaxial: von Mises is |sxx|"
        );
        assert_eq!(r.max_von_mises_element, 7);
        assert_eq!(r.reactions_n["face_x_min"], [0.0, 100.0, 0.0]);
        assert_eq!(r.volume_mm3, Some(1.0e4));
        assert_eq!(read_dat("nothing"), None);
    }

    #[test]
    fn a_regular_tetrahedron_has_quality_one_and_a_flat_one_zero() {
        let s = 1.0 / 2f64.sqrt();
        let regular = [[1.0, 0.0, -s], [-1.0, 0.0, -s], [0.0, 1.0, s], [0.0, -1.0, s]];
        assert!((mean_ratio(regular) - 1.0).abs() < 1e-12);
        let flat = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]];
        assert!(mean_ratio(flat).abs() < 1e-12);
        let corner = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        let q = mean_ratio(corner);
        assert!(q > 0.8 && q < 0.9, "a right-corner tetrahedron: {q}");
    }
}
