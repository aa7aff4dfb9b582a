//! The gateway as a process: start-up policy, durability across a restart, the orphan rule.

#![expect(
    clippy::expect_used,
    reason = "test helpers: a peer that does not start must fail the test loudly"
)]

use metaforge_ports::ToolSource;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{
    Process, aimock_provider_env, args, banner_address, http, http_raw, mcp_client, metaforge,
    server_command, start_aimock, start_gateway,
};

#[test]
fn binding_off_loopback_without_a_key_refuses_to_start() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = metaforge()
        .args(["gateway", "--bind", "0.0.0.0:0"])
        .env("METAFORGE_HOME", home.path())
        .env_remove("METAFORGE_GATEWAY_API_KEY")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("METAFORGE_GATEWAY_API_KEY"), "{stderr}");
    assert!(
        !home.path().join("tool_approvals_ledger.db").exists(),
        "nothing written on refusal"
    );
}

#[test]
fn an_env_route_override_for_a_role_that_does_not_exist_refuses_to_start() {
    let home = tempfile::tempdir().expect("tempdir");
    let mut child = metaforge()
        .args(["gateway", "--bind", "127.0.0.1:0"])
        .env("METAFORGE_HOME", home.path())
        .env(
            "METAFORGE_ROUTE_GATE_CHECK_FAST",
            "anthropic:claude-haiku-4-5-20251001",
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the gateway started despite an env override naming no role");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("METAFORGE_ROUTE_GATE_CHECK_FAST") && stderr.contains("gate_check_fast"),
        "{stderr}"
    );
}

#[test]
fn decisions_and_versions_survive_a_restart_and_open_holds_are_orphaned() {
    let home = tempfile::tempdir().expect("tempdir");
    let (gateway, gw) = start_gateway(home.path(), &[]);
    let proposal = json!({
        "template": "mech_v1",
        "operations": [{"op": "add_deliverable", "phase": "design", "value": "test_plan", "rationale": "bench test"}],
        "manufacturingContext": {"route": "vendor"},
        "targetMaturity": "physically_validated",
        "loadsAndUse": "20 kg"
    });
    let (status, proposed) = http(&gw, "POST", "/v1/design-flows/propose", Some(&proposal));
    assert_eq!(status, 201, "{proposed}");
    let approval = proposed["approvalId"].as_str().expect("approval id").to_owned();
    let version = proposed["versionId"].as_str().expect("version id").to_owned();
    assert_eq!(
        proposed["version_id"], proposed["versionId"],
        "the first name of the version id still comes, for existing clients: {proposed}"
    );
    let (status, decided) = http(
        &gw,
        "POST",
        &format!("/v1/approvals/{approval}/decision"),
        Some(&json!({"decision": "approve"})),
    );
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["approver"], "ops");
    let (status, hold) = http(
        &gw,
        "POST",
        "/v1/chat/tool_approvals",
        Some(&json!({"tool": "twin.commit_geometry", "caller": "remote"})),
    );
    assert_eq!(status, 201, "{hold}");
    let open_hold = hold["id"].as_str().expect("hold id").to_owned();
    drop(gateway);

    let (_gateway, gw) = start_gateway(home.path(), &[]);
    let (status, stored) = http(&gw, "GET", &format!("/v1/design-flows/versions/{version}"), None);
    assert_eq!(status, 200, "{stored}");
    assert_eq!(stored["version"]["status"], "approved");
    assert_eq!(stored["version"]["approver"], "ops");
    let (_, orphan) = http(&gw, "GET", &format!("/v1/chat/tool_approvals/{open_hold}"), None);
    assert_eq!(orphan["status"], "failed");
    assert_eq!(
        orphan["reason"],
        "orphaned: gateway restarted while this approval was pending"
    );
    let (status, conflict) = http(
        &gw,
        "POST",
        &format!("/v1/approvals/{approval}/decision"),
        Some(&json!({"decision": "reject"})),
    );
    assert_eq!(status, 409, "{conflict}");
}

