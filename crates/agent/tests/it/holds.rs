//! Gates and approval tiers: schema pre-validation before any hold, holds approved, timed out
//! and canceled, unattended refusal, forward mode, and cancellation of a model call.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use metaforge_agent::{
    APPROVAL_TOOL_REFUSED_UNATTENDED, ApprovalMode, CancellationToken, ToolPolicy, TurnConfig, TurnError,
    TurnEvent, TurnInput,
};
use metaforge_ports::{
    ApprovalDecision, ApprovalLedger, ApprovalStatus, CallerClass, CallerContext, HostCallOutcome,
    InputChannel, PortError, ResourceTemplateDescriptor, ResourceText, ToolDescriptor, ToolHints, ToolHost,
    ToolOutput,
};
use metaforge_test_support::doubles::{FakeToolSource, MemoryApprovalLedger, ScriptStep, descriptor};
use serde_json::{Map, Value, json};

use crate::common::{LogCapture, RigSpec, SLOW, drain, events, names, rig};

fn schema_name() -> Value {
    json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})
}

fn input() -> TurnInput {
    TurnInput {
        system: "You are MetaForge.".to_owned(),
        history: Vec::new(),
        user: "make the part".to_owned(),
    }
}

fn ask_tier(ids: &[&str]) -> ToolPolicy {
    ToolPolicy {
        requires_approval: ids.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>(),
        ..ToolPolicy::default()
    }
}

fn fast_holds(mut config: TurnConfig) -> TurnConfig {
    config.approval_poll = Duration::from_millis(10);
    config
}

