//! The flow-version store contract (FORGE-482).

use futures::future::BoxFuture;
use metaforge_ports::{
    FlowVersionDecision, FlowVersionOrigin, FlowVersionRecord, FlowVersionStatus, FlowVersionStore,
    PortErrorKind,
};

use super::{kind_of, t};
use metaforge_ports::sha256_hex;

/// Overwrites a stored version's frozen content behind the store's back (keeping its hash), as
/// disk corruption or a hand edit would; the store must then refuse to serve it.
pub type Tamper<'a> = &'a (dyn Fn(String, String) -> BoxFuture<'static, ()> + Sync);

/// A proposed version of `template` with frozen content `body`, hashed correctly.
pub fn frozen_version(id: &str, template: &str, body: &str, at_secs: i64) -> FlowVersionRecord {
    let frozen = format!("{{\"phases\":[\"{body}\"],\"template\":\"{template}\"}}");
    FlowVersionRecord {
        id: id.to_owned(),
        template_id: template.to_owned(),
        template_version: "1.0.0".to_owned(),
        status: FlowVersionStatus::Proposed,
        content_hash: sha256_hex(&frozen),
        frozen,
        origin: FlowVersionOrigin::Server,
        approval_id: None,
        approver: None,
        created_at: super::t(at_secs),
        decided_at: None,
    }
}

/// Runs every flow-version rule against `store`; `tamper` corrupts a stored row.
pub async fn flow_version_store_contract(store: &dyn FlowVersionStore, tamper: Tamper<'_>) {
    let v1 = store
        .save(frozen_version("v-1", "tpl-a", "design", 0))
        .await
        .expect("save v-1");
    assert_eq!(
        store.get("v-1").await.expect("get"),
        v1,
        "a saved version reads back unchanged"
    );
    assert_eq!(
        kind_of(&store.save(frozen_version("v-1", "tpl-a", "design", 0)).await),
        Some(PortErrorKind::Conflict)
    );
    let mut lying = frozen_version("v-bad", "tpl-a", "x", 0);
    lying.content_hash = sha256_hex("something else");
    assert_eq!(
        kind_of(&store.save(lying).await),
        Some(PortErrorKind::Invalid),
        "a hash that does not match is refused"
    );
    assert_eq!(
        kind_of(&store.get("v-bad").await),
        Some(PortErrorKind::NotFound),
        "a refused save wrote nothing"
    );
    store
        .save(frozen_version("v-2", "tpl-b", "build", 1))
        .await
        .expect("save v-2");
    store
        .save(frozen_version("v-3", "tpl-a", "verify", 2))
        .await
        .expect("save v-3");

    let all: Vec<String> = store
        .list(None)
        .await
        .expect("list")
        .into_iter()
        .map(|v| v.id)
        .collect();
    assert_eq!(all, vec!["v-1", "v-2", "v-3"], "oldest first");
    let a: Vec<String> = store
        .list(Some("tpl-a"))
        .await
        .expect("list")
        .into_iter()
        .map(|v| v.id)
        .collect();
    assert_eq!(a, vec!["v-1", "v-3"], "filtered by template");

    // Decisions: once, with an approver, and then immutable.
    let decision = FlowVersionDecision {
        status: FlowVersionStatus::Approved,
        approver: "ana".into(),
        approval_id: Some("appr-9".into()),
        at: t(10),
    };
    assert_eq!(
        kind_of(
            &store
                .decide(
                    "v-1",
                    FlowVersionDecision {
                        status: FlowVersionStatus::Proposed,
                        ..decision.clone()
                    }
                )
                .await
        ),
        Some(PortErrorKind::Invalid)
    );
    assert_eq!(
        kind_of(
            &store
                .decide(
                    "v-1",
                    FlowVersionDecision {
                        approver: " ".into(),
                        ..decision.clone()
                    }
                )
                .await
        ),
        Some(PortErrorKind::Invalid)
    );
    let approved = store.decide("v-1", decision.clone()).await.expect("approve v-1");
    assert_eq!(approved.status, FlowVersionStatus::Approved);
    assert_eq!(approved.approver.as_deref(), Some("ana"));
    assert_eq!(approved.approval_id.as_deref(), Some("appr-9"));
    assert_eq!(approved.decided_at, Some(t(10)));
    assert_eq!(
        approved.content_hash, v1.content_hash,
        "deciding never touches the content"
    );
    assert_eq!(
        kind_of(
            &store
                .decide(
                    "v-1",
                    FlowVersionDecision {
                        status: FlowVersionStatus::Rejected,
                        ..decision.clone()
                    }
                )
                .await
        ),
        Some(PortErrorKind::Conflict),
        "a decided version is immutable"
    );
    assert_eq!(
        kind_of(&store.decide("missing", decision.clone()).await),
        Some(PortErrorKind::NotFound)
    );

    // Restore verifies every row; a tampered row is skipped and never served.
    tamper("v-2".to_owned(), "{\"phases\":[\"evil\"]}".to_owned()).await;
    let restored = store.restore().await.expect("restore");
    let ids: Vec<String> = restored.restored.iter().map(|v| v.id.clone()).collect();
    assert_eq!(ids, vec!["v-1", "v-3"], "the tampered row is not restored");
    assert_eq!(restored.skipped.len(), 1);
    assert_eq!(restored.skipped[0].id, "v-2");
    assert!(restored.skipped[0].reason.contains("hash"), "the skip says why");
    assert_eq!(
        kind_of(&store.get("v-2").await),
        Some(PortErrorKind::Corrupt),
        "a tampered version is never served"
    );
    assert!(
        !store
            .list(None)
            .await
            .expect("list")
            .iter()
            .any(|v| v.id == "v-2")
    );
    assert_eq!(
        kind_of(&store.decide("v-2", decision).await),
        Some(PortErrorKind::Corrupt),
        "a tampered version cannot be approved"
    );
    assert_eq!(
        store.get("v-1").await.expect("get"),
        approved,
        "restore changes nothing it serves"
    );
}
