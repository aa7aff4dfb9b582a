//! Chat threads through the real binary: a gateway with its provider on aimock and
//! server-everything configured in a servers file (the mcpServers shape), driven by
//! `metaforge chat`, `metaforge sessions search` and plain HTTP as a second terminal would.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "process tests: a failure must stop the test loudly"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{KEY, Process, http, metaforge, start_aimock, start_gateway};
use metaforge_test_support::peers::{self, Peer};
use serde_json::{Value, json};

/// A gateway whose chat role is served by aimock and whose registry holds server-everything
/// (stdio), `toggle-*` in the ask tier. `None` (skipped, the reason printed) without the peers.
fn chat_gateway(home: &Path) -> Option<(Process, String, peers::Aimock)> {
    let everything = peers::require(Peer::ServerEverything)?;
    let (mock, port) = start_aimock("tests/fixtures/aimock_chat.json")?;
    let servers = json!({"mcpServers": {"everything": {
        "command": "node", "args": [everything, "stdio"], "requires_approval": ["toggle-*"]
    }}});
    std::fs::create_dir_all(home).unwrap();
    std::fs::write(home.join("mcp_servers.json"), servers.to_string()).unwrap();
    let mut vars = crate::common::aimock_provider_env(port, home);
    vars.push(("METAFORGE_ROUTE_CHAT", "openai:gpt-4o-mini".to_owned()));
    let (gateway, addr) = start_gateway(home, &vars);
    Some((gateway, addr, mock))
}

