//! `metaforge tool-server cad`: parts modelled in FreeCAD (`freecadcmd`, no window), one
//! sandboxed FreeCAD process per modelling session running a fixed driver (`driver.py`: the
//! server sends only its closed set of operations, never code). A session's objects are
//! `sketch_N` and `part_N`, ids of that session only — never twin node ids: a part becomes a
//! work product when it is exported and staged.
//!
//! Tools (all touch only the session's own scratch directory; a design file is read from the
//! server's workspace and never written):
//! - `freecad.open_session` / `freecad.close_session` (idle sessions are closed by the server);
//! - `freecad.create_sketch` — closed profiles (lines and arcs, circles; the first loop the
//!   outline, the rest holes) or one open path on the XY, XZ or YZ plane at an offset;
//! - `freecad.pad_sketch`, `freecad.pocket_sketch`, `freecad.revolve_sketch`,
//!   `freecad.loft_sketches`, `freecad.sweep_sketch` — solids from sketches;
//! - `freecad.fillet_edges`, `freecad.chamfer_edges` (edges by selector), `freecad.boolean`
//!   (union, cut, intersection), `freecad.place` (move and turn a copy);
//! - `freecad.import_step` (a STEP file of the workspace), `freecad.export_model` (STEP, or STL
//!   with a tolerance; the file comes back as evidence);
//! - `freecad.measure` — volume, area, bounding box, centre of mass, mass from a density;
//! - `freecad.list_objects`, and `freecad.list_joints`, which says FreeCAD 0.20 has no
//!   assembly joints rather than listing none.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use metaforge_ports::{
    CallerClass, CallerContext, HostCallOutcome, PortError, ProgramVersion, QuantityKind, ToolDescriptor,
    ToolEvidence, ToolHints, ToolHost, ToolOutput,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::answer::{Refusal, answer, descriptor_with, parse, quantity, sha256, unknown_tool};
use crate::live::LiveProgram;
use crate::runner::{RunError, Runner};
use crate::workspace::{DesignWorkspace, no_workspace};

/// The driver run inside FreeCAD; fixed, shipped with the server.
const DRIVER: &str = include_str!("driver.py");

/// What marks the driver's answers among FreeCAD's own printing.
const MARKER: &str = "@@metaforge ";

/// The largest STEP file imported (bytes).
pub const MAX_STEP_BYTES: u64 = 64 * 1024 * 1024;

/// The workspace directory exports are shared in.
pub const EXPORTS_DIR: &str = "exports";

/// The deliverable an exported model is evidence for.
const CAD_MODEL: &str = "cad_model";

/// Authoring: the tools change their session's scratch state only, never a design file.
const AUTHORING: ToolHints = ToolHints {
    read_only_hint: Some(false),
    destructive_hint: Some(false),
    idempotent_hint: Some(false),
    open_world_hint: Some(false),
};

/// How long sessions live and how many there may be.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// A session unused this long is closed.
    pub idle: Duration,
    /// The most sessions open at once.
    pub max_sessions: usize,
    /// How long FreeCAD may take to start.
    pub start_wait: Duration,
    /// How long one operation may take (the session is closed when it does not answer).
    pub operation_wait: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(900),
            max_sessions: 8,
            start_wait: Duration::from_secs(60),
            operation_wait: Duration::from_secs(120),
        }
    }
}

struct Session {
    program: LiveProgram,
    last_used: Instant,
}

/// The CAD tool server.
pub struct CadHost {
    runner: Arc<Runner>,
    workspace: Option<DesignWorkspace>,
    limits: SessionLimits,
    sessions: Mutex<BTreeMap<String, Arc<Mutex<Session>>>>,
    opened: AtomicU64,
    version: Mutex<String>,
    /// Where exports are also written for the other tool servers (`<workspace>/exports`), when
    /// the server was started with `--write-exports`.
    exports: Option<PathBuf>,
}

/// The session an operation works in.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionArgs {
    /// The session (`freecad.open_session`'s answer).
    pub session_id: String,
}

/// A point of a sketch on its plane, `[u, v]` in mm (XY: x, y; XZ: x, z; YZ: y, z).
type Point2 = [f64; 2];

