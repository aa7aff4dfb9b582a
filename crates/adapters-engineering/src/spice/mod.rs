//! `metaforge tool-server spice`: circuit simulation with ngspice in batch mode (`ngspice -b`),
//! one fresh sandboxed run per analysis.
//!
//! Tools (all read-only: they compute, they change nothing):
//! - `spice.validate_netlist` — the netlist checked and parsed by ngspice: its elements and nodes,
//!   or the problems with their line numbers;
//! - `spice.op` — the DC operating point: every node voltage (V) and source current (A);
//! - `spice.dc` — a DC sweep of one source: each output node's voltage over the sweep;
//! - `spice.ac` — small-signal frequency response: magnitude (dB) and phase (degrees) per
//!   frequency and the −3 dB points;
//! - `spice.transient` — the time response, each vector downsampled to a bounded number of points
//!   keeping its extremes, with its minimum, maximum and final value, and the netlist's `.meas`
//!   results.
//!
//! The caller sends the circuit only ([`netlist::Netlist::check`]): the analysis is the tool's,
//! written in a `.control` block the caller cannot send. A netlist that asks for anything else
//! (a shell, an include, an analysis card) is refused naming its line.

pub mod netlist;
pub mod results;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_ports::{
    CallerClass, CallerContext, HostCallOutcome, PortError, ProgramVersion, Quantity, QuantityKind,
    ToolDescriptor, ToolEvidence, ToolHost, ToolOutput,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::answer::{
    Refusal, SIMULATION_RESULT, answer, descriptor, millis, output_files, parse, quantity, sha256, tail,
    unknown_tool,
};

/// The name ngspice's own printout is recorded under.
const NGSPICE_OUTPUT: &str = "ngspice_output.txt";
use crate::runner::{RunOutput, Runner};
use netlist::{Netlist, NetlistError};

impl From<NetlistError> for Refusal {
    fn from(e: NetlistError) -> Self {
        Self::Line {
            error: "invalid_netlist",
            line: e.line,
            message: e.to_string(),
        }
    }
}

/// The most output nodes one analysis reports.
pub const MAX_OUTPUTS: usize = 32;

/// The most points an analysis may compute.
pub const MAX_ANALYSIS_POINTS: f64 = 200_000.0;

/// The most points a reported vector keeps (default [`DEFAULT_POINTS`]).
pub const MAX_POINTS: usize = 2_000;

/// How many points a reported vector keeps unless the caller asks otherwise.
pub const DEFAULT_POINTS: usize = 200;

/// `spice.validate_netlist` and `spice.op`: a netlist only.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetlistArgs {
    /// The SPICE netlist: a title line, then the circuit (elements, .model, .subckt, .param,
    /// .meas); no .control block, include or analysis card.
    pub netlist: String,
}

/// `spice.dc`: a sweep of one independent source.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DcArgs {
    /// The netlist.
    pub netlist: String,
    /// The independent source swept, e.g. V1.
    pub source: String,
    /// The sweep's start value (V or A).
    pub start: f64,
    /// The sweep's stop value.
    pub stop: f64,
    /// The sweep's step (non-zero, towards stop).
    pub step: f64,
    /// The nodes reported (default: every node, at most 32).
    #[serde(default)]
    pub outputs: Option<Vec<String>>,
    /// The most points kept per vector (default 200, at most 2000).
    #[serde(default)]
    pub max_points: Option<usize>,
}

/// `spice.ac`: a small-signal sweep in frequency (decades).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcArgs {
    /// The netlist (a source with an AC value drives it).
    pub netlist: String,
    /// The lowest frequency (Hz).
    pub start_hz: f64,
    /// The highest frequency (Hz).
    pub stop_hz: f64,
    /// Points per decade (default 50).
    #[serde(default)]
    pub points_per_decade: Option<u32>,
    /// The nodes reported (default: every node, at most 32).
    #[serde(default)]
    pub outputs: Option<Vec<String>>,
    /// The most points kept per vector (default 200, at most 2000).
    #[serde(default)]
    pub max_points: Option<usize>,
}

/// `spice.transient`: the time response.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TransientArgs {
    /// The netlist (its .meas lines are measured).
    pub netlist: String,
    /// The print step (s).
    pub step_s: f64,
    /// The end time (s).
    pub stop_s: f64,
    /// The largest internal time step (s); default: the print step.
    #[serde(default)]
    pub max_step_s: Option<f64>,
    /// The nodes reported (default: every node, at most 32).
    #[serde(default)]
    pub outputs: Option<Vec<String>>,
    /// The most points kept per vector (default 200, at most 2000).
    #[serde(default)]
    pub max_points: Option<usize>,
}

