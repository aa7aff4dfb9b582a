//! Sidecar remote mode end to end (FORGE-406/462): `metaforge gateway` and `metaforge mcp serve
//! --http` with `METAFORGE_GATEWAY_URL`, each with its OWN `METAFORGE_HOME`, so anything the
//! person sees at the gateway can only have come through the gateway's one ledger.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a peer that cannot start must fail the test loudly"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use metaforge_adapters_gateway::{GatewayClient, RemoteApprovalLedger, RemoteFlowBindings};
use metaforge_adapters_store::{SqliteApprovalLedger, SqliteFlowVersionStore};
use metaforge_app::approvals::ApprovalService;
use metaforge_ports::{
    CallerClass, CallerContext, Clock, HostCallOutcome, InputChannel, PortError, ToolDescriptor, ToolHints,
    ToolHost, ToolOutput, ToolSource,
};
use metaforge_sidecar::{
    FlowStores, HeldWrites, HoldPolicy, SidecarHost, SidecarTool, host_with_bindings, host_with_stores,
};
use serde_json::{Map, Value, json};

use crate::common::{
    Ids, KEY, Process, Wall, aimock_provider_env, args, http, http_raw, mcp_client, proposal_arguments,
    start_aimock, start_gateway, start_sidecar,
};

/// The sidecar in remote mode: the gateway's URL and key and a home of its own; its stderr is
/// kept so the test can read the mode it logged.
fn start_remote_sidecar(home: &std::path::Path, gateway: &str, log: &std::path::Path) -> (Process, String) {
    start_sidecar(home, |sidecar| {
        sidecar
            .env("METAFORGE_GATEWAY_URL", format!("http://{gateway}"))
            .env("METAFORGE_GATEWAY_API_KEY", format!("ops:{KEY}"))
            .env("RUST_LOG", "info,rmcp=warn")
            .stderr(std::fs::File::create(log).unwrap());
    })
}

