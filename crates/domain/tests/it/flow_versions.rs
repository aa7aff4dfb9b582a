//! Flow versions: created only when valid and different from the template, frozen and hashed,
//! immutable once decided, and refused when their content no longer matches their hash.

use metaforge_domain::flow::{
    VersionDecision, VersionError, attach_approval, decide_version, new_version, sha256_hex, template, thaw,
    verify_version,
};
use metaforge_ports::{FlowVersionOrigin, FlowVersionStatus, Timestamp};

#[expect(clippy::unwrap_used, reason = "a fixed valid timestamp")]
fn at(minute: u32) -> Timestamp {
    format!("2026-11-30T06:{minute:02}:00Z").parse().unwrap()
}

#[expect(clippy::unwrap_used, reason = "the shipped template exists")]
fn edited() -> metaforge_domain::flow::Flow {
    let mut flow = template("mech_v1").unwrap();
    flow.phase_mut("design")
        .unwrap()
        .required_deliverables
        .push("bom".to_owned());
    flow
}

#[test]
fn a_valid_edit_becomes_a_proposed_frozen_hashed_version() {
    let base = template("mech_v1").unwrap();
    let v = new_version(
        "v-1".into(),
        at(0),
        &base,
        &edited(),
        None,
        FlowVersionOrigin::Caller,
    )
    .unwrap();
    assert_eq!(v.status, FlowVersionStatus::Proposed);
    assert_eq!(
        (v.template_id.as_str(), v.template_version.as_str()),
        ("mech_v1", "1.1.0")
    );
    assert_eq!(v.content_hash, sha256_hex(&v.frozen));
    assert_eq!(v.origin, FlowVersionOrigin::Caller);
    assert_eq!(thaw(&v.frozen).unwrap(), edited());
    assert!(v.approval_id.is_none() && v.approver.is_none() && v.decided_at.is_none());
}

#[test]
fn an_invalid_flow_is_refused_with_every_violation() {
    let base = template("mech_v1").unwrap();
    let mut flow = base.clone();
    flow.phase_mut("design").unwrap().enforce_deliverables = false;
    flow.phase_mut("feasibility")
        .unwrap()
        .required_deliverables
        .clear();
    let err = new_version("v-1".into(), at(0), &base, &flow, None, FlowVersionOrigin::Server).unwrap_err();
    let VersionError::Invalid { violations } = err else {
        panic!("expected Invalid, got {err:?}");
    };
    let rules: Vec<&str> = violations.iter().map(|v| v.rule.as_str()).collect();
    assert_eq!(rules, ["no-pass-without-data", "gates-enforce-what-they-require"]);
}

#[test]
fn a_flow_identical_to_its_template_is_refused() {
    let base = template("design_v1").unwrap();
    let err = new_version("v-1".into(), at(0), &base, &base, None, FlowVersionOrigin::Server).unwrap_err();
    assert!(matches!(err, VersionError::IdenticalToTemplate { .. }), "{err:?}");
}

#[test]
fn decided_versions_are_immutable() {
    let base = template("mech_v1").unwrap();
    let v = new_version(
        "v-1".into(),
        at(0),
        &base,
        &edited(),
        None,
        FlowVersionOrigin::Server,
    )
    .unwrap();
    let held = attach_approval(&v, "appr-1".into()).unwrap();
    let approved = decide_version(&held, VersionDecision::Approve, "alice".into(), at(5)).unwrap();
    assert_eq!(approved.status, FlowVersionStatus::Approved);
    assert_eq!(approved.approver.as_deref(), Some("alice"));
    assert_eq!(approved.decided_at, Some(at(5)));
    assert_eq!(
        (approved.frozen.as_str(), approved.id.as_str()),
        (v.frozen.as_str(), "v-1")
    );
    for err in [
        decide_version(&approved, VersionDecision::Reject, "bob".into(), at(6)).unwrap_err(),
        attach_approval(&approved, "appr-2".into()).unwrap_err(),
    ] {
        assert!(matches!(err, VersionError::AlreadyDecided { .. }), "{err:?}");
    }
    let rejected = decide_version(&held, VersionDecision::Reject, "bob".into(), at(7)).unwrap();
    assert_eq!(rejected.status, FlowVersionStatus::Rejected);
    assert!(decide_version(&rejected, VersionDecision::Approve, "bob".into(), at(8)).is_err());
}

