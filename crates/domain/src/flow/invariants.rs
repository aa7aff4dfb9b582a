//! The flow invariants (FORGE-397, FORGE-463): server-enforced rules checked before a flow is
//! approved and again when a run starts. Every violation is reported at once, each naming its
//! rule and phase, in an order that does not depend on the order the phases are listed in.
//!
//! "Before" means "upstream in the dependency graph". A flow that declares dependencies
//! (`depends_on` on any phase) is ordered by them alone, and list order is presentation only, so
//! reordering its phases never changes its verdict. A flow in which no phase carries a
//! `depends_on` is a plain sequence: list order is the order (see [`uses_list_order`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::context::FlowContext;
use super::model::{Flow, Phase};
use crate::providers::{model_family_mismatch, parse_route, resolve_provider};

/// Every rule id, in reporting order.
pub const RULES: &[&str] = &[
    "has-phases",
    "unique-phase-ids",
    "graph-is-valid",
    "release-gate-exists",
    "no-pass-without-data",
    "gates-enforce-what-they-require",
    "deliverable-is-producible",
    "requirements-are-verified",
    "physical-verification-kept",
    "phase-model-routable",
];

/// Artifacts that are verification evidence: simulation or verification results.
pub const VERIFICATION_ARTIFACTS: &[&str] = &["simulation_result", "verification_report"];

/// Artifacts that record requirements (besides any phase whose id is `requirements`).
pub const REQUIREMENT_ARTIFACTS: &[&str] = &["requirements", "requirements_spec", "requirements_doc"];

/// Words that make a human gate a release gate.
const RELEASE_WORDS: &[&str] = &["release", "sign-off", "signoff", "acceptance"];

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Violation {
    /// The rule id, e.g. `gates-enforce-what-they-require`.
    pub rule: String,
    /// The phase the violation is about; `None` for flow-wide rules.
    pub phase: Option<String>,
    /// What is wrong, for the person reading it.
    pub message: String,
}

fn violation(rule: &str, phase: Option<&str>, message: String) -> Violation {
    Violation {
        rule: rule.to_owned(),
        phase: phase.map(str::to_owned),
        message,
    }
}

/// Checks every invariant of `flow` under an optional request `context` and returns all
/// violations (empty means the flow may be approved and started).
///
/// Without a context the loads are not judged (a test plan at a human gate may stand in for
/// simulation); with one, missing or `unknown` loads forbid that substitute.
pub fn validate(flow: &Flow, context: Option<&FlowContext>) -> Vec<Violation> {
    let mut out = Vec::new();
    if flow.phases.is_empty() {
        out.push(violation("has-phases", None, "the flow has no phases".to_owned()));
    }
    let graph = Graph::new(flow);
    check_unique_ids(&graph, &mut out);
    check_graph(flow, &graph, &mut out);
    check_release_gate(flow, &mut out);
    check_gates(flow, &mut out);
    check_producible(flow, &graph, &mut out);
    check_requirements_verified(flow, &graph, &mut out);
    check_physical_verification(flow, context, &mut out);
    check_models(flow, &mut out);
    let order = |rule: &str| RULES.iter().position(|r| *r == rule).unwrap_or(RULES.len());
    out.sort_by(|a, b| (order(&a.rule), &a.phase, &a.message).cmp(&(order(&b.rule), &b.phase, &b.message)));
    out.dedup();
    out
}

/// True when `flow` passes every invariant under `context`.
pub fn is_valid(flow: &Flow, context: Option<&FlowContext>) -> bool {
    validate(flow, context).is_empty()
}

/// True when no phase of `flow` carries a `depends_on`: the flow is then a sequence in list order,
/// each distinct phase id (in order of first appearance) running after the one before it.
///
/// A person writing "requirements, then verify" as a list means that order; reading such a flow
/// as "no order at all" would make every "before" rule fail on it.
pub fn uses_list_order(flow: &Flow) -> bool {
    flow.phases.iter().all(|p| p.depends_on.is_empty())
}

/// Every phase id upstream of `id` in `flow`'s dependency graph (transitively, list order taken
/// as the sequence when no phase carries `depends_on`); contains `id` only when it is on a
/// cycle. Tailoring asks it so that "upstream" means the same thing there as in the rules.
pub fn upstream_of<'a>(flow: &'a Flow, id: &str) -> BTreeSet<&'a str> {
    Graph::new(flow).ancestors(id)
}

