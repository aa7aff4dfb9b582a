//! Tools at the edges: what an MCP tool server offers (`ToolSource`) and what the MetaForge
//! sidecar exposes to external harnesses (`ToolHost`).
//!
//! Invariant 1 of the architecture is that agents never call tools directly: every tool call
//! goes through MCP. These types are the vocabulary both directions share, so the registry in
//! `metaforge-app` can treat a native tool and a tool from a remote MCP server alike, and the
//! sidecar transport in `metaforge-adapters-mcp` can serve the app's handlers without knowing
//! what they do.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::PortError;

/// The MCP tool annotations a server declares; every hint is optional because servers omit them.
///
/// The gating rules read them (a destructive hint tightens, a read-only hint relaxes), so an
/// absent hint must stay absent rather than default to a guess.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolHints {
    /// The tool does not modify its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling the tool again with the same arguments has no additional effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// One tool as its server describes it: the name the server knows it by, plus its schema.
///
/// The provider-facing name and the registry id are derived from this by the registry; the
/// descriptor keeps the server's own spelling so a call goes back under the exact name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDescriptor {
    /// The tool's name on its server (for native tools, the full dotted id, e.g. `flow.list`).
    pub name: String,
    /// A short human title, when the server gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does, as the model will read it.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments; `{"type":"object"}` when the server declares none.
    pub input_schema: Value,
    /// The server's behaviour hints.
    #[serde(default)]
    pub hints: ToolHints,
}

/// What a tool call produced, kept as the server sent it.
///
/// `is_error` is the MCP `isError` flag: the tool ran and reported a failure. Its `content` and
/// `structured` payload are the server's own words (status, message, hint), which the model
/// needs to tell "stop trying" from "fix the argument" (MET-569: structured error pass-through).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolOutput {
    /// MCP content blocks, verbatim JSON (text, image, resource links, …).
    pub content: Vec<Value>,
    /// The server's `structuredContent`, when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// The tool reported a failure.
    #[serde(default)]
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful result carrying one JSON value as both text and structured content.
    pub fn json(value: Value) -> Self {
        Self {
            content: vec![serde_json::json!({"type": "text", "text": value.to_string()})],
            structured: Some(value),
            is_error: false,
        }
    }

    /// A tool-level failure carrying the handler's own envelope, so the model reads it.
    pub fn error(envelope: Value) -> Self {
        Self {
            is_error: true,
            ..Self::json(envelope)
        }
    }

    /// The concatenated text blocks, for logs and for callers that only read text.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// One MCP tool server as the registry sees it: a name, a live tool list, and calls.
///
/// The adapter keeps the list current (it re-lists on `notifications/tools/list_changed`) and
/// hides transport recovery (an HTTP session that is gone is re-initialised once, transparently).
#[async_trait::async_trait]
pub trait ToolSource: Send + Sync {
    /// The configured server name; registry ids are `<server>.<tool>`.
    fn server_name(&self) -> &str;

    /// The tools the server offers now, after the configured include/exclude filters.
    async fn list_tools(&self) -> Result<Vec<ToolDescriptor>, PortError>;

    /// Calls `tool` (the server's own name) with `arguments`.
    ///
    /// A tool that ran and failed is `Ok` with `is_error`; `Err` means the call did not reach
    /// a result (timeout → `Unavailable`, unknown tool → `NotFound`, refused arguments →
    /// `Invalid`). Dropping the returned future cancels the call on the server.
    async fn call_tool(&self, tool: &str, arguments: Map<String, Value>) -> Result<ToolOutput, PortError>;

    /// The skills the server serves over the Skills extension, each file read and checked
    /// against its manifest digest (none when the server does not declare the extension).
    async fn list_skills(&self) -> Result<Vec<ServedSkill>, PortError> {
        Ok(Vec::new())
    }
}

/// Who is calling, decided by the connection and never by the caller's arguments: the one type
/// the sidecar classifies callers into and the domain's tool gating
/// (`metaforge_domain::tool_gating`) decides by.
///
/// The names match the seed's caller classes so logs and approval records read the same.
/// Deliberately not `#[non_exhaustive]`: the gating rules match every class, so a new class
/// cannot be added without deciding what it may call (no wildcard arm quietly deciding for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallerClass {
    /// The same machine and user: stdio, or a person at the local gateway (dashboard chat, TUI).
    Local,
    /// An HTTP client presenting no credential (a harness plugin); its writes go through the
    /// ordinary guardrail.
    Remote,
    /// A caller the sidecar cannot vouch for at all (e.g. the worker presenting a wrong service
    /// key).
    Untrusted,
    /// A MetaForge service presenting `METAFORGE_MCP_SERVICE_KEY`: the design-flow worker on an
    /// approved run (FORGE-487).
    Service,
    /// An MCP session running a claimed client-mode phase (FORGE-584).
    ClientTask,
}

