//! Large generated flows for the scaling test and the timing example: a dependency chain and one
//! big dependency cycle, shaped like the 10,000-phase flow of issue 12 (each phase requires the
//! artifact of the phase before it, every tenth phase has a human gate, the last one releases).

use metaforge_domain::flow::{Flow, Gate, MAX_DELIVERABLES, MAX_DEPENDENCIES, MAX_PHASES, Phase};

/// The two shapes measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// `p0 ← p1 ← … ← p(n-1)`.
    Chain,
    /// The chain closed into one cycle (`p0` depends on `p(n-1)`).
    Cycle,
}

impl Shape {
    /// The label printed in tables.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Chain => "chain",
            Self::Cycle => "cycle",
        }
    }
}

/// A flow of `n` phases in `shape`.
pub(crate) fn big_flow(n: usize, shape: Shape) -> Flow {
    let id = |i: usize| format!("p{i}");
    let phases = (0..n)
        .map(|i| {
            let last = i + 1 == n;
            let mut depends_on = Vec::new();
            if i > 0 {
                depends_on.push(id(i - 1));
            } else if shape == Shape::Cycle && n > 1 {
                depends_on.push(id(n - 1));
            }
            let mut required = Vec::new();
            if i > 0 {
                required.push(format!("artifact_{}", i - 1));
            }
            let gated = last || i % 10 == 9;
            if gated {
                required.push(format!("artifact_{i}"));
            }
            Phase {
                id: id(i),
                title: format!("Phase {i}"),
                disciplines: vec!["mechanical".to_owned()],
                depends_on,
                condition: None,
                expected_artifacts: vec![format!("artifact_{i}")],
                required_deliverables: required,
                enforce_deliverables: true,
                gate: gated.then(|| Gate {
                    name: if last {
                        "Release Gate".to_owned()
                    } else {
                        format!("G{i} Review")
                    },
                    auto_approve: false,
                    criteria: vec!["the artifact is complete".to_owned()],
                }),
                model: None,
                items: Vec::new(),
            }
        })
        .collect();
    Flow {
        id: "big".to_owned(),
        version: "1".to_owned(),
        title: "Big flow".to_owned(),
        label: String::new(),
        phases,
    }
}

/// A flow exactly at every size limit: each phase depends on the ten before it (wrapping, so the
/// whole flow is one cycle), produces five artifacts and requires the five of the phase before.
pub(crate) fn maximum_flow() -> Flow {
    let fan = MAX_DEPENDENCIES / MAX_PHASES;
    let per_side = MAX_DELIVERABLES / MAX_PHASES / 2;
    let mut flow = big_flow(MAX_PHASES, Shape::Cycle);
    for (i, phase) in flow.phases.iter_mut().enumerate() {
        phase.depends_on = (1..=fan)
            .map(|k| format!("p{}", (i + MAX_PHASES - k) % MAX_PHASES))
            .collect();
        phase.expected_artifacts = (0..per_side).map(|k| format!("a{i}_{k}")).collect();
        phase.required_deliverables = (0..per_side)
            .map(|k| format!("a{}_{k}", (i + MAX_PHASES - 1) % MAX_PHASES))
            .collect();
    }
    flow
}
