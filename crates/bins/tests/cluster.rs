//! The scripted cluster run, `cargo xtask cluster` (issue 20): every part on loopback — PostgreSQL
//! (every ledger), a Temporal dev server (design-flow runs), a tansu broker (the event log),
//! FalkorDB (the twin), two `metaforge gateway` processes on that one PostgreSQL, one `metaforge
//! worker` and one `metaforge mcp serve --http` sidecar in remote mode pointed at the first
//! gateway — then, in order:
//!
//! 1. **the README walk-through through both gateways alternately** (catalogue, validate, propose,
//!    the one queue, approve, the frozen version; a run of it through its gates on Temporal and its
//!    deliverables merged into the twin's `main`), and a `flow.propose` through the sidecar that
//!    the other gateway's queue shows;
//! 2. **the load and fault script**: N proposals (default 1,000) spread over both gateways, each
//!    hold raced at once by 20 decisions across the two; gateway B killed with SIGKILL and
//!    restarted on its address every 30 s throughout; design-flow runs started alternately on the
//!    two, the worker killed with SIGKILL while their first phases are in flight and started again;
//! 3. **the audit**: every acknowledged proposal is in the ledger exactly once, no hold has two
//!    winners and every acknowledged winner's decision is the one recorded, every run completed
//!    exactly once with each transition once, and both gateways show the same queue.
//!
//! Prints the figures, and exits 1 naming every promise that did not hold. A test target without
//! libtest's harness (features `kafka` and `temporal`): `cargo test -p metaforge-bins --features
//! kafka,temporal --test cluster -- [N] [--kill-every SECONDS] [--runs R]`. A missing peer is
//! skipped with the reason printed (a failure under `METAFORGE_REQUIRE_PEERS=1`).

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "a scripted run: a part that cannot start stops the run loudly"
)]

#[expect(dead_code, reason = "shared process helpers; the cluster run uses a few")]
mod common;
#[expect(dead_code, reason = "shared run helpers; the cluster run uses a few")]
mod run_support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use metaforge_ports::ToolSource as _;
use metaforge_test_support::temporal::TemporalDevServer;
use metaforge_test_support::{falkordb, kafka, net, peers, postgres};
use run_support::{ScriptedModel, approve_body, exchange, merged_into_main, open_gate, send};
use serde_json::{Value, json};

/// How the run is sized: `[N] [--kill-every SECONDS] [--runs R] [--racers K]`.
struct Script {
    /// Proposals in the load.
    proposals: usize,
    /// Decisions raced on each hold.
    racers: usize,
    /// Seconds between SIGKILLs of gateway B.
    kill_every: Duration,
    /// Design-flow runs through the worker kill.
    runs: usize,
    /// Client threads sending the load.
    clients: usize,
}

impl Script {
    fn from_args() -> Result<Self, String> {
        let mut script = Self {
            proposals: 1_000,
            racers: 20,
            kill_every: Duration::from_secs(30),
            runs: 4,
            clients: 4,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut number = |name: &str| -> Result<usize, String> {
                args.next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{name} takes a positive number"))
            };
            match arg.as_str() {
                "--kill-every" => script.kill_every = Duration::from_secs(number("--kill-every")? as u64),
                "--runs" => script.runs = number("--runs")?,
                "--racers" => script.racers = number("--racers")?,
                // What cargo's test runner may pass on to a harness-less target.
                "--nocapture" | "--quiet" | "-q" => {}
                n => match n.parse::<usize>() {
                    Ok(n) if n > 0 => script.proposals = n,
                    _ => {
                        return Err(format!(
                            "unknown argument {n:?} (usage: [N] [--kill-every SECONDS] [--runs R] [--racers K])"
                        ));
                    }
                },
            }
        }
        Ok(script)
    }
}

/// The servers every process shares, dropped (killed) at the end.
struct Peers {
    postgres: postgres::PostgresServer,
    temporal: TemporalDevServer,
    broker: kafka::TansuBroker,
    twin: falkordb::FalkorServer,
    /// The OTLP receiver every process exports its spans to.
    traces: common::otlp::Receiver,
    _temporal_dir: tempfile::TempDir,
}

impl Peers {
    /// Each server, or `None` (the skip reason printed) when one is not installed.
    fn start() -> Option<Self> {
        let cli = peers::require(peers::Peer::Temporal)?;
        let postgres = postgres::start_postgres()?;
        let twin = falkordb::start_falkordb()?;
        let broker = kafka::start_tansu()?;
        let temporal_dir = tempfile::tempdir().unwrap();
        let temporal = TemporalDevServer::start(&cli, temporal_dir.path()).unwrap_or_else(|e| panic!("{e}"));
        Some(Self {
            postgres,
            temporal,
            broker,
            twin,
            traces: common::otlp::Receiver::start(),
            _temporal_dir: temporal_dir,
        })
    }
}

/// One `metaforge` server process of the cluster over its own home, restartable in place.
struct Node {
    name: &'static str,
    args: Vec<String>,
    home: tempfile::TempDir,
    vars: Vec<(&'static str, String)>,
    log: PathBuf,
    process: Option<common::Process>,
}

impl Node {
    fn new(name: &'static str, args: &[&str], model: &ScriptedModel, peers: &Peers) -> Self {
        let home = tempfile::tempdir().unwrap();
        let mut vars = model.gateway_env(home.path());
        vars.extend([
            ("METAFORGE_DATABASE_URL", peers.postgres.url.clone()),
            ("METAFORGE_FLOW_ENGINE", "temporal".to_owned()),
            ("TEMPORAL_HOST", peers.temporal.host.clone()),
            ("KAFKA_BOOTSTRAP_SERVERS", peers.broker.bootstrap.clone()),
            ("METAFORGE_TWIN_URL", peers.twin.url.clone()),
            ("RUST_LOG", "info".to_owned()),
        ]);
        vars.extend(common::otlp::exporting(&peers.traces));
        let log = home.path().join(format!("{name}.log"));
        Self {
            name,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            home,
            vars,
            log,
            process: None,
        }
    }

