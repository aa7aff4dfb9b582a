//! Client tasks (FORGE-581/582): a client-mode phase posted for the connected MCP client to do,
//! kept durably so a gateway restart does not lose one a client is working on.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::error::PortError;

/// Where a client task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientTaskStatus {
    /// Posted, nobody working on it.
    Open,
    /// A client took it (`phase.claim`).
    Claimed,
    /// The client handed its work back (`phase.submit`); final.
    Submitted,
    /// The worker stopped; a retry of the same attempt reopens it.
    Withdrawn,
}

impl ClientTaskStatus {
    /// The snake_case name used in JSON and storage.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Claimed => "claimed",
            Self::Submitted => "submitted",
            Self::Withdrawn => "withdrawn",
        }
    }

    /// Parses the name written by [`ClientTaskStatus::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "open" => Self::Open,
            "claimed" => Self::Claimed,
            "submitted" => Self::Submitted,
            "withdrawn" => Self::Withdrawn,
            _ => return None,
        })
    }
}

/// The task id `run:phase:attempt`, so a retried activity finds the task its first attempt posted.
pub fn client_task_id(run_id: &str, phase: &str, attempt: u32) -> String {
    format!("{run_id}:{phase}:{attempt}")
}

/// One client task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientTask {
    /// `run:phase:attempt`.
    pub id: String,
    /// The run.
    pub run_id: String,
    /// The phase.
    pub phase: String,
    /// The activity attempt.
    pub attempt: u32,
    /// The brief a phase brain would have been given.
    pub brief: serde_json::Value,
    /// Where it is.
    pub status: ClientTaskStatus,
    /// Who claimed it: the identity the claiming transport authenticated (`local` when it
    /// authenticated nobody), never a string the client chose.
    pub claimed_by: Option<String>,
    /// The MCP session the claim was made in (`X-MetaForge-Session`), when there was one: with
    /// `claimed_by`, it finds the claim a session's twin writes belong to. A session id alone
    /// proves nothing (any client may send any header), so it is never matched without the
    /// identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_session: Option<String>,
    /// The client's submission.
    pub submission: Option<serde_json::Value>,
    /// When it was first posted.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// The client-task store.
#[async_trait]
pub trait ClientTaskStore: Send + Sync {
    /// Posts the task for `run:phase:attempt`. Only for a run that exists (`NotFound`) and was
    /// started in client mode (`Conflict`). Posting an id that exists returns it as it is
    /// (a retried activity finds its submission), except that a withdrawn task is reopened.
    async fn post(
        &self,
        run_id: &str,
        phase: &str,
        attempt: u32,
        brief: serde_json::Value,
        at: Timestamp,
    ) -> Result<ClientTask, PortError>;

    /// One task (`NotFound` when absent).
    async fn get(&self, id: &str) -> Result<ClientTask, PortError>;

    /// Tasks, oldest first, optionally of one run and/or in one status.
    async fn list(
        &self,
        run_id: Option<&str>,
        status: Option<ClientTaskStatus>,
    ) -> Result<Vec<ClientTask>, PortError>;

    /// A client takes an open task (`Conflict` unless open; exactly one of two racers wins).
    async fn claim(&self, id: &str, claimant: &Claimant, at: Timestamp) -> Result<ClientTask, PortError>;

    /// The claimant hands its work back (`Conflict` unless claimed by `claimant`).
    async fn submit(
        &self,
        id: &str,
        claimant: &str,
        submission: serde_json::Value,
        at: Timestamp,
    ) -> Result<ClientTask, PortError>;

    /// The worker stops waiting: an open or claimed task is withdrawn (idempotent for a
    /// withdrawn one; `Conflict` for a submitted one).
    async fn withdraw(&self, id: &str, at: Timestamp) -> Result<ClientTask, PortError>;
}

/// Who takes or hands back a client task: the authenticated identity (what the task store
/// records as the claimant, and the only one that may submit) and the MCP session it works in
/// (kept beside the claim, so the twin's run scopes find which of the identity's sessions
/// writes for the task).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimant {
    /// The authenticated identity (`local` when the transport authenticated nobody).
    pub identity: String,
    /// The MCP session (`X-MetaForge-Session`, else the transport's session id).
    pub session: Option<String>,
}
