//! The run use cases both doors call (issue 16 item 6): the HTTP gateway's `/v1/runs` and
//! `/v1/client-tasks` routes, and the MCP sidecar's run tools. Door-neutral: no HTTP types, one
//! typed error ([`RunServiceError`]) with one code table, so a refusal reads the same through
//! either door.
//!
//! The service never re-decides what the run's state machine decides: which decisions a gate
//! allows, whether it is ready, the approval reason and every refusal come from
//! `metaforge_domain::run` through the engine; the service only turns requests into engine calls
//! and engine answers into views. A refused start records nothing: the version is checked by the
//! engine before the run is created, and an engine that is not running is asked nothing.

use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use metaforge_api::{GateDecisionBody, StartRunBody};
use metaforge_domain::flow::{
    DEFAULT_TEMPLATE_ID, TemplateError, VersionError, Violation, template, template_version,
};
use metaforge_domain::run::{FrozenFlow, RunRefusal};
use metaforge_domain::usage::UsageTotals;
use metaforge_ports::{
    Claimant, ClientTaskStatus, ClientTaskStore, Clock, DecisionSurface, FlowEngine, FlowEngineKind,
    FlowVersionRecord, FlowVersionStore, GateAnswer, GateDecision, GateDecisionKind, IdGen, IntelligenceMode,
    OpenGate, PortError, PortErrorKind, RunLedger, RunRecord, RunSettings, RunStatus, RunView, StartRun,
    UsageStore,
};
use serde_json::{Value, json};

use super::notices::RunNotice;
use super::settings::resolve_intelligence;
use super::views::{
    ClientTaskView, FlowStateView, GateView, PhaseView, RunDetail, RunStatusEntry, RunSummary, UNKNOWN_STATUS,
};

/// A run's notices for one watcher: the persisted backlog first, then live ones, each once, in
/// `(seq, index)` order; it ends when the run has ended.
pub type RunNoticeStream = BoxStream<'static, RunNotice>;

pub use metaforge_ports::WorkerHealth;

/// The flow engine as the run service drives it: the `FlowEngine` port, plus the two things a
/// door needs from the engine that the port does not carry — a run's notice stream (SSE, MCP
/// watchers) and whether its worker runs — so the service never names a concrete engine.
/// Implemented by [`super::EmbeddedEngine`] and [`super::UnavailableEngine`].
#[async_trait]
pub trait RunEngine: FlowEngine {
    /// The run's notices after the key `after` (`(seq, index)`; `(0, 0)` for all of them), then
    /// live ones until the run ends. `None`: live ones only. `NotFound` for an unknown run.
    async fn notices(&self, run_id: &str, after: Option<(u64, u32)>) -> Result<RunNoticeStream, PortError>;

    /// Whether runs can be started and answered now.
    async fn worker(&self) -> WorkerHealth;
}

/// The SSE event id of a notice, `seq.index`: a watcher reconnecting with it as `Last-Event-ID`
/// resumes right after it.
pub fn event_id(notice: &RunNotice) -> String {
    format!("{}.{}", notice.seq, notice.index)
}

/// Reads an event id written by [`event_id`] (`None` when it is not `seq.index`).
pub fn parse_event_id(text: &str) -> Option<(u64, u32)> {
    let (seq, index) = text.trim().split_once('.')?;
    Some((seq.parse().ok()?, index.parse().ok()?))
}

/// The ports the service reads and writes besides the engine.
#[derive(Clone)]
pub struct RunServicePorts {
    /// The run ledger (records, history, transitions).
    pub runs: Arc<dyn RunLedger>,
    /// Flow versions: a run starts on a stored version; a shipped template is frozen into one.
    pub versions: Arc<dyn FlowVersionStore>,
    /// Client tasks (client intelligence).
    pub tasks: Arc<dyn ClientTaskStore>,
    /// Model-call usage, read per run.
    pub usage: Arc<dyn UsageStore>,
    /// Time (claims, submissions, a template's version).
    pub clock: Arc<dyn Clock>,
    /// Ids (new runs).
    pub ids: Arc<dyn IdGen>,
}

