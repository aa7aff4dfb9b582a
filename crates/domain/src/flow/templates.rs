//! The built-in flow templates and the catalogue served from them (FORGE-395, FORGE-397).
//!
//! The templates are data in `fixtures/flows/*.yaml`, embedded at build time so the domain stays
//! free of IO and every consumer (gateway, sidecar, CLI) serves the very same files. A template
//! that breaks an invariant is listed as unstartable, never hidden.

use serde::Serialize;

use super::document::{DocumentError, Syntax, parse_document};
use super::freeze::content_hash;
use super::invariants::{Violation, validate};
use super::model::Flow;

/// The id of the flow a run gets when the request names none.
pub const DEFAULT_TEMPLATE_ID: &str = "design_v1";

/// Every built-in template as `(id, YAML source)`, in catalogue order.
pub const TEMPLATE_SOURCES: &[(&str, &str)] = &[
    (
        "design_v1",
        include_str!("../../../../fixtures/flows/design_v1.yaml"),
    ),
    ("mech_v1", include_str!("../../../../fixtures/flows/mech_v1.yaml")),
    (
        "hardware_v1",
        include_str!("../../../../fixtures/flows/hardware_v1.yaml"),
    ),
];

/// Why a template could not be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// No built-in template has this id.
    #[error("unknown flow template '{0}' (known: design_v1, mech_v1, hardware_v1)")]
    Unknown(String),
    /// The embedded YAML does not parse (a build defect, reported rather than hidden).
    #[error("template '{id}' does not parse: {source}")]
    Unparseable {
        /// The template id.
        id: String,
        /// The parse problem and where.
        source: DocumentError,
    },
    /// The file's own id disagrees with the name it is served under.
    #[error("template file for '{expected}' declares id '{found}'")]
    IdMismatch {
        /// The id it is served under.
        expected: String,
        /// The id the file declares.
        found: String,
    },
}

/// The YAML source of a built-in template, exactly as shipped.
pub fn template_source(id: &str) -> Result<&'static str, TemplateError> {
    TEMPLATE_SOURCES
        .iter()
        .find(|(known, _)| *known == id)
        .map(|(_, src)| *src)
        .ok_or_else(|| TemplateError::Unknown(id.to_owned()))
}

/// A built-in template, parsed.
pub fn template(id: &str) -> Result<Flow, TemplateError> {
    let source = template_source(id)?;
    let flow: Flow = parse_document(source, Syntax::Yaml).map_err(|source| TemplateError::Unparseable {
        id: id.to_owned(),
        source,
    })?;
    if flow.id != id {
        return Err(TemplateError::IdMismatch {
            expected: id.to_owned(),
            found: flow.id,
        });
    }
    Ok(flow)
}

/// One gate as the catalogue shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CatalogueGate {
    /// The phase the gate closes.
    pub phase: String,
    /// Gate name.
    pub name: String,
    /// True for checkpoints nobody answers.
    pub auto_approve: bool,
    /// What the person checks.
    pub criteria: Vec<String>,
    /// What the gate demands.
    pub required_deliverables: Vec<String>,
}

/// One phase as the catalogue shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CataloguePhase {
    /// Phase id.
    pub id: String,
    /// Phase title, exactly as runs name it.
    pub title: String,
    /// Disciplines.
    pub disciplines: Vec<String>,
    /// Upstream phases.
    pub depends_on: Vec<String>,
    /// Condition, if the phase is conditional.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// Gate name, if the phase has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
    /// Deliverables the phase's gate demands.
    pub required_deliverables: Vec<String>,
}

/// One launchable flow as the catalogue serves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CatalogueEntry {
    /// Template id.
    pub id: String,
    /// Short display label (from the template file).
    pub label: String,
    /// Title.
    pub title: String,
    /// Template version.
    pub version: String,
    /// True for the flow a run gets when it names none.
    pub default: bool,
    /// Phases in listed order.
    pub phases: Vec<CataloguePhase>,
    /// Gates in phase order.
    pub gates: Vec<CatalogueGate>,
    /// Every required deliverable, first-seen order.
    pub deliverables: Vec<String>,
    /// Every discipline, first-seen order.
    pub disciplines: Vec<String>,
    /// Whether the flow passes its own invariants and can be started.
    pub startable: bool,
    /// The invariant violations that make it unstartable.
    pub violations: Vec<Violation>,
    /// Content hash of the frozen template, when it parses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// Why the template could not be loaded at all, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_error: Option<String>,
}

fn push_unique(into: &mut Vec<String>, items: &[String]) {
    for item in items {
        if !into.contains(item) {
            into.push(item.clone());
        }
    }
}

/// The catalogue entry describing `flow`.
pub fn describe(flow: &Flow) -> CatalogueEntry {
    let violations = validate(flow, None);
    let mut deliverables = Vec::new();
    let mut disciplines = Vec::new();
    for phase in &flow.phases {
        push_unique(&mut deliverables, &phase.required_deliverables);
        push_unique(&mut disciplines, &phase.disciplines);
    }
    CatalogueEntry {
        id: flow.id.clone(),
        label: flow.label.clone(),
        title: flow.title.clone(),
        version: flow.version.clone(),
        default: flow.id == DEFAULT_TEMPLATE_ID,
        phases: flow
            .phases
            .iter()
            .map(|p| CataloguePhase {
                id: p.id.clone(),
                title: p.title.clone(),
                disciplines: p.disciplines.clone(),
                depends_on: p.depends_on.clone(),
                condition: p.condition.clone(),
                gate: p.gate.as_ref().map(|g| g.name.clone()),
                required_deliverables: p.required_deliverables.clone(),
            })
            .collect(),
        gates: flow
            .gates()
            .map(|(p, g)| CatalogueGate {
                phase: p.id.clone(),
                name: g.name.clone(),
                auto_approve: g.auto_approve,
                criteria: g.criteria.clone(),
                required_deliverables: p.required_deliverables.clone(),
            })
            .collect(),
        deliverables,
        disciplines,
        startable: violations.is_empty(),
        violations,
        content_hash: content_hash(flow).ok(),
        load_error: None,
    }
}

/// Every built-in flow, startable or not, in catalogue order.
pub fn catalogue() -> Vec<CatalogueEntry> {
    TEMPLATE_SOURCES
        .iter()
        .map(|(id, _)| match template(id) {
            Ok(flow) => describe(&flow),
            Err(e) => CatalogueEntry {
                id: (*id).to_owned(),
                label: String::new(),
                title: String::new(),
                version: String::new(),
                default: *id == DEFAULT_TEMPLATE_ID,
                phases: Vec::new(),
                gates: Vec::new(),
                deliverables: Vec::new(),
                disciplines: Vec::new(),
                startable: false,
                violations: Vec::new(),
                content_hash: None,
                load_error: Some(e.to_string()),
            },
        })
        .collect()
}