#[tokio::test]
async fn a_plugins_flow_propose_is_held_in_the_gateways_ledger_and_approved_over_http() {
    let gateway_home = tempfile::tempdir().unwrap();
    let sidecar_home = tempfile::tempdir().unwrap();
    let (_gateway, addr) = start_gateway(gateway_home.path(), &[]);
    let log = sidecar_home.path().join("sidecar.log");
    let (_sidecar, url) = start_remote_sidecar(sidecar_home.path(), &addr, &log);

    let client = mcp_client(url);
    let proposed = client
        .call_tool("flow.propose", proposal_arguments())
        .await
        .unwrap();
    println!("flow.propose through the remote sidecar: {}", proposed.text());
    let proposal = proposed.structured.unwrap();
    assert_eq!(proposal["status"], "proposed", "{proposal}");
    let approval_id = proposal["approval_id"].as_str().unwrap().to_owned();
    let version_id = proposal["flow_version_id"].as_str().unwrap().to_owned();

    // The person's side: the gateway's unified queue shows the hold the plugin caused.
    let (status, pending) = http(&addr, "GET", "/v1/approvals", None);
    assert_eq!(status, 200, "{pending}");
    let held: Vec<&Value> = pending["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["id"] == approval_id.as_str())
        .collect();
    assert_eq!(
        held.len(),
        1,
        "the proposal's hold is in the gateway's queue: {pending}"
    );
    assert_eq!(held[0]["kind"], "design_flow_proposal");
    assert_eq!(held[0]["flow_version_id"], version_id.as_str());

    let (status, decided) = http(
        &addr,
        "POST",
        &format!("/v1/approvals/{approval_id}/decision"),
        Some(&json!({"decision": "approve", "note": "looks right"})),
    );
    assert_eq!(status, 200, "{decided}");
    assert_eq!(
        decided["approver"], "ops",
        "the approver is the authenticated identity"
    );

    let (status, version) = http(
        &addr,
        "GET",
        &format!("/v1/design-flows/versions/{version_id}"),
        None,
    );
    assert_eq!(status, 200, "{version}");
    assert_eq!(version["version"]["status"], "approved", "{version}");

    // The sidecar reads the same version back through the gateway.
    let read = client
        .call_tool("flow.version", args(json!({"id": version_id})))
        .await
        .unwrap();
    assert_eq!(read.structured.unwrap()["status"], "approved");

    // Nothing was written under the sidecar's own home: there is one ledger.
    let written: Vec<_> = walk(sidecar_home.path())
        .into_iter()
        .filter(|p| p != &log)
        .collect();
    assert!(written.is_empty(), "the sidecar wrote locally: {written:?}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("mcp_flow_bindings_remote"), "{logged}");
    assert!(!logged.contains("mcp_flow_bindings_in_process"), "{logged}");
    client.close().await;
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

#[test]
fn without_a_gateway_url_the_sidecar_logs_the_in_process_choice_at_start() {
    let home = tempfile::tempdir().unwrap();
    let log = home.path().join("sidecar.log");
    let (_sidecar, _) = start_sidecar(&home.path().join("home"), |sidecar| {
        sidecar
            .env_remove("METAFORGE_GATEWAY_URL")
            .env("RUST_LOG", "info,rmcp=warn")
            .stderr(std::fs::File::create(&log).unwrap());
    });
    let logged = std::fs::read_to_string(&log).unwrap();
    let line = logged
        .lines()
        .find(|l| l.contains("mcp_flow_bindings_in_process"))
        .unwrap_or_else(|| panic!("no in-process warning in: {logged}"));
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("correct only inside the gateway"), "{line}");
}

/// A standalone sidecar without `METAFORGE_GATEWAY_URL` parks holds where no approver is known
/// to look: each hold is still parked, and is logged `approval_hold_unreachable` and counted in
/// `metaforge_unreachable_approval_hold_total` on the sidecar's own `/metrics`.
#[tokio::test]
async fn a_hold_parked_by_a_sidecar_without_a_gateway_is_logged_and_counted_as_unreachable() {
    let home = tempfile::tempdir().unwrap();
    let log = home.path().join("sidecar.log");
    let (_sidecar, url) = start_sidecar(&home.path().join("home"), |sidecar| {
        sidecar
            .env_remove("METAFORGE_GATEWAY_URL")
            .env("RUST_LOG", "info,rmcp=warn")
            .stderr(std::fs::File::create(&log).unwrap());
    });
    let proposed = mcp_client(url.clone())
        .call_tool("flow.propose", proposal_arguments())
        .await
        .unwrap();
    assert_eq!(proposed.structured.unwrap()["status"], "proposed");
    let authority = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let (status, metrics) = http_raw(&authority, "GET", "/metrics", None, &[]);
    assert_eq!(status, 200, "{metrics}");
    let line = metrics
        .lines()
        .find(|l| l.starts_with("metaforge_unreachable_approval_hold_total{"))
        .unwrap_or_else(|| panic!("no unreachable-hold series in: {metrics}"));
    assert!(line.contains("kind=\"design_flow_proposal\""), "{line}");
    assert!(line.ends_with(" 1"), "{line}");
    let logged = std::fs::read_to_string(&log).unwrap();
    let unreachable = logged
        .lines()
        .find(|l| l.contains("approval_hold_unreachable"))
        .unwrap_or_else(|| panic!("no approval_hold_unreachable in: {logged}"));
    assert!(unreachable.contains("ERROR"), "{unreachable}");
}

/// A write the gating rules hold for a remote caller: test-only, never in the product binary.
struct TestWrite;

#[async_trait::async_trait]
impl SidecarTool for TestWrite {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor {
            name: "test.write".to_owned(),
            title: None,
            description: "a write held for a person".to_owned(),
            input_schema: json!({"type": "object", "properties": {"value": {"type": "string"}}}),
            hints: ToolHints {
                read_only_hint: Some(false),
                destructive_hint: Some(true),
                idempotent_hint: Some(false),
                open_world_hint: Some(false),
            },
        }
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        Ok(HostCallOutcome::Done(ToolOutput::json(
            json!({"status": "written", "value": arguments.get("value")}),
        )))
    }
}

/// The sidecar's host exactly as remote mode composes it, plus the test-only held write.
fn remote_host(addr: &str, timeout: Duration) -> Arc<dyn ToolHost> {
    let client = GatewayClient::new(&format!("http://{addr}"), Some(KEY.to_owned())).unwrap();
    let held = HeldWrites {
        approvals: Arc::new(ApprovalService::waiter(
            Arc::new(RemoteApprovalLedger::new(client.clone())),
            Arc::new(Wall),
            Arc::new(Ids),
        )),
        policy: HoldPolicy {
            timeout,
            poll: Duration::from_millis(100),
        },
    };
    Arc::new(
        host_with_bindings(Arc::new(RemoteFlowBindings::new(client)), held).with_tool(Arc::new(TestWrite)),
    )
}

fn remote_caller() -> CallerContext {
    CallerContext {
        class: CallerClass::Remote,
        session: None,
        input_channel: InputChannel::None,
        identity: None,
    }
}

/// Polls the gateway's queue until a `test.write` hold appears.
async fn pending_hold(addr: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, pending) = http(addr, "GET", "/v1/chat/tool_approvals", None);
        assert_eq!(status, 200, "{pending}");
        if let Some(hold) = pending["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["tool"] == "test.write")
        {
            return hold.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no hold parked at the gateway: {pending}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_held_write_waits_in_the_gateways_ledger_and_runs_once_approved_over_http() {
    let home = tempfile::tempdir().unwrap();
    let (_gateway, addr) = start_gateway(home.path(), &[]);
    let host = remote_host(&addr, Duration::from_secs(60));
    let call = tokio::spawn({
        let host = Arc::clone(&host);
        async move {
            host.call(&remote_caller(), "test.write", args(json!({"value": "v1"})))
                .await
        }
    });
    let hold = pending_hold(&addr).await;
    assert_eq!(hold["status"], "awaiting_approval");
    assert_eq!(hold["caller"], "remote");
    assert!(!call.is_finished(), "the call waits for a person");
    let id = hold["id"].as_str().unwrap();
    let (status, decided) = http(
        &addr,
        "POST",
        &format!("/v1/approvals/{id}/decision"),
        Some(&json!({"decision": "approve"})),
    );
    assert_eq!(status, 200, "{decided}");
    let outcome = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the wait returns once approved")
        .unwrap()
        .unwrap();
    let HostCallOutcome::Done(output) = outcome else {
        panic!("expected a finished call, got {outcome:?}");
    };
    assert!(!output.is_error, "{output:?}");
    assert_eq!(output.structured.unwrap()["status"], "written");
}

#[tokio::test]
async fn a_held_write_whose_window_closes_is_resolved_timed_out_in_the_gateways_ledger() {
    let home = tempfile::tempdir().unwrap();
    let (_gateway, addr) = start_gateway(home.path(), &[]);
    let host = remote_host(&addr, Duration::from_secs(1));
    let outcome = host
        .call(&remote_caller(), "test.write", args(json!({"value": "late"})))
        .await
        .unwrap();
    let HostCallOutcome::Done(output) = outcome else {
        panic!("expected a finished call, got {outcome:?}");
    };
    assert!(output.is_error);
    let envelope = output.structured.unwrap();
    assert_eq!(envelope["status"], "timed_out", "{envelope}");
    let id = envelope["approval_id"].as_str().unwrap();
    let (status, record) = http(&addr, "GET", &format!("/v1/chat/tool_approvals/{id}"), None);
    assert_eq!(status, 200, "{record}");
    assert_eq!(
        record["status"], "timed_out",
        "the sidecar closed its own hold: {record}"
    );
    // A person answering it now is told the state.
    let (status, answer) = http(
        &addr,
        "POST",
        &format!("/v1/approvals/{id}/decision"),
        Some(&json!({"decision": "approve"})),
    );
    assert_eq!(status, 409, "{answer}");
}

/// The sidecar's host exactly as in-process mode composes it, over SQLite ledgers in `home`.
async fn local_host(home: &std::path::Path) -> SidecarHost {
    let clock: Arc<dyn Clock> = Arc::new(Wall);
    let stores = FlowStores {
        approvals: Arc::new(
            SqliteApprovalLedger::open(&home.join("approvals.db"), Arc::clone(&clock))
                .await
                .unwrap(),
        ),
        versions: Arc::new(
            SqliteFlowVersionStore::open(&home.join("versions.db"))
                .await
                .unwrap(),
        ),
        clock,
        ids: Arc::new(Ids),
    };
    host_with_stores(
        stores,
        HoldPolicy {
            timeout: Duration::from_secs(5),
            poll: Duration::from_millis(100),
        },
    )
}

/// The keys of a JSON object in order, each with the kind of its value.
fn shape(v: &Value) -> Vec<(String, &'static str)> {
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let kind = match v {
                Value::Null => "null",
                Value::Bool(_) => "bool",
                Value::Number(_) => "number",
                Value::String(_) => "string",
                Value::Array(_) => "array",
                Value::Object(_) => "object",
            };
            (k.clone(), kind)
        })
        .collect()
}

/// A finished call's structured result.
#[expect(
    clippy::panic,
    reason = "a helper of tests: an unfinished call must fail the test loudly"
)]
fn structured(outcome: HostCallOutcome) -> Value {
    match outcome {
        HostCallOutcome::Done(output) => output.structured.unwrap(),
        other @ HostCallOutcome::NeedsInput { .. } => panic!("expected a finished call, got {other:?}"),
    }
}

