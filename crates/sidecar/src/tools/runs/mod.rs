//! The run tools (issue 16 item 7; FORGE-400/581/582/584) over [`RunBindings`] — in process over
//! the run service, or the gateway's routes in remote mode; every line of every tool is shared:
//!
//! - `flow.start_run` starts a run on an approved version (or a shipped template): a version that
//!   is not approved is refused 409-style and the call is never held — its approval was the
//!   person's decision on the version;
//! - `flow.status`, `run.list`, `run.get`, `phase.list_tasks` read, never held (a follower polls);
//! - `flow.await_gate` waits for the run's next gate and asks the person by elicitation with only
//!   the decisions the gate allows, recording their answer as them with `surface: "chat"`; it
//!   decides nothing itself, and nothing from its arguments (the answers come from the person's
//!   form, [`metaforge_ports::CallFacts`]);
//! - `phase.claim` is a held write (the person lets the client take the phase, once); a claim
//!   records the session's grant ([`ClientTaskGrants`]), which `phase.submit` ends;
//! - resource `metaforge://flow/run/{id}` (the run as markdown) and prompt `metaforge:flow`.
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## MCP run tools (issue 16, item 7) — `metaforge_api::run_bindings`, `crates/sidecar/src/tools/runs`, `bins`
//!
//! - **Port** `metaforge_api::run_bindings::RunBindings` (`start`, `list`, `get`, `flow_state`,
//!   `answer_gate(run, GateDecisionBody, approver)`, `client_tasks`, `client_task`,
//!   `claim_client_task(id, Claimant)`, `submit_client_task`): a refusal crosses it typed
//!   (`RunReply::Refused(RunRefused {kind, code, message, details})`). In process
//!   `crates/sidecar/src/run_bindings.rs` (`InProcessRunBindings` over `app::runs::RunService`, whose
//!   views are the wire contracts' own `metaforge_api::run_views`, handed over as they are, so both
//!   modes answer byte for byte alike; `LateRunBindings`
//!   for a composition that builds the tools first — `Unavailable` until set); remote
//!   `crates/adapters-gateway/src/runs.rs` (`RemoteRunBindings` over `/v1/runs` and
//!   `/v1/client-tasks`; a gate answer is sent with the approver's own `identity:key`, refused
//!   unsent when the sidecar holds none).
//! - **Tools** `crates/sidecar/src/tools/runs` (`SidecarRuns {bindings, grants, settings}`,
//!   registered by `metaforge_sidecar::with_runs`): `start` (`flow.start_run`, 409-style refusal of
//!   an unapproved version, never held), `read` (`flow.status`, `run.list`, `run.get`,
//!   `phase.list_tasks`, never held; resource `metaforge://flow/run/{id}`), `gate`
//!   (`flow.await_gate`), `phase` (`phase.claim` — a held write; records the session's grant —
//!   and `phase.submit`, which ends it), `prompt` (`metaforge:flow`), `args` (their argument types).
//!   `flow.await_gate` waits for the run's gate and asks the person by elicitation with only the
//!   gate's allowed decisions; the answer comes from the person's form (`CallFacts::answers`), never
//!   from the arguments, is matched to the gate asked (phase, opening time and attempt) and recorded
//!   as the authenticated identity with `surface: "chat"`; a dismissed form, a caller that is no
//!   person's client or a gate that moved on decides nothing.
//! - **Grants** `crates/sidecar/src/grants.rs`: `ClientTaskGrants` (which session holds which
//!   claim), `SidecarCallerGrants` (the transport's `CallerGrants`: a service-key call's run — its
//!   `X-MetaForge-Session` — running in server mode on an approved version in the call's project
//!   (a client-mode run's phases are a person's client's, never the key's); with
//!   `METAFORGE_CLIENT_TASK_WRITES=on`, a session holding a grant is `client_task` while its task
//!   is still its claim, its run running in client mode and in the call's project — asked before
//!   every call, anything unconfirmed `false`), `BindingsRunScopes` (twin run scopes through the
//!   bindings).
//! - **Composition** `bins/src/cmd/serve.rs` `compose_mcp`: `metaforge up`'s sidecar serves
//!   `tool_servers::sidecar_mcp_host` (the agent loop's natives plus the run tools over
//!   `InProcessRunBindings` on the app's `RunService`) with `SidecarCallerGrants` over the same
//!   service; the agent loop's registry is not offered the run tools. `bins/src/cmd/mcp.rs`: with
//!   `METAFORGE_GATEWAY_URL` the run tools and the caller grants go through `RemoteRunBindings`
//!   (every `identity:key` of `METAFORGE_GATEWAY_API_KEY` held for acting as that person); without
//!   it no run tools are offered, and `METAFORGE_CLIENT_TASK_WRITES=on` refuses start (exit 2), as
//!   does a value other than `on`/`off`. HTTP client keys authenticate their gateway identity
//!   (`ClientKey {identity, key}`), which a gate decision records as approver. Remote mode composes
//!   no twin, so a client phase's deliverables are recorded through `up`'s sidecar only.
//! - **Tests** `crates/sidecar/tests/it/sidecar_runs.rs` (every tool through `SidecarHost::call_with`
//!   over the real service and embedded engine, a mech_v1 run to completion) and
//!   `bins/tests/it/runs_mcp_client.rs` (the Python MCP client, `tests/peers/mcp_run_driver.py`,
//!   drives a client-mode mech_v1 run against `metaforge up` to completion: claims approved at
//!   `/v1/approvals`, deliverables written as `client_task` on the run's branch and merged into
//!   `main`, four gates answered by elicitation and recorded as `ops` with `surface: chat`; a
//!   standalone sidecar pointed at the gateway starts and follows a run there writing nothing
//!   locally).
//! - **Invariant:** no MCP tool approves anything: `flow.await_gate` asks the person and records
//!   their own answer; `phase.claim` is itself held for a person.