/// One segment of a profile, from where the previous one ended.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Segment {
    /// A straight line to a point.
    Line {
        /// Where the line ends.
        line_to: Point2,
    },
    /// A circular arc to a point through another.
    Arc {
        /// Where the arc ends.
        arc_to: Point2,
        /// A point the arc passes through.
        through: Point2,
    },
}

/// A circle.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Circle {
    /// Its centre.
    pub centre: Point2,
    /// Its radius (mm).
    pub radius_mm: f64,
}

/// One loop of a sketch: a circle, or a start and segments (a closed loop ends where it starts).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Loop {
    /// A circle.
    Circle {
        /// The circle.
        circle: Circle,
    },
    /// Lines and arcs from a start point.
    Profile {
        /// Where it starts.
        start: Point2,
        /// Its segments in order.
        segments: Vec<Segment>,
    },
}

/// `freecad.create_sketch`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SketchArgs {
    /// The session.
    pub session_id: String,
    /// The plane: XY (normal +z), XZ (normal +y) or YZ (normal +x).
    pub plane: String,
    /// The plane's offset along its normal (mm).
    #[serde(default)]
    pub offset_mm: f64,
    /// The loops: the first is the outline, the others holes in it; an open sketch (a sweep
    /// path) has one.
    pub loops: Vec<Loop>,
    /// False for an open path (a sweep's); default true.
    #[serde(default = "yes")]
    pub closed: bool,
}

fn yes() -> bool {
    true
}

/// `freecad.pad_sketch`: a closed sketch extruded along its plane's normal.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PadArgs {
    /// The session.
    pub session_id: String,
    /// The closed sketch.
    pub sketch: String,
    /// How far (mm).
    pub length_mm: f64,
    /// Extrude against the normal.
    #[serde(default)]
    pub reversed: bool,
}

/// `freecad.pocket_sketch`: a closed sketch's extrusion cut from a part.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PocketArgs {
    /// The session.
    pub session_id: String,
    /// The part cut.
    pub part: String,
    /// The closed sketch.
    pub sketch: String,
    /// How deep (mm), unless `through_all`.
    #[serde(default)]
    pub depth_mm: Option<f64>,
    /// Cut through the whole part.
    #[serde(default)]
    pub through_all: bool,
    /// Cut against the sketch plane's normal (into a part that lies below the sketch).
    #[serde(default)]
    pub reversed: bool,
}

/// `freecad.revolve_sketch`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RevolveArgs {
    /// The session.
    pub session_id: String,
    /// The closed sketch.
    pub sketch: String,
    /// A point of the axis (mm; default the origin).
    #[serde(default)]
    pub axis_point_mm: Option<[f64; 3]>,
    /// The axis's direction.
    pub axis_direction: [f64; 3],
    /// The angle (degrees, up to 360; default 360).
    #[serde(default)]
    pub angle_deg: Option<f64>,
}

/// `freecad.loft_sketches`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoftArgs {
    /// The session.
    pub session_id: String,
    /// The closed sketches, in order (at least two).
    pub sketches: Vec<String>,
    /// Straight faces between the profiles instead of smooth ones.
    #[serde(default)]
    pub ruled: bool,
}

/// `freecad.sweep_sketch`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepArgs {
    /// The session.
    pub session_id: String,
    /// The closed profile.
    pub sketch: String,
    /// The path: an open sketch.
    pub path: String,
}

/// Which edges of a part: `"all"`, `{"parallel_to": "x"|"y"|"z"}` (straight edges along an
/// axis) or `{"indices": [1, 2]}` (FreeCAD's edge numbers).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum EdgeSelector {
    /// `"all"`.
    All(String),
    /// Straight edges along an axis.
    Parallel {
        /// x, y or z.
        parallel_to: String,
    },
    /// By number.
    Indices {
        /// FreeCAD's edge numbers, from 1.
        indices: Vec<u32>,
    },
}

/// `freecad.fillet_edges`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilletArgs {
    /// The session.
    pub session_id: String,
    /// The part.
    pub part: String,
    /// The radius (mm).
    pub radius_mm: f64,
    /// The edges.
    pub edges: EdgeSelector,
}

/// `freecad.chamfer_edges`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChamferArgs {
    /// The session.
    pub session_id: String,
    /// The part.
    pub part: String,
    /// The chamfer's size (mm).
    pub size_mm: f64,
    /// The edges.
    pub edges: EdgeSelector,
}