    /// Starts the process; returns once its banner is printed (a server then accepts
    /// connections on the address its arguments bind).
    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let mut command = common::server_command(&args, self.home.path());
        command
            .envs(self.vars.iter().map(|(k, v)| (*k, v.as_str())))
            .stderr(Stdio::from(log));
        let mut process = common::spawn(&mut command, self.name);
        let mut banner = String::new();
        BufReader::new(process.child_mut().stdout.take().unwrap())
            .read_line(&mut banner)
            .unwrap();
        assert!(
            banner.contains("metaforge"),
            "{} did not start (banner {banner:?}):\n{}",
            self.name,
            run_support::log_tail(&self.log, 30)
        );
        self.process = Some(process);
    }

    /// SIGKILLs the process group.
    fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }
}

/// A gateway of the cluster on a fixed loopback address (a restart binds it again, as a
/// gateway behind a load balancer would come back).
fn gateway(name: &'static str, model: &ScriptedModel, peers: &Peers) -> (Node, String) {
    let addr = format!("127.0.0.1:{}", net::unused_port());
    let mut node = Node::new(name, &["gateway", "--bind", &addr], model, peers);
    node.start();
    common::wait_until_listening(addr.as_str(), name);
    (node, addr)
}

/// The two gateways' addresses: a request goes to the one its caller prefers and, when that one
/// cannot be reached (killed), to the other — what a load balancer does.
#[derive(Clone)]
struct Front {
    gateways: [String; 2],
}

impl Front {
    fn call(
        &self,
        prefer: usize,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), String> {
        exchange(&self.gateways[prefer % 2], method, path, body)
            .or_else(|_| exchange(&self.gateways[(prefer + 1) % 2], method, path, body))
    }

    /// `call`, failing the run when neither gateway answers.
    fn must(&self, prefer: usize, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.call(prefer, method, path, body)
            .unwrap_or_else(|e| panic!("{method} {path}: neither gateway answered: {e}"))
    }
}

/// What the run found that breaks a promise.
#[derive(Default)]
struct Findings(Mutex<Vec<String>>);

impl Findings {
    fn broken(&self, what: impl Into<String>) {
        let what = what.into();
        println!("  BROKEN: {what}");
        self.0.lock().unwrap().push(what);
    }

    fn check(&self, holds: bool, what: impl FnOnce() -> String) {
        if !holds {
            self.broken(what());
        }
    }
}

/// The proposal body of the README walk-through, with its rationale.
fn proposal(rationale: &str) -> Value {
    json!({
        "template": "mech_v1",
        "operations": [{"op": "add_deliverable", "phase": "design", "value": "test_plan",
                        "rationale": rationale}],
        "manufacturingContext": {"route": "undecided"},
        "targetMaturity": "physically_validated",
        "loadsAndUse": "20 kg shelf load",
        "caller": {"client": "cluster"}
    })
}

