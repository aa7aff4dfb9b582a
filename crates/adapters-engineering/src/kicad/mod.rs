//! `metaforge tool-server kicad`: a KiCad board and schematic read with KiCad's own `pcbnew`
//! module (KiCad 6, the system Python), one fresh sandboxed run of a fixed driver per call
//! (`driver.py`: the server never runs code a caller sends). Read-only, as the spec's first EDA
//! phase: it computes and exports, it never changes a design file.
//!
//! Tools (design files are named relative to the server's workspace):
//! - `kicad.board_info` — layers, board size (its Edge.Cuts outline), thickness, and the counts
//!   of footprints, tracks, vias, nets and zones;
//! - `kicad.drc` — KiCad's design-rule check: each violation with its code, KiCad's words,
//!   severity, rule and positions; the project's exclusions are honoured (an excluded violation
//!   is listed as excluded, not counted); KiCad's report file comes back as evidence;
//! - `kicad.export_gerbers` — RS-274X (X2) Gerber files for every copper layer, the masks, the
//!   silkscreens and the outline (or the layers asked for), as evidence files;
//! - `kicad.export_drill` — Excellon drill files (plated and unplated) with the hole counts;
//! - `kicad.bom` — the bill of materials from the schematic's own s-expressions ([`bom`]),
//!   grouped by value and footprint, with references and quantities;
//! - `kicad.netlist` — every net of the board with the pads on it;
//! - `kicad.erc` — where the installed KiCad cannot run ERC headless (KiCad 6: no `kicad-cli`),
//!   an error saying so, never an empty "no errors".

pub mod bom;
pub mod drc;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_ports::{
    CallerClass, CallerContext, FileText, HostCallOutcome, PortError, ProgramVersion, SandboxReport,
    ToolDescriptor, ToolEvidence, ToolHost, ToolOutput,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::answer::{Refusal, answer, descriptor, millis, output_files, parse, sha256, unknown_tool};
use crate::runner::{RunOutput, Runner};
use crate::workspace::{DesignFile, DesignWorkspace, no_workspace};

/// The driver run inside the sandbox; fixed, shipped with the server.
const DRIVER: &str = include_str!("driver.py");

/// The largest board or schematic read (bytes).
pub const MAX_DESIGN_BYTES: u64 = 64 * 1024 * 1024;

/// The most sub-sheets a schematic's hierarchy may name.
pub const MAX_SHEETS: usize = 256;

/// The deliverables the tools' evidence is for.
const DRC_REPORT: &str = "drc_report";
const GERBER_SET: &str = "gerber_set";
const DRILL_SET: &str = "drill_set";
const BOM: &str = "bom";

/// A board.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BoardArgs {
    /// The board file (`.kicad_pcb`), relative to the workspace; its project file beside it
    /// (`.kicad_pro`, `.kicad_dru`) brings the design rules and DRC exclusions.
    pub board: String,
}

/// `kicad.export_gerbers`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GerberArgs {
    /// The board file (`.kicad_pcb`), relative to the workspace.
    pub board: String,
    /// The layers, by KiCad's names (`F.Cu`, `B.Cu`, `F.Mask`, `Edge.Cuts`, …); default: every
    /// copper layer, both masks, both silkscreens and the outline.
    #[serde(default)]
    pub layers: Option<Vec<String>>,
}

/// A schematic.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SchematicArgs {
    /// The root schematic (`.kicad_sch`), relative to the workspace; its sub-sheets are read
    /// from beside it.
    pub schematic: String,
}

/// The KiCad tool server.
pub struct KicadHost {
    runner: Arc<Runner>,
    workspace: Option<DesignWorkspace>,
    version: String,
}

/// A board as one run gets it.
struct Board {
    /// The file name in the scratch directory (the design's own, so exports carry its name).
    name: String,
    files: Vec<(String, String)>,
    sha256: String,
    relative: String,
}

impl KicadHost {
    /// The tools over `runner` (the system Python that has `pcbnew`), reading design files from
    /// `workspace`; `version` is KiCad's, reported with every result.
    pub fn new(runner: Runner, workspace: Option<PathBuf>, version: String) -> Self {
        Self {
            runner: Arc::new(runner),
            workspace: workspace.map(DesignWorkspace::new),
            version,
        }
    }

    fn workspace(&self, field: &str) -> Result<&DesignWorkspace, Refusal> {
        self.workspace
            .as_ref()
            .ok_or_else(|| no_workspace(field, "kicad"))
    }