pub mod args;
pub mod gate;
pub mod phase;
pub mod prompt;
pub mod read;
pub mod start;

use std::sync::Arc;
use std::time::Duration;

use metaforge_api::RunBindings;
use metaforge_ports::{CallerContext, HostCallOutcome, PortError, PortErrorKind, ToolOutput};
use serde::Serialize;

use crate::envelope::{not_found, port_failure};
use crate::grants::ClientTaskGrants;
use crate::host::{SidecarPrompt, SidecarResource, SidecarTool};

/// How `flow.await_gate` waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunToolSettings {
    /// How often it reads the run's flow state while it waits.
    pub gate_poll: Duration,
    /// How long it waits when the call names no `wait_seconds`.
    pub default_gate_wait: Duration,
}

impl Default for RunToolSettings {
    /// A poll a second, two minutes' wait.
    fn default() -> Self {
        Self {
            gate_poll: Duration::from_secs(1),
            default_gate_wait: Duration::from_secs(120),
        }
    }
}

/// The longest `flow.await_gate` waits in one call (its schema's `wait_seconds` maximum).
pub const MAX_GATE_WAIT: Duration = Duration::from_secs(1800);

/// What the run tools share: the bindings, the sessions' client-task grants, and the settings.
#[derive(Clone)]
pub struct SidecarRuns {
    /// The run use cases (in process or through the gateway).
    pub bindings: Arc<dyn RunBindings>,
    /// The client tasks this sidecar's sessions hold (the transport's client-task grants and the
    /// remote twin's run scopes read them).
    pub grants: Arc<ClientTaskGrants>,
    /// How `flow.await_gate` waits.
    pub settings: RunToolSettings,
}

impl SidecarRuns {
    /// The run tools over `bindings`, recording claims in `grants`.
    pub fn new(bindings: Arc<dyn RunBindings>, grants: Arc<ClientTaskGrants>) -> Self {
        Self {
            bindings,
            grants,
            settings: RunToolSettings::default(),
        }
    }

    /// The same tools waiting as `settings` say.
    #[must_use]
    pub fn with_settings(mut self, settings: RunToolSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Every run tool.
    pub fn tools(&self) -> Vec<Arc<dyn SidecarTool>> {
        vec![
            Arc::new(start::FlowStartRun::new(self.clone())),
            Arc::new(read::FlowStatus::new(self.clone())),
            Arc::new(read::RunList::new(self.clone())),
            Arc::new(read::RunGet::new(self.clone())),
            Arc::new(read::ListTasks::new(self.clone())),
            Arc::new(gate::AwaitGate::new(self.clone())),
            Arc::new(phase::Claim::new(self.clone())),
            Arc::new(phase::Submit::new(self.clone())),
        ]
    }

    /// `metaforge://flow/run/{id}`.
    pub fn resource(&self) -> Arc<dyn SidecarResource> {
        Arc::new(read::RunResource::new(self.clone()))
    }

    /// `metaforge:flow`.
    pub fn prompt(&self) -> Arc<dyn SidecarPrompt> {
        Arc::new(prompt::FlowPrompt)
    }
}

/// The identity a call acts as: the one the transport authenticated, else `local`.
pub(crate) fn identity(caller: &CallerContext) -> String {
    metaforge_app::twin::caller_identity(caller).to_owned()
}

/// A port failure as the tool's answer: an unknown record names its id; a conflict, an
/// unreachable engine or gateway, or a request the bindings refused is a tool-level error; a
/// corrupt record or an internal failure stays a protocol error.
pub(crate) fn failure(tool: &str, id: &str, err: PortError) -> Result<HostCallOutcome, PortError> {
    if err.kind == PortErrorKind::NotFound {
        return Ok(not_found(id, &err.message));
    }
    port_failure(tool, &err).ok_or(err)
}

/// A value as the tool's successful result.
pub(crate) fn output(value: &impl Serialize) -> Result<HostCallOutcome, PortError> {
    let value = serde_json::to_value(value)
        .map_err(|e| PortError::with_source(PortErrorKind::Internal, "a run tool's answer", e))?;
    Ok(HostCallOutcome::Done(ToolOutput::json(value)))
}