impl CallerClass {
    /// The snake_case name used in approval records and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Remote => "remote",
            Self::Untrusted => "untrusted",
            Self::Service => "service",
            Self::ClientTask => "client_task",
        }
    }
}

/// How the connected client can be asked a person's question mid-call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputChannel {
    /// A 2025-11-25 client that declared the elicitation capability: ask with `elicitation/create`.
    Elicitation,
    /// A 2026-07-28 client: answer the call with an `InputRequiredResult` (multi round-trip).
    InputRequired,
    /// Neither: the questions go back as the tool result.
    None,
}

/// Everything the sidecar knows about the caller of one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallerContext {
    /// The caller class, from the connection.
    pub class: CallerClass,
    /// The MCP session id, when the transport has one.
    pub session: Option<String>,
    /// How a question for a person can reach them through this client.
    pub input_channel: InputChannel,
    /// The identity the transport authenticated (a gateway key, a console session, the key an
    /// MCP request presented); `None` when it authenticated nobody (stdio, an open loopback
    /// listener: the local user). Every hold, claim and decision records this, never a string
    /// the client chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

impl CallerContext {
    /// The session the caller named, trimmed; `None` when it named none (a blank header is none).
    pub fn session_id(&self) -> Option<&str> {
        self.session.as_deref().map(str::trim).filter(|s| !s.is_empty())
    }
}

/// One question a tool needs a person to answer before it can continue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputQuestion {
    /// The answer's key in the re-submitted arguments' `answers` object.
    pub id: String,
    /// The question as the person reads it.
    pub prompt: String,
    /// The allowed answers, when the question is a choice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    /// True when the person may leave it unanswered (a reason only some answers need); the form
    /// marks every other question required.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// What the transport knows about one call that the caller cannot set through its arguments
/// beyond who is calling ([`CallerContext`]): the person's answers to the questions the call
/// asked, and a hold an in-process caller already had approved.
///
/// Kept apart from the arguments on purpose: an agent writes a call's arguments, while the
/// answers come from the client's form a person fills in (elicitation) — a tool that records a
/// person's decision reads them here and never from its arguments (FORGE-400: no tool lets the
/// agent approve anything).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallFacts {
    /// The person's answers, keyed by question id, when this call comes back with them.
    pub answers: Option<Map<String, Value>>,
    /// A hold a person already approved for exactly this call, set only by an in-process caller
    /// that held the call itself (the agent loop's ask tier, which told its watchers
    /// `tool.approval_requested`). A host runs an ask-tier call without a second hold only when
    /// its ledger reads this hold approved, for this tool and these arguments; anything else
    /// (unknown, pending, rejected, another call's hold) is held as usual. Transports never set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_hold: Option<String>,
}

/// One prompt template the sidecar serves (e.g. `/metaforge:flow`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptDescriptor {
    /// The prompt's name.
    pub name: String,
    /// A short human title.
    pub title: Option<String>,
    /// What it is for.
    pub description: String,
    /// The arguments it takes.
    pub arguments: Vec<PromptArgumentDescriptor>,
}

/// One argument of a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptArgumentDescriptor {
    /// Its name.
    pub name: String,
    /// What to give.
    pub description: String,
    /// Whether it must be given.
    pub required: bool,
}

/// A rendered prompt: one user message of text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptText {
    /// What the prompt is.
    pub description: String,
    /// The message text.
    pub text: String,
}

/// A caller class a call asks for beyond what its connection proves (FORGE-487/584): the
/// transport confirms it through [`CallerGrants`] before every call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassClaim {
    /// `service` (the service key was presented) or `client_task` (a session that claimed a
    /// client task).
    pub class: CallerClass,
    /// `X-MetaForge-Session`: the run a service call works for, or the stable session that took
    /// a client task.
    pub session: String,
    /// `X-MetaForge-Project`: the project the call says it works in.
    pub project: Option<String>,
    /// The identity the transport authenticated, if any.
    pub identity: Option<String>,
    /// The tool called (`None` for a listing), for the log.
    pub tool: Option<String>,
}

