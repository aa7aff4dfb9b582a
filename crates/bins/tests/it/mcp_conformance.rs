//! The MCP conformance suite (`@modelcontextprotocol/conformance`, Node 22) against the sidecar's
//! streamable HTTP endpoint, served by the TEST-ONLY example `mcp_conformance_fixture` (the
//! product transport plus the suite's fixture tools). Prints pass/fail per scenario and pins the
//! scenarios the sidecar supports; the rest (logging, completion, progress, sampling, prompts,
//! subscriptions, blob resources, SEP-1034/1330 schemas) are features it does not offer.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a peer that cannot start must fail the test loudly"
)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use metaforge_test_support::{ChildGuard, Peer, net, process, require};

fn fixture_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let path = debug_dir.join("examples/mcp_conformance_fixture");
    assert!(
        path.exists(),
        "{} missing: cargo build -p metaforge-bins --example mcp_conformance_fixture",
        path.display()
    );
    path
}

/// Scenarios the sidecar must pass (a regression in any fails the test).
const MUST_PASS: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-elicitation",
    "server-sse-multiple-streams",
    "resources-list",
    "resources-read-text",
    "resources-templates-read",
    "dns-rebinding-protection",
];

#[test]
fn conformance_suite_against_the_sidecar_http_endpoint() {
    let Some(suite) = require(Peer::Conformance) else {
        return;
    };
    let Some(node22) = require(Peer::Node22) else {
        return;
    };
    let port = net::unused_port();
    let mut fixture = ChildGuard::spawn(
        Command::new(fixture_binary())
            .arg(format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .unwrap();
    assert!(
        net::wait_listening(("127.0.0.1", port), Duration::from_secs(20)),
        "fixture did not listen"
    );
    let out = process::output(Command::new(node22).arg(suite).args([
        "server",
        "--url",
        &format!("http://127.0.0.1:{port}/mcp"),
    ]))
    .unwrap();
    fixture.kill();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .split("=== SUMMARY ===")
        .nth(1)
        .expect("the suite printed no summary");
    println!("=== SUMMARY ==={summary}");
    let mut results: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for line in summary.lines() {
        // "✓ tools-list: 1 passed, 0 failed"
        let Some((name, counts)) = line
            .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
            .split_once(": ")
        else {
            continue;
        };
        let nums: Vec<u32> = counts
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        if let [passed, failed] = nums[..] {
            results.insert(name.trim().to_owned(), (passed, failed));
        }
    }
    assert!(results.len() >= 30, "parsed only {} scenarios", results.len());
    for scenario in MUST_PASS {
        let (passed, failed) = results.get(*scenario).copied().unwrap_or((0, 1));
        assert!(
            passed > 0 && failed == 0,
            "{scenario}: {passed} passed, {failed} failed"
        );
    }
}