/// `freecad.boolean`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BooleanArgs {
    /// The session.
    pub session_id: String,
    /// union, cut or intersection.
    pub operation: String,
    /// The part operated on.
    pub base: String,
    /// The part united with, cut away or intersected.
    pub tool: String,
}

/// A turn about an axis.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rotation {
    /// A point of the axis (mm; default the origin).
    #[serde(default)]
    pub point_mm: Option<[f64; 3]>,
    /// The axis's direction.
    pub axis: [f64; 3],
    /// The angle (degrees).
    pub angle_deg: f64,
}

/// `freecad.place`: a moved (and turned) copy of a part.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlaceArgs {
    /// The session.
    pub session_id: String,
    /// The part.
    pub part: String,
    /// The move (mm), after the turn.
    #[serde(default)]
    pub translate_mm: Option<[f64; 3]>,
    /// The turn.
    #[serde(default)]
    pub rotate: Option<Rotation>,
}

/// `freecad.import_step`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportArgs {
    /// The session.
    pub session_id: String,
    /// The STEP file, relative to the workspace.
    pub path: String,
}

/// `freecad.export_model`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExportArgs {
    /// The session.
    pub session_id: String,
    /// The part.
    pub part: String,
    /// step or stl.
    pub format: String,
    /// The file name (`bracket.step`, `bracket.stl`).
    pub name: String,
    /// STL only: the largest distance of the facets from the surface (mm).
    #[serde(default)]
    pub tolerance_mm: Option<f64>,
}

/// `freecad.measure`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MeasureArgs {
    /// The session.
    pub session_id: String,
    /// The part.
    pub part: String,
    /// The material's density (kg/m³), for the mass.
    #[serde(default)]
    pub density_kg_m3: Option<f64>,
}

/// `freecad.list_joints`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JointsArgs {
    /// The session.
    pub session_id: String,
    /// The assembly.
    #[serde(default)]
    pub assembly: Option<String>,
}

/// An operation's arguments as the driver gets them: everything but the session, and no field
/// the caller left out (the driver applies its defaults).
fn driver_args<T: Serialize>(args: &T) -> Value {
    fn without_nulls(value: &mut Value) {
        if let Some(object) = value.as_object_mut() {
            object.retain(|_, v| !v.is_null());
            object.values_mut().for_each(without_nulls);
        }
    }
    let mut value = serde_json::to_value(args).unwrap_or(Value::Null);
    if let Some(object) = value.as_object_mut() {
        object.remove("session_id");
    }
    without_nulls(&mut value);
    value
}

impl CadHost {
    /// The tools over `runner` (FreeCAD's `freecadcmd`), importing STEP files from `workspace`.
    pub fn new(runner: Runner, workspace: Option<PathBuf>, limits: SessionLimits) -> Self {
        Self {
            runner: Arc::new(runner),
            workspace: workspace.map(DesignWorkspace::new),
            limits,
            sessions: Mutex::new(BTreeMap::new()),
            opened: AtomicU64::new(0),
            version: Mutex::new(String::new()),
            exports: None,
        }
    }

    /// Also writes every export to `<workspace>/exports/` (the directory the servers-file
    /// entry binds writable), where another tool server reading the same workspace finds it:
    /// a part modelled here is meshed and solved by `fea.*` as `exports/<name>`.
    #[must_use]
    pub fn with_exports_in_workspace(mut self, workspace: PathBuf) -> Self {
        self.exports = Some(workspace.join(EXPORTS_DIR));
        self
    }