/// The ngspice tool server.
pub struct SpiceHost {
    runner: Arc<Runner>,
    version: String,
}

impl SpiceHost {
    /// The tools over `runner` (ngspice, sandboxed); `version` is ngspice's, reported with
    /// every result.
    pub fn new(runner: Runner, version: impl Into<String>) -> Self {
        Self {
            runner: Arc::new(runner),
            version: version.into(),
        }
    }

    fn descriptors() -> Vec<ToolDescriptor> {
        vec![
            descriptor::<NetlistArgs>(
                "spice.validate_netlist",
                "Check a SPICE netlist",
                "Parse a netlist with ngspice: its elements and nodes, or each problem with its line number. Runs no analysis.",
            ),
            descriptor::<NetlistArgs>(
                "spice.op",
                "DC operating point",
                "The DC operating point (ngspice): every node voltage in volts and every source current in amperes.",
            ),
            descriptor::<DcArgs>(
                "spice.dc",
                "DC sweep",
                "Sweep one independent source (ngspice .dc): each output node's voltage in volts over the sweep, and the netlist's .meas dc results.",
            ),
            descriptor::<AcArgs>(
                "spice.ac",
                "AC frequency response",
                "Small-signal frequency response (ngspice .ac, decades): magnitude in dB and phase in degrees per frequency, the -3 dB points in Hz, and the netlist's .meas ac results.",
            ),
            descriptor::<TransientArgs>(
                "spice.transient",
                "Transient response",
                "Time response (ngspice .tran): each output node's voltage in volts over time in seconds, downsampled keeping extremes, with min, max and final values and the netlist's .meas results.",
            ),
        ]
    }

    async fn run_tool(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        let result = match tool {
            "spice.validate_netlist" => self.validate(parse(tool, arguments)?).await.map(ToolOutput::json),
            "spice.op" => self.op(parse(tool, arguments)?).await,
            "spice.dc" => self.dc(parse(tool, arguments)?).await,
            "spice.ac" => self.ac(parse(tool, arguments)?).await,
            "spice.transient" => self.transient(parse(tool, arguments)?).await,
            other => return Err(unknown_tool(other)),
        };
        Ok(answer(tool, result))
    }

    /// Runs `control` on `netlist`, reading back `files`.
    async fn simulate(
        &self,
        netlist: &Netlist,
        control: &[String],
        files: &[&str],
    ) -> Result<RunOutput, Refusal> {
        let deck = netlist.deck(control);
        let output = self
            .runner
            .run(
                &[("circuit.cir", &deck)],
                &["-b".to_owned(), "circuit.cir".to_owned()],
                files,
            )
            .await
            .map_err(Refusal::Run)?;
        // ngspice's exit status says nothing in batch mode (1 after a clean run with no
        // `.print` card): its error lines, or a signal (a limit hit), do.
        let errors = results::errors(&output.output);
        if !errors.is_empty() || output.status.is_none() {
            return Err(Refusal::Program {
                program: "ngspice",
                error: "simulation_failed",
                message: "ngspice could not simulate this circuit: read its errors (a line it names is the netlist's as sent)".to_owned(),
                errors,
                output: tail(&output.output),
            });
        }
        Ok(output)
    }

    fn provenance(&self, netlist_text: &str, run: &RunOutput) -> Value {
        let limits = self.runner.limits();
        json!({
            "program": "ngspice",
            "version": self.version,
            "input_sha256": sha256(netlist_text),
            "elapsed_ms": millis(run),
            "limits": {
                "cpu_seconds": limits.cpu_seconds,
                "memory_mb": limits.memory_mb,
                "file_size_mb": limits.file_size_mb,
            },
        })
    }