/// Decides the first hold that appears in `ledger`.
async fn decide_first(ledger: Arc<MemoryApprovalLedger>, approve: bool) -> String {
    loop {
        if let Some(hold) = ledger.list_pending().await.expect("pending").into_iter().next() {
            ledger
                .decide(
                    &hold.id,
                    ApprovalDecision {
                        approve,
                        approver: "ada".to_owned(),
                        note: Some("looks right".to_owned()),
                    },
                )
                .await
                .expect("decide");
            return hold.id;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_schema_invalid_call_is_refused_before_any_hold() {
    let server =
        FakeToolSource::new("cad").with_echo(descriptor("create", schema_name(), false), Duration::ZERO);
    let mut spec = RigSpec::new(
        vec![
            ScriptStep::calls(&[("c1", "mcp_cad_create", json!({"name": 7}))]),
            ScriptStep::text("I could not."),
        ],
        server,
    );
    spec.policy = ask_tier(&["cad.create"]);
    let rig = rig(spec).await;
    let (sink, mut rx) = events();
    let outcome = rig
        .agent
        .run_turn(
            &fast_holds(TurnConfig::chat("t1")),
            &input(),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    assert_eq!(outcome.calls[0].result["error"], "invalid_arguments");
    assert_eq!(outcome.calls[0].result["validation_errors"][0]["path"], "/name");
    assert!(
        rig.ledger.list_recent(10).await.expect("recent").is_empty(),
        "nobody was asked"
    );
    assert_eq!(rig.server.calls_of("create"), 0);
    assert!(!names(&drain(&mut rx)).contains(&"tool.approval_requested"));
}

#[tokio::test]
async fn a_held_call_approved_mid_turn_runs_and_the_turn_continues() {
    let server = FakeToolSource::new("cad")
        .with_echo(descriptor("create", schema_name(), false), Duration::ZERO)
        .with_echo(descriptor("read", json!({"type": "object"}), true), SLOW);
    let mut spec = RigSpec::new(
        vec![
            ScriptStep::calls(&[
                ("c1", "mcp_cad_read", json!({})),
                ("c2", "mcp_cad_create", json!({"name": "bracket"})),
            ]),
            ScriptStep::text("Created the bracket."),
        ],
        server,
    );
    spec.policy = ask_tier(&["cad.create"]);
    let rig = rig(spec).await;
    let approver = tokio::spawn(decide_first(rig.ledger.clone(), true));
    let (sink, mut rx) = events();
    let outcome = rig
        .agent
        .run_turn(
            &fast_holds(TurnConfig::chat("t1")),
            &input(),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    let approval_id = approver.await.expect("approver");
    assert_eq!(rig.server.calls_of("create"), 1, "the approved call ran");
    assert_eq!(
        rig.server.max_concurrency(),
        1,
        "a batch holding an approval tool runs serially"
    );
    assert_eq!(
        outcome.calls[1].approval_id.as_deref(),
        Some(approval_id.as_str())
    );
    assert!(!outcome.calls[1].is_error);
    let record = rig.ledger.get(&approval_id).await.expect("hold");
    assert_eq!(record.status, ApprovalStatus::Approved);
    assert_eq!(record.tool, "cad.create");
    assert_eq!(record.caller, "local");
    let events = drain(&mut rx);
    assert!(events.iter().any(|e| matches!(
        e,
        TurnEvent::ApprovalRequested { approval_id: id, call_id, .. } if *id == approval_id && call_id == "c2"
    )));
    assert_eq!(
        outcome.reply, "Created the bracket.",
        "a real call grounds the claim"
    );
}

#[tokio::test]
async fn a_rejected_hold_is_not_run_and_the_model_reads_why() {
    let server =
        FakeToolSource::new("cad").with_echo(descriptor("create", schema_name(), false), Duration::ZERO);
    let mut spec = RigSpec::new(
        vec![
            ScriptStep::calls(&[("c1", "mcp_cad_create", json!({"name": "bracket"}))]),
            ScriptStep::text("It was rejected."),
        ],
        server,
    );
    spec.policy = ask_tier(&["cad.create"]);
    let rig = rig(spec).await;
    let approver = tokio::spawn(decide_first(rig.ledger.clone(), false));
    let (sink, _rx) = events();
    let outcome = rig
        .agent
        .run_turn(
            &fast_holds(TurnConfig::chat("t1")),
            &input(),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    approver.await.expect("approver");
    assert_eq!(rig.server.calls_of("create"), 0);
    assert_eq!(outcome.calls[0].result["error"], "rejected");
    assert_eq!(outcome.calls[0].result["approver"], "ada");
}

#[tokio::test]
async fn a_held_call_nobody_answers_times_out_and_is_closed_as_timed_out() {
    let server =
        FakeToolSource::new("cad").with_echo(descriptor("create", schema_name(), false), Duration::ZERO);
    let mut spec = RigSpec::new(
        vec![
            ScriptStep::calls(&[("c1", "mcp_cad_create", json!({"name": "bracket"}))]),
            ScriptStep::text("Nobody approved it."),
        ],
        server,
    );
    spec.policy = ask_tier(&["cad.create"]);
    let rig = rig(spec).await;
    let mut config = fast_holds(TurnConfig::chat("t1"));
    config.approval_timeout = Duration::from_millis(100);
    let (sink, _rx) = events();
    let outcome = rig
        .agent
        .run_turn(&config, &input(), &sink, &CancellationToken::new())
        .await
        .expect("turn");
    let id = outcome.calls[0].approval_id.clone().expect("held");
    assert_eq!(
        rig.ledger.get(&id).await.expect("hold").status,
        ApprovalStatus::TimedOut
    );
    assert_eq!(outcome.calls[0].result["error"], "timed_out");
    assert_eq!(rig.server.calls_of("create"), 0);
}

#[tokio::test]
async fn cancelling_a_turn_closes_its_open_hold_as_canceled() {
    let server =
        FakeToolSource::new("cad").with_echo(descriptor("create", schema_name(), false), Duration::ZERO);
    let mut spec = RigSpec::new(
        vec![ScriptStep::calls(&[(
            "c1",
            "mcp_cad_create",
            json!({"name": "bracket"}),
        )])],
        server,
    );
    spec.policy = ask_tier(&["cad.create"]);
    let rig = rig(spec).await;
    let cancel = CancellationToken::new();
    let ledger = rig.ledger.clone();
    let canceller = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            while ledger.list_pending().await.expect("pending").is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            cancel.cancel();
        })
    };
    let (sink, mut rx) = events();
    let failure = rig
        .agent
        .run_turn(&fast_holds(TurnConfig::chat("t1")), &input(), &sink, &cancel)
        .await
        .expect_err("canceled");
    canceller.await.expect("canceller");
    assert_eq!(failure.error, TurnError::Canceled);
    let holds = rig.ledger.list_recent(10).await.expect("recent");
    assert_eq!(holds.len(), 1);
    assert_eq!(holds[0].status, ApprovalStatus::Canceled);
    assert_eq!(rig.server.calls_of("create"), 0);
    let events = drain(&mut rx);
    let n = events.len();
    assert!(matches!(&events[n - 2], TurnEvent::NotifyError { code, .. } if code == "canceled"));
    assert_eq!(events[n - 1].name(), "agent.done");
}

#[tokio::test]
async fn cancelling_a_turn_stops_the_model_call_in_flight() {
    let rig = rig(RigSpec::new(vec![ScriptStep::Hang], FakeToolSource::new("cad"))).await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        trigger.cancel();
    });
    let (sink, _rx) = events();
    let started = std::time::Instant::now();
    let failure = tokio::time::timeout(
        Duration::from_secs(5),
        rig.agent
            .run_turn(&TurnConfig::chat("t1"), &input(), &sink, &cancel),
    )
    .await
    .expect("the turn ended")
    .expect_err("canceled");
    assert_eq!(failure.error, TurnError::Canceled);
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A native host with one tool, `project.create`, counting its calls.
struct NativeHost {
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl ToolHost for NativeHost {
    fn tools(&self, _caller: CallerClass) -> Vec<ToolDescriptor> {
        vec![ToolDescriptor {
            name: "project.create".to_owned(),
            title: None,
            description: "create a project".to_owned(),
            input_schema: schema_name(),
            hints: ToolHints {
                destructive_hint: Some(false),
                ..ToolHints::default()
            },
        }]
    }

    async fn call(
        &self,
        _caller: &CallerContext,
        _tool: &str,
        _arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(HostCallOutcome::Done(ToolOutput::json(
            json!({"project_id": "p1"}),
        )))
    }

    fn resource_templates(&self) -> Vec<ResourceTemplateDescriptor> {
        Vec::new()
    }

    async fn read_resource(&self, uri: &str) -> Result<ResourceText, PortError> {
        Err(PortError::new(metaforge_ports::PortErrorKind::NotFound, uri))
    }
}

fn unattended(config: TurnConfig) -> TurnConfig {
    let mut config = fast_holds(config);
    config.approval_mode = ApprovalMode::Forward;
    config.caller.unattended = true;
    config
}

#[tokio::test]
async fn an_unattended_turn_refuses_a_native_approval_tool_without_holding_it() {
    let host = Arc::new(NativeHost {
        calls: AtomicUsize::new(0),
    });
    let context = CallerContext {
        class: CallerClass::Local,
        session: None,
        input_channel: InputChannel::None,
        identity: None,
    };
    let mut spec = RigSpec::new(
        vec![
            ScriptStep::calls(&[("c1", "project_create", json!({"name": "shelf"}))]),
            ScriptStep::text("Not available here."),
        ],
        FakeToolSource::new("cad"),
    );
    spec.native = Some((host.clone() as Arc<dyn ToolHost>, context));
    spec.policy = ask_tier(&["project.create"]);
    let rig = rig(spec).await;
    let logs = LogCapture::start();
    let (sink, _rx) = events();
    let outcome = rig
        .agent
        .run_turn(
            &unattended(TurnConfig::chat("t1")),
            &input(),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    assert_eq!(outcome.calls[0].result["error"], APPROVAL_TOOL_REFUSED_UNATTENDED);
    assert_eq!(host.calls.load(Ordering::SeqCst), 0, "not run");
    assert!(
        rig.ledger.list_recent(10).await.expect("recent").is_empty(),
        "not held"
    );
    assert!(
        logs.events()
            .contains(&("WARN".to_owned(), APPROVAL_TOOL_REFUSED_UNATTENDED.to_owned())),
        "{:?}",
        logs.events()
    );
}

#[tokio::test]
async fn an_unattended_turn_forwards_a_held_mcp_call_to_its_own_server() {
    let server =
        FakeToolSource::new("cad").with_echo(descriptor("create", schema_name(), false), Duration::ZERO);
    let mut spec = RigSpec::new(
        vec![
            ScriptStep::calls(&[("c1", "mcp_cad_create", json!({"name": "bracket"}))]),
            ScriptStep::text("Created the bracket."),
        ],
        server,
    );
    spec.policy = ask_tier(&["cad.create"]);
    let rig = rig(spec).await;
    let (sink, _rx) = events();
    rig.agent
        .run_turn(
            &unattended(TurnConfig::chat("t1")),
            &input(),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    assert_eq!(
        rig.server.calls_of("create"),
        1,
        "the server's own policy decides"
    );
    assert!(rig.ledger.list_recent(10).await.expect("recent").is_empty());
}

#[tokio::test]
async fn a_disabled_gate_refuses_the_call_before_any_hold() {
    let server = FakeToolSource::new("twin").with_echo(
        descriptor("commit_geometry", schema_name(), false),
        Duration::ZERO,
    );
    let mut spec = RigSpec::new(
        vec![
            ScriptStep::calls(&[("c1", "mcp_twin_commit_geometry", json!({"name": "bracket"}))]),
            ScriptStep::text("Chat is read-only here."),
        ],
        server,
    );
    spec.policy = ask_tier(&["twin.commit_geometry"]);
    spec.policy
        .required_gates
        .insert("twin.commit_geometry".to_owned(), vec!["twin_write".to_owned()]);
    let rig = rig(spec).await;
    // METAFORGE_CHAT_TWIN_WRITES=0 reaches the turn as a disabled gate.
    let mut config = fast_holds(TurnConfig::chat("t1"));
    config.caller.disabled_gates = vec!["twin_write".to_owned()];
    let (sink, _rx) = events();
    let outcome = rig
        .agent
        .run_turn(&config, &input(), &sink, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.calls[0].result["error"], "refused");
    assert!(
        outcome.calls[0].result["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("twin_write")
    );
    assert_eq!(rig.server.calls_of("commit_geometry"), 0);
    assert!(rig.ledger.list_recent(10).await.expect("recent").is_empty());
}

#[tokio::test]
async fn without_an_approval_ledger_a_held_call_is_refused_never_run() {
    let server =
        FakeToolSource::new("cad").with_echo(descriptor("create", schema_name(), false), Duration::ZERO);
    let mut spec = RigSpec::new(
        vec![
            ScriptStep::calls(&[("c1", "mcp_cad_create", json!({"name": "bracket"}))]),
            ScriptStep::text("No approver."),
        ],
        server,
    );
    spec.policy = ask_tier(&["cad.create"]);
    spec.ledger = false;
    let rig = rig(spec).await;
    let (sink, _rx) = events();
    let outcome = rig
        .agent
        .run_turn(
            &fast_holds(TurnConfig::chat("t1")),
            &input(),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    assert_eq!(outcome.calls[0].result["error"], "approval_unavailable");
    assert_eq!(rig.server.calls_of("create"), 0);
}

#[tokio::test]
async fn two_turns_of_one_session_never_run_at_once() {
    for (sessions, expected) in [(["s1", "s1"], 1), (["s1", "s2"], 2)] {
        let server =
            FakeToolSource::new("cad").with_echo(descriptor("read", json!({"type": "object"}), true), SLOW);
        let rig = rig(RigSpec::new(
            vec![
                ScriptStep::calls(&[("c1", "mcp_cad_read", json!({"x": 1}))]),
                ScriptStep::calls(&[("c2", "mcp_cad_read", json!({"x": 2}))]),
                ScriptStep::text("one"),
                ScriptStep::text("two"),
            ],
            server,
        ))
        .await;
        let (sink, _rx) = events();
        let cancel = CancellationToken::new();
        let (a, b) = (TurnConfig::chat(sessions[0]), TurnConfig::chat(sessions[1]));
        let ask = input();
        let (first, second) = tokio::join!(
            rig.agent.run_turn(&a, &ask, &sink, &cancel),
            rig.agent.run_turn(&b, &ask, &sink, &cancel)
        );
        first.expect("first turn");
        second.expect("second turn");
        assert_eq!(
            rig.server.max_concurrency(),
            expected,
            "sessions {sessions:?}: turns of one session are serialised, of two sessions not"
        );
    }
}

#[tokio::test]
async fn cancelling_a_turn_stops_the_tool_calls_in_flight() {
    let server = FakeToolSource::new("cad").with_echo(
        descriptor("simulate", json!({"type": "object"}), true),
        Duration::from_secs(30),
    );
    let rig = rig(RigSpec::new(
        vec![ScriptStep::calls(&[
            ("c1", "mcp_cad_simulate", json!({"n": 1})),
            ("c2", "mcp_cad_simulate", json!({"n": 2})),
        ])],
        server,
    ))
    .await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let server = rig.server.clone();
    tokio::spawn(async move {
        while server.calls().len() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        trigger.cancel();
    });
    let (sink, _rx) = events();
    let failure = tokio::time::timeout(
        Duration::from_secs(5),
        rig.agent
            .run_turn(&TurnConfig::chat("t1"), &input(), &sink, &cancel),
    )
    .await
    .expect("the turn ended long before the tools would have")
    .expect_err("canceled");
    assert_eq!(failure.error, TurnError::Canceled);
    assert!(
        rig.server.finished().is_empty(),
        "both calls were dropped mid-flight"
    );
    assert_eq!(failure.calls.len(), 2);
    assert!(failure.calls.iter().all(|c| c.result["error"] == "canceled"));
}
