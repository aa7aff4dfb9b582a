//! The ask tier as the operator declares it: exact registry ids and glob patterns over them.

use metaforge_agent::ToolPolicy;

#[test]
fn the_ask_tier_holds_exact_ids_and_ids_a_glob_matches_and_nothing_else() {
    let policy = ToolPolicy {
        requires_approval: ["parts.write_*", "twin.commit_geometry", "bad[glob"]
            .into_iter()
            .map(str::to_owned)
            .collect(),
        ..ToolPolicy::default()
    };
    assert!(policy.holds("parts.write_part"));
    assert!(policy.holds("parts.write_"));
    assert!(policy.holds("twin.commit_geometry"));
    assert!(
        policy.holds("bad[glob"),
        "an entry that is not a glob matches itself"
    );
    assert!(!policy.holds("parts.read_part"));
    assert!(!policy.holds("other.write_part"));
    assert!(!policy.holds("twin.commit_geometry_v2"));
}
