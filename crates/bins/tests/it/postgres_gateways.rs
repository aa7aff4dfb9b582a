//! Two `metaforge gateway` processes on one PostgreSQL server (`METAFORGE_DATABASE_URL`): one
//! approval queue seen by both, one winner when decisions on one hold race across them, and
//! nothing written to the SQLite files under either home.

#![expect(
    clippy::expect_used,
    reason = "test helpers: a peer that does not start must fail the test loudly"
)]

use std::process::Stdio;

use serde_json::{Value, json};

use crate::common::{http, server_command, start_gateway};

fn proposal(rationale: &str) -> Value {
    json!({
        "template": "mech_v1",
        "operations": [{"op": "add_deliverable", "phase": "design", "value": "test_plan", "rationale": rationale}],
        "manufacturingContext": {"route": "vendor"},
        "targetMaturity": "physically_validated",
        "loadsAndUse": "20 kg"
    })
}

fn pending_ids(gateway: &str) -> Vec<String> {
    let (status, list) = http(gateway, "GET", "/v1/approvals", None);
    assert_eq!(status, 200, "{list}");
    let mut ids: Vec<String> = list["approvals"]
        .as_array()
        .expect("approvals array")
        .iter()
        .map(|a| a["id"].as_str().expect("id").to_owned())
        .collect();
    ids.sort();
    ids
}

#[test]
fn two_gateways_on_one_postgres_share_the_queue_and_a_decision_has_one_winner() {
    let pg_dir = tempfile::tempdir().expect("tempdir");
    let Some(server) = metaforge_test_support::postgres::start_postgres(pg_dir.path()) else {
        return;
    };
    let database = [("METAFORGE_DATABASE_URL", server.url.clone())];
    let (home_a, home_b) = (
        tempfile::tempdir().expect("home a"),
        tempfile::tempdir().expect("home b"),
    );
    let (_gateway_a, a) = start_gateway(home_a.path(), &database);
    let (_gateway_b, b) = start_gateway(home_b.path(), &database);

    // Proposals through either gateway land in the one queue both show.
    let mut holds = Vec::new();
    for (n, gateway) in [&a, &b, &a, &b].into_iter().enumerate() {
        let (status, proposed) = http(
            gateway,
            "POST",
            "/v1/design-flows/propose",
            Some(&proposal(&format!("p{n}"))),
        );
        assert_eq!(status, 201, "{proposed}");
        holds.push(proposed["approvalId"].as_str().expect("approval id").to_owned());
    }
    holds.sort();
    assert_eq!(pending_ids(&a), holds, "gateway a shows every pending hold");
    assert_eq!(pending_ids(&b), holds, "gateway b shows the same queue");

    // Ten decisions per hold race across the two gateways: one 200, nine 409.
    for hold in &holds {
        let racers: Vec<_> = (0..10)
            .map(|n| {
                let gateway = if n % 2 == 0 { a.clone() } else { b.clone() };
                let path = format!("/v1/approvals/{hold}/decision");
                let decision = if n % 3 == 0 { "reject" } else { "approve" };
                std::thread::spawn(move || {
                    http(&gateway, "POST", &path, Some(&json!({"decision": decision})))
                })
            })
            .collect();
        let statuses: Vec<u16> = racers.into_iter().map(|r| r.join().expect("racer").0).collect();
        assert_eq!(
            statuses.iter().filter(|s| **s == 200).count(),
            1,
            "one winner for {hold}: {statuses:?}"
        );
        assert_eq!(
            statuses.iter().filter(|s| **s == 409).count(),
            9,
            "the rest conflict: {statuses:?}"
        );
        let (_, from_a) = http(&a, "GET", &format!("/v1/approvals/{hold}"), None);
        let (_, from_b) = http(&b, "GET", &format!("/v1/approvals/{hold}"), None);
        assert_eq!(from_a, from_b, "both gateways read the one decision");
    }
    assert!(pending_ids(&a).is_empty() && pending_ids(&b).is_empty());
    for home in [&home_a, &home_b] {
        assert!(
            !home.path().join("tool_approvals_ledger.db").exists()
                && !home.path().join("flow_versions.db").exists(),
            "no ledger file is written when METAFORGE_DATABASE_URL is set"
        );
    }
}

#[test]
fn a_database_url_of_another_scheme_refuses_to_start_naming_the_variable() {
    let home = tempfile::tempdir().expect("tempdir");
    let output = server_command(&["gateway", "--bind", "127.0.0.1:0"], home.path())
        .env("METAFORGE_DATABASE_URL", "mysql://db/metaforge")
        .stderr(Stdio::piped())
        .output()
        .expect("run the gateway");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("METAFORGE_DATABASE_URL"), "{stderr}");
    assert!(
        !home.path().join("tool_approvals_ledger.db").exists(),
        "nothing is written"
    );
}

#[test]
fn an_unreachable_database_fails_start_up_instead_of_falling_back_to_files() {
    let home = tempfile::tempdir().expect("tempdir");
    let port = metaforge_test_support::net::unused_port();
    let output = server_command(&["gateway", "--bind", "127.0.0.1:0"], home.path())
        .env(
            "METAFORGE_DATABASE_URL",
            format!("postgres://metaforge@127.0.0.1:{port}/postgres"),
        )
        .stderr(Stdio::piped())
        .output()
        .expect("run the gateway");
    assert!(
        !output.status.success(),
        "the gateway must not start without its ledgers"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot connect to the PostgreSQL ledger"),
        "{stderr}"
    );
    assert!(
        !home.path().join("tool_approvals_ledger.db").exists(),
        "no fallback to the files"
    );
}