    /// An analysis' answer with its evidence: the quantities, ngspice's version, the netlist's
    /// hash, the sandbox, and as files the full data table (every computed point, where the
    /// answer keeps a bounded number) and ngspice's own output.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call site per analysis, each naming every part"
    )]
    fn with_evidence(
        &self,
        value: Value,
        tool: &str,
        what: &str,
        netlist: &Netlist,
        netlist_text: &str,
        run: &RunOutput,
        quantities: Vec<Quantity>,
        table: Option<&str>,
    ) -> ToolOutput {
        let mut kept = run.clone();
        kept.files.insert(NGSPICE_OUTPUT.to_owned(), run.output.clone());
        let mut wanted = Vec::new();
        if let Some(table) = table {
            wanted.push((table, "text/plain"));
        }
        wanted.push((NGSPICE_OUTPUT, "text/plain"));
        let (files, texts) = output_files(&kept, &wanted);
        let circuit = netlist.title.trim();
        let title = if circuit.is_empty() {
            what.to_owned()
        } else {
            format!("{what}: {circuit}")
        };
        let evidence = ToolEvidence {
            tool: tool.to_owned(),
            artifact: SIMULATION_RESULT.to_owned(),
            title,
            programs: vec![ProgramVersion {
                name: "ngspice".to_owned(),
                version: self.version.clone(),
            }],
            input_sha256: sha256(netlist_text),
            sandbox: self.runner.sandbox_report(),
            quantities,
            files,
        };
        ToolOutput::with_evidence(value, &evidence, &texts)
    }

    async fn validate(&self, args: NetlistArgs) -> Result<Value, Refusal> {
        let netlist = Netlist::check(&args.netlist)?;
        let run = self.simulate(&netlist, &["listing".to_owned()], &[]).await?;
        Ok(json!({
            "valid": true,
            "title": netlist.title,
            "elements": netlist.elements,
            "nodes": netlist.nodes,
            "run": self.provenance(&args.netlist, &run),
        }))
    }

    async fn op(&self, args: NetlistArgs) -> Result<ToolOutput, Refusal> {
        let netlist = Netlist::check(&args.netlist)?;
        let run = self
            .simulate(&netlist, &["op".to_owned(), "print all".to_owned()], &[])
            .await?;
        let values = results::assignments(&run.output);
        let mut voltages = BTreeMap::new();
        let mut currents = BTreeMap::new();
        for (name, value) in values {
            if let Some(source) = name.strip_suffix("#branch") {
                currents.insert(source.to_owned(), value);
            } else if netlist.has_node(&name) {
                voltages.insert(name, value);
            }
        }
        if voltages.is_empty() {
            return Err(Refusal::program(
                "ngspice",
                "simulation_failed",
                "ngspice printed no operating point",
                &run.output,
            ));
        }
        let quantities = voltages
            .iter()
            .map(|(node, v)| quantity(format!("v({node})"), QuantityKind::Voltage, *v, "V"))
            .chain(
                currents
                    .iter()
                    .map(|(source, a)| quantity(format!("i({source})"), QuantityKind::Current, *a, "A")),
            )
            .collect();
        let value = json!({
            "analysis": "op",
            "node_voltages_v": voltages,
            "source_currents_a": currents,
            "run": self.provenance(&args.netlist, &run),
        });
        Ok(self.with_evidence(
            value,
            "spice.op",
            "DC operating point",
            &netlist,
            &args.netlist,
            &run,
            quantities,
            None,
        ))
    }

    async fn dc(&self, args: DcArgs) -> Result<ToolOutput, Refusal> {
        let netlist = Netlist::check(&args.netlist)?;
        if !netlist.has_source(&args.source) {
            return Err(Refusal::argument(
                "source",
                format!("{} is not an independent source of the netlist", args.source),
            ));
        }
        let points = sweep_points(args.start, args.stop, args.step)?;
        let outputs = outputs(&netlist, args.outputs.as_deref())?;
        let limit = point_limit(args.max_points)?;
        let vectors: Vec<String> = outputs.iter().map(|n| format!("v({n})")).collect();
        let control = vec![
            format!("dc {} {} {} {}", args.source, args.start, args.stop, args.step),
            format!("wrdata dc.txt {}", vectors.join(" ")),
        ];
        let run = self.simulate(&netlist, &control, &["dc.txt"]).await?;
        let rows = results::table(run.files.get("dc.txt").map_or("", String::as_str));
        let mut series = Map::new();
        for (i, node) in outputs.iter().enumerate() {
            let points: Vec<(f64, f64)> = column_pairs(&rows, i);
            series.insert(
                node.clone(),
                json!(
                    results::downsample(&points, limit)
                        .iter()
                        .map(|(x, v)| json!({"sweep": x, "v": v}))
                        .collect::<Vec<_>>()
                ),
            );
        }
        let value = json!({
            "analysis": "dc",
            "source": args.source,
            "sweep_points": points,
            "units": {"sweep": "V or A (the source's)", "v": "V"},
            "nodes": series,
            "measurements": measurements(&netlist, &run),
            "run": self.provenance(&args.netlist, &run),
        });
        let title = format!("DC sweep of {}", args.source);
        Ok(self.with_evidence(
            value,
            "spice.dc",
            &title,
            &netlist,
            &args.netlist,
            &run,
            Vec::new(),
            Some("dc.txt"),
        ))
    }

    async fn ac(&self, args: AcArgs) -> Result<ToolOutput, Refusal> {
        let netlist = Netlist::check(&args.netlist)?;
        let per_decade = args.points_per_decade.unwrap_or(50);
        if !(args.start_hz > 0.0 && args.stop_hz > args.start_hz && args.stop_hz.is_finite()) {
            return Err(Refusal::argument("start_hz", "need 0 < start_hz < stop_hz"));
        }
        if per_decade == 0
            || f64::from(per_decade) * (args.stop_hz / args.start_hz).log10() > MAX_ANALYSIS_POINTS
        {
            return Err(Refusal::argument(
                "points_per_decade",
                format!("from 1 to a total of {MAX_ANALYSIS_POINTS} points over the sweep"),
            ));
        }
        let outputs = outputs(&netlist, args.outputs.as_deref())?;
        let limit = point_limit(args.max_points)?;
        let vectors: Vec<String> = outputs
            .iter()
            .flat_map(|n| [format!("vdb({n})"), format!("vp({n})")])
            .collect();
        let control = vec![
            format!("ac dec {per_decade} {} {}", args.start_hz, args.stop_hz),
            format!("wrdata ac.txt {}", vectors.join(" ")),
        ];
        let run = self.simulate(&netlist, &control, &["ac.txt"]).await?;
        let rows = results::table(run.files.get("ac.txt").map_or("", String::as_str));
        let mut series = Map::new();
        let mut quantities = Vec::new();
        for (i, node) in outputs.iter().enumerate() {
            let magnitude = column_pairs(&rows, 2 * i);
            let phase = column_pairs(&rows, 2 * i + 1);
            let minus_3db = results::minus_3db_points(&magnitude);
            let kept = results::downsample(&magnitude, limit);
            let points: Vec<Value> = kept
                .iter()
                .map(|(f, db)| {
                    let radians = phase
                        .iter()
                        .find(|(pf, _)| (pf - f).abs() <= f.abs() * 1e-12)
                        .map_or(f64::NAN, |p| p.1);
                    json!({"f_hz": f, "magnitude_db": db, "phase_deg": radians.to_degrees()})
                })
                .collect();
            let peak = magnitude.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
            quantities.push(quantity(
                format!("peak_gain({node})"),
                QuantityKind::Gain,
                peak,
                "dB",
            ));
            for f in &minus_3db {
                quantities.push(quantity(
                    format!("minus_3db_frequency({node})"),
                    QuantityKind::Frequency,
                    *f,
                    "Hz",
                ));
            }
            series.insert(
                node.clone(),
                json!({"peak_db": peak, "minus_3db_hz": minus_3db, "points": points}),
            );
        }
        let value = json!({
            "analysis": "ac",
            "units": {"f_hz": "Hz", "magnitude_db": "dB", "phase_deg": "degree"},
            "nodes": series,
            "measurements": measurements(&netlist, &run),
            "run": self.provenance(&args.netlist, &run),
        });
        Ok(self.with_evidence(
            value,
            "spice.ac",
            "AC frequency response",
            &netlist,
            &args.netlist,
            &run,
            quantities,
            Some("ac.txt"),
        ))
    }

    async fn transient(&self, args: TransientArgs) -> Result<ToolOutput, Refusal> {
        let netlist = Netlist::check(&args.netlist)?;
        if !(args.step_s > 0.0 && args.stop_s > 0.0 && args.stop_s.is_finite()) {
            return Err(Refusal::argument("step_s", "need step_s > 0 and stop_s > 0"));
        }
        if args.stop_s / args.step_s > MAX_ANALYSIS_POINTS * 5.0 {
            return Err(Refusal::argument(
                "step_s",
                format!("stop_s / step_s may be at most {}", MAX_ANALYSIS_POINTS * 5.0),
            ));
        }
        let max_step = args.max_step_s.unwrap_or(args.step_s);
        if max_step <= 0.0 {
            return Err(Refusal::argument("max_step_s", "must be positive"));
        }
        let outputs = outputs(&netlist, args.outputs.as_deref())?;
        let limit = point_limit(args.max_points)?;
        let vectors: Vec<String> = outputs.iter().map(|n| format!("v({n})")).collect();
        let control = vec![
            format!("tran {} {} 0 {}", args.step_s, args.stop_s, max_step),
            format!("wrdata tran.txt {}", vectors.join(" ")),
        ];
        let run = self.simulate(&netlist, &control, &["tran.txt"]).await?;
        let rows = results::table(run.files.get("tran.txt").map_or("", String::as_str));
        let mut series = Map::new();
        let mut quantities = Vec::new();
        for (i, node) in outputs.iter().enumerate() {
            let points = column_pairs(&rows, i);
            let min = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
            let max = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
            let last = points.last().map(|p| p.1);
            quantities.push(quantity(
                format!("min_v({node})"),
                QuantityKind::Voltage,
                min,
                "V",
            ));
            quantities.push(quantity(
                format!("max_v({node})"),
                QuantityKind::Voltage,
                max,
                "V",
            ));
            if let Some(last) = last {
                quantities.push(quantity(
                    format!("final_v({node})"),
                    QuantityKind::Voltage,
                    last,
                    "V",
                ));
            }
            series.insert(
                node.clone(),
                json!({
                    "min_v": min, "max_v": max, "final_v": last,
                    "points": results::downsample(&points, limit)
                        .iter()
                        .map(|(t, v)| json!({"t_s": t, "v": v}))
                        .collect::<Vec<_>>(),
                }),
            );
        }
        let measurements = measurements(&netlist, &run);
        let value = json!({
            "analysis": "transient",
            "units": {"t_s": "s", "v": "V"},
            "computed_points": rows.len(),
            "nodes": series,
            "measurements": measurements,
            "run": self.provenance(&args.netlist, &run),
        });
        Ok(self.with_evidence(
            value,
            "spice.transient",
            "Transient response",
            &netlist,
            &args.netlist,
            &run,
            quantities,
            Some("tran.txt"),
        ))
    }
}