#[tokio::test]
async fn flow_propose_answers_in_the_same_shape_in_process_and_through_the_gateway() {
    let gateway_home = tempfile::tempdir().unwrap();
    let (_gateway, addr) = start_gateway(gateway_home.path(), &[]);
    let remote = remote_host(&addr, Duration::from_secs(5));

    let local_home = tempfile::tempdir().unwrap();
    let local = local_host(local_home.path()).await;
    let caller = remote_caller();
    let from_gateway = structured(
        remote
            .call(&caller, "flow.propose", proposal_arguments())
            .await
            .unwrap(),
    );
    let in_process = structured(
        local
            .call(&caller, "flow.propose", proposal_arguments())
            .await
            .unwrap(),
    );
    assert_eq!(
        shape(&from_gateway),
        shape(&in_process),
        "{from_gateway}\n{in_process}"
    );
    assert_eq!(
        from_gateway["diff"], in_process["diff"],
        "same operations, same diff"
    );
    assert_eq!(from_gateway["content_hash"], in_process["content_hash"]);

    let version_of = |v: &Value| args(json!({"id": v["flow_version_id"]}));
    let remote_version = structured(
        remote
            .call(&caller, "flow.version", version_of(&from_gateway))
            .await
            .unwrap(),
    );
    let local_version = structured(
        local
            .call(&caller, "flow.version", version_of(&in_process))
            .await
            .unwrap(),
    );
    assert_eq!(
        shape(&remote_version),
        shape(&local_version),
        "{remote_version}\n{local_version}"
    );
}