/// The dependency graph, keyed by phase id. Phases sharing an id are merged (their dependencies
/// united), so a duplicated id yields the same verdict whichever copy is listed first. A flow
/// without any `depends_on` gets its list order as the sequence ([`uses_list_order`]).
struct Graph<'a> {
    phases: &'a [Phase],
    deps: BTreeMap<&'a str, BTreeSet<&'a str>>,
    duplicates: BTreeSet<&'a str>,
}

impl<'a> Graph<'a> {
    fn new(flow: &'a Flow) -> Self {
        let mut deps: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        let mut duplicates = BTreeSet::new();
        let list_order = uses_list_order(flow);
        let mut previous: Option<&str> = None;
        for phase in &flow.phases {
            let id = phase.id.as_str();
            if deps.contains_key(id) {
                duplicates.insert(id);
                continue;
            }
            let entry = deps.entry(id).or_default();
            if list_order && let Some(before) = previous {
                entry.insert(before);
            }
            previous = Some(id);
        }
        for phase in &flow.phases {
            if let Some(entry) = deps.get_mut(phase.id.as_str()) {
                entry.extend(phase.depends_on.iter().map(String::as_str));
            }
        }
        Self {
            phases: &flow.phases,
            deps,
            duplicates,
        }
    }

    fn contains(&self, id: &str) -> bool {
        self.deps.contains_key(id)
    }

    /// Every phase carrying this id.
    fn phases_of(&self, id: &'a str) -> impl Iterator<Item = &'a Phase> + 'a {
        self.phases.iter().filter(move |p| p.id == id)
    }

    /// Every phase id upstream of `id` (transitively); contains `id` only when on a cycle.
    fn ancestors(&self, id: &str) -> BTreeSet<&'a str> {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&'a str> = self
            .deps
            .get(id)
            .map(|d| d.iter().copied().collect())
            .unwrap_or_default();
        while let Some(next) = stack.pop() {
            if let Some((key, deps)) = self.deps.get_key_value(next)
                && seen.insert(*key)
            {
                stack.extend(deps.iter().copied());
            }
        }
        seen
    }
}

fn check_unique_ids(graph: &Graph<'_>, out: &mut Vec<Violation>) {
    for id in &graph.duplicates {
        out.push(violation(
            "unique-phase-ids",
            Some(id),
            format!("phase id '{id}' is used by more than one phase"),
        ));
    }
}

fn check_graph(flow: &Flow, graph: &Graph<'_>, out: &mut Vec<Violation>) {
    for phase in &flow.phases {
        let mut reported = BTreeSet::new();
        for dep in &phase.depends_on {
            if !graph.contains(dep) && reported.insert(dep.as_str()) {
                out.push(violation(
                    "graph-is-valid",
                    Some(&phase.id),
                    format!(
                        "phase '{}' depends on '{dep}', which is not a phase of this flow",
                        phase.id
                    ),
                ));
            }
        }
    }
    for id in graph.deps.keys() {
        if graph.ancestors(id).contains(id) {
            out.push(violation(
                "graph-is-valid",
                Some(id),
                format!("phase '{id}' depends on itself through a dependency cycle"),
            ));
        }
    }
}

fn is_release_gate_name(name: &str) -> bool {
    let lowered = name.to_ascii_lowercase();
    RELEASE_WORDS.iter().any(|w| lowered.contains(w))
}

fn check_release_gate(flow: &Flow, out: &mut Vec<Violation>) {
    if flow.phases.is_empty() {
        return;
    }
    let has_release = flow.phases.iter().any(|p| {
        p.condition.is_none()
            && p.gate
                .as_ref()
                .is_some_and(|g| g.is_human() && is_release_gate_name(&g.name))
    });
    if !has_release {
        out.push(violation(
            "release-gate-exists",
            None,
            "no unconditional human gate named for release, sign-off or acceptance: the flow would run to completion with nobody approving the result".to_owned(),
        ));
    }
}

fn check_gates(flow: &Flow, out: &mut Vec<Violation>) {
    for phase in &flow.phases {
        let Some(gate) = phase.gate.as_ref().filter(|g| g.is_human()) else {
            continue;
        };
        if phase.required_deliverables.is_empty() {
            out.push(violation(
                "no-pass-without-data",
                Some(&phase.id),
                format!(
                    "gate '{}' on phase '{}' requires no deliverables, so it cannot tell an empty phase from a complete one",
                    gate.name, phase.id
                ),
            ));
        }
        if !phase.enforce_deliverables {
            out.push(violation(
                "gates-enforce-what-they-require",
                Some(&phase.id),
                format!(
                    "gate '{}' on phase '{}' does not enforce its deliverables: a decorative gate",
                    gate.name, phase.id
                ),
            ));
        }
    }
}