/// The netlist's `.meas` results ngspice printed for the analysis that ran (`name = value`
/// lines that are not node voltages).
fn measurements(netlist: &Netlist, run: &RunOutput) -> BTreeMap<String, f64> {
    results::assignments(&run.output)
        .into_iter()
        .filter(|(name, _)| !netlist.has_node(name))
        .collect()
}

#[async_trait]
impl ToolHost for SpiceHost {
    fn tools(&self, _caller: CallerClass) -> Vec<ToolDescriptor> {
        Self::descriptors()
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        self.run_tool(tool, arguments).await
    }
}

/// The nodes reported: the caller's, each checked, or every node (at most [`MAX_OUTPUTS`]).
fn outputs(netlist: &Netlist, asked: Option<&[String]>) -> Result<Vec<String>, Refusal> {
    match asked {
        Some([]) | None => {
            if netlist.nodes.len() > MAX_OUTPUTS {
                return Err(Refusal::argument(
                    "outputs",
                    format!(
                        "the circuit has {} nodes: name at most {MAX_OUTPUTS} to report",
                        netlist.nodes.len()
                    ),
                ));
            }
            Ok(netlist.nodes.clone())
        }
        Some(nodes) => {
            if nodes.len() > MAX_OUTPUTS {
                return Err(Refusal::argument(
                    "outputs",
                    format!("at most {MAX_OUTPUTS} nodes"),
                ));
            }
            for node in nodes {
                if !netlist.has_node(node) {
                    return Err(Refusal::argument(
                        "outputs",
                        format!(
                            "{node} is not a node of the circuit (its nodes: {})",
                            netlist.nodes.join(", ")
                        ),
                    ));
                }
            }
            Ok(nodes.to_vec())
        }
    }
}