/// Issue 11 (W2, W6): one `flow.propose` over the bindings, so a refusal made by the flow service
/// has the same code, message and shape whether it was made in process or by the gateway — the
/// code the gateway's own HTTP answer carries — and nothing is held either way.
#[tokio::test]
async fn a_refused_flow_propose_answers_with_the_same_code_and_shape_in_process_and_through_the_gateway() {
    let gateway_home = tempfile::tempdir().unwrap();
    let (_gateway, addr) = start_gateway(gateway_home.path(), &[]);
    let remote = remote_host(&addr, Duration::from_secs(5));
    let local_home = tempfile::tempdir().unwrap();
    let local = local_host(local_home.path()).await;
    let caller = remote_caller();
    let context = json!({"manufacturing_context": {"route": "vendor"},
                         "target_maturity": "sim_validated", "loads_and_use": "20 kg"});
    for (arguments, code) in [
        (
            json!({"template_id": "mech_v1", "context": context,
                   "operations": [{"op": "drop_phase", "phase": "no_such_phase", "rationale": "r"}]}),
            "invalid_proposal",
        ),
        (
            json!({"template_id": "nope_v9", "operations": [], "context": context}),
            "unknown_template",
        ),
    ] {
        let from_gateway = structured(
            remote
                .call(&caller, "flow.propose", args(arguments.clone()))
                .await
                .unwrap(),
        );
        let in_process = structured(
            local
                .call(&caller, "flow.propose", args(arguments.clone()))
                .await
                .unwrap(),
        );
        assert_eq!(from_gateway["error"], code, "{from_gateway}");
        assert_eq!(in_process["error"], code, "{in_process}");
        assert_eq!(
            shape(&from_gateway),
            shape(&in_process),
            "{from_gateway}\n{in_process}"
        );
        assert_eq!(from_gateway["message"], in_process["message"]);

        // The gateway's own HTTP answer to the same proposal carries the same code.
        let mut body = arguments.as_object().unwrap().clone();
        let template = body.remove("template_id").unwrap();
        body.insert("template".into(), template);
        let context = body.remove("context").unwrap();
        for (key, value) in context.as_object().unwrap() {
            body.insert(key.clone(), value.clone());
        }
        let (status, answer) = http(
            &addr,
            "POST",
            "/v1/design-flows/propose",
            Some(&Value::Object(body)),
        );
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["error"], code, "{answer}");
    }
    let (_, pending) = http(&addr, "GET", "/v1/approvals", None);
    assert_eq!(pending["approvals"], json!([]), "nothing held: {pending}");
}

