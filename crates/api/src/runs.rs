//! The run and client-task routes' request bodies: starting a run, answering its gate,
//! cancelling it, and a client handing a phase back.

use metaforge_ports::{DecisionSurface, GateDecisionKind};
use serde::{Deserialize, Serialize};

/// A run to start: on a stored, approved flow version, or on a shipped template run as it is.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StartRunBody {
    /// The approved flow version to run (what `flow.start_run` sends). It must be approved and
    /// verify against its content hash (409 otherwise, nothing recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_version_id: Option<String>,
    /// A shipped template to run as it is, when no version is named (default `design_v1`): it is
    /// frozen into an approved version of origin `template`, which the run pins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_id: Option<String>,
    /// The project the run belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// `server` (a model the server calls) or `client` (the connected MCP client, through
    /// `/v1/client-tasks`); absent: the deployment's `METAFORGE_INTELLIGENCE`. Anything else is
    /// a 422 naming the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intelligence: Option<String>,
}

/// A decision on a run's open gate. There is deliberately no approver field: it is the
/// authenticated caller.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GateDecisionBody {
    /// One of the decisions the open gate allows (`GET …/flow-state` lists them).
    pub decision: GateChoice,
    /// Why. Required for `retry` and `rework`: the phase brain gets it first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For `rework` only: the earlier phase to go back to (it and every later phase re-run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The gated phase the decision is about; absent: the gate open now. An answer for a gate
    /// that is no longer open is a 409.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_phase: Option<String>,
    /// Where the person answered, recorded with the decision: `api` (the default) or `chat` (an
    /// MCP sidecar relaying `flow.await_gate`, which asked the person). Provenance only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface: Option<SurfaceBody>,
}

/// Where a gate decision was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SurfaceBody {
    /// This API (a dashboard, a script).
    Api,
    /// An MCP client's chat.
    Chat,
}

impl From<SurfaceBody> for DecisionSurface {
    fn from(surface: SurfaceBody) -> Self {
        match surface {
            SurfaceBody::Api => Self::Api,
            SurfaceBody::Chat => Self::Chat,
        }
    }
}

impl From<DecisionSurface> for SurfaceBody {
    fn from(surface: DecisionSurface) -> Self {
        match surface {
            DecisionSurface::Api => Self::Api,
            DecisionSurface::Chat => Self::Chat,
        }
    }
}

/// approve, reject, retry or rework.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GateChoice {
    /// Accept the phase; the run moves on (only when the gate is ready).
    Approve,
    /// End the run, failed.
    Reject,
    /// Run the gated phase again with the reason and the gate's findings first.
    Retry,
    /// Run an earlier phase and every later one again.
    Rework,
}

impl From<GateChoice> for GateDecisionKind {
    fn from(kind: GateChoice) -> Self {
        match kind {
            GateChoice::Approve => Self::Approve,
            GateChoice::Reject => Self::Reject,
            GateChoice::Retry => Self::Retry,
            GateChoice::Rework => Self::Rework,
        }
    }
}

impl From<GateDecisionKind> for GateChoice {
    fn from(kind: GateDecisionKind) -> Self {
        match kind {
            GateDecisionKind::Approve => Self::Approve,
            GateDecisionKind::Reject => Self::Reject,
            GateDecisionKind::Retry => Self::Retry,
            GateDecisionKind::Rework => Self::Rework,
        }
    }
}

/// Why a run is canceled.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// Kept as the run's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A client hands a phase back.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SubmitBody {
    /// What the phase did and what is open: the summary the gate's reviewer reads. The
    /// deliverables are what the twin records on the run's branch, not what this says.
    #[cfg_attr(feature = "openapi", schema(min_length = 1))]
    pub summary: String,
    /// Anything else the client reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}