/// `metaforge up` on free loopback ports over `home` with `vars` added: the process, the
/// gateway's `host:port` and the MCP endpoint URL, read from its two banner lines.
fn start_up(home: &std::path::Path, vars: &[(&str, String)]) -> (Process, String, String) {
    let mut up = crate::common::spawn(
        server_command(
            &["up", "--bind", "127.0.0.1:0", "--mcp-bind", "127.0.0.1:0"],
            home,
        )
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str()))),
        "up",
    );
    let mut lines = BufReader::new(up.child_mut().stdout.take().expect("stdout")).lines();
    let gateway_line = lines.next().expect("gateway banner").expect("utf-8");
    let mcp_line = lines.next().expect("mcp banner").expect("utf-8");
    let mcp_url = mcp_line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("mcp url")
        .to_owned();
    (up, banner_address(&gateway_line), mcp_url)
}

#[test]
fn up_serves_the_gateway_and_the_mcp_sidecar_in_one_process() {
    let home = tempfile::tempdir().expect("tempdir");
    let (_up, gw, mcp_url) = start_up(home.path(), &[]);
    let (status, health) = http(&gw, "GET", "/health", None);
    assert_eq!(status, 200, "{health}");

    // An MCP initialize over streamable HTTP answers with the server's info (with the key: the
    // gateway's keys are configured, so the sidecar requires one too).
    let authority = mcp_url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("authority")
        .to_owned();
    let raw = mcp_initialize(&authority, crate::common::KEY);
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(raw.contains("serverInfo"), "{raw}");
}

/// One MCP `initialize` POST with `key` as `X-API-Key`: the whole raw response.
fn mcp_initialize(authority: &str, key: &str) -> String {
    let payload = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "metaforge-up-test", "version": "0"}}})
    .to_string();
    let mut stream = TcpStream::connect(authority).expect("connect mcp");
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nX-API-Key: {key}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    stream.write_all(request.as_bytes()).expect("write");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw).into_owned()
}

/// Issue 38 item 6: the sidecar throttles wrong keys too, with the gateway's count (an address
/// cannot double its guesses by switching doors), and neither door locks out a valid key.
#[test]
fn wrong_keys_share_one_count_across_both_doors_and_never_lock_out_a_valid_key() {
    let home = tempfile::tempdir().expect("tempdir");
    let (_up, gw, mcp_url) = start_up(
        home.path(),
        &[("METAFORGE_GATEWAY_AUTH_FAILURES_PER_MINUTE", "3".to_owned())],
    );
    let authority = mcp_url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("authority")
        .to_owned();
    for _ in 0..3 {
        let raw = mcp_initialize(&authority, "sk-guess-0001");
        assert!(raw.starts_with("HTTP/1.1 401"), "{raw}");
    }
    let raw = mcp_initialize(&authority, "sk-guess-0002");
    assert!(raw.starts_with("HTTP/1.1 429"), "{raw}");
    assert!(raw.to_ascii_lowercase().contains("retry-after:"), "{raw}");
    assert!(raw.contains("\"code\":-32002"), "a JSON-RPC error body: {raw}");
    let raw = mcp_initialize(&authority, crate::common::KEY);
    assert!(
        raw.starts_with("HTTP/1.1 200"),
        "a valid key on the sidecar: {raw}"
    );
    // The gateway's count is the same one: its first wrong key from this address is already 429.
    // (`http_raw` presents the valid key too; a wrong one beside it still makes a wrong request.)
    let (status, body) = http_raw(
        &gw,
        "GET",
        "/v1/approvals",
        None,
        &[("x-api-key", "sk-guess-0003")],
    );
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("auth_throttled"), "{body}");
    let (status, body) = http(&gw, "GET", "/v1/approvals", None);
    assert_eq!(status, 200, "a valid key on the gateway: {body}");
}