fn check_producible(flow: &Flow, graph: &Graph<'_>, out: &mut Vec<Violation>) {
    for phase in &flow.phases {
        let ancestors = graph.ancestors(&phase.id);
        let mut reported = BTreeSet::new();
        for wanted in &phase.required_deliverables {
            let by_self = phase.expected_artifacts.contains(wanted);
            let upstream = ancestors
                .iter()
                .filter(|a| **a != phase.id)
                .flat_map(|a| graph.phases_of(a))
                .any(|p| p.condition.is_none() && p.expected_artifacts.contains(wanted));
            if !by_self && !upstream && reported.insert(wanted.as_str()) {
                out.push(violation(
                    "deliverable-is-producible",
                    Some(&phase.id),
                    format!(
                        "phase '{}' requires '{wanted}', which neither it nor any unconditional phase it depends on produces",
                        phase.id
                    ),
                ));
            }
        }
    }
}

fn records_requirements(phase: &Phase) -> bool {
    phase.id == "requirements" || REQUIREMENT_ARTIFACTS.iter().any(|a| phase.commits(a))
}

fn check_requirements_verified(flow: &Flow, graph: &Graph<'_>, out: &mut Vec<Violation>) {
    let verifies = |p: &Phase| {
        p.condition.is_none()
            && (VERIFICATION_ARTIFACTS
                .iter()
                .any(|a| p.expected_artifacts.iter().any(|e| e == a))
                || (p.has_human_gate() && p.required_deliverables.iter().any(|d| d == "test_plan")))
    };
    for phase in &flow.phases {
        if !records_requirements(phase) {
            continue;
        }
        let id = phase.id.as_str();
        let verified = flow
            .phases
            .iter()
            .any(|p| p.id != id && graph.ancestors(&p.id).contains(id) && verifies(p));
        if !verified {
            out.push(violation(
                "requirements-are-verified",
                Some(id),
                format!(
                    "requirements recorded by phase '{id}' are never checked: no unconditional later phase produces a simulation_result or verification_report, or requires a test_plan at a human gate"
                ),
            ));
        }
    }
}

fn check_physical_verification(flow: &Flow, context: Option<&FlowContext>, out: &mut Vec<Violation>) {
    // The lexicographically first committer is named, so the verdict ignores list order.
    let Some(committer) = flow
        .phases
        .iter()
        .filter(|p| p.commits("cad_model"))
        .min_by(|a, b| a.id.cmp(&b.id))
    else {
        return;
    };
    let verified = flow.phases.iter().any(|p| {
        p.condition.is_none()
            && VERIFICATION_ARTIFACTS
                .iter()
                .any(|a| p.expected_artifacts.iter().any(|e| e == a))
    });
    if verified {
        return;
    }
    let loads_unknown = context.is_some_and(FlowContext::loads_unknown);
    let test_plan_at_gate = flow
        .phases
        .iter()
        .any(|p| p.has_human_gate() && p.required_deliverables.iter().any(|d| d == "test_plan"));
    if test_plan_at_gate && !loads_unknown {
        return;
    }
    let message = if loads_unknown {
        format!(
            "the flow commits a cad_model (phase '{}') but keeps no phase producing simulation_result or verification_report, and the loads are unknown, so not even a test plan may replace it",
            committer.id
        )
    } else {
        format!(
            "the flow commits a cad_model (phase '{}') but keeps no phase producing simulation_result or verification_report and requires no test_plan at a human gate",
            committer.id
        )
    };
    out.push(violation(
        "physical-verification-kept",
        Some(&committer.id),
        message,
    ));
}

fn check_models(flow: &Flow, out: &mut Vec<Violation>) {
    for phase in &flow.phases {
        let Some(route) = phase.model.as_deref() else {
            continue;
        };
        let problem = match parse_route(route) {
            Err(e) => Some(e.to_string()),
            Ok(parsed) => match resolve_provider(&parsed.provider) {
                Err(e) => Some(e.to_string()),
                Ok(provider) => model_family_mismatch(provider, &parsed.model),
            },
        };
        if let Some(reason) = problem {
            out.push(violation(
                "phase-model-routable",
                Some(&phase.id),
                format!("phase '{}' model '{route}' is not routable: {reason}", phase.id),
            ));
        }
    }
}