    /// The board named `relative`, with its project files beside it.
    fn board(&self, relative: &str) -> Result<Board, Refusal> {
        if !relative.ends_with(".kicad_pcb") {
            return Err(Refusal::argument(
                "board",
                format!("{relative} is not a KiCad board: give a .kicad_pcb file"),
            ));
        }
        let workspace = self.workspace("board")?;
        let board = workspace.read("board", relative, MAX_DESIGN_BYTES)?;
        let name = board
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "board.kicad_pcb".to_owned());
        let stem = name.trim_end_matches(".kicad_pcb").to_owned();
        let mut files = vec![(name.clone(), board.text.clone())];
        for extension in ["kicad_pro", "kicad_dru"] {
            if let Some(DesignFile { text, .. }) = workspace.sibling(&board.path, extension, MAX_DESIGN_BYTES)
            {
                files.push((format!("{stem}.{extension}"), text));
            }
        }
        Ok(Board {
            name,
            sha256: sha256(&board.text),
            files,
            relative: relative.to_owned(),
        })
    }

    /// Runs the driver's `command` on `board`; its result, and the run (with the files it wrote
    /// under `out/`).
    async fn drive(
        &self,
        command: &str,
        board: &Board,
        options: &Value,
    ) -> Result<(Value, RunOutput), Refusal> {
        let mut inputs: Vec<(&str, &str)> = vec![("driver.py", DRIVER)];
        inputs.extend(
            board
                .files
                .iter()
                .map(|(name, text)| (name.as_str(), text.as_str())),
        );
        let args = [
            "driver.py".to_owned(),
            command.to_owned(),
            board.name.clone(),
            options.to_string(),
        ];
        let run = self.runner.run(&inputs, &args, &["result.json", "out/"]).await?;
        let result = run
            .files
            .get("result.json")
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
            .ok_or_else(|| {
                Refusal::program(
                    "kicad",
                    "kicad_failed",
                    format!("KiCad could not read {} (see its output)", board.relative),
                    &run.output,
                )
            })?;
        Ok((result, run))
    }

    fn evidence(&self, tool: &str, artifact: &str, title: String, board: &Board) -> ToolEvidence {
        ToolEvidence {
            tool: tool.to_owned(),
            artifact: artifact.to_owned(),
            title,
            programs: vec![ProgramVersion {
                name: "kicad".to_owned(),
                version: self.version.clone(),
            }],
            input_sha256: board.sha256.clone(),
            sandbox: self.runner.sandbox_report(),
            quantities: Vec::new(),
            files: Vec::new(),
        }
    }

    async fn board_info(&self, args: BoardArgs) -> Result<Value, Refusal> {
        let board = self.board(&args.board)?;
        let (mut result, run) = self.drive("board_info", &board, &json!({})).await?;
        if let Some(object) = result.as_object_mut() {
            object.insert("board".to_owned(), json!(board.relative));
            object.insert("elapsed_ms".to_owned(), json!(millis(&run)));
        }
        Ok(result)
    }

    async fn drc(&self, args: BoardArgs) -> Result<ToolOutput, Refusal> {
        let board = self.board(&args.board)?;
        let (_, run) = self.drive("drc", &board, &json!({})).await?;
        let Some(report) = run.files.get("out/drc.rpt") else {
            return Err(Refusal::program(
                "kicad",
                "drc_failed",
                "KiCad wrote no DRC report",
                &run.output,
            ));
        };
        let (mut violations, counts) = drc::parse_report(report);
        let project = board
            .files
            .iter()
            .find(|(name, _)| name.ends_with(".kicad_pro"))
            .and_then(|(_, text)| serde_json::from_str::<Value>(text).ok());
        if let Some(project) = &project {
            drc::apply_exclusions(&mut violations, &drc::exclusions(project));
        }
        let counted = |section: drc::Section| {
            violations
                .iter()
                .filter(|v| v.section == section && !v.excluded)
                .count()
        };
        let errors = violations
            .iter()
            .filter(|v| !v.excluded && v.severity == "error")
            .count();
        let value = json!({
            "board": board.relative,
            "passed": errors == 0,
            "counts": {
                "violations": counted(drc::Section::Violation),
                "unconnected": counted(drc::Section::Unconnected),
                "footprint_errors": counted(drc::Section::Footprint),
                "excluded": violations.iter().filter(|v| v.excluded).count(),
                "errors": errors,
            },
            "reported_by_kicad": counts,
            "violations": violations,
            "units": "mm",
            "kicad_version": self.version,
            "elapsed_ms": millis(&run),
        });
        let (files, texts) = output_files(&run, &[("out/drc.rpt", "text/plain")]);
        let mut evidence = self.evidence(
            "kicad.drc",
            DRC_REPORT,
            format!("Design-rule check of {}", board.relative),
            &board,
        );
        evidence.files = files;
        Ok(ToolOutput::with_evidence(value, &evidence, &texts))
    }

    async fn gerbers(&self, args: GerberArgs) -> Result<ToolOutput, Refusal> {
        let board = self.board(&args.board)?;
        let options = json!({"layers": args.layers});
        let (result, run) = self.drive("gerbers", &board, &options).await?;
        if result.get("error").and_then(Value::as_str) == Some("unknown_layers") {
            return Err(Refusal::argument(
                "layers",
                format!(
                    "not layers of this board: {}; its layers are {}",
                    join(&result["layers"]),
                    join(&result["enabled"])
                ),
            ));
        }
        let mut listed = Vec::new();
        let mut wanted = Vec::new();
        for entry in result["files"].as_array().into_iter().flatten() {
            let (Some(layer), Some(file)) = (entry["layer"].as_str(), entry["file"].as_str()) else {
                continue;
            };
            let name = format!("out/{file}");
            let Some(text) = run.files.get(&name) else {
                return Err(Refusal::program(
                    "kicad",
                    "export_failed",
                    format!("KiCad wrote no Gerber file for {layer}"),
                    &run.output,
                ));
            };
            listed.push(json!({"layer": layer, "file": file, "bytes": text.len(), "sha256": sha256(text)}));
            wanted.push(name);
        }
        let wanted: Vec<(&str, &str)> = wanted
            .iter()
            .map(|n| (n.as_str(), "application/vnd.gerber"))
            .collect();
        let (files, texts) = output_files(&run, &wanted);
        let value = json!({
            "board": board.relative,
            "format": "RS-274X (Gerber X2)",
            "units": "mm",
            "files": listed,
            "kicad_version": self.version,
            "elapsed_ms": millis(&run),
        });
        let mut evidence = self.evidence(
            "kicad.export_gerbers",
            GERBER_SET,
            format!("Gerber files of {}", board.relative),
            &board,
        );
        evidence.files = files;
        Ok(ToolOutput::with_evidence(value, &evidence, &texts))
    }

    async fn drill(&self, args: BoardArgs) -> Result<ToolOutput, Refusal> {
        let board = self.board(&args.board)?;
        let (result, run) = self.drive("drill", &board, &json!({})).await?;
        let names: Vec<String> = result["files"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|f| format!("out/{f}"))
            .collect();
        if names.is_empty() {
            return Err(Refusal::program(
                "kicad",
                "export_failed",
                "KiCad wrote no drill file",
                &run.output,
            ));
        }
        let listed: Vec<Value> = names
            .iter()
            .filter_map(|name| {
                let text = run.files.get(name)?;
                Some(json!({"file": name.trim_start_matches("out/"), "bytes": text.len(), "sha256": sha256(text)}))
            })
            .collect();
        let wanted: Vec<(&str, &str)> = names
            .iter()
            .map(|n| (n.as_str(), "application/x-excellon"))
            .collect();
        let (files, texts) = output_files(&run, &wanted);
        let value = json!({
            "board": board.relative,
            "format": "Excellon",
            "files": listed,
            "plated_pad_holes": result["plated_pad_holes"],
            "unplated_holes": result["unplated_holes"],
            "via_holes": result["via_holes"],
            "kicad_version": self.version,
            "elapsed_ms": millis(&run),
        });
        let mut evidence = self.evidence(
            "kicad.export_drill",
            DRILL_SET,
            format!("Drill files of {}", board.relative),
            &board,
        );
        evidence.files = files;
        Ok(ToolOutput::with_evidence(value, &evidence, &texts))
    }

    async fn netlist(&self, args: BoardArgs) -> Result<Value, Refusal> {
        let board = self.board(&args.board)?;
        let (result, run) = self.drive("netlist", &board, &json!({})).await?;
        Ok(json!({
            "board": board.relative,
            "source": "the board's pads and their nets (pcbnew)",
            "nets": result["nets"],
            "kicad_version": self.version,
            "elapsed_ms": millis(&run),
        }))
    }

    /// The BOM is read by the server itself (no program runs: no sandbox to report), from the
    /// schematic files of the workspace.
    fn bom(&self, args: &SchematicArgs) -> Result<ToolOutput, Refusal> {
        let field = "schematic";
        if !args.schematic.ends_with(".kicad_sch") {
            return Err(Refusal::argument(
                field,
                format!(
                    "{} is not a KiCad schematic: give the root .kicad_sch",
                    args.schematic
                ),
            ));
        }
        let workspace = self.workspace(field)?;
        let root = workspace.read(field, &args.schematic, MAX_DESIGN_BYTES)?;
        let directory = std::path::Path::new(&args.schematic)
            .parent()
            .unwrap_or_else(|| std::path::Path::new(""));
        let bom_error = |e: bom::BomError| Refusal::argument(field, format!("{}: {e}", args.schematic));
        // The hierarchy, breadth first, each sheet once.
        let mut seen = std::collections::BTreeSet::new();
        let mut pending = bom::sheet_files(&root.text).map_err(bom_error)?;
        let mut sheets = Vec::new();
        while let Some(file) = pending.pop() {
            if !seen.insert(file.clone()) {
                continue;
            }
            if seen.len() > MAX_SHEETS {
                return Err(Refusal::argument(
                    field,
                    format!("the hierarchy names more than {MAX_SHEETS} sheets"),
                ));
            }
            let relative = directory.join(&file).to_string_lossy().into_owned();
            let sheet = workspace.read(field, &relative, MAX_DESIGN_BYTES)?;
            pending.extend(bom::sheet_files(&sheet.text).map_err(bom_error)?);
            sheets.push(sheet.text);
        }
        let groups = bom::bom(&root.text, &sheets).map_err(bom_error)?;
        let value = json!({
            "schematic": args.schematic,
            "sheets": 1 + sheets.len(),
            "lines": groups.len(),
            "parts": groups.iter().map(|g| g.quantity).sum::<usize>(),
            "groups": groups,
            "sha256": sha256(&root.text),
        });
        // The BOM itself is the work product: its groups as a file, hashed.
        let file = FileText {
            name: "bom.json".to_owned(),
            media_type: "application/json".to_owned(),
            text: serde_json::to_string_pretty(&value["groups"]).unwrap_or_default(),
        };
        let evidence = ToolEvidence {
            tool: "kicad.bom".to_owned(),
            artifact: BOM.to_owned(),
            title: format!("Bill of materials of {}", args.schematic),
            programs: vec![ProgramVersion {
                name: "metaforge (KiCad 6 schematic s-expressions)".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            }],
            input_sha256: sha256(&root.text),
            sandbox: SandboxReport {
                sandboxed: false,
                cpu_seconds: 0,
                memory_mb: 0,
                file_size_mb: 0,
                wall_seconds: 0,
            },
            quantities: Vec::new(),
            files: vec![file.entry()],
        };
        Ok(ToolOutput::with_evidence(value, &evidence, &[file]))
    }

    fn erc(&self, args: &SchematicArgs) -> Refusal {
        Refusal::program(
            "kicad",
            "erc_unavailable",
            format!(
                "{}: ERC cannot run headless with KiCad {} (it has no kicad-cli; KiCad 7 or later does). Run it in Eeschema (Inspect → Electrical Rules Checker); this server reports no ERC result rather than an empty one",
                args.schematic, self.version
            ),
            "",
        )
    }
}