/// Confirms a [`ClassClaim`] with the authority (the gateway) at every call. Anything that cannot
/// be confirmed is `false`: the transport then grants the class the connection alone earns
/// (fail closed: a service call is `untrusted`, a client-task session `remote`).
#[async_trait::async_trait]
pub trait CallerGrants: Send + Sync {
    /// True only when the claim is confirmed now.
    async fn confirm(&self, claim: &ClassClaim) -> bool;
}

/// What a sidecar tool call came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum HostCallOutcome {
    /// The call finished (successfully or with a tool-level error envelope).
    Done(ToolOutput),
    /// The call cannot continue without a person's answers. The transport asks them through
    /// the client's [`InputChannel`] and calls again with `answers` added to the arguments; a
    /// client with no channel gets `result` (the questions) as the tool result.
    NeedsInput {
        /// Why the answers are needed.
        message: String,
        /// The questions.
        questions: Vec<InputQuestion>,
        /// The tool result to return when the client has no way to ask.
        result: ToolOutput,
    },
}

/// A readable resource family the sidecar serves (e.g. `metaforge://flow/version/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceTemplateDescriptor {
    /// RFC 6570 URI template.
    pub uri_template: String,
    /// Short name.
    pub name: String,
    /// What the resource is.
    pub description: String,
    /// The MIME type of its contents.
    pub mime_type: String,
}

/// The contents of one read resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceText {
    /// The URI that was read.
    pub uri: String,
    /// The MIME type of `text`.
    pub mime_type: String,
    /// The contents.
    pub text: String,
}

/// The file that makes a directory a skill, first in [`ServedSkill::files`].
pub const SKILL_MANIFEST: &str = "SKILL.md";

/// A skill a host serves over MCP (the Skills extension, SEP-2640): its frontmatter as the
/// `SKILL.md` gives it and every file with its bytes, `SKILL.md` first. The transport names
/// each file `skill://<name>/<path>` and gives its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedSkill {
    /// The skill's name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Every frontmatter field (`name`, `description`, `license`, `metadata`, …).
    pub frontmatter: Map<String, Value>,
    /// `(path relative to the skill, bytes)`, `SKILL.md` first.
    pub files: Vec<(String, Vec<u8>)>,
}

/// The use-case side of the MCP sidecar: the tools, and resources it exposes.
///
/// The transport (rmcp, in the MCP adapter) decides the caller context from the connection and
/// turns a [`HostCallOutcome::NeedsInput`] into elicitation or an `InputRequiredResult`; the
/// host never sees the protocol.
#[async_trait::async_trait]
pub trait ToolHost: Send + Sync {
    /// The tools offered to a caller of this class (a tool a class may never call is not listed).
    fn tools(&self, caller: CallerClass) -> Vec<ToolDescriptor>;

    /// Runs one call. `Err` is a protocol-level failure (unknown tool → `NotFound`); a tool
    /// that ran and refused is `Ok(Done(..))` with an error envelope.
    async fn call(
        &self,
        caller: &CallerContext,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError>;

    /// Runs one call with what the transport knows beyond the caller ([`CallFacts`]: the
    /// person's answers, an approved hold). The default ignores them, for hosts whose tools need
    /// neither.
    async fn call_with(
        &self,
        caller: &CallerContext,
        facts: &CallFacts,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        let _ = facts;
        self.call(caller, tool, arguments).await
    }

    /// The resource templates served (none by default).
    fn resource_templates(&self) -> Vec<ResourceTemplateDescriptor> {
        Vec::new()
    }

    /// Reads one resource by URI (`NotFound` for an unknown URI or record; every URI for a host
    /// serving none, the default).
    async fn read_resource(&self, uri: &str) -> Result<ResourceText, PortError> {
        Err(PortError::new(
            crate::error::PortErrorKind::NotFound,
            format!("unknown resource: {uri}"),
        ))
    }

    /// The skills served over MCP (none by default): a transport declares the Skills extension
    /// only when there are some.
    fn skills(&self) -> Vec<ServedSkill> {
        Vec::new()
    }

    /// The prompt templates served (none by default).
    fn prompts(&self) -> Vec<PromptDescriptor> {
        Vec::new()
    }

    /// Renders one prompt with its arguments (`NotFound` for an unknown prompt, `Invalid` for a
    /// missing required argument).
    async fn prompt(&self, name: &str, arguments: &Map<String, Value>) -> Result<PromptText, PortError> {
        let _ = arguments;
        Err(PortError::new(
            crate::error::PortErrorKind::NotFound,
            format!("unknown prompt: {name}"),
        ))
    }
}