#[tokio::test]
async fn a_cancelled_held_call_resolves_its_hold_canceled_in_the_gateways_ledger() {
    let home = tempfile::tempdir().unwrap();
    let (_gateway, addr) = start_gateway(home.path(), &[]);
    let host = remote_host(&addr, Duration::from_secs(60));
    let call = tokio::spawn(async move {
        host.call(&remote_caller(), "test.write", args(json!({"value": "dropped"})))
            .await
    });
    let hold = pending_hold(&addr).await;
    let id = hold["id"].as_str().unwrap().to_owned();
    call.abort();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, record) = http(&addr, "GET", &format!("/v1/chat/tool_approvals/{id}"), None);
        assert_eq!(status, 200, "{record}");
        if record["status"] == "canceled" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cancelled call did not close its hold: {record}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_gateway_gone_while_waiting_times_the_call_out_without_raising_the_failed_close() {
    let home = tempfile::tempdir().unwrap();
    let (gateway, addr) = start_gateway(home.path(), &[]);
    let host = remote_host(&addr, Duration::from_secs(2));
    let call = tokio::spawn(async move {
        host.call(&remote_caller(), "test.write", args(json!({"value": "orphan"})))
            .await
    });
    pending_hold(&addr).await;
    drop(gateway);
    let outcome = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("the wait ends when its window closes")
        .unwrap()
        .expect("a failed close is not raised into the tool call");
    let HostCallOutcome::Done(output) = outcome else {
        panic!("expected a finished call, got {outcome:?}");
    };
    assert!(output.is_error);
    assert_eq!(output.structured.unwrap()["status"], "timed_out");
}

/// Remote mode, no operations: the sidecar has no model of its own, so `flow.propose` with only an
/// intent and context goes to the gateway, whose generator (aimock as the model) tailors the flow
/// and holds it in the gateway's ledger; a model question needs no answer here; a gateway whose
/// model answers without a proposal makes the tool say the generator is unavailable, and nothing
/// is held.
#[tokio::test]
async fn a_plugins_flow_propose_without_operations_is_tailored_by_the_gateways_generator() {
    let Some((_mock, port)) = start_aimock("tests/fixtures/aimock_generator.json") else {
        return;
    };
    let gateway_home = tempfile::tempdir().unwrap();
    let sidecar_home = tempfile::tempdir().unwrap();
    let (_gateway, addr) = start_gateway(
        gateway_home.path(),
        &aimock_provider_env(port, gateway_home.path()),
    );
    let log = sidecar_home.path().join("sidecar.log");
    let (_sidecar, url) = start_remote_sidecar(sidecar_home.path(), &addr, &log);
    let client = mcp_client(url);
    let context = json!({"manufacturing_context": {"route": "in_house", "processes": ["FDM printing"],
                                                   "stock_materials": ["PETG"]},
                         "target_maturity": "physically_validated",
                         "loads_and_use": "holds 5 kg of books"});

    let proposed = client
        .call_tool(
            "flow.propose",
            args(json!({"intent": "A wall shelf I can print with what I have.", "context": context})),
        )
        .await
        .unwrap();
    let proposal = proposed.structured.unwrap();
    assert_eq!(proposal["status"], "proposed", "{proposal}");
    assert_eq!(proposal["generated_by"]["provider"], "openai", "{proposal}");
    assert_eq!(proposal["generated_by"]["fellBackFrom"], Value::Null);
    assert_eq!(proposal["skipped"][0]["phase"], "no_such_phase");
    assert_eq!(
        proposal["open_questions"],
        json!(["Which wall type will it hang on?"])
    );
    let approval_id = proposal["approval_id"].as_str().unwrap().to_owned();
    let (status, held) = http(&addr, "GET", &format!("/v1/approvals/{approval_id}"), None);
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["kind"], "design_flow_proposal");
    assert_eq!(held["arguments"]["generated_by"]["model"], "gpt-4o-mini");

    let unusable = client
        .call_tool(
            "flow.propose",
            args(json!({"intent": "A chatty answer, please.", "context": context})),
        )
        .await
        .unwrap();
    let refusal = unusable.structured.unwrap();
    assert_eq!(refusal["error"], "generator_unavailable", "{refusal}");
    let (_, pending) = http(&addr, "GET", "/v1/approvals", None);
    assert_eq!(
        pending["approvals"].as_array().map(Vec::len),
        Some(1),
        "{pending}"
    );
}

