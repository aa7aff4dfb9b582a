//! The linear-time graph rules agree with the definition: for random small flows (cycles,
//! self-loops, duplicated ids, missing ids, conditional phases), the `{rule, phase}` pairs of
//! `graph-is-valid`, `deliverable-is-producible` and `requirements-are-verified` equal those of
//! a brute-force reading of the rule text (transitive ancestors per phase, recomputed each time).

use std::collections::BTreeSet;

use metaforge_domain::flow::{Flow, Gate, Phase, uses_list_order, validate};
use proptest::prelude::*;

const IDS: &[&str] = &["a", "b", "c", "d", "requirements", "f"];
const ARTIFACTS: &[&str] = &["x", "y", "requirements", "simulation_result", "test_plan"];

fn phase() -> impl Strategy<Value = Phase> {
    (
        prop::sample::select(IDS),
        prop::collection::vec(prop::sample::select(IDS), 0..3),
        prop::bool::weighted(0.2),
        prop::collection::vec(prop::sample::select(ARTIFACTS), 0..3),
        prop::collection::vec(prop::sample::select(ARTIFACTS), 0..3),
        prop::bool::weighted(0.5),
    )
        .prop_map(|(id, deps, conditional, expected, required, gated)| Phase {
            id: id.to_owned(),
            title: id.to_owned(),
            disciplines: Vec::new(),
            depends_on: deps.into_iter().map(str::to_owned).collect(),
            condition: conditional.then(|| "sometimes".to_owned()),
            expected_artifacts: expected.into_iter().map(str::to_owned).collect(),
            required_deliverables: required.into_iter().map(str::to_owned).collect(),
            enforce_deliverables: true,
            gate: gated.then(|| Gate {
                name: "Release Gate".to_owned(),
                auto_approve: false,
                criteria: Vec::new(),
            }),
            model: None,
            items: Vec::new(),
        })
}

/// The direct dependencies of `id`, as the rule text defines them.
fn direct(flow: &Flow, id: &str) -> BTreeSet<String> {
    if uses_list_order(flow) {
        let mut order: Vec<&str> = Vec::new();
        for p in &flow.phases {
            if !order.contains(&p.id.as_str()) {
                order.push(&p.id);
            }
        }
        let at = order.iter().position(|o| *o == id);
        return at
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| order.get(i))
            .map(|o| BTreeSet::from([(*o).to_owned()]))
            .unwrap_or_default();
    }
    flow.phases
        .iter()
        .filter(|p| p.id == id)
        .flat_map(|p| p.depends_on.iter())
        .filter(|d| flow.phases.iter().any(|p| &p.id == *d))
        .cloned()
        .collect()
}

fn ancestors(flow: &Flow, id: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<String> = direct(flow, id).into_iter().collect();
    while let Some(next) = stack.pop() {
        if seen.insert(next.clone()) {
            stack.extend(direct(flow, &next));
        }
    }
    seen
}

fn brute_force(flow: &Flow) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for p in &flow.phases {
        if ancestors(flow, &p.id).contains(&p.id) {
            out.insert(("graph-is-valid".to_owned(), p.id.clone()));
        }
        if p.depends_on
            .iter()
            .any(|d| !flow.phases.iter().any(|q| &q.id == d))
        {
            out.insert(("graph-is-valid".to_owned(), p.id.clone()));
        }
        let up = ancestors(flow, &p.id);
        for wanted in &p.required_deliverables {
            let by_self = p.expected_artifacts.contains(wanted);
            let upstream = flow.phases.iter().any(|q| {
                q.id != p.id
                    && up.contains(&q.id)
                    && q.condition.is_none()
                    && q.expected_artifacts.contains(wanted)
            });
            if !by_self && !upstream {
                out.insert(("deliverable-is-producible".to_owned(), p.id.clone()));
            }
        }
        let records = p.id == "requirements" || p.commits("requirements");
        if records {
            let verified = flow.phases.iter().any(|q| {
                q.id != p.id
                    && ancestors(flow, &q.id).contains(&p.id)
                    && q.condition.is_none()
                    && (q.expected_artifacts.iter().any(|a| a == "simulation_result")
                        || (q.has_human_gate() && q.required_deliverables.iter().any(|d| d == "test_plan")))
            });
            if !verified {
                out.insert(("requirements-are-verified".to_owned(), p.id.clone()));
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn graph_rules_match_their_brute_force_definition(
        phases in prop::collection::vec(phase(), 0..8),
        list_order in any::<bool>(),
    ) {
        let mut flow = Flow {
            id: "p".to_owned(),
            version: "1".to_owned(),
            title: "P".to_owned(),
            label: String::new(),
            phases,
        };
        if list_order {
            for p in &mut flow.phases {
                p.depends_on.clear();
            }
        }
        let graph_rules = ["graph-is-valid", "deliverable-is-producible", "requirements-are-verified"];
        let got: BTreeSet<(String, String)> = validate(&flow, None)
            .into_iter()
            .filter(|v| graph_rules.contains(&v.rule.as_str()))
            .map(|v| (v.rule, v.phase.unwrap_or_default()))
            .collect();
        prop_assert_eq!(got, brute_force(&flow));
    }
}
