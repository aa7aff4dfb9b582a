//! Size limits on what a caller may send as a flow or a tailoring (issue 12): generous for real
//! flows — the built-in templates have 7 to 11 phases — and small enough that validating a flow
//! at the limit takes milliseconds, so nobody can occupy a server by sending a huge one. Every
//! entry point (`POST /v1/design-flows/validate`, `/versions`, `/propose`, MCP `flow.validate`
//! and `flow.propose`, the CLI) checks them before doing any work; a refusal names the limit.

use super::model::Flow;

/// The most phases a flow may have.
pub const MAX_PHASES: usize = 1_000;

/// The most `depends_on` entries a flow may have, summed over its phases.
pub const MAX_DEPENDENCIES: usize = 10_000;

/// The most deliverable entries a flow may have: `expected_artifacts` plus
/// `required_deliverables`, summed over its phases.
pub const MAX_DELIVERABLES: usize = 10_000;

/// The most operations one tailoring proposal may carry.
pub const MAX_OPERATIONS: usize = 200;

/// A flow or proposal over a size limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} has {actual} entries; the limit is {max} ({limit})")]
pub struct SizeLimitError {
    /// The field over its limit, as the request names it (`flow.phases`, `operations`).
    pub field: &'static str,
    /// The limit's name (`MAX_PHASES`, …).
    pub limit: &'static str,
    /// The limit.
    pub max: usize,
    /// What was sent.
    pub actual: usize,
}

fn within(field: &'static str, limit: &'static str, max: usize, actual: usize) -> Result<(), SizeLimitError> {
    if actual > max {
        Err(SizeLimitError {
            field,
            limit,
            max,
            actual,
        })
    } else {
        Ok(())
    }
}

/// Checks `flow` against [`MAX_PHASES`], [`MAX_DEPENDENCIES`] and [`MAX_DELIVERABLES`].
pub fn check_flow_size(flow: &Flow) -> Result<(), SizeLimitError> {
    within("flow.phases", "MAX_PHASES", MAX_PHASES, flow.phases.len())?;
    let dependencies = flow.phases.iter().map(|p| p.depends_on.len()).sum();
    within(
        "flow.phases[].depends_on",
        "MAX_DEPENDENCIES",
        MAX_DEPENDENCIES,
        dependencies,
    )?;
    let deliverables = flow
        .phases
        .iter()
        .map(|p| p.expected_artifacts.len() + p.required_deliverables.len())
        .sum();
    within(
        "flow.phases[].expected_artifacts+required_deliverables",
        "MAX_DELIVERABLES",
        MAX_DELIVERABLES,
        deliverables,
    )
}

/// Checks a proposal's operation count against [`MAX_OPERATIONS`].
pub fn check_operation_count(count: usize) -> Result<(), SizeLimitError> {
    within("operations", "MAX_OPERATIONS", MAX_OPERATIONS, count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::template;

    #[test]
    fn templates_are_far_inside_the_limits_and_the_limit_itself_is_accepted() {
        for id in ["design_v1", "mech_v1", "hardware_v1"] {
            assert_eq!(check_flow_size(&template(id).unwrap()), Ok(()));
        }
        assert_eq!(check_operation_count(MAX_OPERATIONS), Ok(()));
        let err = check_operation_count(MAX_OPERATIONS + 1).unwrap_err();
        assert_eq!(err.limit, "MAX_OPERATIONS");
        assert!(err.to_string().contains("MAX_OPERATIONS") && err.to_string().contains("201"));
    }

    #[test]
    fn one_phase_over_the_limit_is_refused_naming_it() {
        let base = template("mech_v1").unwrap();
        let mut flow = base.clone();
        flow.phases = (0..=MAX_PHASES)
            .map(|i| {
                let mut p = base.phases[0].clone();
                p.id = format!("p{i}");
                p
            })
            .collect();
        let err = check_flow_size(&flow).unwrap_err();
        assert_eq!(
            (err.field, err.limit, err.actual),
            ("flow.phases", "MAX_PHASES", MAX_PHASES + 1)
        );
        flow.phases.pop();
        assert_eq!(check_flow_size(&flow), Ok(()));
    }
}
