//! Two `metaforge gateway` processes on one PostgreSQL server (`METAFORGE_DATABASE_URL`): one
//! approval queue seen by both, one winner when decisions on one hold race across them, nothing
//! written to the SQLite files under either home; and one of them driving the shared runs (the
//! engine lease) while the other stands by, taking over when the first is killed.

#![expect(
    clippy::expect_used,
    reason = "test helpers: a peer that does not start must fail the test loudly"
)]

use std::process::Stdio;

use serde_json::{Value, json};

use crate::common::{http, server_command, start_gateway};
use crate::run_support::{
    ScriptedModel, approve_body, exchange, log_tail, open_gate, start_gateway as run_gateway,
};

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
    let Some(server) = metaforge_test_support::postgres::start_postgres() else {
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
        for ledger in [
            "tool_approvals_ledger.db",
            "flow_versions.db",
            "runs_ledger.db",
            "client_tasks.db",
            "llm_usage.db",
            "sessions.db",
        ] {
            assert!(
                !home.path().join(ledger).exists(),
                "no ledger file ({ledger}) is written when METAFORGE_DATABASE_URL is set"
            );
        }
    }
}

fn park_held_write(gateway: &str) -> String {
    let (status, hold) = http(
        gateway,
        "POST",
        "/v1/chat/tool_approvals",
        Some(&json!({"tool": "twin.commit_geometry", "caller": "remote", "timeout_seconds": 3600})),
    );
    assert_eq!(status, 201, "{hold}");
    hold["id"].as_str().expect("hold id").to_owned()
}

fn hold_status(gateway: &str, id: &str) -> Value {
    let (status, hold) = http(gateway, "GET", &format!("/v1/chat/tool_approvals/{id}"), None);
    assert_eq!(status, 200, "{hold}");
    hold
}

#[test]
fn a_restart_orphans_only_its_own_holds_and_a_killed_peers_are_orphaned_by_the_survivor() {
    let Some(server) = metaforge_test_support::postgres::start_postgres() else {
        return;
    };
    let database = [("METAFORGE_DATABASE_URL", server.url.clone())];
    let (home_a, home_b) = (
        tempfile::tempdir().expect("home a"),
        tempfile::tempdir().expect("home b"),
    );
    let (gateway_a, a) = start_gateway(home_a.path(), &database);
    let (gateway_b, b) = start_gateway(home_b.path(), &database);
    let held_on_a = park_held_write(&a);
    let held_on_b = park_held_write(&b);

    // b restarts: the hold it parked lost its waiter, a's is still waited on.
    drop(gateway_b);
    let (_gateway_b, b) = start_gateway(home_b.path(), &database);
    let own = hold_status(&b, &held_on_b);
    assert_eq!(own["status"], "failed", "{own}");
    assert_eq!(
        own["reason"],
        "orphaned: gateway restarted while this approval was pending"
    );
    assert_eq!(
        hold_status(&b, &held_on_a)["status"],
        "awaiting_approval",
        "a live gateway's hold survives its peer's restart"
    );

    // kill -9 a: b's sweep sees a is gone and orphans its hold, without a restart.
    drop(gateway_a);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    loop {
        let hold = hold_status(&b, &held_on_a);
        if hold["status"] == "failed" {
            assert_eq!(
                hold["reason"],
                "orphaned: gateway restarted while this approval was pending"
            );
            break;
        }
        assert_eq!(hold["status"], "awaiting_approval", "{hold}");
        assert!(
            std::time::Instant::now() < deadline,
            "the killed gateway's hold was never orphaned"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
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

/// How long a takeover or a phase on the scripted model may take on two slow cores.
const RUN_WAIT: std::time::Duration = std::time::Duration::from_secs(40);

fn wait_for<T>(what: &str, log: &std::path::Path, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + RUN_WAIT;
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "waited {RUN_WAIT:?} for {what}\n--- gateway log ---\n{}",
            log_tail(log, 40)
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn one_gateway_drives_the_shared_runs_and_another_takes_over_when_it_is_killed() {
    let Some(server) = metaforge_test_support::postgres::start_postgres() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let model = runtime.block_on(ScriptedModel::start());
    let (home_a, home_b) = (
        tempfile::tempdir().expect("home a"),
        tempfile::tempdir().expect("home b"),
    );
    let env = |home: &std::path::Path| {
        let mut vars = model.gateway_env(home);
        vars.push(("METAFORGE_DATABASE_URL", server.url.clone()));
        vars
    };
    let (log_a, log_b) = (
        home_a.path().join("gateway.log"),
        home_b.path().join("gateway.log"),
    );
    let (mut gateway_a, a) = run_gateway(home_a.path(), &env(home_a.path()), &log_a);
    let (_gateway_b, b) = run_gateway(home_b.path(), &env(home_b.path()), &log_b);

    // The second gateway stands by: a run started there is refused, naming the holder, and
    // nothing is recorded.
    let start = json!({"template_id": "design_v1"});
    let (status, refused) = exchange(&b, "POST", "/v1/runs", Some(&start)).expect("start on b");
    assert_eq!(status, 503, "{refused}");
    assert!(
        refused.to_string().contains("runs in another process"),
        "the refusal names why: {refused}"
    );

    // The first drives a run to its first gate; the second reads it from the shared ledger.
    let (status, run) = exchange(&a, "POST", "/v1/runs", Some(&start)).expect("start on a");
    assert_eq!(status, 201, "{run}");
    let run = run["id"].as_str().expect("run id").to_owned();
    let gate = wait_for("the run parked at its first gate on a", &log_a, || {
        open_gate(&a, &run).ok().flatten().filter(|g| g.approvable)
    });
    let (status, listed) = exchange(&b, "GET", "/v1/runs", None).expect("list on b");
    assert_eq!(status, 200, "{listed}");
    let ids: Vec<&str> = listed["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [run.as_str()],
        "one ledger, one run; the refused start wrote nothing"
    );

    // kill -9 the driver: the standby sees its holder is gone from this host, takes the lease,
    // resumes the run at the same gate, and a decision through it moves the run on.
    gateway_a.kill();
    let resumed = wait_for("the second gateway took over the run", &log_b, || {
        open_gate(&b, &run).ok().flatten().filter(|g| g.approvable)
    });
    assert_eq!(resumed, gate, "the run waits at the same gate, same hold");
    let (status, answered) = exchange(
        &b,
        "POST",
        &format!("/v1/runs/{run}/approval"),
        Some(&approve_body(&resumed)),
    )
    .expect("approve on b");
    assert_eq!(status, 200, "{answered}");
    wait_for("the run moved to its next gate on b", &log_b, || {
        open_gate(&b, &run)
            .ok()
            .flatten()
            .filter(|g| g.phase != gate.phase && g.approvable)
    });
    let log = std::fs::read_to_string(&log_b).unwrap_or_default();
    assert!(
        log.contains("flow_engine_lease_released_for_dead_holder"),
        "the dead holder's lease was released, not waited out:\n{}",
        log_tail(&log_b, 40)
    );
}
