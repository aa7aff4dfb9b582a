//! The design-flow data model: a flow is data (YAML or JSON), so it can be tailored, diffed,
//! frozen and hashed instead of living as code.
//!
//! Fields that were added to the model after the first templates shipped (`label`, `condition`,
//! `gate`, `model`, `items`) are left out of the serialized form when unset, so the canonical
//! JSON — and with it the content hash — of an older flow does not change when the model grows.

use serde::{Deserialize, Serialize};

/// One design flow: the phases a piece of work goes through and the gates a person answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Flow {
    /// Stable id (`design_v1`); a tailored flow keeps its template's id.
    pub id: String,
    /// The template version the flow was written against; every run records it.
    pub version: String,
    /// Human title, as every run and the dashboard show it.
    pub title: String,
    /// Short display label for pickers; lives in the template so no client keeps its own copy.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// The phases. Execution order comes from `depends_on`; when no phase carries one, list
    /// order is the sequence.
    #[serde(default)]
    pub phases: Vec<Phase>,
}

/// One phase of a flow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// Unique within the flow; readiness, activity and the live view key on it.
    pub id: String,
    /// Human title.
    pub title: String,
    /// The disciplines the phase fans out into.
    #[serde(default)]
    pub disciplines: Vec<String>,
    /// Phases that must finish before this one starts.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// When set, the phase runs only if this holds; a conditional phase may not run at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// Artifacts the phase produces.
    #[serde(default)]
    pub expected_artifacts: Vec<String>,
    /// Artifacts the phase's gate demands before it can pass.
    #[serde(default)]
    pub required_deliverables: Vec<String>,
    /// Whether the gate actually checks `required_deliverables` (default true: fail closed).
    #[serde(default = "enforce_by_default")]
    pub enforce_deliverables: bool,
    /// The gate at the end of the phase, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<Gate>,
    /// The `provider:model` route the phase brain uses, when pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The named parts the phase writes (deliverable slots).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<String>,
}

fn enforce_by_default() -> bool {
    true
}

/// A gate: the point where a person (or, for checkpoints, the server) decides a phase is done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Gate {
    /// Display name, e.g. `G6 Design Review`; the `G<n>` token is how prose refers to it.
    pub name: String,
    /// A checkpoint nobody answers; exempt from the human-gate rules.
    #[serde(default)]
    pub auto_approve: bool,
    /// What the person answering the gate checks.
    #[serde(default)]
    pub criteria: Vec<String>,
}

impl Gate {
    /// True when a person answers the gate (it is not an auto-approved checkpoint).
    pub fn is_human(&self) -> bool {
        !self.auto_approve
    }

    /// The short name prose uses: the `G<digits>` token of the name when it has one, else the
    /// whole name (so `Release Gate G8` reads as `G8`).
    pub fn short_name(&self) -> &str {
        self.name
            .split(|c: char| !c.is_ascii_alphanumeric())
            .find(|token| {
                token.len() > 1
                    && token.starts_with(['G', 'g'])
                    && token[1..].chars().all(|c| c.is_ascii_digit())
            })
            .unwrap_or(&self.name)
    }
}

impl Flow {
    /// The phase with this id (the first one, if ids are duplicated).
    pub fn phase(&self, id: &str) -> Option<&Phase> {
        self.phases.iter().find(|p| p.id == id)
    }

    /// Mutable access to the phase with this id.
    pub fn phase_mut(&mut self, id: &str) -> Option<&mut Phase> {
        self.phases.iter_mut().find(|p| p.id == id)
    }

    /// The gates of the flow, in phase order, with the phase each sits on.
    pub fn gates(&self) -> impl Iterator<Item = (&Phase, &Gate)> {
        self.phases.iter().filter_map(|p| p.gate.as_ref().map(|g| (p, g)))
    }
}

impl Phase {
    /// True when the phase has a gate a person answers.
    pub fn has_human_gate(&self) -> bool {
        self.gate.as_ref().is_some_and(Gate::is_human)
    }

    /// True when the phase produces or demands `artifact`.
    pub fn commits(&self, artifact: &str) -> bool {
        self.expected_artifacts.iter().any(|a| a == artifact)
            || self.required_deliverables.iter().any(|a| a == artifact)
    }
}
