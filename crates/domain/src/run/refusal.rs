//! Why the reducer refused an event. Every refusal names the run's state that forbids it, so an
//! engine can answer the caller (409 with the reason) and leave the stored state untouched.

use metaforge_ports::{GateDecisionKind, PortError, PortErrorKind, RunStatus};

/// An event or start the run state machine will not apply. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunRefusal {
    /// The run has ended; a terminal run never reopens.
    #[error("run {run_id} is {} and never reopens", status.as_str())]
    Terminal {
        /// The run.
        run_id: String,
        /// Its final status.
        status: RunStatus,
    },
    /// The event (or the flow handed in) is for another version than the run's frozen one.
    #[error("run is pinned to flow version {expected}, not {got}")]
    WrongVersion {
        /// The run's frozen version (id, or id@hash when the hash differs).
        expected: String,
        /// The version named.
        got: String,
    },
    /// The version's stored text does not match its hash or does not parse.
    #[error("flow version '{version_id}' is corrupt: {reason}")]
    Corrupt {
        /// The version.
        version_id: String,
        /// What failed.
        reason: String,
    },
    /// The version is not approved; runs start only on approved versions.
    #[error("flow version '{version_id}' is {status}, not approved")]
    NotApproved {
        /// The version.
        version_id: String,
        /// Its status.
        status: String,
    },
    /// The flow cannot be run: no phases, a duplicated id or a dependency cycle.
    #[error("flow version '{version_id}' cannot be run: {reason}")]
    Unrunnable {
        /// The version.
        version_id: String,
        /// Why.
        reason: String,
    },
    /// A required text was empty.
    #[error("{0} must not be empty")]
    Missing(&'static str),
    /// An id that would not split back out of the `run:phase:attempt` key.
    #[error("{field} '{value}' must not contain ':' (it is part of the run:phase:attempt key)")]
    ColonInId {
        /// `run_id` or `phase`.
        field: &'static str,
        /// The value.
        value: String,
    },
    /// The phase is not in the run's frozen flow.
    #[error("phase '{phase}' is not in the run's flow")]
    UnknownPhase {
        /// The phase named.
        phase: String,
    },
    /// A phase event for an attempt that is not in flight (a duplicate or stale report).
    #[error("phase '{phase}' attempt {attempt} is not in flight (the phase is {status}, attempt {current})")]
    NotInFlight {
        /// The phase named.
        phase: String,
        /// The attempt named.
        attempt: u32,
        /// The phase's status.
        status: &'static str,
        /// Its current attempt.
        current: u32,
    },
    /// A gate event for a gate that is not open.
    #[error("no gate is open on phase '{phase}'{}", open.as_ref().map(|o| format!(" (the open gate is on '{o}')")).unwrap_or_default())]
    NoOpenGate {
        /// The phase named.
        phase: String,
        /// The phase whose gate is open, if any.
        open: Option<String>,
    },
    /// The gate was already reported open.
    #[error("gate on phase '{phase}' was already reported open")]
    AlreadyOpened {
        /// The phase.
        phase: String,
    },
    /// Approving a gate whose required deliverables are not recorded.
    #[error("gate '{gate}' is not ready: {}", findings.join("; "))]
    NotReady {
        /// The gate.
        gate: String,
        /// What is missing.
        findings: Vec<String>,
    },
    /// The rework cap is used up.
    #[error("this run already took {cap} rework decision(s), its cap")]
    ReworkCapReached {
        /// The cap.
        cap: u32,
    },
    /// A rework must name a phase that runs before the gated one.
    #[error("rework must name a phase before '{gate_phase}'; '{phase}' is not one")]
    ReworkTarget {
        /// The phase named.
        phase: String,
        /// The gated phase.
        gate_phase: String,
    },
    /// A decision the gate does not allow now.
    #[error("gate '{gate}' does not allow {}; it allows {}", decision.as_str(), allowed.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", "))]
    NotAllowed {
        /// The gate.
        gate: String,
        /// The decision refused.
        decision: GateDecisionKind,
        /// The ones it allows.
        allowed: Vec<GateDecisionKind>,
    },
    /// The gate has no deadline, or it has not passed yet.
    #[error("gate '{gate}' has not expired{}", deadline.as_ref().map(|d| format!(" (deadline {d})")).unwrap_or_else(|| " (it has no deadline)".to_owned()))]
    NotExpired {
        /// The gate.
        gate: String,
        /// Its deadline, RFC 3339.
        deadline: Option<String>,
    },
    /// A flow change arrived while a phase is in flight; it applies only at a gate boundary.
    #[error("a flow change applies only at a gate boundary; phase '{phase}' is in flight")]
    NotAtGateBoundary {
        /// The phase in flight.
        phase: String,
    },
    /// The flow change names the version the run already runs.
    #[error("run already runs flow version '{version_id}'")]
    SameVersion {
        /// The version.
        version_id: String,
    },
}

impl RunRefusal {
    /// A stable snake_case code for tables, logs and API bodies.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Terminal { .. } => "terminal",
            Self::WrongVersion { .. } => "wrong_version",
            Self::Corrupt { .. } => "corrupt",
            Self::NotApproved { .. } => "not_approved",
            Self::Unrunnable { .. } => "unrunnable",
            Self::Missing(_) => "missing",
            Self::ColonInId { .. } => "colon_in_id",
            Self::UnknownPhase { .. } => "unknown_phase",
            Self::NotInFlight { .. } => "not_in_flight",
            Self::NoOpenGate { .. } => "no_open_gate",
            Self::AlreadyOpened { .. } => "already_opened",
            Self::NotReady { .. } => "not_ready",
            Self::ReworkCapReached { .. } => "rework_cap_reached",
            Self::ReworkTarget { .. } => "rework_target",
            Self::NotAllowed { .. } => "not_allowed",
            Self::NotExpired { .. } => "not_expired",
            Self::NotAtGateBoundary { .. } => "not_at_gate_boundary",
            Self::SameVersion { .. } => "same_version",
        }
    }

    /// The port error kind an engine answers with: bad input is `Invalid`, a corrupt version is
    /// `Corrupt`, everything the run's state forbids is `Conflict`.
    pub fn port_kind(&self) -> PortErrorKind {
        match self {
            Self::Missing(_)
            | Self::ColonInId { .. }
            | Self::UnknownPhase { .. }
            | Self::ReworkTarget { .. } => PortErrorKind::Invalid,
            Self::Corrupt { .. } => PortErrorKind::Corrupt,
            Self::Terminal { .. }
            | Self::WrongVersion { .. }
            | Self::NotApproved { .. }
            | Self::Unrunnable { .. }
            | Self::NotInFlight { .. }
            | Self::NoOpenGate { .. }
            | Self::AlreadyOpened { .. }
            | Self::NotReady { .. }
            | Self::ReworkCapReached { .. }
            | Self::NotAllowed { .. }
            | Self::NotExpired { .. }
            | Self::NotAtGateBoundary { .. }
            | Self::SameVersion { .. } => PortErrorKind::Conflict,
        }
    }
}

impl From<RunRefusal> for PortError {
    /// The refusal travels as the port error's source, so a door can downcast it and answer its
    /// stable code and particulars (the allowed decisions, the findings) instead of a bare message.
    fn from(refusal: RunRefusal) -> Self {
        Self::with_source(refusal.port_kind(), refusal.to_string(), refusal)
    }
}