/// Issue 38 item 1: with four eyes on, a hold parked through the MCP door records the key that
/// parked it, so its proposer is refused over HTTP (403) exactly as for a hold parked over HTTP;
/// another person decides it. Both a flow proposal and a held twin write.
#[test]
fn four_eyes_cover_holds_parked_through_the_mcp_door() {
    const BOB_KEY: &str = "sk-bob-four-eyes-1";
    let home = tempfile::tempdir().expect("tempdir");
    let (_up, gw, mcp_url) = start_up(
        home.path(),
        &[
            ("METAFORGE_APPROVALS_SEPARATE_APPROVER", "on".to_owned()),
            (
                "METAFORGE_GATEWAY_API_KEY",
                format!("ops:{},bob:{BOB_KEY}", crate::common::KEY),
            ),
        ],
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let client = std::sync::Arc::new(mcp_client(mcp_url));
    let proposed = runtime
        .block_on(client.call_tool("flow.propose", crate::common::proposal_arguments()))
        .expect("flow.propose");
    let proposal = proposed.structured.expect("structured result");
    assert_eq!(proposal["status"], "proposed", "{proposal}");
    let approval = proposal["approval_id"].as_str().expect("approval id").to_owned();
    let writer = std::sync::Arc::clone(&client);
    let write = runtime.spawn(async move {
        writer
            .call_tool(
                "twin.commit_work_product",
                args(json!({"artifact": "load_case", "title": "Load case", "content": "20 kg"})),
            )
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let held_write = loop {
        let (_, list) = http(&gw, "GET", "/v1/approvals?kind=tool_call", None);
        if let Some(hold) = list["approvals"]
            .as_array()
            .and_then(|a| a.iter().find(|h| h["tool"] == "twin.commit_work_product"))
        {
            break hold["id"].as_str().expect("id").to_owned();
        }
        assert!(Instant::now() < deadline, "no held twin write appeared: {list}");
        std::thread::sleep(Duration::from_millis(50));
    };
    for (id, route) in [
        (&approval, format!("/v1/approvals/{approval}/decision")),
        (&held_write, format!("/v1/chat/tool_approvals/{held_write}")),
    ] {
        let (_, record) = http(&gw, "GET", &format!("/v1/approvals/{id}"), None);
        assert_eq!(
            record["requested_by"], "ops",
            "the MCP key is the requester: {record}"
        );
        let (status, refused) = http(&gw, "POST", &route, Some(&json!({"decision": "approve"})));
        assert_eq!(status, 403, "the proposer cannot decide its own hold: {refused}");
        assert_eq!(refused["error"], "separate_approver_required");
        let (status, body) = http_raw(
            &gw,
            "POST",
            &route,
            Some(&json!({"decision": "approve"})),
            &[("authorization", &format!("Bearer {BOB_KEY}"))],
        );
        // `http_raw` also sends the ops key; bob decides with his key alone below.
        assert_eq!(status, 401, "two identities in one request are refused: {body}");
        let (status, decided) = bob_decides(&gw, &route, BOB_KEY);
        assert_eq!(status, 200, "another person decides: {decided}");
    }
    let written = runtime
        .block_on(write)
        .expect("join")
        .expect("the held write ran once bob approved it");
    assert!(!written.is_error, "{}", written.text());
}

/// `POST route` approving, with only `key` presented.
fn bob_decides(gw: &str, route: &str, key: &str) -> (u16, Value) {
    let payload = json!({"decision": "approve"}).to_string();
    let mut stream = TcpStream::connect(gw).expect("connect");
    let request = format!(
        "POST {route} HTTP/1.1\r\nHost: {gw}\r\nX-API-Key: {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    stream.write_all(request.as_bytes()).expect("write");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read");
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn up_refuses_a_sidecar_off_loopback() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = metaforge()
        .args(["up", "--bind", "127.0.0.1:0", "--mcp-bind", "0.0.0.0:0"])
        .env("METAFORGE_HOME", home.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"));
}

#[test]
fn a_chat_completion_through_aimock_is_served_and_counted_in_the_usage_summary() {
    let Some((_mock, port)) = start_aimock("../adapters-llm/tests/fixtures/aimock.json") else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    let (_gateway, gw) = start_gateway(
        home.path(),
        &[
            ("HARNESS_OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1")),
            ("OPENAI_API_KEY", "sk-test-aimock".to_owned()),
            ("METAFORGE_ROUTE_CHAT", "openai:gpt-4o-mini".to_owned()),
            (
                "METAFORGE_CREDENTIALS_PATH",
                home.path().join("credentials.json").display().to_string(),
            ),
        ],
    );
    let (status, providers) = http(&gw, "GET", "/v1/harness/providers", None);
    assert_eq!(status, 200, "{providers}");
    assert_eq!(providers["pipeline"], true);
    let request = json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]});
    let (status, text) = http_raw(
        &gw,
        "POST",
        "/v1/chat/completions",
        Some(&request),
        &[("x-metaforge-run-id", "run-42")],
    );
    let answer: serde_json::Value = serde_json::from_str(&text).expect("json answer");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "Hello from aimock! How can I help?"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, summary) = http(&gw, "GET", "/v1/runs/usage/summary", None);
        assert_eq!(status, 200, "{summary}");
        if summary["totals"]["by_role"]["chat"]["calls"] == 1 {
            assert_eq!(
                summary["totals"]["by_model"]["openai:gpt-4o-mini"]["calls"], 1,
                "{summary}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the usage summary never counted the call: {summary}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The call is in the Prometheus series (FORGE-476): one call, usage reported, by role.
    let (status, metrics) = http_raw(&gw, "GET", "/metrics", None, &[]);
    assert_eq!(status, 200);
    let calls = metrics
        .lines()
        .find(|l| l.starts_with("metaforge_llm_calls_total{") && l.contains("role=\"chat\""))
        .unwrap_or_default();
    assert!(calls.contains("usage_reported=\"true\""), "{metrics}");
    assert!(calls.ends_with(" 1"), "{calls}");
    assert!(
        metrics.contains("metaforge_llm_tokens_total{") && metrics.contains("kind=\"prompt\""),
        "{metrics}"
    );
    // A run id that is not one is refused naming the header; nothing is called.
    let (status, refused) = http_raw(
        &gw,
        "POST",
        "/v1/chat/completions",
        Some(&request),
        &[("x-metaforge-run-id", &"r".repeat(300))],
    );
    assert_eq!(status, 400, "{refused}");
    assert!(refused.contains("x-metaforge-run-id"), "{refused}");
}

/// The exposition is valid Prometheus text with help on every family (`promtool check metrics`,
/// when promtool is installed; said so when it is not).
fn promtool_accepts(metrics: &str) {
    match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(mut promtool) => {
            promtool
                .stdin
                .take()
                .expect("stdin")
                .write_all(metrics.as_bytes())
                .expect("write");
            let out = promtool.wait_with_output().expect("promtool");
            let text =
                String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "promtool check metrics: {text}\n{metrics}");
        }
        Err(err) => eprintln!("promtool not runnable ({err}): the exposition's syntax is not checked here"),
    }
}