fn point_limit(asked: Option<usize>) -> Result<usize, Refusal> {
    match asked {
        None => Ok(DEFAULT_POINTS),
        Some(n) if (4..=MAX_POINTS).contains(&n) => Ok(n),
        Some(_) => Err(Refusal::argument("max_points", format!("from 4 to {MAX_POINTS}"))),
    }
}

fn sweep_points(start: f64, stop: f64, step: f64) -> Result<f64, Refusal> {
    if !(start.is_finite() && stop.is_finite() && step.is_finite()) || step == 0.0 {
        return Err(Refusal::argument(
            "step",
            "start, stop and a non-zero step must be numbers",
        ));
    }
    let points = (stop - start) / step;
    if points < 0.0 {
        return Err(Refusal::argument("step", "must go from start towards stop"));
    }
    if points > MAX_ANALYSIS_POINTS {
        return Err(Refusal::argument(
            "step",
            format!("the sweep may have at most {MAX_ANALYSIS_POINTS} points"),
        ));
    }
    Ok(points.floor() + 1.0)
}

/// Column pair `index` of a `wrdata` table: each row's `(scale, value)` of that vector.
fn column_pairs(rows: &[Vec<f64>], index: usize) -> Vec<(f64, f64)> {
    rows.iter()
        .filter_map(|row| Some((*row.get(2 * index)?, *row.get(2 * index + 1)?)))
        .collect()
}