/// `metaforge chat` against the gateway at `addr` with `args`, stdin closed.
fn chat(addr: &str, args: &[&str]) -> std::process::Child {
    metaforge()
        .arg("chat")
        .args(["--gateway", &format!("http://{addr}")])
        .args(args)
        .env("METAFORGE_GATEWAY_API_KEY", format!("ops:{KEY}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn metaforge chat")
}

fn finish(child: std::process::Child, within: Duration) -> (i32, String, String) {
    let started = Instant::now();
    let mut child = child;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            let mut err = String::new();
            child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (status.code().unwrap_or(-1), out, err);
        }
        if started.elapsed() > within {
            let _ = child.kill();
            panic!("metaforge chat did not finish within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads `GET path` as SSE until `agent.done`, returning (event, data) pairs.
fn read_sse(addr: &str, method: &str, path: &str, body: Option<&Value>) -> Vec<(String, Value)> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let payload = body.map(Value::to_string).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nX-API-Key: {KEY}\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
        payload.len()
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut events = Vec::new();
    let mut name = String::new();
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let text = line.trim_end();
        if let Some(n) = text.strip_prefix("event: ") {
            name = n.to_owned();
        } else if let Some(data) = text.strip_prefix("data: ") {
            events.push((name.clone(), serde_json::from_str(data).unwrap_or(Value::Null)));
            if name == "agent.done" {
                break;
            }
        }
    }
    events
}

#[test]
fn metaforge_chat_streams_a_turn_that_calls_a_server_everything_tool_and_the_thread_is_searchable() {
    let home = tempfile::tempdir().unwrap();
    let Some((_gateway, addr, _mock)) = chat_gateway(home.path()) else {
        return;
    };
    let (_, health) = http(&addr, "GET", "/health", None);
    assert_eq!(
        health["mcp_servers"]["servers"]["everything"]["status"], "ok",
        "{health}"
    );

    let (code, out, err) = finish(chat(&addr, &["-m", "please echo hello"]), Duration::from_secs(60));
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert_eq!(
        out.trim(),
        "The everything server echoed it back: hello from MetaForge."
    );
    assert!(err.contains("→ everything.echo"), "{err}");
    assert!(
        err.contains("← everything.echo: Echo: hello from MetaForge"),
        "{err}"
    );
    assert!(err.contains("2 model call(s)"), "{err}");

    let search = metaforge()
        .args([
            "sessions",
            "search",
            "echoed",
            "HELLO",
            "--json",
            "--gateway",
            &format!("http://{addr}"),
        ])
        .env("METAFORGE_GATEWAY_API_KEY", format!("ops:{KEY}"))
        .output()
        .unwrap();
    assert!(search.status.success());
    let hits: Value = serde_json::from_slice(&search.stdout).unwrap();
    assert!(
        hits["hits"][0]["content"]
            .as_str()
            .unwrap()
            .contains("echoed it back"),
        "{hits}"
    );
}

#[test]
fn a_thread_stream_carries_the_turn_to_agent_done_and_the_stored_thread_has_the_call() {
    let home = tempfile::tempdir().unwrap();
    let Some((_gateway, addr, _mock)) = chat_gateway(home.path()) else {
        return;
    };
    let (status, thread) = http(&addr, "POST", "/v1/chat/threads", Some(&json!({"title": "echo"})));
    assert_eq!(status, 201, "{thread}");
    let id = thread["id"].as_str().unwrap().to_owned();
    let follower = {
        let addr = addr.clone();
        let id = id.clone();
        std::thread::spawn(move || read_sse(&addr, "GET", &format!("/v1/chat/threads/{id}/stream"), None))
    };
    std::thread::sleep(Duration::from_millis(300));
    let posted = read_sse(
        &addr,
        "POST",
        &format!("/v1/chat/threads/{id}/messages"),
        Some(&json!({"content": "echo this"})),
    );
    let followed = follower.join().unwrap();
    for events in [&posted, &followed] {
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["tool.call", "tool.result", "message.delta", "agent.done"],
            "{events:?}"
        );
        assert_eq!(events[0].1["tool"], "everything.echo");
        assert!(
            events[3].1["usage"]["calls"].as_u64() == Some(2),
            "{:?}",
            events[3]
        );
    }
    let (_, stored) = http(&addr, "GET", &format!("/v1/chat/threads/{id}"), None);
    let roles: Vec<&str> = stored["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "tool", "assistant"]);
}

#[test]
fn a_stdio_tool_server_started_by_the_gateway_sees_none_of_its_secrets() {
    // Issue 38 item 3, through the binary: the gateway holds a provider key and its own API
    // keys; server-everything's get-env, called in a chat turn, shows what the server was given.
    let home = tempfile::tempdir().unwrap();
    let Some((_gateway, addr, _mock)) = chat_gateway(home.path()) else {
        return;
    };
    let (status, thread) = http(&addr, "POST", "/v1/chat/threads", Some(&json!({})));
    assert_eq!(status, 201, "{thread}");
    let id = thread["id"].as_str().unwrap().to_owned();
    let events = read_sse(
        &addr,
        "POST",
        &format!("/v1/chat/threads/{id}/messages"),
        Some(&json!({"content": "show the tool server environment"})),
    );
    assert_eq!(
        events.first().map(|(_, e)| e["tool"].clone()),
        Some(json!("everything.get-env")),
        "{events:?}"
    );
    let (_, stored) = http(&addr, "GET", &format!("/v1/chat/threads/{id}"), None);
    let seen = stored["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    let own_home = home.path().join("tool-servers").join("everything");
    assert!(
        seen.contains(&own_home.display().to_string()),
        "its own HOME: {seen}"
    );
    for secret in ["sk-test-aimock", KEY, "OPENAI_API_KEY", "METAFORGE_", "HARNESS_"] {
        assert!(!seen.contains(secret), "{secret} reached the tool server: {seen}");
    }
}

/// The first hold awaiting a person, within 30 s.
fn first_pending_hold(addr: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, approvals) = http(addr, "GET", "/v1/approvals", None);
        if let Some(hold) = approvals["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["status"] == "awaiting_approval")
        {
            return hold.clone();
        }
        assert!(Instant::now() < deadline, "no hold appeared: {approvals}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Approves `hold` as the operator, from a second terminal.
fn approve(addr: &str, hold: &Value) -> Value {
    let (status, decided) = http(
        addr,
        "POST",
        &format!("/v1/approvals/{}/decision", hold["id"].as_str().unwrap()),
        Some(&json!({"decision": "approve"})),
    );
    assert_eq!(status, 200, "{decided}");
    decided
}

#[test]
fn a_held_call_waits_for_a_decision_from_a_second_terminal_and_the_turn_continues() {
    let home = tempfile::tempdir().unwrap();
    let Some((_gateway, addr, _mock)) = chat_gateway(home.path()) else {
        return;
    };
    let child = chat(&addr, &["-m", "turn on logging please"]);
    let hold = first_pending_hold(&addr);
    assert_eq!(hold["tool"], "everything.toggle-simulated-logging");
    assert_eq!(hold["kind"], "tool_call");
    let decided = approve(&addr, &hold);
    assert_eq!(decided["approver"], "ops");
    let (code, out, err) = finish(child, Duration::from_secs(60));
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert!(
        err.contains("⏸ held for a person: everything.toggle-simulated-logging"),
        "{err}"
    );
    assert!(
        err.contains("← everything.toggle-simulated-logging: Started simulated"),
        "{err}"
    );
    assert_eq!(
        out.trim(),
        "Simulated logging is toggled on the everything server, after your approval."
    );
}

#[test]
fn a_twin_write_from_a_turn_is_held_once_announced_on_the_turn_and_committed_after_approval() {
    let home = tempfile::tempdir().unwrap();
    let Some((_gateway, addr, _mock)) = chat_gateway(home.path()) else {
        return;
    };
    let child = chat(&addr, &["-m", "record the bracket drawing in the twin"]);
    let hold = first_pending_hold(&addr);
    assert_eq!(hold["tool"], "twin.commit_work_product");
    assert_eq!(approve(&addr, &hold)["status"], "approved");
    let (code, out, err) = finish(child, Duration::from_secs(60));
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    // The turn itself announced the hold (the terminal showed it), not only the ledger.
    assert!(
        err.contains("⏸ held for a person: twin.commit_work_product"),
        "{err}"
    );
    assert_eq!(
        out.trim(),
        "The shelf bracket drawing is recorded in the twin, after your approval."
    );
    // One hold for one write: the host ran the call on the approval the turn already had.
    let (_, approvals) = http(&addr, "GET", "/v1/approvals?status=all", None);
    let twin_holds: Vec<&Value> = approvals["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["tool"] == "twin.commit_work_product")
        .collect();
    assert_eq!(twin_holds.len(), 1, "{approvals}");
    assert_eq!(twin_holds[0]["status"], "approved");
    let (status, nodes) = http(
        &addr,
        "GET",
        "/v1/twin/nodes?branch=main&type=WorkProduct&artifact=drawing",
        None,
    );
    assert_eq!(status, 200, "{nodes}");
    let nodes = nodes["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert_eq!(nodes[0]["properties"]["title"], "Shelf bracket drawing");
}

#[test]
fn a_turn_activates_a_bundled_skill_and_follows_it_with_the_tools_it_names() {
    let home = tempfile::tempdir().unwrap();
    let Some((_gateway, addr, _mock)) = chat_gateway(home.path()) else {
        return;
    };
    let (status, proposed) = http(
        &addr,
        "POST",
        "/v1/design-flows/propose",
        Some(
            &json!({"template": "mech_v1", "operations": [{"op": "add_deliverable", "phase": "design",
            "value": "test_plan", "rationale": "load-tested before release"}],
            "manufacturing_context": {"route": "vendor"}, "target_maturity": "sim_validated",
            "loads_and_use": "20 kg shelf"}),
        ),
    );
    assert_eq!(status, 201, "{proposed}");
    let child = chat(&addr, &["-m", "review the waiting flow proposal"]);
    let (code, out, err) = finish(child, Duration::from_secs(60));
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    println!("--- metaforge chat -m \"review the waiting flow proposal\" ---\n{err}{out}");
    let activated = err.find("skills.activate").expect("the skill was activated");
    let followed = err
        .find("approvals.list")
        .expect("the tool its steps name was called");
    assert!(activated < followed, "activated first, then followed: {err}");
    assert!(out.contains("One flow proposal waits"), "{out}");
    assert!(
        err.contains("\"count\":1"),
        "the tool it followed saw the proposal: {err}"
    );
}

#[test]
fn a_skill_that_commits_is_held_for_a_person_before_it_is_activated() {
    let home = tempfile::tempdir().unwrap();
    let Some((_gateway, addr, _mock)) = chat_gateway(home.path()) else {
        return;
    };
    let child = chat(&addr, &["-m", "keep this design decision"]);
    let hold = first_pending_hold(&addr);
    assert_eq!(hold["tool"], "skills.activate_committing", "{hold}");
    assert_eq!(hold["arguments"]["name"], "design-decision-record");
    assert_eq!(approve(&addr, &hold)["status"], "approved");
    let (code, out, err) = finish(child, Duration::from_secs(60));
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert!(
        err.contains("held for a person: skills.activate_committing"),
        "{err}"
    );
    assert!(
        out.contains("The decision skill is active, after your approval"),
        "{out}"
    );
}

#[test]
fn skills_served_by_a_second_sidecar_are_discovered_under_its_name_and_activated_in_a_turn() {
    let Some((_mock, port)) = start_aimock("tests/fixtures/aimock_chat.json") else {
        return;
    };
    // The second MetaForge sidecar, with one skill of its own (and a reference file).
    let other_home = tempfile::tempdir().unwrap();
    metaforge_test_support::skills::write_skill(
        &other_home.path().join("skills"),
        "bracket-check",
        "Checks a shelf bracket against its loads.",
        "Read references/loads.md first.",
        &[("references/loads.md", "20 kg static.\n")],
    );
    let sidecar_port = metaforge_test_support::net::unused_port();
    let _second = crate::common::spawn(
        metaforge()
            .args(["mcp", "serve", "--http", &format!("127.0.0.1:{sidecar_port}")])
            .env("METAFORGE_HOME", other_home.path())
            .env_remove("METAFORGE_GATEWAY_API_KEY")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "second sidecar",
    );
    crate::common::wait_until_listening(("127.0.0.1", sidecar_port), "second sidecar");
    let home = tempfile::tempdir().unwrap();
    let servers = json!({"mcpServers": {"second": {"url": format!("http://127.0.0.1:{sidecar_port}/mcp")}}});
    std::fs::write(home.path().join("mcp_servers.json"), servers.to_string()).unwrap();
    let mut vars = crate::common::aimock_provider_env(port, home.path());
    vars.push(("METAFORGE_ROUTE_CHAT", "openai:gpt-4o-mini".to_owned()));
    let (_gateway, addr) = start_gateway(home.path(), &vars);
    let child = chat(&addr, &["-m", "run the bracket check"]);
    let (code, out, err) = finish(child, Duration::from_secs(60));
    let (_, threads) = http(&addr, "GET", "/v1/chat/threads", None);
    let thread = threads["threads"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (_, stored) = http(&addr, "GET", &format!("/v1/chat/threads/{thread}"), None);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}\nthread: {stored}");
    assert!(
        err.contains("→ skills.activate {\"name\":\"second.bracket-check\"}"),
        "{err}"
    );
    assert!(
        err.contains("Read references/loads.md first."),
        "the served body came back: {err}"
    );
    assert!(err.contains("references/loads.md"), "{err}");
    assert!(out.contains("bracket-check skill is active"), "{out}");
}

/// Issue 38 item 14: a server whose first start outlasts its handshake timeout (a slow first
/// `npx`), and which answers on the next use, is `ok` in `/health` within seconds — not at the
/// next timed refresh a minute later, and never only after a restart.
#[test]
fn a_server_that_answers_after_its_first_handshake_timed_out_becomes_available_at_once() {
    let Some(everything) = peers::require(Peer::ServerEverything) else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let script = home.path().join("slow-first-start.sh");
    let marker = home.path().join("started-once");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ ! -f '{marker}' ]; then touch '{marker}'; sleep 5; fi\nexec node '{everything}' stdio\n",
            marker = marker.display(),
            everything = everything.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // Unsandboxed: the script keeps its first-start marker in the test's home, which a sandbox
    // hides (MetaForge's home is never visible to a tool server).
    let servers = json!({"mcpServers": {"slow": {
        "command": script.display().to_string(), "args": [], "connect_timeout_secs": 2,
        "sandbox": "off"
    }}});
    std::fs::write(home.path().join("mcp_servers.json"), servers.to_string()).unwrap();
    let started = Instant::now();
    let (_gateway, addr) = start_gateway(home.path(), &[]);
    let mut seen = Vec::new();
    loop {
        let (_, health) = http(&addr, "GET", "/health", None);
        let status = health["mcp_servers"]["servers"]["slow"]["status"].clone();
        seen.push(status.clone());
        if status == "ok" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "still not available after {:?} (statuses seen: {seen:?}): {health}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(marker.exists(), "the slow first start did happen");
    println!(
        "available {:?} after start; statuses seen: {seen:?}",
        started.elapsed()
    );
}

#[test]
fn a_community_engineering_server_classified_in_the_servers_file_is_called_in_a_chat_turn() {
    let Some(script) = peers::require(Peer::Spicebridge) else {
        return;
    };
    if peers::require(Peer::Bubblewrap).is_none() || peers::require(Peer::Ngspice).is_none() {
        return;
    }
    let Some((_mock, port)) = start_aimock("tests/fixtures/aimock_chat.json") else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    // The entry a user writes for a PyPI server: its venv's script, scoped to electronics, its
    // reads classified read-only and its own circuit store as producing; a destructive class is
    // never loosened by the file.
    let servers = json!({"mcpServers": {"spicebridge": {
        "command": script, "domains": ["electronics", "simulation"],
        "classify": {"read_only": ["get_*", "list_*", "measure_*"], "producing": ["create_circuit", "run_*"],
                     "destructive": ["delete_circuit"]}
    }}});
    std::fs::write(home.path().join("mcp_servers.json"), servers.to_string()).unwrap();
    let mut vars = crate::common::aimock_provider_env(port, home.path());
    vars.push(("METAFORGE_ROUTE_CHAT", "openai:gpt-4o-mini".to_owned()));
    let (_gateway, addr) = start_gateway(home.path(), &vars);
    let (_, health) = http(&addr, "GET", "/health", None);
    let entry = &health["mcp_servers"]["servers"]["spicebridge"];
    println!("{entry}");
    assert_eq!(entry["status"], "ok", "{health}");
    assert_eq!(entry["sandbox"], "on", "{entry}");
    let classes = &entry["classes"];
    let total: u64 = classes
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(
        Some(total),
        entry["tools"].as_u64(),
        "every tool has a class: {entry}"
    );
    assert!(
        classes["producing"].as_u64().unwrap() >= 4,
        "create_circuit and run_*: {entry}"
    );
    assert!(
        classes["destructive"].as_u64().unwrap() >= 1,
        "delete_circuit: {entry}"
    );

    let (code, out, err) = finish(
        chat(&addr, &["-m", "simulate a divider with spicebridge"]),
        Duration::from_secs(90),
    );
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert_eq!(out.trim(), "spicebridge stored the divider for simulation.");
    assert!(err.contains("→ spicebridge.create_circuit"), "{err}");
    assert!(err.contains("← spicebridge.create_circuit"), "{err}");
    assert!(
        err.contains("circuit_id"),
        "the server's own answer reached the turn: {err}"
    );
    assert!(
        !err.contains("held for a person"),
        "a producing tool runs for a local caller: {err}"
    );
}