/// The deployment's run settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunServiceSettings {
    /// `METAFORGE_INTELLIGENCE` (parsed by [`super::parse_intelligence`]): a run request's
    /// `intelligence` wins, else this.
    pub default_intelligence: IntelligenceMode,
    /// Every new run's bounds (rework cap, phase retries, gate timeout).
    pub run: RunSettings,
}

impl Default for RunServiceSettings {
    /// Server intelligence (the seed's default) and the default run bounds.
    fn default() -> Self {
        Self {
            default_intelligence: IntelligenceMode::Server,
            run: RunSettings::default(),
        }
    }
}

/// Which runs to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs of this project.
    pub project_id: Option<String>,
}

/// A client's hand-back of a phase.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientTaskSubmission {
    /// What was done and what is open (the phase's summary for the gate's reviewer).
    pub summary: String,
    /// Anything else the client reports.
    pub details: Option<Value>,
}

/// Why a run request was refused, with one code table for both doors: `code()` (stable,
/// snake_case), `kind()` (the class a door maps to a status: `Invalid` → 422, `Conflict`/`Corrupt`
/// → 409, `NotFound` → 404, `Unavailable` → 503) and `details()`. Nothing was recorded.
#[derive(Debug, thiserror::Error)]
pub enum RunServiceError {
    /// A request field is not acceptable (a bad `intelligence`, an empty id, a field the decision
    /// does not take).
    #[error("{field}: {message}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// No shipped template has this id.
    #[error(transparent)]
    UnknownTemplate(TemplateError),
    /// No stored flow version has this id.
    #[error("flow version '{version_id}' does not exist")]
    UnknownVersion {
        /// The id given.
        version_id: String,
    },
    /// The shipped template cannot be started (it breaks invariants or does not load).
    #[error("template '{template_id}' cannot be started: {reason}")]
    Unstartable {
        /// The template.
        template_id: String,
        /// Why.
        reason: String,
        /// Every invariant it breaks.
        violations: Vec<Violation>,
    },
    /// The run's state machine refused: a version that is not approved, corrupt or unrunnable at
    /// start; a decision the gate does not allow, a gate that is not open, a run that ended.
    #[error("{refusal}")]
    Refused {
        /// The run it is about (none for a refused start: no run was created).
        run_id: Option<String>,
        /// The reducer's refusal.
        refusal: RunRefusal,
        /// The run's open gate as it stands, with the decisions it allows (decisions only).
        gate: Option<Box<GateView>>,
    },
    /// A ledger or the engine failed (`Unavailable`: 503), or the record does not exist.
    #[error(transparent)]
    Port(#[from] PortError),
}

impl RunServiceError {
    /// The stable code of a refusal; `None` for a port failure, which each door reports as any
    /// port error.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            Self::Field { .. } => Some("invalid_field"),
            Self::UnknownTemplate(_) => Some("unknown_template"),
            Self::UnknownVersion { .. } => Some("unknown_flow_version"),
            Self::Unstartable { .. } => Some("unstartable"),
            Self::Refused { refusal, .. } => Some(refusal.code()),
            Self::Port(_) => None,
        }
    }

    /// The class a door maps to its status: `Invalid` (422), `Conflict`/`Corrupt` (409), or the
    /// port error's own kind.
    pub fn kind(&self) -> PortErrorKind {
        match self {
            Self::Field { .. } | Self::UnknownTemplate(_) | Self::UnknownVersion { .. } => {
                PortErrorKind::Invalid
            }
            Self::Unstartable { .. } => PortErrorKind::Conflict,
            Self::Refused { refusal, .. } => refusal.port_kind(),
            Self::Port(e) => e.kind,
        }
    }

    /// The refusal's particulars, the same at both doors: the field at fault, the decisions the
    /// open gate allows, the findings, the violations. `None` for a port failure.
    pub fn details(&self) -> Option<Value> {
        match self {
            Self::Field { field, .. } => Some(json!({ "field": field })),
            Self::UnknownTemplate(_) => Some(json!({ "field": "template_id" })),
            Self::UnknownVersion { version_id } => {
                Some(json!({ "field": "flow_version_id", "flow_version_id": version_id }))
            }
            Self::Unstartable {
                template_id,
                violations,
                ..
            } => Some(json!({ "template_id": template_id, "violations": violations })),
            Self::Refused {
                run_id,
                refusal,
                gate,
            } => Some(refusal_details(run_id.as_deref(), refusal, gate.as_deref())),
            Self::Port(_) => None,
        }
    }
}