/// `/metrics` before any call: the build, and the process (memory, CPU, fds, start time); the
/// exposition is valid Prometheus text (promtool, when installed, checks it).
#[test]
fn metrics_at_start_carry_build_info_and_process_series() {
    let home = tempfile::tempdir().expect("tempdir");
    let (_gateway, gw) = start_gateway(
        home.path(),
        &[(
            "METAFORGE_CREDENTIALS_PATH",
            home.path().join("credentials.json").display().to_string(),
        )],
    );
    let (status, metrics) = http_raw(&gw, "GET", "/metrics", None, &[]);
    assert_eq!(status, 200);
    let build = format!(
        "metaforge_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    assert!(metrics.lines().any(|l| l == build), "{build} missing: {metrics}");
    for series in [
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
        "process_threads",
    ] {
        let value: f64 = metrics
            .lines()
            .find(|l| l.starts_with(&format!("{series} ")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1.0);
        assert!(value >= 0.0, "{series} missing: {metrics}");
    }
    let rss: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_default();
    assert!(rss > 1_000_000.0, "a running gateway holds more than 1 MB: {rss}");
    promtool_accepts(&metrics);
}

/// What an OpenAI SDK user sends: a bare (or `openai/`-prefixed) model name, no MetaForge role;
/// served by the configured `openai` provider (aimock here); `/v1/models` lists it; a model nothing
/// here serves is a 400 in OpenAI's error shape.
#[test]
fn an_openai_sdk_model_name_is_served_through_aimock_and_listed_by_v1_models() {
    let Some((_mock, port)) = start_aimock("../adapters-llm/tests/fixtures/aimock.json") else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    let (_gateway, gw) = start_gateway(
        home.path(),
        &[
            ("HARNESS_OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1")),
            ("OPENAI_API_KEY", "sk-test-aimock".to_owned()),
            ("METAFORGE_LLM_PROVIDER", "openai".to_owned()),
            ("METAFORGE_LLM_MODEL", "gpt-4o-mini".to_owned()),
            (
                "METAFORGE_CREDENTIALS_PATH",
                home.path().join("credentials.json").display().to_string(),
            ),
        ],
    );
    for model in ["gpt-4o-mini", "openai/gpt-4o-mini"] {
        let request = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        let (status, text) = http_raw(&gw, "POST", "/v1/chat/completions", Some(&request), &[]);
        let answer: serde_json::Value = serde_json::from_str(&text).expect("json answer");
        assert_eq!(status, 200, "{model}: {answer}");
        assert_eq!(
            answer["choices"][0]["message"]["content"],
            "Hello from aimock! How can I help?"
        );
        assert_eq!(answer["object"], "chat.completion");
    }
    let (status, models) = http(&gw, "GET", "/v1/models", None);
    assert_eq!(status, 200, "{models}");
    assert_eq!(models["object"], "list");
    let ids: Vec<&str> = models["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    for id in ["chat", "openai:gpt-4o-mini", "gpt-4o-mini"] {
        assert!(ids.contains(&id), "{id} not listed: {models}");
    }
    // Both calls were priced: the cost is a counter of fractional dollars, by role/provider/model.
    let (status, metrics) = http_raw(&gw, "GET", "/metrics", None, &[]);
    assert_eq!(status, 200);
    assert!(
        metrics.contains("# TYPE metaforge_llm_cost_usd_total counter"),
        "{metrics}"
    );
    let cost: f64 = metrics
        .lines()
        .find(|l| l.starts_with("metaforge_llm_cost_usd_total{") && l.contains("model=\"gpt-4o-mini\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_default();
    assert!(cost > 0.0 && cost < 0.01, "two tiny priced calls: {metrics}");
    promtool_accepts(&metrics);
    let request = json!({"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": "hi"}]});
    let (status, refused) = http(&gw, "POST", "/v1/chat/completions", Some(&request));
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["type"], "invalid_request_error", "{refused}");
    assert_eq!(refused["error"]["param"], "model", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("provider:model")),
        "{refused}"
    );
}

