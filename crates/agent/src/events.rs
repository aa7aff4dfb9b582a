//! Typed turn events, in the order a chat thread's SSE stream forwards them.
//!
//! The loop only sends; a closed receiver never fails a turn (the person may have gone away while
//! the work goes on). Event names are the SSE names of the seed (`tool.approval_requested`,
//! `notify_error`, `agent.done`).

use metaforge_domain::usage::UsageTotals;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

/// One event of a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TurnEvent {
    /// Assistant text (the final reply, grounding banners included).
    MessageDelta {
        /// The text.
        text: String,
    },
    /// The model asked for a tool call.
    ToolCall {
        /// The provider's call id.
        call_id: String,
        /// The registry id of the tool (the name the model used when it named no known tool).
        tool: String,
        /// The arguments as the model sent them.
        arguments: Value,
    },
    /// A tool call's observation, as the model will read it.
    ToolResult {
        /// The call id it answers.
        call_id: String,
        /// The registry id of the tool.
        tool: String,
        /// The call failed (an error envelope).
        is_error: bool,
        /// The observation came from the same-turn duplicate guard.
        cached: bool,
        /// The observation text (loudly truncated when long).
        content: String,
    },
    /// A call was parked in the approval ledger for a person.
    ApprovalRequested {
        /// The hold's id in the approval ledger.
        approval_id: String,
        /// The call id it holds.
        call_id: String,
        /// The registry id of the tool.
        tool: String,
        /// The held arguments.
        arguments: Value,
    },
    /// The turn failed; sent before `agent.done` so a client shows the cause.
    NotifyError {
        /// A stable code (`iteration_cap`, `token_budget`, `canceled`, `model_error`, …).
        code: String,
        /// The message, naming the limit or the cause.
        message: String,
    },
    /// The turn ended (successfully or not); always the last event.
    Done {
        /// The turn's model usage (unknown counts `null`, never 0).
        usage: UsageTotals,
    },
}

impl TurnEvent {
    /// The SSE event name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::MessageDelta { .. } => "message.delta",
            Self::ToolCall { .. } => "tool.call",
            Self::ToolResult { .. } => "tool.result",
            Self::ApprovalRequested { .. } => "tool.approval_requested",
            Self::NotifyError { .. } => "notify_error",
            Self::Done { .. } => "agent.done",
        }
    }
}

/// Where a turn's events go: a channel, or nowhere.
#[derive(Debug, Clone, Default)]
pub struct EventSink {
    tx: Option<UnboundedSender<TurnEvent>>,
}

impl EventSink {
    /// Events go to `tx`.
    pub fn channel(tx: UnboundedSender<TurnEvent>) -> Self {
        Self { tx: Some(tx) }
    }

    /// Events are dropped (a phase turn nobody watches).
    pub fn none() -> Self {
        Self { tx: None }
    }

    /// Sends one event; a gone receiver is ignored.
    pub fn emit(&self, event: TurnEvent) {
        if let Some(tx) = &self.tx {
            let _ignored = tx.send(event);
        }
    }
}
