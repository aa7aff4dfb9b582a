//! The web console in a real browser (issue 18): `tests/browser/console.cjs` drives Debian's
//! headless Chromium with Playwright against `metaforge up` on a temporary home — keys on, chat
//! served by aimock (the anthropic family), phases by the scripted phase model — and checks
//! every page with axe-core. This test starts those peers, runs the script, and fails naming the
//! script's own failing steps; the screenshots stay in `CARGO_TARGET_TMPDIR/console-screenshots`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Command;

use crate::common::{KEY, banner_address, start_aimock};
use crate::run_support::ScriptedModel;
use metaforge_test_support::peers::{self, Peer};

/// The second person's key (identity `alice`), for the browser context without JavaScript.
const SECOND_KEY: &str = "sk-alice-000001";

#[test]
fn the_console_signs_in_answers_proposals_tool_calls_and_gates_in_a_real_browser_and_passes_axe() {
    let Some(node_modules) = peers::require(Peer::Browser) else {
        return;
    };
    let Some((_mock, port)) = start_aimock("tests/fixtures/aimock_chat.json") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let model = runtime.block_on(ScriptedModel::start());
    let home = tempfile::tempdir().unwrap();
    let mut vars = model.gateway_env(home.path());
    vars.extend([
        ("HARNESS_ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}")),
        ("ANTHROPIC_API_KEY", "sk-ant-aimock".to_owned()),
        ("METAFORGE_ROUTE_CHAT", "anthropic:claude-sonnet-4-5".to_owned()),
        (
            "METAFORGE_GATEWAY_API_KEY",
            format!("ops:{KEY},alice:{SECOND_KEY}"),
        ),
    ]);
    let mut up = crate::common::spawn(
        crate::common::server_command(
            &["up", "--bind", "127.0.0.1:0", "--mcp-bind", "127.0.0.1:0"],
            home.path(),
        )
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str()))),
        "up",
    );
    // The reader lives to the end of the test: `up` writes more banner lines after the first.
    let mut stdout = BufReader::new(up.child_mut().stdout.take().expect("stdout"));
    let mut banner = String::new();
    stdout.read_line(&mut banner).expect("banner");
    let addr = banner_address(&banner);
    crate::common::wait_until_listening(addr.as_str(), "up");
    let artifacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let _ = std::fs::remove_dir_all(&artifacts);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/console.cjs");
    let output = metaforge_test_support::process::output(
        Command::new("node")
            .arg(&script)
            .env("NODE_PATH", &node_modules)
            .env("BASE", format!("http://{addr}"))
            .env("KEY", KEY)
            .env("SECOND_KEY", SECOND_KEY)
            .env("ARTIFACTS", &artifacts)
            .env("CHROMIUM", peers::CHROMIUM),
    )
    .expect("run node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("not ok")).collect();
    assert!(
        output.status.success() && failed.is_empty(),
        "the browser script failed ({}):\n{}\n--- stderr ---\n{stderr}",
        output.status,
        failed.join("\n")
    );
    assert!(stdout.contains(" 0 failed;"), "{stdout}");
}