/// The run tools answer byte-identical JSON in process (`metaforge up`'s own sidecar, over the
/// run service) and through the gateway (a remote sidecar, over `/v1/runs`): the run views have
/// one home, `metaforge_api::run_views`, and no copy between the two that could drop a field.
#[tokio::test]
async fn the_run_tools_answer_byte_identical_json_in_process_and_through_the_gateway() {
    let up_home = tempfile::tempdir().unwrap();
    let mut up = crate::common::spawn(
        &mut crate::common::server_command(
            &["up", "--bind", "127.0.0.1:0", "--mcp-bind", "127.0.0.1:0"],
            up_home.path(),
        ),
        "up",
    );
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(up.child_mut().stdout.take().unwrap()));
    let gateway = crate::common::banner_address(&lines.next().unwrap().unwrap());
    let in_process_url = lines
        .next()
        .unwrap()
        .unwrap()
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_owned();
    let sidecar_home = tempfile::tempdir().unwrap();
    let log = sidecar_home.path().join("sidecar.log");
    let (_remote, remote_url) = start_remote_sidecar(sidecar_home.path(), &gateway, &log);
    let in_process = mcp_client(in_process_url);
    let remote = mcp_client(remote_url);
    let started = in_process
        .call_tool(
            "flow.start_run",
            args(json!({"template_id": "mech_v1", "intelligence": "client", "project_id": "p-shelf"})),
        )
        .await
        .unwrap()
        .structured
        .unwrap();
    assert_eq!(started["status"], "started", "{started}");
    let run_id = started["run"]["id"].as_str().unwrap().to_owned();
    // Wait until the run has posted its first task, so both reads see one settled state.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, tasks) = http(
            &gateway,
            "GET",
            &format!("/v1/client-tasks?run_id={run_id}"),
            None,
        );
        if tasks["tasks"].as_array().is_some_and(|t| !t.is_empty()) {
            break;
        }
        assert!(Instant::now() < deadline, "no task posted: {tasks}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (tool, arguments) in [
        ("run.get", json!({"run_id": run_id})),
        ("flow.status", json!({"run_id": run_id})),
        ("run.list", json!({"project_id": "p-shelf"})),
        ("phase.list_tasks", json!({"run_id": run_id})),
    ] {
        let here = in_process.call_tool(tool, args(arguments.clone())).await.unwrap();
        let there = remote.call_tool(tool, args(arguments)).await.unwrap();
        let (here, there) = (here.structured.unwrap(), there.structured.unwrap());
        assert_eq!(
            serde_json::to_string(&here).unwrap(),
            serde_json::to_string(&there).unwrap(),
            "{tool}: in process vs through the gateway"
        );
        assert!(here.as_object().is_some_and(|o| !o.is_empty()), "{tool}: {here}");
    }
}