#[test]
fn a_gateway_without_a_configured_provider_starts_and_chat_completions_answer_503() {
    let home = tempfile::tempdir().expect("tempdir");
    let (_gateway, gw) = start_gateway(
        home.path(),
        &[(
            "METAFORGE_CREDENTIALS_PATH",
            home.path().join("credentials.json").display().to_string(),
        )],
    );
    let request = json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]});
    let (status, answer) = http(&gw, "POST", "/v1/chat/completions", Some(&request));
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "unavailable", "{answer}");
}

/// The generator path through the real binary: `flow_generator` routed to aimock's OpenAI
/// surface, the proposal applied leniently, held once with `generatedBy`, and its tokens counted
/// under the `flow_generator` role; an answer without a proposal is 503 and stores nothing.
#[test]
fn the_server_generator_proposes_through_aimock_and_holds_once_with_generated_by() {
    let Some((_mock, port)) = start_aimock("tests/fixtures/aimock_generator.json") else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    let (_gateway, gw) = start_gateway(home.path(), &aimock_provider_env(port, home.path()));
    let context = json!({
        "manufacturingContext": {"route": "in_house", "processes": ["FDM printing"], "stockMaterials": ["PETG"]},
        "targetMaturity": "physically_validated",
        "loadsAndUse": "holds 5 kg of books"
    });
    let mut request = context.clone();
    request["intent"] = json!("A wall shelf I can print with what I have.");
    let (status, proposal) = http(&gw, "POST", "/v1/design-flows/propose", Some(&request));
    assert_eq!(status, 201, "{proposal}");
    assert_eq!(
        proposal["generatedBy"],
        json!({"provider": "openai", "model": "gpt-4o-mini", "fellBackFrom": null})
    );
    assert_eq!(proposal["proposal"]["template_id"], "mech_v1");
    assert_eq!(proposal["proposal"]["applied"][0]["op"], "add_deliverable");
    assert_eq!(proposal["proposal"]["skipped"][0]["phase"], "no_such_phase");
    assert_eq!(
        proposal["openQuestions"],
        json!(["Which wall type will it hang on?"])
    );
    let approval = proposal["approvalId"].as_str().expect("approval id").to_owned();
    let (status, held) = http(&gw, "GET", &format!("/v1/approvals/{approval}"), None);
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["status"], "awaiting_approval");
    assert_eq!(held["arguments"]["generated_by"]["model"], "gpt-4o-mini");

    // Context missing: the server's questions, then the model's product-specific one.
    let mut lamp = json!({"manufacturingContext": {"route": "vendor"}});
    lamp["intent"] = json!("A desk lamp for my workbench.");
    let (status, asked) = http(&gw, "POST", "/v1/design-flows/propose", Some(&lamp));
    assert_eq!(status, 200, "{asked}");
    assert_eq!(asked["status"], "needs_input");
    let last = asked["questions"]
        .as_array()
        .and_then(|q| q.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["source"], "model", "{asked}");

    // A model that answers without a proposal: 503, and the ledger still holds only the first.
    let mut chatty = context;
    chatty["intent"] = json!("A chatty answer, please.");
    let (status, err) = http(&gw, "POST", "/v1/design-flows/propose", Some(&chatty));
    assert_eq!(status, 503, "{err}");
    assert_eq!(err["error"], "generator_answer_unusable");
    let (_, versions) = http(&gw, "GET", "/v1/design-flows/versions", None);
    assert_eq!(
        versions["versions"].as_array().map(Vec::len),
        Some(1),
        "{versions}"
    );

    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, summary) = http(&gw, "GET", "/v1/runs/usage/summary", None);
        if summary["totals"]["by_role"]["flow_generator"]["calls"] == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the generator's calls were never counted: {summary}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `metaforge up`: `flow.propose` over MCP with only an intent and context runs the gateway's own