#[test]
fn an_edit_of_an_approved_version_is_a_new_version() {
    let base = template("mech_v1").unwrap();
    let v1 = new_version(
        "v-1".into(),
        at(0),
        &base,
        &edited(),
        None,
        FlowVersionOrigin::Server,
    )
    .unwrap();
    let approved = decide_version(&v1, VersionDecision::Approve, "alice".into(), at(1)).unwrap();
    let mut again = verify_version(&approved).unwrap();
    again
        .phase_mut("simulation")
        .unwrap()
        .required_deliverables
        .push("cad_model".into());
    let v2 = new_version(
        "v-2".into(),
        at(2),
        &base,
        &again,
        None,
        FlowVersionOrigin::Server,
    )
    .unwrap();
    assert_ne!(v2.content_hash, approved.content_hash);
    assert_eq!(v2.status, FlowVersionStatus::Proposed);
    assert_eq!(approved.status, FlowVersionStatus::Approved);
}

#[test]
fn a_version_whose_content_no_longer_matches_its_hash_is_refused() {
    let base = template("mech_v1").unwrap();
    let mut v = new_version(
        "v-1".into(),
        at(0),
        &base,
        &edited(),
        None,
        FlowVersionOrigin::Server,
    )
    .unwrap();
    v.frozen = v
        .frozen
        .replace("\"enforce_deliverables\":true", "\"enforce_deliverables\":false");
    for err in [
        verify_version(&v).unwrap_err(),
        decide_version(&v, VersionDecision::Approve, "alice".into(), at(1)).unwrap_err(),
    ] {
        assert!(matches!(err, VersionError::Corrupt { .. }), "{err:?}");
    }
}

#[test]
fn empty_ids_and_approvers_are_refused() {
    let base = template("mech_v1").unwrap();
    assert!(matches!(
        new_version(
            " ".into(),
            at(0),
            &base,
            &edited(),
            None,
            FlowVersionOrigin::Server
        ),
        Err(VersionError::Missing("id"))
    ));
    let v = new_version(
        "v-1".into(),
        at(0),
        &base,
        &edited(),
        None,
        FlowVersionOrigin::Server,
    )
    .unwrap();
    assert!(matches!(
        decide_version(&v, VersionDecision::Approve, "".into(), at(1)),
        Err(VersionError::Missing("approver"))
    ));
}

#[test]
fn a_shipped_template_freezes_into_one_approved_template_version_that_verifies() {
    use metaforge_domain::flow::{TEMPLATE_APPROVER, content_hash, template_version};
    let design = template("design_v1").unwrap();
    let first = template_version(&design, at(0)).unwrap();
    let again = template_version(&design, at(5)).unwrap();
    assert_eq!(first.status, FlowVersionStatus::Approved);
    assert_eq!(first.origin, FlowVersionOrigin::Template);
    assert_eq!(first.approver.as_deref(), Some(TEMPLATE_APPROVER));
    assert_eq!(first.content_hash, content_hash(&design).unwrap());
    assert_eq!(
        first.id, again.id,
        "the same template text gives the same version id"
    );
    assert!(first.id.starts_with("template-design_v1-1.1.0-"), "{}", first.id);
    assert_eq!(verify_version(&first).unwrap(), design);
    // An edited template (new text) is another version.
    let other = template_version(&edited(), at(0)).unwrap();
    assert_ne!(
        other.id,
        template_version(&template("mech_v1").unwrap(), at(0)).unwrap().id
    );
}

#[test]
fn a_template_that_breaks_an_invariant_is_not_frozen_into_a_version() {
    use metaforge_domain::flow::template_version;
    let mut broken = template("mech_v1").unwrap();
    for phase in &mut broken.phases {
        phase.gate = None;
    }
    let refused = template_version(&broken, at(0));
    assert!(
        matches!(&refused, Err(VersionError::Invalid { violations }) if violations.iter().any(|v| v.rule == "release-gate-exists")),
        "{refused:?}"
    );
}