/// Waits up to `within` for `probe` to find something.
fn wait_for<T>(what: &str, within: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(Instant::now() < deadline, "waited {within:?} for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Starts a run through `front` (503 until the worker's pollers are seen); its id.
fn start_run(front: &Front, prefer: usize, body: &Value) -> String {
    let run = wait_for("a run started on Temporal", Duration::from_secs(90), || {
        let (status, run) = front.call(prefer, "POST", "/v1/runs", Some(body)).ok()?;
        (status == 201).then_some(run)
    });
    assert_eq!(run["flow_engine"], "temporal", "{run}");
    run["id"].as_str().unwrap().to_owned()
}

/// The status a run's record reads, from either gateway.
fn run_status(front: &Front, prefer: usize, run: &str) -> Option<String> {
    let (status, record) = front.call(prefer, "GET", &format!("/v1/runs/{run}"), None).ok()?;
    (status == 200).then(|| record["status"].as_str().unwrap_or_default().to_owned())
}

/// Answers each open gate of `runs` with approve, alternating the gateways, until every run
/// ended or `within` passed; the gates answered.
fn drive_gates(front: &Front, runs: &[String], within: Duration) -> usize {
    let deadline = Instant::now() + within;
    let mut answered = 0;
    let mut turn = 0;
    let mut open: BTreeSet<&String> = runs.iter().collect();
    while !open.is_empty() && Instant::now() < deadline {
        open.retain(|run| {
            turn += 1;
            if run_status(front, turn, run)
                .is_some_and(|s| matches!(s.as_str(), "completed" | "failed" | "canceled"))
            {
                return false;
            }
            let gateway = &front.gateways[turn % 2];
            if let Ok(Some(gate)) = open_gate(gateway, run)
                && gate.approvable
                && front
                    .call(
                        turn + 1,
                        "POST",
                        &format!("/v1/runs/{run}/approval"),
                        Some(&approve_body(&gate)),
                    )
                    .is_ok_and(|(status, _)| status == 200)
            {
                answered += 1;
            }
            true
        });
        std::thread::sleep(Duration::from_millis(300));
    }
    answered
}

/// The trace the walk-through's run is started in: a caller's W3C context on `POST /v1/runs`.
const WALK_TRACE: &str = "5b8efff798038103d269b633813fc60c";

/// Starts a run on `gateway` inside the caller's trace [`WALK_TRACE`]; its id.
fn start_traced_run(gateway: &str, body: &Value) -> String {
    let traceparent = format!("00-{WALK_TRACE}-eee19b7ec3c1b174-01");
    let run = wait_for(
        "a traced run started on Temporal",
        Duration::from_secs(90),
        || {
            let (status, text) = common::http_raw(
                gateway,
                "POST",
                "/v1/runs",
                Some(body),
                &[("traceparent", traceparent.as_str())],
            );
            (status == 201)
                .then(|| serde_json::from_str::<Value>(&text).ok())
                .flatten()
        },
    );
    assert_eq!(run["flow_engine"], "temporal", "{run}");
    run["id"].as_str().unwrap().to_owned()
}

/// Step 1: the README walk-through, each step on the other gateway than the last; the id of
/// its run (started in the trace [`WALK_TRACE`]).
fn walk_through(
    front: &Front,
    sidecar: &str,
    runtime: &tokio::runtime::Runtime,
    findings: &Findings,
) -> String {
    println!("1. the README walk-through, alternating gateways A and B");
    let (status, catalogue) = front.must(0, "GET", "/v1/design-flows", None);
    let flows = catalogue["flows"].as_array().map_or(0, Vec::len);
    findings.check(status == 200 && flows > 0, || {
        format!("catalogue on A: {status} {catalogue}")
    });
    println!("   A  GET  /v1/design-flows: {flows} flows");

    let shown = common::metaforge()
        .args(["flow", "show", "mech_v1", "--json"])
        .output()
        .unwrap();
    let flow: Value = serde_json::from_slice(&shown.stdout).unwrap_or(Value::Null);
    let (status, report) = front.must(
        1,
        "POST",
        "/v1/design-flows/validate",
        Some(&json!({"flow": flow})),
    );
    findings.check(status == 200 && report["valid"] == true, || {
        format!("validate on B: {status} {report}")
    });
    println!("   B  POST /v1/design-flows/validate: valid {}", report["valid"]);

    let (status, proposed) = front.must(
        0,
        "POST",
        "/v1/design-flows/propose",
        Some(&proposal("bench test before release")),
    );
    assert_eq!(status, 201, "propose on A: {proposed}");
    let approval = proposed["approvalId"].as_str().unwrap().to_owned();
    let version = proposed["versionId"].as_str().unwrap().to_owned();
    println!(
        "   A  POST /v1/design-flows/propose: {} ({approval})",
        proposed["status"]
    );

    let (_, queue) = front.must(1, "GET", "/v1/approvals", None);
    let queued = queue["approvals"]
        .as_array()
        .is_some_and(|a| a.iter().any(|h| h["id"] == approval.as_str()));
    findings.check(queued, || format!("B's queue lacks the hold A parked: {queue}"));
    println!("   B  GET  /v1/approvals: the hold A parked is there");

    let (status, decided) = front.must(
        1,
        "POST",
        &format!("/v1/approvals/{approval}/decision"),
        Some(&json!({"decision": "approve"})),
    );
    findings.check(status == 200 && decided["approver"] == "ops", || {
        format!("approve on B: {status} {decided}")
    });
    println!(
        "   B  POST /v1/approvals/{{id}}/decision: {} by {}",
        decided["status"], decided["approver"]
    );

    let (_, versions) = front.must(0, "GET", "/v1/design-flows/versions?template_id=mech_v1", None);
    let frozen = versions["versions"].as_array().and_then(|v| {
        v.iter()
            .find(|v| v["id"] == version.as_str())
            .map(|v| (v["status"].clone(), v["content_hash"].clone()))
    });
    findings.check(
        frozen
            .as_ref()
            .is_some_and(|(status, hash)| status == "approved" && hash.is_string()),
        || format!("the version on A is not approved and hashed: {versions}"),
    );
    println!("   A  GET  /v1/design-flows/versions: {frozen:?}");

    let run = start_traced_run(&front.gateways[1], &json!({"flow_version_id": version}));
    println!("   B  POST /v1/runs (traceparent of trace {WALK_TRACE}): {run} on Temporal");
    let gates = drive_gates(front, std::slice::from_ref(&run), Duration::from_secs(240));
    let status = run_status(front, 0, &run).unwrap_or_default();
    findings.check(status == "completed", || {
        format!("the walk-through run {run} ended {status}")
    });
    println!("   A/B answered {gates} gates alternately; A GET /v1/runs/{{id}}: {status}");
    let merged = merged_into_main(&front.gateways[1], &run).unwrap_or(false);
    findings.check(merged, || {
        format!("run {run}'s deliverables are not on the twin's main")
    });
    println!("   B  GET  /v1/twin/nodes?branch=main: the run's deliverables merged ({merged})");

    let client = common::mcp_client(sidecar.to_owned());
    let proposed = runtime
        .block_on(client.call_tool("flow.propose", common::proposal_arguments()))
        .unwrap();
    let held = proposed
        .structured
        .as_ref()
        .and_then(|p| p["approval_id"].as_str())
        .unwrap_or_default()
        .to_owned();
    let (_, queue) = front.must(1, "GET", "/v1/approvals", None);
    let seen = queue["approvals"]
        .as_array()
        .is_some_and(|a| a.iter().any(|h| h["id"] == held.as_str()));
    findings.check(!held.is_empty() && seen, || {
        format!(
            "the sidecar's proposal {held:?} is not in B's queue: {}",
            proposed.text()
        )
    });
    let (status, _) = front.must(
        0,
        "POST",
        &format!("/v1/approvals/{held}/decision"),
        Some(&json!({"decision": "approve"})),
    );
    findings.check(status == 200, || {
        format!("approving the sidecar's proposal on A: {status}")
    });
    println!("   sidecar flow.propose (remote, via A): held {held}, in B's queue, approved on A");
    runtime.block_on(client.close());
    run
}

/// What the event log holds of the runs: notices read back, expected, and read twice.
struct EventLog {
    read: usize,
    expected: usize,
    twice: usize,
    /// The `traceparent`s of the walk-through run's notices.
    walk_traceparents: Vec<Option<String>>,
}

/// Reads every `metaforge.run.*` topic with fresh consumer groups and holds each run's notices
/// against its event stream on `gateway` (the workflow's transitions): each once, none twice.
fn audit_event_log(
    runs: &[String],
    walk_run: &str,
    gateway: &str,
    bootstrap: &str,
    runtime: &tokio::runtime::Runtime,
    findings: &Findings,
) -> EventLog {
    use metaforge_ports::EventBus as _;
    let events = runtime.block_on(async {
        let bus = metaforge_adapters_store::KafkaEventBus::connect(bootstrap)
            .await
            .unwrap();
        let reads = metaforge_app::runs::RunNoticeKind::ALL.map(|kind| {
            let bus = &bus;
            async move {
                bus.replay(
                    kind.as_str(),
                    &format!("cluster-audit-{}", kind.as_str()),
                    100_000,
                    5_000,
                )
                .await
                .unwrap_or_else(|e| panic!("replaying {}: {e}", kind.as_str()))
            }
        });
        futures::future::join_all(reads).await
    });
    let mut log: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut walk_traceparents = Vec::new();
    for event in events.into_iter().flatten() {
        let key = format!("{}.{}", event.payload["seq"], event.payload["index"]);
        if event.trace_id == walk_run {
            walk_traceparents.push(event.traceparent.clone());
        }
        log.entry(event.trace_id).or_default().push(key);
    }
    let (mut read, mut expected, mut twice) = (0, 0, 0);
    for run in runs {
        let streamed: BTreeSet<String> = transition_ids(gateway, run).into_iter().collect();
        let logged = log.remove(run).unwrap_or_default();
        let distinct: BTreeSet<String> = logged.iter().cloned().collect();
        twice += logged.len() - distinct.len();
        findings.check(logged.len() == distinct.len(), || {
            format!("run {run}: a notice is in the event log twice")
        });
        findings.check(distinct.is_subset(&streamed), || {
            format!(
                "run {run}: the event log holds notices its stream lacks: {:?}",
                distinct.difference(&streamed).collect::<Vec<_>>()
            )
        });
        if run == walk_run {
            findings.check(distinct == streamed, || {
                format!(
                    "the walk-through run {run} (no kill) is missing notices in the event log: {:?}",
                    streamed.difference(&distinct).collect::<Vec<_>>()
                )
            });
        }
        read += distinct.len();
        expected += streamed.len();
    }
    EventLog {
        read,
        expected,
        twice,
        walk_traceparents,
    }
}

/// What the trace audit found.
struct TraceAudit {
    /// The span names found in the walk-through's trace, by service.
    by_service: BTreeMap<String, BTreeSet<String>>,
    /// The run branch's commits that keep the trace, of all its commits.
    traced_commits: (usize, usize),
}

/// Holds the spans the processes exported against the walk-through's trace: the gateway's
/// request, the worker's phase activities, the event log's producer spans, and a sidecar tool
/// call made in the same trace — and the run's twin commits read through `gateway`.
fn audit_trace(
    receiver: &common::otlp::Receiver,
    run: &str,
    sidecar: &str,
    gateway: &str,
    findings: &Findings,
) -> TraceAudit {
    let answer = common::otlp::call_tool(
        sidecar,
        "run.get",
        json!({"run_id": run}),
        json!({"traceparent": format!("00-{WALK_TRACE}-0020000000000001-01")}),
    );
    findings.check(answer["result"].is_object(), || {
        format!("run.get through the sidecar answered {answer}")
    });
    let wanted: [(&str, &str, String); 4] = [
        (
            "metaforge-gateway",
            "the gateway's span of the request that started the run",
            "POST".to_owned(),
        ),
        (
            "metaforge-worker",
            "the worker's phase activity",
            format!("run_phase {run}"),
        ),
        (
            "metaforge-gateway",
            "the producer span of the run's completion on the event log",
            "publish metaforge.run.completed".to_owned(),
        ),
        (
            "metaforge-mcp",
            "the sidecar's tool call",
            "tools/call run.get".to_owned(),
        ),
    ];
    for (service, what, name) in &wanted {
        let found = std::iter::repeat_with(|| {
            let spans = receiver.spans.lock().unwrap();
            let hit = spans
                .iter()
                .any(|(s, trace, n)| s == service && trace == WALK_TRACE && n.starts_with(name.as_str()));
            drop(spans);
            hit || {
                std::thread::sleep(Duration::from_millis(200));
                false
            }
        })
        .take(100)
        .any(|hit| hit);
        findings.check(found, || {
            format!("no span of {service} ({what}, '{name}…') in the walk-through's trace {WALK_TRACE}")
        });
    }
    // The run's twin commits (on FalkorDB, made by the worker's phases) keep its trace.
    let branch = format!("run/{run}");
    let commits = exchange(gateway, "GET", &format!("/v1/twin/log?branch={branch}"), None)
        .ok()
        .filter(|(status, _)| *status == 200)
        .and_then(|(_, body)| body["commits"].as_array().cloned())
        .unwrap_or_default();
    let traced_commits = commits
        .iter()
        .filter(|c| c["traceparent"].as_str().and_then(|tp| tp.split('-').nth(1)) == Some(WALK_TRACE))
        .count();
    findings.check(!commits.is_empty() && traced_commits == commits.len(), || {
        format!(
            "{traced_commits} of the {} commits on {branch} keep the walk-through's trace",
            commits.len()
        )
    });
    let mut by_service: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (service, trace, name) in receiver.spans.lock().unwrap().iter() {
        if trace == WALK_TRACE {
            by_service
                .entry(service.clone())
                .or_default()
                .insert(name.clone());
        }
    }
    TraceAudit {
        by_service,
        traced_commits: (traced_commits, commits.len()),
    }
}

/// One proposal of the load: its hold and what each raced decision was answered.
struct Raced {
    approval: String,
    version: String,
    /// The decisions answered 200: `approve` or `reject`.
    winners: Vec<&'static str>,
    conflicts: usize,
    unanswered: usize,
}

/// What the load threads saw.
#[derive(Default)]
struct Load {
    raced: Mutex<Vec<Raced>>,
    proposals_unacknowledged: AtomicUsize,
}

/// One client thread: proposals `n` of `script.proposals` with `n % clients == client`, each on
/// the gateway its number picks, its hold raced by `script.racers` decisions sent at once,
/// alternating the gateways.
fn load_client(front: &Front, script: &Script, client: usize, load: &Load) {
    for n in (client..script.proposals).step_by(script.clients) {
        let Ok((201, proposed)) = front.call(
            n,
            "POST",
            "/v1/design-flows/propose",
            Some(&proposal(&format!("load {n}"))),
        ) else {
            load.proposals_unacknowledged.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let approval = proposed["approvalId"].as_str().unwrap_or_default().to_owned();
        let version = proposed["versionId"].as_str().unwrap_or_default().to_owned();
        let path = format!("/v1/approvals/{approval}/decision");
        let decisions: Vec<&'static str> = (0..script.racers)
            .map(|k| if k % 3 == 0 { "reject" } else { "approve" })
            .collect();
        // Every request is written before any answer is read: the decisions are in flight at
        // both gateways together.
        let sent: Vec<_> = decisions
            .iter()
            .enumerate()
            .map(|(k, decision)| {
                send(
                    &front.gateways[(n + k) % 2],
                    "POST",
                    &path,
                    Some(&json!({"decision": decision})),
                )
            })
            .collect();
        let mut raced = Raced {
            approval,
            version,
            winners: Vec::new(),
            conflicts: 0,
            unanswered: 0,
        };
        for (decision, sent) in decisions.iter().zip(sent) {
            match sent.and_then(run_support::Sent::receive) {
                Ok((200, _)) => raced.winners.push(decision),
                Ok((409, _)) => raced.conflicts += 1,
                Ok(_) | Err(_) => raced.unanswered += 1,
            }
        }
        load.raced.lock().unwrap().push(raced);
    }
}

/// The ledger's holds as a gateway lists them (`status=all`), by id, with how many times each id
/// appears.
fn ledger_holds(front: &Front, gateway: usize) -> (BTreeMap<String, Value>, usize) {
    let (status, list) = exchange(&front.gateways[gateway], "GET", "/v1/approvals?status=all", None)
        .unwrap_or_else(|e| panic!("gateway {gateway} does not answer the approvals list: {e}"));
    assert_eq!(status, 200, "{list}");
    let rows = list["approvals"].as_array().cloned().unwrap_or_default();
    let total = rows.len();
    let by_id = rows
        .into_iter()
        .map(|row| (row["id"].as_str().unwrap_or_default().to_owned(), row))
        .collect();
    (by_id, total)
}

/// One raw HTTP/1.1 exchange with `addr` (the console speaks cookies and forms): the whole
/// answer, head and body; empty when the gateway cannot be reached.
fn raw_exchange(addr: &str, head: &str, body: &str) -> String {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let request = format!(
        "{head}\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut answer = String::new();
    if stream.write_all(request.as_bytes()).is_ok() {
        let _ = stream.read_to_string(&mut answer);
    }
    answer
}

/// The value after `start` up to `end` in `text`.
fn between<'a>(text: &'a str, start: &str, end: char) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    text[from..].split(end).next()
}

/// The console's approvals queue as a person signed in on `gateway` sees it (`/approvals/queue`,
/// the fragment the approvals page shows), with the session's CSRF token taken out; `Err` says
/// which step failed.
fn console_queue(gateway: &str) -> Result<String, String> {
    let form = raw_exchange(gateway, "GET /sign-in HTTP/1.1", "");
    let cookie = between(&form, "mf_session=", ';').ok_or("GET /sign-in set no session cookie")?;
    let csrf = between(&form, "name=\"csrf\" value=\"", '"').ok_or("the sign-in form has no CSRF field")?;
    let body = format!("csrf={csrf}&key={}", common::KEY);
    let signed = raw_exchange(
        gateway,
        &format!(
            "POST /sign-in HTTP/1.1\r\nCookie: mf_session={cookie}\r\nContent-Type: application/x-www-form-urlencoded"
        ),
        &body,
    );
    let session = between(&signed, "mf_session=", ';').ok_or_else(|| {
        format!(
            "POST /sign-in gave no session: {}",
            signed.lines().next().unwrap_or_default()
        )
    })?;
    let page = raw_exchange(
        gateway,
        &format!("GET /approvals/queue HTTP/1.1\r\nCookie: mf_session={session}"),
        "",
    );
    let (head, html) = page
        .split_once("\r\n\r\n")
        .ok_or("no answer to /approvals/queue")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!(
            "/approvals/queue answered {}",
            head.lines().next().unwrap_or_default()
        ));
    }
    let csrf = between(html, "name=\"csrf\" value=\"", '"').unwrap_or_default();
    Ok(if csrf.is_empty() {
        html.to_owned()
    } else {
        html.replace(csrf, "CSRF")
    })
}