/// The particulars of a refusal: for a decision, the run and the gate open now (its allowed
/// decisions; none when no gate is open), then what the refusal itself names.
fn refusal_details(run_id: Option<&str>, refusal: &RunRefusal, gate: Option<&GateView>) -> Value {
    let mut details = serde_json::Map::new();
    if let Some(run_id) = run_id {
        details.insert("run_id".into(), json!(run_id));
        details.insert("open_gate".into(), json!(gate.map(|g| g.phase.clone())));
        details.insert(
            "allowed".into(),
            json!(gate.map(|g| g.allowed.clone()).unwrap_or_default()),
        );
    }
    let mut put = |key: &str, value: Value| {
        details.insert(key.to_owned(), value);
    };
    match refusal {
        RunRefusal::NotAllowed {
            gate,
            decision,
            allowed,
        } => {
            put("gate", json!(gate));
            put("decision", json!(decision));
            put("allowed", json!(allowed));
        }
        RunRefusal::NoOpenGate { phase, open } => {
            put("phase", json!(phase));
            put("open_gate", json!(open));
        }
        RunRefusal::NotReady { gate, findings } => {
            put("gate", json!(gate));
            put("findings", json!(findings));
        }
        RunRefusal::ReworkCapReached { cap } => put("cap", json!(cap)),
        RunRefusal::ReworkTarget { phase, gate_phase } => {
            put("field", json!("phase"));
            put("phase", json!(phase));
            put("gate_phase", json!(gate_phase));
        }
        RunRefusal::Missing(field) => put("field", json!(field)),
        RunRefusal::ColonInId { field, .. } => put("field", json!(field)),
        RunRefusal::UnknownPhase { phase } => {
            put("field", json!("phase"));
            put("phase", json!(phase));
        }
        RunRefusal::NotApproved { version_id, status } => {
            put("field", json!("flow_version_id"));
            put("flow_version_id", json!(version_id));
            put("status", json!(status));
        }
        RunRefusal::Corrupt { version_id, reason } | RunRefusal::Unrunnable { version_id, reason } => {
            put("flow_version_id", json!(version_id));
            put("reason", json!(reason));
        }
        RunRefusal::WrongVersion { expected, got } => {
            put("expected", json!(expected));
            put("got", json!(got));
        }
        RunRefusal::Terminal { status, .. } => put("status", json!(status.as_str())),
        RunRefusal::NotInFlight { .. }
        | RunRefusal::AlreadyOpened { .. }
        | RunRefusal::NotExpired { .. }
        | RunRefusal::NotAtGateBoundary { .. }
        | RunRefusal::SameVersion { .. } => {}
    }
    Value::Object(details)
}

/// The reducer's refusal an engine answer carries as its source, if any.
fn refusal_of(err: &PortError) -> Option<RunRefusal> {
    err.source
        .as_deref()
        .and_then(|s| s.downcast_ref::<RunRefusal>())
        .cloned()
}