/// A JSON list of names as `a, b, c`.
fn join(list: &Value) -> String {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

#[async_trait]
impl ToolHost for KicadHost {
    fn tools(&self, _caller: CallerClass) -> Vec<ToolDescriptor> {
        vec![
            descriptor::<BoardArgs>(
                "kicad.board_info",
                "Board summary",
                "A KiCad board's layers, size, thickness and its counts of footprints, tracks, vias, nets and zones (KiCad's pcbnew).",
            ),
            descriptor::<BoardArgs>(
                "kicad.drc",
                "Design-rule check",
                "KiCad's design-rule check of a board: each violation with its code, severity, rule and positions (mm); the project's exclusions are honoured; KiCad's report comes back as evidence.",
            ),
            descriptor::<GerberArgs>(
                "kicad.export_gerbers",
                "Export Gerbers",
                "RS-274X (X2) Gerber files of a board for a fab: every copper layer, masks, silkscreens and outline, or the layers asked for.",
            ),
            descriptor::<BoardArgs>(
                "kicad.export_drill",
                "Export drill files",
                "Excellon drill files of a board (plated and unplated holes) with the hole counts.",
            ),
            descriptor::<SchematicArgs>(
                "kicad.bom",
                "Bill of materials",
                "The bill of materials of a KiCad 6 schematic hierarchy: parts grouped by value and footprint with their references and quantities (power symbols and parts marked not in BOM left out).",
            ),
            descriptor::<BoardArgs>(
                "kicad.netlist",
                "Board netlist",
                "Every net of a KiCad board with the pads on it (reference.pad).",
            ),
            descriptor::<SchematicArgs>(
                "kicad.erc",
                "Electrical rules check",
                "KiCad's electrical rules check of a schematic, where the installed KiCad can run it headless (kicad-cli, KiCad 7 or later); otherwise an error saying so.",
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
            "kicad.board_info" => self
                .board_info(parse(tool, arguments)?)
                .await
                .map(ToolOutput::json),
            "kicad.drc" => self.drc(parse(tool, arguments)?).await,
            "kicad.export_gerbers" => self.gerbers(parse(tool, arguments)?).await,
            "kicad.export_drill" => self.drill(parse(tool, arguments)?).await,
            "kicad.bom" => self.bom(&parse(tool, arguments)?),
            "kicad.netlist" => self.netlist(parse(tool, arguments)?).await.map(ToolOutput::json),
            "kicad.erc" => Err(self.erc(&parse(tool, arguments)?)),
            other => return Err(unknown_tool(other)),
        };
        Ok(answer(tool, result))
    }
}