    /// Closes, every quarter of the idle limit, the sessions unused for longer than it, until
    /// the host is dropped.
    pub fn reap_idle_sessions(self: &Arc<Self>) {
        let host: Weak<Self> = Arc::downgrade(self);
        let every = (self.limits.idle / 4).max(Duration::from_secs(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(host) = host.upgrade() else { return };
                host.close_idle().await;
            }
        });
    }

    /// Closes the sessions unused for longer than the idle limit.
    pub async fn close_idle(&self) {
        let now = Instant::now();
        let mut idle = Vec::new();
        {
            let sessions = self.sessions.lock().await;
            for (id, session) in sessions.iter() {
                // A session busy with an operation is in use.
                if let Ok(session) = session.try_lock()
                    && now.duration_since(session.last_used) > self.limits.idle
                {
                    idle.push(id.clone());
                }
            }
        }
        for id in idle {
            if let Some(session) = self.sessions.lock().await.remove(&id) {
                tracing::info!(event = "cad_session_closed", session_id = %id, reason = "idle", "a CAD session unused past its idle limit was closed");
                stop(session).await;
            }
        }
    }

    async fn open(&self) -> Result<Value, Refusal> {
        let open = self.sessions.lock().await.len();
        if open >= self.limits.max_sessions {
            return Err(Refusal::argument(
                "session",
                format!(
                    "{open} sessions are open, the most this server keeps: close one with freecad.close_session"
                ),
            ));
        }
        let started = Instant::now();
        let (program, greeting) = self
            .runner
            .start(
                &[("driver.py", DRIVER)],
                &["driver.py".to_owned()],
                MARKER,
                self.limits.start_wait,
            )
            .await?;
        let greeting: Value = serde_json::from_str(&greeting).unwrap_or(Value::Null);
        let version = greeting["freecad_version"].as_str().unwrap_or("").to_owned();
        *self.version.lock().await = version.clone();
        let id = format!("session_{}", self.opened.fetch_add(1, Ordering::Relaxed) + 1);
        self.sessions.lock().await.insert(
            id.clone(),
            Arc::new(Mutex::new(Session {
                program,
                last_used: Instant::now(),
            })),
        );
        tracing::info!(event = "cad_session_opened", session_id = %id, "a CAD session was opened");
        Ok(json!({
            "session_id": id,
            "freecad_version": version,
            "idle_close_s": self.limits.idle.as_secs(),
            "elapsed_ms": millis(started),
        }))
    }

    async fn session(&self, id: &str) -> Result<Arc<Mutex<Session>>, Refusal> {
        let sessions = self.sessions.lock().await;
        sessions.get(id).cloned().ok_or_else(|| {
            let open: Vec<&str> = sessions.keys().map(String::as_str).collect();
            Refusal::argument(
                "session_id",
                format!(
                    "{id} is no open session (open: {}); sessions close after {} s unused: open one with freecad.open_session",
                    if open.is_empty() { "none".to_owned() } else { open.join(", ") },
                    self.limits.idle.as_secs()
                ),
            )
        })
    }

    async fn close(&self, id: &str) -> Result<Value, Refusal> {
        let session = self.session(id).await?;
        self.sessions.lock().await.remove(id);
        stop(session).await;
        tracing::info!(event = "cad_session_closed", session_id = %id, reason = "asked", "a CAD session was closed");
        Ok(json!({"session_id": id, "closed": true}))
    }

    /// Runs `op` with `args` in session `id`: the driver's result, with the session and the time.
    async fn operate(&self, id: &str, op: &str, args: Value) -> Result<Value, Refusal> {
        let session = self.session(id).await?;
        let mut session = session.lock().await;
        self.operate_in(&mut session, id, op, args).await
    }

    async fn operate_in(
        &self,
        session: &mut Session,
        id: &str,
        op: &str,
        args: Value,
    ) -> Result<Value, Refusal> {
        let started = Instant::now();
        let request = json!({"op": op, "args": args}).to_string();
        let answer = match session
            .program
            .ask(&request, MARKER, self.limits.operation_wait)
            .await
        {
            Ok(answer) => answer,
            Err(e) => {
                // The session's FreeCAD is gone or stuck: it is closed.
                self.sessions.lock().await.remove(id);
                tracing::warn!(event = "cad_session_closed", session_id = %id, reason = %e, "a CAD session's FreeCAD ended or stopped answering");
                return Err(e.into());
            }
        };
        session.last_used = Instant::now();
        let answer: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
        if answer["ok"] == true {
            let mut result = answer["result"].clone();
            if let Some(object) = result.as_object_mut() {
                object.insert("session_id".to_owned(), json!(id));
                object.insert("elapsed_ms".to_owned(), json!(millis(started)));
            }
            Ok(result)
        } else {
            let field = answer["field"].as_str().unwrap_or("");
            let message = answer["message"]
                .as_str()
                .unwrap_or("FreeCAD gave no reason")
                .to_owned();
            Err(match answer["error"].as_str() {
                Some("invalid_arguments") => Refusal::argument(field, message),
                code => Refusal::Modelling {
                    error: code.unwrap_or("freecad_failed").to_owned(),
                    field: field.to_owned(),
                    message,
                },
            })
        }
    }

    async fn import(&self, args: ImportArgs) -> Result<Value, Refusal> {
        let workspace = self
            .workspace
            .as_ref()
            .ok_or_else(|| no_workspace("path", "cad"))?;
        let file = workspace.read("path", &args.path, MAX_STEP_BYTES)?;
        let name = file
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "part.step".to_owned());
        let session = self.session(&args.session_id).await?;
        let mut session = session.lock().await;
        let imports = session.program.scratch().join("imports");
        std::fs::create_dir_all(&imports)
            .and_then(|()| std::fs::write(imports.join(&name), &file.text))
            .map_err(|e| RunError::Start(format!("the session's scratch directory: {e}")))?;
        let mut result = self
            .operate_in(
                &mut session,
                &args.session_id,
                "import_step",
                json!({"file": name}),
            )
            .await?;
        if let Some(object) = result.as_object_mut() {
            object.insert("path".to_owned(), json!(args.path));
            object.insert("sha256".to_owned(), json!(sha256(&file.text)));
        }
        Ok(result)
    }

    async fn export(&self, args: ExportArgs) -> Result<ToolOutput, Refusal> {
        let extensions: &[&str] = match args.format.as_str() {
            "step" => &[".step", ".stp"],
            "stl" => &[".stl"],
            _ => return Err(Refusal::argument("format", "step or stl")),
        };
        let plain = !args.name.is_empty()
            && args
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !plain
            || !extensions
                .iter()
                .any(|e| args.name.to_ascii_lowercase().ends_with(e))
        {
            return Err(Refusal::argument(
                "name",
                format!(
                    "a plain file name (letters, digits, . _ -) ending in {}",
                    extensions.join(" or ")
                ),
            ));
        }
        if args.format == "stl" && args.tolerance_mm.is_none() {
            return Err(Refusal::argument(
                "tolerance_mm",
                "an STL export needs its tolerance (the largest distance of a facet from the surface, mm)",
            ));
        }
        let session = self.session(&args.session_id).await?;
        let mut session = session.lock().await;
        let request = json!({"part": args.part, "format": args.format, "name": args.name, "tolerance_mm": args.tolerance_mm});
        let result = self
            .operate_in(&mut session, &args.session_id, "export_model", request)
            .await?;
        let path = session.program.scratch().join("exports").join(&args.name);
        let text = std::fs::read_to_string(&path).map_err(|e| Refusal::Modelling {
            error: "export_failed".to_owned(),
            field: "name".to_owned(),
            message: format!("FreeCAD wrote no readable {}: {e}", args.name),
        })?;
        let media_type = if args.format == "step" {
            "model/step"
        } else {
            "model/stl"
        };
        let file = metaforge_ports::FileText {
            name: args.name.clone(),
            media_type: media_type.to_owned(),
            text,
        };
        let entry = file.entry();
        let mut value = result;
        if let Some(dir) = &self.exports {
            std::fs::create_dir_all(dir)
                .and_then(|()| std::fs::write(dir.join(&args.name), &file.text))
                .map_err(|e| Refusal::Modelling {
                    error: "export_failed".to_owned(),
                    field: "name".to_owned(),
                    message: format!(
                        "{} could not be written to the workspace's {EXPORTS_DIR}/ (is the entry's workspace_access \"rw\"?): {e}",
                        args.name
                    ),
                })?;
            if let Some(object) = value.as_object_mut() {
                object.insert(
                    "workspace_path".to_owned(),
                    json!(format!("{EXPORTS_DIR}/{}", args.name)),
                );
            }
        }
        if let Some(object) = value.as_object_mut() {
            object.insert("bytes".to_owned(), json!(entry.bytes));
            object.insert("sha256".to_owned(), json!(entry.sha256));
        }
        let evidence = ToolEvidence {
            tool: "freecad.export_model".to_owned(),
            artifact: CAD_MODEL.to_owned(),
            title: format!("{} exported as {}", args.part, args.name),
            programs: vec![ProgramVersion {
                name: "freecad".to_owned(),
                version: self.version.lock().await.clone(),
            }],
            input_sha256: entry.sha256.clone(),
            sandbox: self.runner.sandbox_report(),
            quantities: Vec::new(),
            files: vec![entry],
        };
        Ok(ToolOutput::with_evidence(value, &evidence, &[file]))
    }

    async fn measure(&self, args: MeasureArgs) -> Result<ToolOutput, Refusal> {
        let result = self
            .operate(&args.session_id, "measure", driver_args(&args))
            .await?;
        let Some(mass) = result["mass_kg"].as_f64() else {
            return Ok(ToolOutput::json(result));
        };
        let evidence = ToolEvidence {
            tool: "freecad.measure".to_owned(),
            artifact: CAD_MODEL.to_owned(),
            title: format!("Mass properties of {}", args.part),
            programs: vec![ProgramVersion {
                name: "freecad".to_owned(),
                version: self.version.lock().await.clone(),
            }],
            input_sha256: sha256(&driver_args(&args).to_string()),
            sandbox: self.runner.sandbox_report(),
            quantities: vec![quantity(
                format!("mass({})", args.part),
                QuantityKind::Mass,
                mass,
                "kg",
            )],
            files: Vec::new(),
        };
        Ok(ToolOutput::with_evidence(result, &evidence, &[]))
    }
}

