//! One way to open the approval ledger and the flow-version store, for every process that opens
//! them (`metaforge gateway`/`up` and a local `metaforge mcp serve`): the same engine
//! (`METAFORGE_DATABASE_URL`, else SQLite files in private directories), and the same start-up
//! check that reads every stored version back against its hash and serves none that fails it.

use std::path::Path;
use std::sync::Arc;

use metaforge_ports::{ApprovalLedger, Clock, FlowVersionRestore, FlowVersionStore};

use crate::ledger_engine::LedgerEngine;

/// The two ledgers, open and checked.
pub(crate) struct Ledgers {
    /// Every hold and its decision.
    pub(crate) approvals: Arc<dyn ApprovalLedger>,
    /// Every flow version, verified at start-up.
    pub(crate) versions: Arc<dyn FlowVersionStore>,
    /// What the start-up read found: the versions served and those skipped (each logged).
    pub(crate) restored: FlowVersionRestore,
}

/// Opens both ledgers on `engine` (at their paths when it is the files), the approvals naming
/// `process` on every hold it parks; an error names the file or server that could not be opened.
pub(crate) async fn open_ledgers(
    engine: &LedgerEngine,
    approvals_path: &Path,
    versions_path: &Path,
    clock: &Arc<dyn Clock>,
    process: &str,
) -> anyhow::Result<Ledgers> {
    if *engine == LedgerEngine::Files {
        for path in [approvals_path, versions_path] {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                metaforge_adapters_store::paths::create_private_dir(dir)
                    .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
            }
        }
    }
    let approvals = engine.approvals(approvals_path, clock, process).await?;
    let versions = engine.flow_versions(versions_path).await?;
    let restored = versions
        .restore()
        .await
        .map_err(|e| anyhow::anyhow!("flow-version store {}: {e}", engine.describe(versions_path)))?;
    for skipped in &restored.skipped {
        tracing::error!(event = "flow_version_skipped", id = %skipped.id, reason = %skipped.reason, "stored flow version failed its hash check; not served");
    }
    Ok(Ledgers {
        approvals,
        versions,
        restored,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::system::SystemClock;

    #[tokio::test]
    async fn missing_directories_are_created_private_and_both_stores_open_empty() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("nested").join("home");
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let ledgers = open_ledgers(
            &LedgerEngine::Files,
            &home.join("approvals.db"),
            &home.join("versions.db"),
            &clock,
            "test-host/1/test",
        )
        .await
        .unwrap();
        let mode = std::fs::metadata(&home).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "the ledgers' directory is private");
        assert!(ledgers.restored.restored.is_empty() && ledgers.restored.skipped.is_empty());
        assert!(ledgers.versions.list(None).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_ledger_that_cannot_be_opened_is_an_error_naming_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("not-a-dir");
        std::fs::write(&blocker, b"a file where the directory should be").unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let approvals = dir.path().join("approvals.db");
        let Err(message) = open_ledgers(
            &LedgerEngine::Files,
            &approvals,
            &blocker.join("versions.db"),
            &clock,
            "test-host/1/test",
        )
        .await
        else {
            unreachable!("a versions path under a file cannot open")
        };
        assert!(message.to_string().contains("not-a-dir"), "{message}");
    }
}
