//! The domain's integration tests, one binary (each former `tests/*.rs` is a module here):
//! flow rules and templates, the rule tables in `fixtures/rules/`, properties and snapshots.

mod flow_answers;
mod flow_diff;
mod flow_graph_props;
mod flow_invariants;
mod flow_props;
mod flow_scaling;
mod flow_stories;
mod flow_tailor;
mod flow_templates;
mod flow_versions;
mod rules_approver_policy;
mod rules_compaction;
mod rules_gating;
mod rules_grounding;
mod rules_model_capability;
mod rules_model_family;
mod rules_routing;
mod rules_snapshots;
mod rules_tool_cap;
mod rules_usage;
mod rules_usage_recorded;
mod run_props;
mod run_reducer;
mod skill_format;

/// Flows of any size and shape for the scaling tests (shared with `examples/validate_timing.rs`).
mod support {
    pub(crate) mod big_flows;
}