async fn stop(session: Arc<Mutex<Session>>) {
    if let Ok(session) = Arc::try_unwrap(session) {
        session.into_inner().program.stop().await;
    }
}

fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[async_trait]
impl ToolHost for CadHost {
    fn tools(&self, _caller: CallerClass) -> Vec<ToolDescriptor> {
        let tool = |name, title, description, schema: fn() -> Value| {
            descriptor_with(name, title, description, schema(), AUTHORING)
        };
        vec![
            tool(
                "freecad.open_session",
                "Open a CAD session",
                "Start a FreeCAD modelling session (its own sandboxed FreeCAD); its sketches and parts live until freecad.close_session or until it is left unused.",
                || json!({"type": "object", "properties": {}, "additionalProperties": false}),
            ),
            tool(
                "freecad.close_session",
                "Close a CAD session",
                "Close a FreeCAD session; its sketches and parts are gone (export what you need first).",
                schema::<SessionArgs>,
            ),
            tool(
                "freecad.create_sketch",
                "Create a sketch",
                "A sketch on the XY, XZ or YZ plane: closed loops of lines and arcs or circles (the first the outline, the others holes), or one open path for a sweep. A loop that does not end where it starts is refused.",
                schema::<SketchArgs>,
            ),
            tool(
                "freecad.pad_sketch",
                "Pad a sketch",
                "Extrude a closed sketch along its plane's normal into a new part.",
                schema::<PadArgs>,
            ),
            tool(
                "freecad.pocket_sketch",
                "Pocket a sketch",
                "Cut a closed sketch's extrusion (a depth, or through all) from a part: a new part.",
                schema::<PocketArgs>,
            ),
            tool(
                "freecad.revolve_sketch",
                "Revolve a sketch",
                "Revolve a closed sketch about an axis into a new part.",
                schema::<RevolveArgs>,
            ),
            tool(
                "freecad.loft_sketches",
                "Loft sketches",
                "A solid lofted through two or more closed sketches in order.",
                schema::<LoftArgs>,
            ),
            tool(
                "freecad.sweep_sketch",
                "Sweep a sketch",
                "Sweep a closed profile along an open path sketch into a new part.",
                schema::<SweepArgs>,
            ),
            tool(
                "freecad.fillet_edges",
                "Fillet edges",
                "Round a part's edges (all, those along an axis, or by number) with a radius: a new part.",
                schema::<FilletArgs>,
            ),
            tool(
                "freecad.chamfer_edges",
                "Chamfer edges",
                "Bevel a part's edges (all, those along an axis, or by number): a new part.",
                schema::<ChamferArgs>,
            ),
            tool(
                "freecad.boolean",
                "Boolean of two parts",
                "Union, cut or intersection of two parts: a new part.",
                schema::<BooleanArgs>,
            ),
            tool(
                "freecad.place",
                "Place a part",
                "A copy of a part turned about an axis and moved: a new part.",
                schema::<PlaceArgs>,
            ),
            tool(
                "freecad.import_step",
                "Import a STEP file",
                "Read a STEP file of the workspace into the session as a part.",
                schema::<ImportArgs>,
            ),
            tool(
                "freecad.export_model",
                "Export a part",
                "Export a part as STEP, or STL with a tolerance; the file comes back as evidence (stage it to keep it).",
                schema::<ExportArgs>,
            ),
            tool(
                "freecad.measure",
                "Measure a part",
                "A part's volume, surface area, bounding box and centre of mass (mm), and its mass from a density.",
                schema::<MeasureArgs>,
            ),
            tool(
                "freecad.list_objects",
                "List a session's objects",
                "The sketches and parts of a session.",
                schema::<SessionArgs>,
            ),
            tool(
                "freecad.list_joints",
                "List an assembly's joints",
                "The joints of an assembly, where the installed FreeCAD has assemblies with joints (1.0 or later); otherwise an error saying so.",
                schema::<JointsArgs>,
            ),
        ]
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        let json_of = |r: Result<Value, Refusal>| r.map(ToolOutput::json);
        let result = match tool {
            "freecad.open_session" => json_of(self.open().await),
            "freecad.close_session" => json_of(
                self.close(&parse::<SessionArgs>(tool, arguments)?.session_id)
                    .await,
            ),
            "freecad.create_sketch" => {
                json_of(self.op::<SketchArgs>(tool, arguments, "create_sketch").await?)
            }
            "freecad.pad_sketch" => json_of(self.op::<PadArgs>(tool, arguments, "pad_sketch").await?),
            "freecad.pocket_sketch" => {
                json_of(self.op::<PocketArgs>(tool, arguments, "pocket_sketch").await?)
            }
            "freecad.revolve_sketch" => {
                json_of(self.op::<RevolveArgs>(tool, arguments, "revolve_sketch").await?)
            }
            "freecad.loft_sketches" => json_of(self.op::<LoftArgs>(tool, arguments, "loft_sketches").await?),
            "freecad.sweep_sketch" => json_of(self.op::<SweepArgs>(tool, arguments, "sweep_sketch").await?),
            "freecad.fillet_edges" => json_of(self.op::<FilletArgs>(tool, arguments, "fillet_edges").await?),
            "freecad.chamfer_edges" => {
                json_of(self.op::<ChamferArgs>(tool, arguments, "chamfer_edges").await?)
            }
            "freecad.boolean" => json_of(self.op::<BooleanArgs>(tool, arguments, "boolean").await?),
            "freecad.place" => json_of(self.op::<PlaceArgs>(tool, arguments, "place").await?),
            "freecad.list_objects" => json_of(self.op::<SessionArgs>(tool, arguments, "list_objects").await?),
            "freecad.import_step" => json_of(self.import(parse(tool, arguments)?).await),
            "freecad.export_model" => self.export(parse(tool, arguments)?).await,
            "freecad.measure" => self.measure(parse(tool, arguments)?).await,
            "freecad.list_joints" => {
                let args: JointsArgs = parse(tool, arguments)?;
                match self.session(&args.session_id).await {
                    Ok(_) => Err(Refusal::Modelling {
                        error: "joints_unavailable".to_owned(),
                        field: "assembly".to_owned(),
                        message: format!(
                            "FreeCAD {} has no assemblies with joints (its Assembly workbench arrives in FreeCAD 1.0): this server lists none rather than an empty list",
                            self.version.lock().await
                        ),
                    }),
                    Err(refusal) => Err(refusal),
                }
            }
            other => return Err(unknown_tool(other)),
        };
        Ok(answer(tool, result))
    }
}

impl CadHost {
    /// Parses `T` and runs driver operation `op` in its session.
    async fn op<T>(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        op: &str,
    ) -> Result<Result<Value, Refusal>, PortError>
    where
        T: serde::de::DeserializeOwned + Serialize + SessionOf,
    {
        let args: T = parse(tool, arguments)?;
        Ok(self.operate(args.session_id(), op, driver_args(&args)).await)
    }
}

/// The session an operation's arguments name.
trait SessionOf {
    fn session_id(&self) -> &str;
}

macro_rules! session_of {
    ($($t:ty),*) => {$(impl SessionOf for $t { fn session_id(&self) -> &str { &self.session_id } })*};
}
session_of!(
    SketchArgs,
    PadArgs,
    PocketArgs,
    RevolveArgs,
    LoftArgs,
    SweepArgs,
    FilletArgs,
    ChamferArgs,
    BooleanArgs,
    PlaceArgs,
    SessionArgs
);

/// The input schema of `T`.
fn schema<T: JsonSchema>() -> Value {
    crate::answer::schema_of::<T>()
}
