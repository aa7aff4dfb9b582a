//! The `twin.*` tools over [`TwinService`]: commit a work product (`twin.commit_work_product`, and
//! `twin.commit_geometry` as the seed names the CAD commit), record a decision, link nodes (the
//! writes), query nodes, read one node, diff branches (the reads).
//!
//! Where a write goes comes from the caller, never from its arguments: a caller the
//! [`RunScopes`] confirm is working for a run's phase writes to `run/<id>`, its work stamped
//! with the run and phase; anyone else writes to `main`. A `service` or `client_task` caller
//! with no confirmed run phase is refused (those classes write unheld only inside a running run).
//!
//! Gates as the seed declares them: the writes declare `twin_write` and are in the ask tier
//! (`requires_approval`), so the host holds a local, remote or untrusted caller's write for a
//! person in the one approval ledger and runs a run worker's (service, client_task) without a
//! hold; the reads are read-only and never held. Every write's arguments are checked in full —
//! parsed, sized, and against the branch it will write — before the host gates or holds it.

pub mod args;
pub mod read;
pub mod write;

use std::sync::Arc;

use metaforge_app::twin::{RunScopes, TwinError, TwinService, WriteTarget};
use metaforge_ports::{CallerClass, CallerContext, HostCallOutcome, PortError, ToolOutput};
use serde_json::json;

use crate::args::ArgError;
use crate::envelope::{invalid_arguments, not_found, refused};
use crate::host::SidecarTool;

/// What the twin tools share: the twin service and who says which run a caller works for.
#[derive(Clone)]
pub struct SidecarTwin {
    /// The twin's use cases.
    pub service: Arc<TwinService>,
    /// Which run phase a caller works for (confirmed per call).
    pub scopes: Arc<dyn RunScopes>,
}

impl SidecarTwin {
    /// The twin tools' shared part.
    pub fn new(service: Arc<TwinService>, scopes: Arc<dyn RunScopes>) -> Self {
        Self { service, scopes }
    }

    /// Every twin tool: the four writes (two names for the work-product commit) and the three
    /// reads.
    pub fn tools(&self) -> Vec<Arc<dyn SidecarTool>> {
        vec![
            Arc::new(write::CommitWorkProduct::work_product(self.clone())),
            Arc::new(write::CommitWorkProduct::geometry(self.clone())),
            Arc::new(write::RecordDecision::new(self.clone())),
            Arc::new(write::Link::new(self.clone())),
            Arc::new(read::TwinQuery::new(self.clone())),
            Arc::new(read::GetNode::new(self.clone())),
            Arc::new(read::TwinDiffTool::new(self.clone())),
        ]
    }

    /// Where `caller`'s writes go now, or the refusal for a run-worker class with no run phase.
    pub(crate) async fn target(
        &self,
        tool: &str,
        caller: &CallerContext,
    ) -> Result<Result<WriteTarget, HostCallOutcome>, PortError> {
        if let Some(scope) = self.scopes.scope_of(caller).await? {
            return Ok(Ok(WriteTarget::Run(scope)));
        }
        match caller.class {
            CallerClass::Local | CallerClass::Remote | CallerClass::Untrusted => Ok(Ok(WriteTarget::Main)),
            CallerClass::Service | CallerClass::ClientTask => {
                tracing::warn!(event = "twin_write_without_run_scope", tool, caller = caller.class.as_str(), session = ?caller.session, "a run-worker caller's twin write was refused: no running phase was confirmed for it");
                Ok(Err(refused(
                    tool,
                    &format!(
                        "a {} caller writes the twin only for a running run's phase, and none was confirmed for its session ({}); nothing was written",
                        caller.class.as_str(),
                        caller.session.as_deref().unwrap_or("none"),
                    ),
                )))
            }
        }
    }

    /// The branch `caller` reads when it names none: the branch it writes to (its run's branch
    /// once that exists, else `main`).
    pub(crate) async fn default_read_branch(&self, caller: &CallerContext) -> Result<String, PortError> {
        let target = match self.scopes.scope_of(caller).await? {
            Some(scope) => WriteTarget::Run(scope),
            None => WriteTarget::Main,
        };
        self.service.read_branch(&target).await
    }
}

/// The author a commit records: the caller class, and its session when it has one.
pub(crate) fn author(caller: &CallerContext) -> String {
    match caller.session.as_deref().filter(|s| !s.trim().is_empty()) {
        Some(session) => format!("{}:{session}", caller.class.as_str()),
        None => caller.class.as_str().to_owned(),
    }
}

/// A twin refusal as the tool's answer: a bad input names its field (`invalid_arguments`), an
/// unknown node read is `not_found`, a store failure is the port's error.
pub(crate) fn answer_error(tool: &str, error: TwinError, read: bool) -> Result<HostCallOutcome, PortError> {
    match error {
        TwinError::UnknownNode { ref id, .. } if read => Ok(not_found(id, &error.to_string())),
        TwinError::Invalid { field, message } => Ok(invalid_arguments(tool, &ArgError::new(field, message))),
        TwinError::UnknownBranch { ref field, .. } | TwinError::UnknownNode { ref field, .. } => {
            let message = error.to_string();
            let message = message
                .strip_prefix(&format!("{field}: "))
                .unwrap_or(&message)
                .to_owned();
            Ok(invalid_arguments(tool, &ArgError::new(field.clone(), message)))
        }
        TwinError::MainMoved { .. } => Ok(HostCallOutcome::Done(ToolOutput::error(json!({
            "status": "error", "error": "conflict", "tool": tool, "message": error.to_string(),
        })))),
        TwinError::Store(e) => Err(e),
    }
}
