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
use super::graph::{BitSet, Graph};
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

/// The order a run executes `flow`'s phases in: every phase after all it depends on (list order
/// taken as the sequence when no phase carries `depends_on`, the same rule the invariants use),
/// ties broken by list order so the order is deterministic. `None` when the graph has a cycle
/// or an id is duplicated: such a flow cannot be run.
pub fn execution_order(flow: &Flow) -> Option<Vec<&str>> {
    Graph::new(flow).execution_order()
}

/// Every phase id upstream of `id` in `flow`'s dependency graph (transitively, list order taken
/// as the sequence when no phase carries `depends_on`); contains `id` only when it is on a
/// cycle. Tailoring asks it so that "upstream" means the same thing there as in the rules.
pub fn upstream_of<'a>(flow: &'a Flow, id: &str) -> BTreeSet<&'a str> {
    Graph::new(flow).upstream_of(id)
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
            if !graph.index.contains_key(dep.as_str()) && reported.insert(dep.as_str()) {
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
    for (node, id) in graph.ids.iter().enumerate() {
        if graph.on_cycle(node) {
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

/// deliverable-is-producible in one topological pass: each component's "artifacts produced by
/// an unconditional phase upstream" is a bit set over the artifacts some phase requires and does
/// not produce itself, OR-ed from the components it depends on and dropped after its last reader.
fn check_producible(flow: &Flow, graph: &Graph<'_>, out: &mut Vec<Violation>) {
    // The artifacts that need an upstream producer, numbered.
    let mut bits: BTreeMap<&str, usize> = BTreeMap::new();
    for phase in &flow.phases {
        for wanted in &phase.required_deliverables {
            if !phase.expected_artifacts.contains(wanted) && !bits.contains_key(wanted.as_str()) {
                bits.insert(wanted.as_str(), bits.len());
            }
        }
    }
    if bits.is_empty() {
        return;
    }
    let width = bits.len();
    // Node → the numbered artifacts its unconditional phases produce.
    let produced: Vec<Vec<usize>> = (0..graph.ids.len())
        .map(|node| {
            let mut list: Vec<usize> = graph
                .phases(flow, node)
                .filter(|p| p.condition.is_none())
                .flat_map(|p| p.expected_artifacts.iter())
                .filter_map(|a| bits.get(a.as_str()).copied())
                .collect();
            list.sort_unstable();
            list.dedup();
            list
        })
        .collect();
    // The last component reading each component's output: it takes the output over.
    let mut last_reader = vec![None::<usize>; graph.components.len()];
    for (c, members) in graph.components.iter().enumerate() {
        for &v in members {
            for &d in graph.deps.get(v).into_iter().flatten() {
                let dc = graph.comp.get(d).copied().unwrap_or(c);
                if dc != c
                    && let Some(slot) = last_reader.get_mut(dc)
                {
                    *slot = Some(slot.map_or(c, |r: usize| r.max(c)));
                }
            }
        }
    }
    let mut outputs: Vec<Option<BitSet>> = vec![None; graph.components.len()];
    let mut missing: Vec<(usize, &str)> = Vec::new();
    for (c, members) in graph.components.iter().enumerate() {
        let mut preds: Vec<usize> = members
            .iter()
            .flat_map(|&v| graph.deps.get(v).into_iter().flatten())
            .filter_map(|&d| graph.comp.get(d).copied())
            .filter(|&dc| dc != c)
            .collect();
        preds.sort_unstable();
        preds.dedup();
        // Outputs this component is the last to read are moved, not copied: along a chain the
        // set travels from phase to phase and each step costs only its own artifacts.
        preds.sort_by_key(|&dc| last_reader.get(dc).copied().flatten() != Some(c));
        let mut upstream: Option<BitSet> = None;
        for dc in preds {
            let last = last_reader.get(dc).copied().flatten() == Some(c);
            let Some(slot) = outputs.get_mut(dc) else {
                continue;
            };
            if last {
                if let Some(set) = slot.take() {
                    match upstream.as_mut() {
                        None => upstream = Some(set),
                        Some(u) => u.union_with(&set),
                    }
                }
            } else if let Some(set) = slot.as_ref() {
                match upstream.as_mut() {
                    None => upstream = Some(set.clone()),
                    Some(u) => u.union_with(set),
                }
            }
        }
        // Inside a cycle every other member is upstream too: count producers per artifact.
        let mut inside: BTreeMap<usize, usize> = BTreeMap::new();
        if members.len() > 1 {
            for &v in members {
                for &bit in produced.get(v).into_iter().flatten() {
                    *inside.entry(bit).or_default() += 1;
                }
            }
        }
        for &v in members {
            let own = produced.get(v).map(Vec::as_slice).unwrap_or_default();
            for phase_at in graph.phases_of.get(v).into_iter().flatten() {
                let Some(phase) = flow.phases.get(*phase_at) else {
                    continue;
                };
                for wanted in &phase.required_deliverables {
                    if phase.expected_artifacts.contains(wanted) {
                        continue;
                    }
                    let Some(&bit) = bits.get(wanted.as_str()) else {
                        continue;
                    };
                    let by_others_inside =
                        inside.get(&bit).copied().unwrap_or(0) > usize::from(own.binary_search(&bit).is_ok());
                    if !upstream.as_ref().is_some_and(|u| u.contains(bit)) && !by_others_inside {
                        missing.push((*phase_at, wanted.as_str()));
                    }
                }
            }
        }
        if last_reader.get(c).copied().flatten().is_some() {
            let mut output = upstream.unwrap_or_else(|| BitSet::new(width));
            for &v in members {
                for &bit in produced.get(v).into_iter().flatten() {
                    output.insert(bit);
                }
            }
            if let Some(slot) = outputs.get_mut(c) {
                *slot = Some(output);
            }
        }
    }
    missing.sort_unstable();
    missing.dedup();
    for (phase_at, wanted) in missing {
        let Some(phase) = flow.phases.get(phase_at) else {
            continue;
        };
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

fn records_requirements(phase: &Phase) -> bool {
    phase.id == "requirements" || REQUIREMENT_ARTIFACTS.iter().any(|a| phase.commits(a))
}

/// requirements-are-verified in one reverse topological pass: a component "reaches a verifier"
/// when any component depending on it verifies or reaches one; inside a cycle every other
/// member counts as later.
fn check_requirements_verified(flow: &Flow, graph: &Graph<'_>, out: &mut Vec<Violation>) {
    let verifies = |p: &Phase| {
        p.condition.is_none()
            && (VERIFICATION_ARTIFACTS
                .iter()
                .any(|a| p.expected_artifacts.iter().any(|e| e == a))
                || (p.has_human_gate() && p.required_deliverables.iter().any(|d| d == "test_plan")))
    };
    let verifier: Vec<bool> = (0..graph.ids.len())
        .map(|node| graph.phases(flow, node).any(verifies))
        .collect();
    let verifiers_in: Vec<usize> = graph
        .components
        .iter()
        .map(|members| {
            members
                .iter()
                .filter(|&&v| verifier.get(v).copied().unwrap_or(false))
                .count()
        })
        .collect();
    // later[c]: some component downstream of c (not c itself) has a verifier.
    let mut later = vec![false; graph.components.len()];
    for c in (0..graph.components.len()).rev() {
        let reaches = later.get(c).copied().unwrap_or(false) || verifiers_in.get(c).copied().unwrap_or(0) > 0;
        if !reaches {
            continue;
        }
        for &v in graph.components.get(c).into_iter().flatten() {
            for &d in graph.deps.get(v).into_iter().flatten() {
                if let Some(dc) = graph.comp.get(d).copied()
                    && dc != c
                    && let Some(slot) = later.get_mut(dc)
                {
                    *slot = true;
                }
            }
        }
    }
    for phase in &flow.phases {
        if !records_requirements(phase) {
            continue;
        }
        let id = phase.id.as_str();
        let Some(&node) = graph.index.get(id) else {
            continue;
        };
        let c = graph.comp.get(node).copied().unwrap_or(0);
        let others_inside = graph.component_size(node) > 1
            && verifiers_in.get(c).copied().unwrap_or(0)
                > usize::from(verifier.get(node).copied().unwrap_or(false));
        let verified = later.get(c).copied().unwrap_or(false) || others_inside;
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