/// generator (aimock answering as the model) — the proposal is held once in the one ledger with
/// `generated_by`, exactly as `POST /v1/design-flows/propose` would hold it.
#[test]
fn up_answers_flow_propose_without_operations_through_the_gateways_generator() {
    let Some((_mock, port)) = start_aimock("tests/fixtures/aimock_generator.json") else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    let (_up, gw, mcp_url) = start_up(home.path(), &aimock_provider_env(port, home.path()));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let client = mcp_client(mcp_url);
    let proposed = runtime
        .block_on(client.call_tool(
            "flow.propose",
            args(json!({
                "intent": "A wall shelf I can print with what I have.",
                "context": {"manufacturing_context": {"route": "in_house", "processes": ["FDM printing"],
                                                      "stock_materials": ["PETG"]},
                            "target_maturity": "physically_validated",
                            "loads_and_use": "holds 5 kg of books"}
            })),
        ))
        .expect("flow.propose");
    let proposal = proposed.structured.expect("structured result");
    assert_eq!(proposal["status"], "proposed", "{proposal}");
    assert_eq!(proposal["generated_by"]["model"], "gpt-4o-mini", "{proposal}");
    assert_eq!(proposal["skipped"][0]["phase"], "no_such_phase", "{proposal}");
    let approval = proposal["approval_id"].as_str().expect("approval id").to_owned();
    let (status, held) = http(&gw, "GET", &format!("/v1/approvals/{approval}"), None);
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["status"], "awaiting_approval");
    assert_eq!(held["arguments"]["generated_by"]["provider"], "openai");

    // Without an intent there is nothing to tailor to: refused, naming the argument.
    let refused = runtime
        .block_on(client.call_tool("flow.propose", args(json!({"context": {}}))))
        .expect("flow.propose answers");
    assert!(refused.text().contains("intent"), "{}", refused.text());
}

#[cfg(not(feature = "temporal"))]
#[test]
fn the_temporal_commands_of_a_build_without_the_engine_exit_2_saying_how_to_get_it() {
    for command in [
        &["worker"][..],
        &["replay", "--run", "r1"][..],
        &[
            "up",
            "--engine",
            "temporal",
            "--bind",
            "127.0.0.1:0",
            "--mcp-bind",
            "127.0.0.1:0",
        ][..],
    ] {
        let home = tempfile::tempdir().expect("tempdir");
        let out = metaforge()
            .args(command)
            .env("METAFORGE_HOME", home.path())
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
        assert!(stderr.contains("--features temporal"), "{command:?}: {stderr}");
    }
}

#[test]
fn replay_with_no_history_named_or_an_unknown_engine_is_exit_2() {
    let out = metaforge().args(["replay"]).output().expect("run");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = metaforge()
        .args(["up", "--engine", "cadence"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("embedded"),
        "clap names the accepted engines: {stderr}"
    );
}
