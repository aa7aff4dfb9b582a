//! Determinism checks with Temporal's own replayer: a recorded history of a design-flow run is
//! fed to this build's [`DesignFlowWorkflow`], and any command the code would issue differently
//! from the history is a nondeterminism. This is what an operator runs before deploying a new
//! worker build (`metaforge replay`), and what CI runs over the histories recorded in
//! `crates/adapters-temporal/tests/histories/`.
//!
//! Histories are the SDK's JSON (`WorkflowHistory::to_json`), fetched from the server by
//! [`fetch_history`], so a recorded file and a live run replay the same way.

use temporalio_client::{WorkflowFetchHistoryOptions, WorkflowHistory};
use temporalio_sdk::workflow_replayer::{WorkflowReplayer, WorkflowReplayerOptions};

use crate::workflow::DesignFlowWorkflow;

/// Why a history could not be checked, or the verdict that it does not replay.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The file is not a workflow history in the SDK's JSON.
    #[error(
        "{source_name} is not a Temporal workflow history (JSON of temporal.api.history.v1.History): {reason}"
    )]
    NotAHistory {
        /// The file or run it came from.
        source_name: String,
        /// The decoder's complaint.
        reason: String,
    },
    /// The history could not be fetched from the server.
    #[error("the history of run {run_id} could not be fetched: {reason}")]
    Fetch {
        /// The run (workflow id).
        run_id: String,
        /// Why.
        reason: String,
    },
    /// The replayer itself could not run.
    #[error("the replayer could not run: {0}")]
    Replayer(String),
}

/// One history's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayVerdict {
    /// The file or run it came from.
    pub source_name: String,
    /// The workflow id the history names.
    pub workflow_id: Option<String>,
    /// How many events it holds.
    pub events: usize,
    /// `None`: this build makes exactly the recorded decisions; otherwise the replayer's reason.
    pub failure: Option<String>,
}

/// Decodes a history file's bytes.
pub fn history_from_json(source_name: &str, bytes: &[u8]) -> Result<WorkflowHistory, ReplayError> {
    WorkflowHistory::from_json(bytes).map_err(|e| ReplayError::NotAHistory {
        source_name: source_name.to_owned(),
        reason: e.to_string(),
    })
}

/// The whole history of run `run_id`'s latest workflow execution, as JSON bytes.
pub async fn fetch_history(client: &temporalio_client::Client, run_id: &str) -> Result<Vec<u8>, ReplayError> {
    client
        .get_workflow_handle::<DesignFlowWorkflow>(run_id)
        .fetch_history(WorkflowFetchHistoryOptions::default())
        .to_json()
        .await
        .map_err(|e| ReplayError::Fetch {
            run_id: run_id.to_owned(),
            reason: e.to_string(),
        })
}

/// Replays each named history against this build's workflow, in order, with one replay worker.
/// Must run inside a tokio runtime whose current thread may block on the replay (the SDK's
/// replay worker is `!Send`): call it from `block_on` or a `LocalSet`.
pub async fn replay(histories: Vec<(String, WorkflowHistory)>) -> Result<Vec<ReplayVerdict>, ReplayError> {
    let mut options = WorkflowReplayerOptions::new()
        .workflow_interceptor(crate::trace_context::hand_on_trace_context())
        .build();
    options
        .register_workflow::<DesignFlowWorkflow>()
        .map_err(|e| ReplayError::Replayer(e.to_string()))?;
    let replayer = WorkflowReplayer::new(options).map_err(|e| ReplayError::Replayer(e.to_string()))?;
    let (names, histories): (Vec<String>, Vec<WorkflowHistory>) = histories.into_iter().unzip();
    let results = replayer
        .replay_workflows(histories)
        .await
        .map_err(|e| ReplayError::Replayer(e.to_string()))?;
    Ok(names
        .into_iter()
        .zip(results)
        .map(|(source_name, result)| ReplayVerdict {
            source_name,
            workflow_id: result.history.workflow_id().map(str::to_owned),
            events: result.history.events().len(),
            failure: result.replay_failure.map(|f| f.to_string()),
        })
        .collect())
}