/// `None` for an absent field; an empty (or blank) one is refused naming it.
fn given(field: &'static str, value: Option<String>) -> Result<Option<String>, RunServiceError> {
    match value {
        None => Ok(None),
        Some(text) if text.trim().is_empty() => Err(RunServiceError::Field {
            field,
            message: "must not be empty when given".to_owned(),
        }),
        Some(text) => Ok(Some(text.trim().to_owned())),
    }
}

/// The run use cases over the engine and the ledgers. Cheap to share (`Arc`).
pub struct RunService {
    engine: Arc<dyn RunEngine>,
    ports: RunServicePorts,
    settings: RunServiceSettings,
}

impl std::fmt::Debug for RunService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunService")
            .field("engine", &self.engine.kind())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl RunService {
    /// The service over `engine` (the embedded engine, or the unavailable one when
    /// `METAFORGE_FLOW_ENGINE` names an engine this build lacks) and the ledgers it shares.
    pub fn new(engine: Arc<dyn RunEngine>, ports: RunServicePorts, settings: RunServiceSettings) -> Self {
        Self {
            engine,
            ports,
            settings,
        }
    }

    /// The engine runs are started on (`METAFORGE_FLOW_ENGINE`).
    pub fn engine_kind(&self) -> FlowEngineKind {
        self.engine.kind()
    }

    /// Whether runs can be started and answered now (`/health`'s `design_flow_worker`).
    pub async fn worker_health(&self) -> WorkerHealth {
        self.engine.worker().await
    }

    /// Starts a run (FORGE-401/474/581): on `flow_version_id` — a stored version that must be
    /// approved and verify against its hash, else a `Refused` (409) — or on `template_id` (default
    /// `design_v1`), frozen into its approved `template` version (one stored record per shipped
    /// template text, created by the first run that needs it). `intelligence` is the request's,
    /// else the deployment's; a value that is not a mode is a `Field` error naming it. An engine
    /// that cannot run anything now is `Unavailable` (503) before anything is written. A refused
    /// start records no run and no hold.
    pub async fn start(&self, request: StartRunBody) -> Result<RunDetail, RunServiceError> {
        let intelligence = resolve_intelligence(
            request.intelligence.as_deref(),
            self.settings.default_intelligence,
        )
        .map_err(|e| RunServiceError::Field {
            field: e.name,
            message: e.to_string(),
        })?;
        let project_id = given("project_id", request.project_id)?;
        let flow_version_id = given("flow_version_id", request.flow_version_id)?;
        let template_id = given("template_id", request.template_id)?;
        if flow_version_id.is_some() && template_id.is_some() {
            return Err(RunServiceError::Field {
                field: "template_id",
                message: "a run starts on a flow_version_id or on a template_id, not both".to_owned(),
            });
        }
        match self.engine.worker().await {
            WorkerHealth::Ok => {}
            WorkerHealth::Absent { reason } | WorkerHealth::Unknown { reason } => {
                return Err(PortError::new(PortErrorKind::Unavailable, reason).into());
            }
        }
        let version = match flow_version_id {
            Some(id) => self.stored_version(&id).await?,
            None => {
                self.template_version(template_id.as_deref().unwrap_or(DEFAULT_TEMPLATE_ID))
                    .await?
            }
        };
        let request = StartRun {
            run_id: self.ports.ids.new_id(),
            project_id,
            intelligence,
            version,
            settings: self.settings.run,
        };
        let state = self
            .engine
            .start(request)
            .await
            .map_err(|e| match refusal_of(&e) {
                Some(refusal) => RunServiceError::Refused {
                    run_id: None,
                    refusal,
                    gate: None,
                },
                None => RunServiceError::Port(e),
            })?;
        self.get(&state.run_id).await
    }

    /// A stored version by id: unknown → `UnknownVersion`; one failing its hash check → a
    /// `Corrupt` refusal (409). Approval is the engine's check.
    async fn stored_version(&self, id: &str) -> Result<FlowVersionRecord, RunServiceError> {
        match self.ports.versions.get(id).await {
            Ok(version) => Ok(version),
            Err(e) if e.kind == PortErrorKind::NotFound => Err(RunServiceError::UnknownVersion {
                version_id: id.to_owned(),
            }),
            Err(e) if e.kind == PortErrorKind::Corrupt => Err(RunServiceError::Refused {
                run_id: None,
                refusal: RunRefusal::Corrupt {
                    version_id: id.to_owned(),
                    reason: e.message,
                },
                gate: None,
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// The approved `template` version of a shipped template, stored once: saved the first time,
    /// read back (and re-verified by the store) every later time.
    async fn template_version(&self, template_id: &str) -> Result<FlowVersionRecord, RunServiceError> {
        let flow = template(template_id).map_err(|e| match e {
            TemplateError::Unknown(_) => RunServiceError::UnknownTemplate(e),
            TemplateError::Unparseable { .. } | TemplateError::IdMismatch { .. } => {
                RunServiceError::Unstartable {
                    template_id: template_id.to_owned(),
                    reason: e.to_string(),
                    violations: Vec::new(),
                }
            }
        })?;
        let record = template_version(&flow, self.ports.clock.now()).map_err(|e| match e {
            VersionError::Invalid { violations } => RunServiceError::Unstartable {
                template_id: template_id.to_owned(),
                reason: format!("it breaks {} invariant(s)", violations.len()),
                violations,
            },
            other @ (VersionError::IdenticalToTemplate { .. }
            | VersionError::AlreadyDecided { .. }
            | VersionError::Corrupt { .. }
            | VersionError::Missing(_)
            | VersionError::Freeze(_)) => RunServiceError::Unstartable {
                template_id: template_id.to_owned(),
                reason: other.to_string(),
                violations: Vec::new(),
            },
        })?;
        match self.ports.versions.save(record.clone()).await {
            Ok(saved) => {
                tracing::info!(event = "flow_template_version_stored", flow_version_id = %saved.id, template_id, content_hash = %saved.content_hash, "a shipped template was frozen into its approved version");
                Ok(saved)
            }
            Err(e) if e.kind == PortErrorKind::Conflict => {
                // Stored by an earlier run (the id is derived from the template's text).
                let stored = self.stored_version(&record.id).await?;
                if stored.content_hash == record.content_hash {
                    Ok(stored)
                } else {
                    Err(RunServiceError::Refused {
                        run_id: None,
                        refusal: RunRefusal::Corrupt {
                            version_id: record.id,
                            reason: format!(
                                "the stored template version has hash {}, the shipped template {}",
                                stored.content_hash, record.content_hash
                            ),
                        },
                        gate: None,
                    })
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Runs in the ledger's order (oldest first), optionally of one status and/or project.
    pub async fn list(&self, filter: RunFilter) -> Result<Vec<RunSummary>, RunServiceError> {
        let runs = self.ports.runs.list(filter.status).await?;
        Ok(runs
            .iter()
            .filter(|r| {
                filter
                    .project_id
                    .as_deref()
                    .is_none_or(|p| r.project_id.as_deref() == Some(p))
            })
            .map(RunSummary::from)
            .collect())
    }

    /// One run: its record (engine, template, version id and hash, status, approval reason), its
    /// status history, and the totals of the model calls recorded for it by phase, role and model.
    pub async fn get(&self, run_id: &str) -> Result<RunDetail, RunServiceError> {
        let record = self.ports.runs.get(run_id).await?;
        let (usage, usage_unavailable) = self.usage_of(run_id).await;
        Ok(RunDetail {
            run: RunSummary::from(&record),
            history: record
                .history
                .iter()
                .map(|h| RunStatusEntry {
                    status: h.status,
                    reason: h.reason.clone(),
                    at: h.at,
                })
                .collect(),
            usage,
            usage_unavailable,
        })
    }

    async fn usage_of(&self, run_id: &str) -> (Option<UsageTotals>, Option<String>) {
        match self.ports.usage.events_for_run(run_id).await {
            Ok(events) => (Some(UsageTotals::from_events(&events)), None),
            Err(e) => (None, Some(format!("the usage store could not be read: {e}"))),
        }
    }

    /// The run phase by phase (FORGE-396): the frozen version's phases with their statuses, the
    /// open gate and its allowed decisions, `live`. When the engine cannot be asked, the phases
    /// still list and every status reads `unknown`; a run whose version cannot be read lists no
    /// phases and says why.
    pub async fn flow_state(&self, run_id: &str) -> Result<FlowStateView, RunServiceError> {
        let record = self.ports.runs.get(run_id).await?;
        let view = match self.engine.state(run_id).await {
            Ok(view) => view,
            Err(e) if e.kind == PortErrorKind::NotFound => return Err(e.into()),
            Err(e) => RunView {
                engine: record.flow_engine,
                live: false,
                reason: Some(format!(
                    "the {} engine could not be asked: {e}",
                    self.engine.kind().as_str()
                )),
                state: None,
            },
        };
        Ok(self.flow_state_of(&record, view).await)
    }

    async fn flow_state_of(&self, record: &RunRecord, view: RunView) -> FlowStateView {
        let (version_id, content_hash) = view.state.as_ref().map_or_else(
            || (record.flow_version_id.clone(), record.content_hash.clone()),
            |s| (s.flow.version_id.clone(), s.flow.content_hash.clone()),
        );
        let live_state = view.state.as_ref().filter(|_| view.live);
        let not_live_reason = if live_state.is_some() {
            None
        } else {
            Some(
                view.reason
                    .clone()
                    .unwrap_or_else(|| format!("the state of run {} could not be read", record.id)),
            )
        };
        let version = match self.ports.versions.get(&version_id).await {
            Ok(version) => FrozenFlow::from_frozen(&version_id, &content_hash, &version.frozen)
                .map(|flow| (version, flow))
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("flow version {version_id} cannot be read: {e}")),
        };
        let (template_id, template_version, phases, phases_unavailable) = match &version {
            Ok((stored, flow)) => {
                let phases = flow
                    .order()
                    .iter()
                    .filter_map(|id| flow.phase(id))
                    .map(|phase| {
                        let state = live_state.and_then(|s| s.phase(&phase.id));
                        PhaseView {
                            id: phase.id.clone(),
                            title: phase.title.clone(),
                            status: state
                                .map_or_else(|| UNKNOWN_STATUS.to_owned(), |p| p.status.as_str().to_owned()),
                            attempt: state.map(|p| p.attempt),
                            gate: phase.gate.as_ref().map(|g| g.name.clone()),
                            auto_approve: phase.gate.as_ref().is_some_and(|g| g.auto_approve),
                            required_deliverables: phase.required_deliverables.clone(),
                            deliverables: state.map(|p| p.deliverables.clone()).unwrap_or_default(),
                            summary: state.and_then(|p| p.summary.clone()),
                        }
                    })
                    .collect();
                (
                    stored.template_id.clone(),
                    stored.template_version.clone(),
                    phases,
                    None,
                )
            }
            Err(reason) => (
                record.template_id.clone(),
                record.template_version.clone(),
                Vec::new(),
                Some(reason.clone()),
            ),
        };
        let (usage, usage_unavailable) = self.usage_of(&record.id).await;
        FlowStateView {
            run_id: record.id.clone(),
            flow_engine: view.engine,
            live: live_state.is_some(),
            reason: not_live_reason,
            status: live_state.map_or_else(|| UNKNOWN_STATUS.to_owned(), |s| s.status.as_str().to_owned()),
            flow_template_id: template_id,
            flow_version: template_version,
            flow_version_id: version_id,
            flow_content_hash: content_hash,
            phases,
            phases_unavailable,
            gate: live_state.and_then(|s| s.gate.as_ref()).map(GateView::from),
            error: live_state.and_then(|s| s.error.clone()),
            usage,
            usage_unavailable,
        }
    }

    /// The gate the run is parked at now, as the engine reports it live (`None` when there is
    /// none or the engine cannot be asked).
    async fn open_gate(&self, run_id: &str) -> (Option<OpenGate>, Option<String>) {
        match self.engine.state(run_id).await {
            Ok(view) if view.live => view.state.map_or((None, None), |s| {
                let running = s.running_phase().map(|p| p.id.clone());
                (s.gate, running)
            }),
            Ok(_) | Err(_) => (None, None),
        }
    }

    /// Why the engine refused an answer or a cancel: the reducer's refusal with the gate open now
    /// (its allowed decisions), or the end of a run that never reopens; anything else as it is.
    async fn refused(&self, run_id: &str, err: PortError) -> RunServiceError {
        if let Some(refusal) = refusal_of(&err) {
            let (gate, _) = self.open_gate(run_id).await;
            return RunServiceError::Refused {
                run_id: Some(run_id.to_owned()),
                refusal,
                gate: gate.as_ref().map(|g| Box::new(GateView::from(g))),
            };
        }
        if err.kind == PortErrorKind::Conflict
            && let Ok(record) = self.ports.runs.get(run_id).await
            && record.status.is_terminal()
        {
            return RunServiceError::Refused {
                run_id: Some(run_id.to_owned()),
                refusal: RunRefusal::Terminal {
                    run_id: run_id.to_owned(),
                    status: record.status,
                },
                gate: None,
            };
        }
        RunServiceError::Port(err)
    }

    /// A person answers the run's open gate (FORGE-495/500): `approver` is the authenticated
    /// identity. The engine applies it through the run's state machine, which alone decides
    /// whether the gate allows it; a refusal names the decisions the open gate allows. Returns
    /// the run's flow state right after the decision.
    pub async fn answer_gate(
        &self,
        run_id: &str,
        request: GateDecisionBody,
        approver: &str,
    ) -> Result<FlowStateView, RunServiceError> {
        let record = self.ports.runs.get(run_id).await?;
        let reason = request.reason;
        let surface = request.surface.map(DecisionSurface::from).unwrap_or_default();
        let not_rework = |decision: GateDecisionKind| RunServiceError::Field {
            field: "phase",
            message: format!(
                "names the phase a rework goes back to; a {} decision takes none",
                decision.as_str()
            ),
        };
        let decision = match (GateDecisionKind::from(request.decision), request.phase) {
            (GateDecisionKind::Rework, phase) => GateDecision::Rework {
                phase: phase.unwrap_or_default().trim().to_owned(),
                reason: reason.unwrap_or_default(),
            },
            (
                kind @ (GateDecisionKind::Approve | GateDecisionKind::Reject | GateDecisionKind::Retry),
                Some(_),
            ) => {
                return Err(not_rework(kind));
            }
            (GateDecisionKind::Approve, None) => GateDecision::Approve { reason },
            (GateDecisionKind::Reject, None) => GateDecision::Reject { reason },
            (GateDecisionKind::Retry, None) => GateDecision::Retry {
                reason: reason.unwrap_or_default(),
            },
        };
        let gate_phase = match request.gate_phase.filter(|p| !p.trim().is_empty()) {
            Some(phase) => phase.trim().to_owned(),
            None => {
                let (gate, running) = self.open_gate(run_id).await;
                gate.map(|g| g.phase).or(running).unwrap_or_default()
            }
        };
        let answer = GateAnswer {
            phase: gate_phase,
            decision,
            approver: approver.to_owned(),
            surface,
        };
        let outcome = self.engine.decide_gate(run_id, answer).await;
        self.state_after(record, outcome).await
    }

    /// A person stops the run (`by` is the authenticated identity): the phase in flight is
    /// stopped, its client task withdrawn, an open gate closed. A run that ended is refused
    /// (it never reopens). Returns the run's flow state after the cancel.
    pub async fn cancel(
        &self,
        run_id: &str,
        by: &str,
        reason: Option<String>,
    ) -> Result<FlowStateView, RunServiceError> {
        let record = self.ports.runs.get(run_id).await?;
        let reason = reason.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
        let outcome = self.engine.cancel(run_id, by, reason).await;
        self.state_after(record, outcome).await
    }

    /// The run's flow state after the engine acted on it, or why the engine refused.
    async fn state_after(
        &self,
        record: RunRecord,
        outcome: Result<metaforge_ports::RunState, PortError>,
    ) -> Result<FlowStateView, RunServiceError> {
        match outcome {
            Ok(state) => {
                let record = self.ports.runs.get(&record.id).await.unwrap_or(record);
                let view = RunView {
                    engine: record.flow_engine,
                    live: true,
                    reason: None,
                    state: Some(state),
                };
                Ok(self.flow_state_of(&record, view).await)
            }
            Err(e) => Err(self.refused(&record.id, e).await),
        }
    }

    /// The run's notices (FORGE-396/489) after the key `after` (`seq.index`, see
    /// [`parse_event_id`]); `None`: from the run's start. Replayed from the ledger, then live,
    /// each once; the stream ends when the run does. `NotFound` for an unknown run.
    pub async fn events(
        &self,
        run_id: &str,
        after: Option<(u64, u32)>,
    ) -> Result<RunNoticeStream, RunServiceError> {
        Ok(self.engine.notices(run_id, Some(after.unwrap_or((0, 0)))).await?)
    }

    /// Client tasks, oldest first, optionally of one run and/or in one status.
    pub async fn client_tasks(
        &self,
        run_id: Option<&str>,
        status: Option<ClientTaskStatus>,
    ) -> Result<Vec<ClientTaskView>, RunServiceError> {
        let tasks = self.ports.tasks.list(run_id, status).await?;
        Ok(tasks.into_iter().map(ClientTaskView::from).collect())
    }

    /// One client task.
    pub async fn client_task(&self, id: &str) -> Result<ClientTaskView, RunServiceError> {
        Ok(self.ports.tasks.get(id).await?.into())
    }

    /// `claimant` (the authenticated identity, in its session) takes an open task; one that is
    /// not open is a `Conflict` naming its state (exactly one of two racers wins).
    pub async fn claim_client_task(
        &self,
        id: &str,
        claimant: &Claimant,
    ) -> Result<ClientTaskView, RunServiceError> {
        let task = self
            .ports
            .tasks
            .claim(id, claimant, self.ports.clock.now())
            .await?;
        tracing::info!(event = "client_task_claimed", task_id = %task.id, claimant = %claimant.identity, session = ?claimant.session, "a client took a phase");
        Ok(task.into())
    }

    /// The claimant hands the phase back with its summary; the phase brain waiting on the task
    /// then reports what the twin recorded (never what the summary claims). A task not claimed
    /// by `claimant` is a `Conflict`.
    pub async fn submit_client_task(
        &self,
        id: &str,
        claimant: &str,
        submission: ClientTaskSubmission,
    ) -> Result<ClientTaskView, RunServiceError> {
        let summary = submission.summary.trim();
        if summary.is_empty() {
            return Err(RunServiceError::Field {
                field: "summary",
                message: "must say what the phase did (it is what the gate's reviewer reads)".to_owned(),
            });
        }
        let mut body = json!({ "summary": summary });
        if let Some(details) = submission.details {
            body["details"] = details;
        }
        let task = self
            .ports
            .tasks
            .submit(id, claimant, body, self.ports.clock.now())
            .await?;
        tracing::info!(event = "client_task_submitted", task_id = %task.id, claimant, "a client handed a phase back");
        Ok(task.into())
    }
}