/// The ids of a run's transitions as its event stream gives them from the start.
fn transition_ids(gateway: &str, run: &str) -> Vec<String> {
    let (status, body) = common::http_raw(gateway, "GET", &format!("/v1/runs/{run}/events"), None, &[]);
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter_map(|line| line.strip_prefix("id: ").or_else(|| line.strip_prefix("id:")))
        .map(|id| id.trim().to_owned())
        .collect()
}

fn main() -> ExitCode {
    // A failed promise panics wherever it is found, often on one of the load's scoped threads,
    // where the scope would then wait forever on the others: end the script at the first panic
    // instead (the gate running it kills every server it started).
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::exit(101);
    }));
    let script = match Script::from_args() {
        Ok(script) => script,
        Err(e) => {
            eprintln!("cluster: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(peers) = Peers::start() else {
        println!("cluster: skipped (a peer above is not installed; `cargo xtask setup` installs them)");
        return ExitCode::SUCCESS;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let model = runtime.block_on(ScriptedModel::start());
    let started = Instant::now();

    let (gateway_a, a) = gateway("gateway-a", &model, &peers);
    let (gateway_b, b) = gateway("gateway-b", &model, &peers);
    let mut worker = Node::new("worker", &["worker"], &model, &peers);
    worker.start();
    let sidecar_home = tempfile::tempdir().unwrap();
    let sidecar_log = sidecar_home.path().join("sidecar.log");
    let (_sidecar, sidecar) = common::start_sidecar(&sidecar_home.path().join("home"), |command| {
        command
            .env("METAFORGE_GATEWAY_URL", format!("http://{a}"))
            .env("METAFORGE_GATEWAY_API_KEY", format!("ops:{}", common::KEY))
            .env("RUST_LOG", "info,rmcp=warn")
            .envs(common::otlp::exporting(&peers.traces))
            .stderr(std::fs::File::create(&sidecar_log).unwrap());
    });
    let front = Front {
        gateways: [a.clone(), b.clone()],
    };
    println!(
        "cluster on loopback: PostgreSQL {}, Temporal {}, tansu {}, FalkorDB {}; gateways A {a} and B {b}, one worker, sidecar {sidecar} (remote, via A)",
        peers.postgres.url.split('@').next_back().unwrap_or("?"),
        peers.temporal.host,
        peers.broker.bootstrap,
        peers.twin.url
    );
    let findings = Findings::default();

    let walk_run = walk_through(&front, &sidecar, &runtime, &findings);

    println!(
        "2. load and faults: {} proposals × {} raced decisions over A and B; B SIGKILLed every {}s; {} runs through a worker kill",
        script.proposals,
        script.racers,
        script.kill_every.as_secs(),
        script.runs
    );
    // Every run's first feasibility attempt hangs in its planner call, so the worker is killed
    // with every run mid-phase.
    model.stall_first_planner_call("feasibility", Duration::from_secs(600));
    let runs: Vec<String> = (0..script.runs)
        .map(|n| start_run(&front, n, &json!({"template_id": "design_v1"})))
        .collect();
    let load = Load::default();
    let loading = AtomicBool::new(true);
    let kills = AtomicUsize::new(0);
    let gateway_b = Mutex::new(gateway_b);
    let (load_took, worker_kill) = std::thread::scope(|scope| {
        let killer = scope.spawn(|| {
            let mut next = Instant::now() + script.kill_every;
            while loading.load(Ordering::Relaxed) {
                if Instant::now() >= next {
                    let mut node = gateway_b.lock().unwrap();
                    node.kill();
                    node.start();
                    common::wait_until_listening(b.as_str(), "gateway B after its kill");
                    let n = kills.fetch_add(1, Ordering::Relaxed) + 1;
                    println!(
                        "   SIGKILLed gateway B and started it again (kill {n}, {:?} in)",
                        started.elapsed()
                    );
                    next = Instant::now() + script.kill_every;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let load_started = Instant::now();
        let clients: Vec<_> = (0..script.clients)
            .map(|client| {
                let (front, script, load) = (&front, &script, &load);
                scope.spawn(move || load_client(front, script, client, load))
            })
            .collect();
        let gates = scope.spawn(|| drive_gates(&front, &runs, Duration::from_secs(600)));

        // The worker kill: once every run's first feasibility attempt is in flight.
        let keys: Vec<String> = runs.iter().map(|run| format!("{run}:feasibility:1")).collect();
        wait_for(
            "every run's feasibility phase in flight",
            Duration::from_secs(120),
            || {
                let calls = model.calls();
                keys.iter()
                    .all(|k| calls.planner_by_key.contains_key(k))
                    .then_some(())
            },
        );
        worker.kill();
        println!(
            "   SIGKILLed the worker with {} runs mid-phase; starting a new one",
            runs.len()
        );
        worker.start();

        for client in clients {
            client.join().unwrap();
        }
        let load_took = load_started.elapsed();
        println!("   load sent in {load_took:.1?}");
        let gates = gates.join().unwrap();
        loading.store(false, Ordering::Relaxed);
        killer.join().unwrap();
        (load_took, (keys, gates))
    });
    let gateway_b = gateway_b.into_inner().unwrap();

    println!("3. the audit");
    let raced = load.raced.into_inner().unwrap();
    let unacknowledged = load.proposals_unacknowledged.load(Ordering::Relaxed);
    let (holds_a, rows_a) = ledger_holds(&front, 0);
    let (holds_b, rows_b) = ledger_holds(&front, 1);
    findings.check(holds_a == holds_b, || {
        "gateways A and B list different holds".to_owned()
    });
    findings.check(rows_a == holds_a.len() && rows_b == holds_b.len(), || {
        format!("an id is listed twice: {rows_a} rows for {} ids", holds_a.len())
    });
    // Holds left for a person, parked through both gateways after the last kill: the queue and
    // the console page show them on either gateway.
    let waiting: BTreeSet<String> = (0..4)
        .map(|n| {
            let (status, proposed) = front.must(
                n,
                "POST",
                "/v1/design-flows/propose",
                Some(&proposal("left for a person")),
            );
            assert_eq!(status, 201, "{proposed}");
            proposed["approvalId"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    let (_, pending_a) = front.must(0, "GET", "/v1/approvals", None);
    let (_, pending_b) = exchange(&b, "GET", "/v1/approvals", None).unwrap();
    findings.check(pending_a == pending_b, || {
        "the pending queues of A and B differ".to_owned()
    });
    // The approvals page a person signed in on either gateway sees.
    let (page_a, page_b) = (console_queue(&a), console_queue(&b));
    let pages_equal = matches!((&page_a, &page_b), (Ok(x), Ok(y)) if x == y && waiting.iter().all(|id| x.contains(id.as_str())));
    let pending_ids: BTreeSet<String> = pending_a["approvals"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["id"].as_str().map(str::to_owned))
        .collect();
    findings.check(pending_ids == waiting, || {
        format!("the pending queue is {pending_ids:?}, not the holds left for a person {waiting:?}")
    });
    findings.check(pages_equal, || {
        format!("the console's approvals queue differs on A and B: {page_a:?} / {page_b:?}")
    });
    let (_, versions) = front.must(0, "GET", "/v1/design-flows/versions?template_id=mech_v1", None);
    let version_status: BTreeMap<String, String> = versions["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|v| {
            (
                v["id"].as_str().unwrap_or_default().to_owned(),
                v["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();

    let mut found = 0;
    let (mut one_winner, mut unacknowledged_winner, mut orphaned) = (0, 0, 0);
    let (mut decisions_won, mut conflicts, mut unanswered) = (0, 0, 0);
    for hold in &raced {
        decisions_won += hold.winners.len();
        conflicts += hold.conflicts;
        unanswered += hold.unanswered;
        // Each hold read back by its id from both gateways (the list shows the newest 500).
        let path = format!("/v1/approvals/{}", hold.approval);
        let from_a = exchange(&a, "GET", &path, None);
        let from_b = exchange(&b, "GET", &path, None);
        let row = match (from_a, from_b) {
            (Ok((200, row)), Ok((200, row_b))) if row == row_b => row,
            (from_a, from_b) => {
                findings.broken(format!(
                    "acknowledged proposal {} is not read back alike: A {from_a:?}, B {from_b:?}",
                    hold.approval
                ));
                continue;
            }
        };
        found += 1;
        let status = row["status"].as_str().unwrap_or_default();
        findings.check(hold.winners.len() <= 1, || {
            format!("hold {} has {} winners", hold.approval, hold.winners.len())
        });
        match (hold.winners.first(), status) {
            (Some(&"approve"), "approved") | (Some(&"reject"), "rejected") => one_winner += 1,
            (None, "approved" | "rejected") => unacknowledged_winner += 1,
            (None, "failed") => orphaned += 1,
            (winner, status) => findings.broken(format!(
                "hold {}: acknowledged winner {winner:?}, ledger {status}",
                hold.approval
            )),
        }
        // A decision is carried to its version; an orphaned hold never approves one.
        let version = version_status.get(&hold.version).map_or("absent", String::as_str);
        let carried = match status {
            "approved" => version == "approved",
            "rejected" => version == "rejected",
            _ => matches!(version, "proposed" | "rejected"),
        };
        findings.check(carried, || {
            format!(
                "version {} of hold {} ({status}) is {version}",
                hold.version, hold.approval
            )
        });
    }

    let (keys, gates) = worker_kill;
    let calls = model.calls();
    let (mut completed_once, mut merged) = (0, 0);
    for (run, key) in runs.iter().zip(&keys) {
        let (_, record_a) = front.must(0, "GET", &format!("/v1/runs/{run}"), None);
        let (_, record_b) = exchange(&b, "GET", &format!("/v1/runs/{run}"), None).unwrap();
        let completions = record_a["history"]
            .as_array()
            .map_or(0, |h| h.iter().filter(|e| e["status"] == "completed").count());
        findings.check(record_a == record_b, || {
            format!("run {run} reads differently on A and B")
        });
        findings.check(record_a["status"] == "completed" && completions == 1, || {
            format!("run {run}: {} with {completions} completions", record_a["status"])
        });
        if record_a["status"] == "completed" && completions == 1 {
            completed_once += 1;
        }
        let ids = transition_ids(&a, run);
        let distinct: BTreeSet<&String> = ids.iter().collect();
        findings.check(!ids.is_empty() && distinct.len() == ids.len(), || {
            format!("run {run}'s transitions repeat or are missing: {ids:?}")
        });
        findings.check(calls.planner_by_key.get(key) == Some(&2), || {
            format!(
                "the killed attempt {key} ran {:?} times, not twice",
                calls.planner_by_key.get(key)
            )
        });
        if merged_into_main(&a, run).unwrap_or(false) {
            merged += 1;
        }
    }
    // Runs in flight together branch from one `main`; the twin merges by fast-forward only, so
    // the first to complete merges and the others are refused ("main moved") for a person to
    // merge by hand.
    findings.check(merged >= 1, || {
        "no run of the load was merged into the twin's main".to_owned()
    });

    let all_runs: Vec<String> = std::iter::once(walk_run.clone())
        .chain(runs.iter().cloned())
        .collect();
    let event_log = audit_event_log(
        &all_runs,
        &walk_run,
        &a,
        &peers.broker.bootstrap,
        &runtime,
        &findings,
    );
    let walk_traced = event_log
        .walk_traceparents
        .iter()
        .filter(|tp| {
            tp.as_deref()
                .is_some_and(|tp| tp.split('-').nth(1) == Some(WALK_TRACE))
        })
        .count();
    findings.check(
        !event_log.walk_traceparents.is_empty() && walk_traced == event_log.walk_traceparents.len(),
        || {
            format!(
                "the walk-through run's notices on the event log carry its trace {walk_traced} of {} times",
                event_log.walk_traceparents.len()
            )
        },
    );
    let trace = audit_trace(&peers.traces, &walk_run, &sidecar, &a, &findings);

    let kills = kills.load(Ordering::Relaxed);
    findings.check(kills > 0, || {
        format!(
            "the load took {load_took:.1?}, under one kill period ({}s): no gateway kill was survived",
            script.kill_every.as_secs()
        )
    });
    println!();
    println!("| cluster run | figure |");
    println!("|---|---|");
    println!("| proposals sent | {} |", script.proposals);
    println!("| proposals acknowledged (201) | {} |", raced.len());
    println!(
        "| acknowledged proposals read back alike from A and B | {found} of {} |",
        raced.len()
    );
    println!("| proposals unanswered (gateway killed mid-request) | {unacknowledged} |");
    println!(
        "| decisions raced | {} ({} per hold) |",
        raced.len() * script.racers,
        script.racers
    );
    println!("| decisions answered 200 / 409 / unanswered | {decisions_won} / {conflicts} / {unanswered} |");
    println!("| holds with one acknowledged winner, recorded as decided | {one_winner} |");
    println!("| holds decided by a request whose gateway died before answering | {unacknowledged_winner} |");
    println!("| holds orphaned (their gateway killed before any decision) | {orphaned} |");
    println!(
        "| holds with more than one winner | {} |",
        raced.iter().filter(|h| h.winners.len() > 1).count()
    );
    println!(
        "| the console's approvals queue (signed in on each), the same on A and B, showing the holds left pending | {} ({} pending) |",
        pages_equal,
        pending_a["approvals"].as_array().map_or(0, Vec::len)
    );
    println!(
        "| newest holds listed on A / B (status=all, at most 500), equal, no id twice | {rows_a} / {rows_b}, {} |",
        holds_a == holds_b
    );
    println!(
        "| gateway B SIGKILLs survived | {kills} (every {}s; load took {load_took:.1?}) |",
        script.kill_every.as_secs()
    );
    println!(
        "| worker SIGKILLs mid-phase | 1 ({} runs in flight) |",
        runs.len()
    );
    println!(
        "| runs completed exactly once | {completed_once} of {} ({gates} gates answered across A/B) |",
        runs.len()
    );
    println!(
        "| runs merged into the twin's main (fast-forward; the rest refused: main moved) | {merged} of {} |",
        runs.len()
    );
    println!(
        "| run notices on the Kafka log: read back / in the runs' streams / read twice | {} / {} / {} ({} runs) |",
        event_log.read,
        event_log.expected,
        event_log.twice,
        all_runs.len()
    );
    println!(
        "| the walk-through run's notices carrying its trace id on Kafka | {walk_traced} of {} |",
        event_log.walk_traceparents.len()
    );
    println!(
        "| the walk-through run's twin commits (FalkorDB) keeping its trace | {} of {} |",
        trace.traced_commits.0, trace.traced_commits.1
    );
    for (service, names) in &trace.by_service {
        let shown: Vec<&str> = names.iter().map(String::as_str).take(6).collect();
        println!(
            "| spans of {service} in the walk-through's trace {WALK_TRACE} | {} ({}{}) |",
            names.len(),
            shown.join(", "),
            if names.len() > shown.len() { ", …" } else { "" }
        );
    }
    println!("| the whole run took | {:.1?} |", started.elapsed());
    let broken = findings.0.into_inner().unwrap();
    if !broken.is_empty() {
        for node in [&gateway_a, &gateway_b, &worker] {
            println!(
                "--- {} log ---\n{}",
                node.name,
                run_support::log_tail(&node.log, 20)
            );
        }
    }
    if broken.is_empty() {
        println!("cluster: every promise held");
        ExitCode::SUCCESS
    } else {
        println!("cluster: {} promises broken:", broken.len());
        for what in &broken {
            println!("  - {what}");
        }
        ExitCode::FAILURE
    }
}
