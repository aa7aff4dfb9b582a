//! Test helper (feature `crash-harness`): a process that writes to the approval ledger and the
//! flow-version store, printing each record only after its commit returned, so a parent that
//! SIGKILLs it at a random point knows exactly which records must have survived.
//!
//! Modes:
//! - `loop <dir> <tag>`: restore (as a gateway start would), then park, decide and save forever.
//! - `decide <dir> <approval-id> <approver> <go-file>`: wait for `<go-file>`, decide once, print
//!   `won` or `conflict`.
//! - `open <dir> <go-file>`: wait for `<go-file>`, then open (creating and migrating) every SQLite
//!   ledger under `<dir>` as a process starting on a fresh home does, and print `opened`.
#![expect(
    clippy::disallowed_methods,
    reason = "a test helper process configured by its parent through the environment"
)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use metaforge_adapters_store::{
    SqliteApprovalLedger, SqliteClientTaskStore, SqliteFlowVersionStore, SqliteRunLedger, SqliteSessionStore,
    SqliteTwinStore, SqliteUsageStore,
};
use metaforge_ports::sha256_hex;
use metaforge_ports::{
    ApprovalDecision, ApprovalKind, ApprovalLedger, ApprovalRecord, ApprovalStatus, Clock, FlowVersionOrigin,
    FlowVersionRecord, FlowVersionStatus, FlowVersionStore, PortError, PortErrorKind, Timestamp,
};

struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
    }
}

fn line(text: &str) -> Result<(), PortError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|e| PortError::with_source(PortErrorKind::Internal, "stdout", e))
}

async fn run_loop(dir: &Path, tag: &str) -> Result<(), PortError> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let approvals = SqliteApprovalLedger::open(&dir.join("tool_approvals_ledger.db"), clock.clone()).await?;
    let versions = SqliteFlowVersionStore::open(&dir.join("flow_versions.db")).await?;
    approvals
        .restore(&metaforge_ports::GoneParkers::default())
        .await?;
    versions.restore().await?;
    line("ready")?;
    for i in 0u64.. {
        let id = format!("{tag}-{i}");
        let now = clock.now();
        approvals
            .park(ApprovalRecord {
                id: format!("a-{id}"),
                kind: ApprovalKind::ToolCall,
                tool: "twin.commit_geometry".into(),
                arguments: serde_json::json!({"i": i, "tag": tag}),
                caller: "remote".into(),
                status: ApprovalStatus::AwaitingApproval,
                reason: None,
                approver: None,
                flow_version_id: Some(format!("v-{id}")),
                created_at: now,
                decided_at: None,
                deadline: None,
                requested_by: None,
            })
            .await?;
        line(&format!("parked a-{id}"))?;
        let frozen = format!("{{\"i\":{i},\"phases\":[\"design\",\"verify\"],\"tag\":\"{tag}\"}}");
        versions
            .save(FlowVersionRecord {
                id: format!("v-{id}"),
                template_id: "tpl-crash".into(),
                template_version: "1.0.0".into(),
                status: FlowVersionStatus::Proposed,
                content_hash: sha256_hex(&frozen),
                frozen,
                origin: FlowVersionOrigin::Server,
                approval_id: Some(format!("a-{id}")),
                approver: None,
                created_at: now,
                decided_at: None,
            })
            .await?;
        line(&format!("saved v-{id}"))?;
        if i % 2 == 0 {
            approvals
                .decide(
                    &format!("a-{id}"),
                    ApprovalDecision {
                        approve: true,
                        approver: "crash-tester".into(),
                        note: None,
                    },
                )
                .await?;
            line(&format!("approved a-{id}"))?;
        }
    }
    Ok(())
}

async fn decide_once(dir: &Path, id: &str, approver: &str, go: &Path) -> Result<(), PortError> {
    let ledger =
        SqliteApprovalLedger::open(&dir.join("tool_approvals_ledger.db"), Arc::new(SystemClock)).await?;
    line("ready")?;
    while !go.exists() {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let decision = ApprovalDecision {
        approve: true,
        approver: approver.to_owned(),
        note: None,
    };
    match ledger.decide(id, decision).await {
        Ok(_) => line("won"),
        Err(e) if e.kind == PortErrorKind::Conflict => line(&format!("conflict {}", e.message)),
        Err(e) => Err(e),
    }
}

/// Waits for the parent's start signal, so every child opens at the same moment.
async fn wait_for(go: &Path) {
    while !go.exists() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn open_every_ledger(dir: &Path, go: &Path) -> Result<(), PortError> {
    wait_for(go).await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    SqliteApprovalLedger::open(&dir.join("tool_approvals_ledger.db"), clock).await?;
    SqliteFlowVersionStore::open(&dir.join("flow_versions.db")).await?;
    SqliteSessionStore::open(&dir.join("sessions.db")).await?;
    SqliteUsageStore::open(&dir.join("usage.db")).await?;
    SqliteTwinStore::open(&dir.join("twin.db")).await?;
    let runs = Arc::new(SqliteRunLedger::open(&dir.join("runs.db")).await?);
    SqliteClientTaskStore::open(&dir.join("client_tasks.db"), runs).await?;
    line("opened")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["loop", dir, tag] => run_loop(&PathBuf::from(dir), tag).await,
        ["open", dir, go] => open_every_ledger(&PathBuf::from(dir), &PathBuf::from(go)).await,
        ["decide", dir, id, approver, go] => {
            decide_once(&PathBuf::from(dir), id, approver, &PathBuf::from(go)).await
        }
        _ => {
            eprintln!(
                "usage: store_crash_child loop <dir> <tag> | decide <dir> <id> <approver> <go-file> | open <dir> <go-file>"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("store_crash_child: {e}");
            ExitCode::FAILURE
        }
    }
}
