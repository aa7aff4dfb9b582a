//! The tools a turn may call, behind the tool ports: MCP servers (`ToolSource`) and the native
//! host (`ToolHost`), named by the domain's naming rule and declared to the gating rule.
//!
//! [`ToolBox`] is what the loop reads and [`ToolBoxes`] where a turn gets one. The central
//! registry of the composition (`metaforge_app::tools::ToolRegistry`: natives, `search_tools`
//! pinning, domain scoping, MCP servers) implements both; [`AgentTool::new`] is the one place a
//! tool is declared to the gating rule, so the registry and test doubles declare tools alike.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_domain::tool_cap::ToolOrigin;
use metaforge_domain::tool_gating::{Annotation, ToolSpec};
use metaforge_ports::{CallerContext, PortError, ToolDescriptor, ToolOutput};
use serde_json::{Map, Value};

/// One tool as a turn sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentTool {
    /// Registry id: `<server>.<tool>` for MCP tools, the native id (e.g. `flow.list`) otherwise.
    pub id: String,
    /// The name sent to providers (`[A-Za-z0-9_-]{1,64}`).
    pub provider_name: String,
    /// Where it runs.
    pub origin: ToolOrigin,
    /// The server's own description, schema and hints.
    pub descriptor: ToolDescriptor,
    /// How the gating rule sees it (name = registry id, schema, gates, ask tier, annotation).
    pub gate: ToolSpec,
    /// Its host applies the same gating itself ([`ToolPolicy::host_enforced`]).
    pub host_enforced: bool,
}

impl AgentTool {
    /// Declares one tool: its gate spec (name = registry id, origin, schema, the ask tier and
    /// static gates from `policy`, the annotation from the server's hints — absent hints are
    /// destructive) is derived here and nowhere else.
    pub fn new(
        id: String,
        provider_name: String,
        origin: ToolOrigin,
        descriptor: ToolDescriptor,
        policy: &ToolPolicy,
    ) -> Self {
        let gate = ToolSpec {
            name: id.clone(),
            origin: origin.as_string(),
            input_schema: Some(descriptor.input_schema.clone()),
            required_gates: policy.required_gates.get(&id).cloned().unwrap_or_default(),
            requires_approval: policy.holds(&id),
            annotation: match policy.declared_class(&id) {
                Some(declared) => Annotation::declared(&descriptor.hints, declared),
                None => Annotation::from_hints(&descriptor.hints),
            },
        };
        let host_enforced = policy.host_enforced.contains(&id);
        Self {
            id,
            provider_name,
            origin,
            descriptor,
            gate,
            host_enforced,
        }
    }

    /// True for the "ask" tier: every call is held for a person.
    pub fn requires_approval(&self) -> bool {
        self.gate.requires_approval
    }
}

/// What the loop reads: the tools offered now, the pinned ones, and calls.
#[async_trait]
pub trait ToolBox: Send + Sync {
    /// The tools offered now (re-read every round, so a tool registered mid-turn is callable on
    /// the next step).
    fn tools(&self) -> Vec<AgentTool>;

    /// Registry ids `search_tools` pinned (protected from the provider's tool cap).
    fn pinned(&self) -> BTreeSet<String> {
        BTreeSet::new()
    }

    /// Runs one already validated and gated call. A tool that ran and failed is `Ok` with
    /// `is_error`; `Err` means no result was reached.
    async fn call(&self, tool: &AgentTool, arguments: Map<String, Value>) -> Result<ToolOutput, PortError>;

    /// Runs a call the loop held and a person approved (hold `approval_id`): a box whose tools
    /// hold on their own (the sidecar's ask tier) passes the approval down so the call is not
    /// held twice; the default is [`ToolBox::call`].
    async fn call_approved(
        &self,
        tool: &AgentTool,
        arguments: Map<String, Value>,
        approval_id: &str,
    ) -> Result<ToolOutput, PortError> {
        let _ = approval_id;
        self.call(tool, arguments).await
    }
}

impl ToolPolicy {
    /// True when every call of `id` is held for a person: an exact entry, or a glob entry that
    /// matches it (an entry that is not a valid glob matches only itself).
    pub fn holds(&self, id: &str) -> bool {
        self.requires_approval.iter().any(|entry| names(entry, id))
    }

    /// The class the servers file declares for `id`, if any.
    pub fn declared_class(&self, id: &str) -> Option<Annotation> {
        self.classified
            .iter()
            .find(|(entry, _)| names(entry, id))
            .map(|(_, class)| *class)
    }
}

/// True when policy entry `entry` names registry id `id`: equal, or a glob that matches it (an
/// entry that is not a valid glob matches only itself).
fn names(entry: &str, id: &str) -> bool {
    entry == id || (entry.contains(['*', '?', '[']) && glob::Pattern::new(entry).is_ok_and(|p| p.matches(id)))
}

/// Where a turn gets its [`ToolBox`]: the composition's central registry answers with a view for
/// one turn — the native tools as `caller` may see them, the MCP tools of the servers in scope
/// (every server when `domains` is `None`; core servers plus the named disciplines' otherwise),
/// and whatever `search_tools` pinned. Chat threads and phase brains both ask here, so both see
/// tools the same way.
pub trait ToolBoxes: Send + Sync {
    /// The tools of one turn for `caller`, scoped to `domains` when given.
    fn for_turn(&self, caller: &CallerContext, domains: Option<&[String]>) -> Arc<dyn ToolBox>;
}

/// Declarations the servers cannot make themselves: the ask tier and static gates, by registry id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolPolicy {
    /// Registry ids — or glob patterns over them (`parts.write_*`) — whose every call is held
    /// for a person (`requires_approval`).
    pub requires_approval: BTreeSet<String>,
    /// Registry id → static gates it declares (`twin_write`, `project_write`).
    pub required_gates: BTreeMap<String, Vec<String>>,
    /// Native ids whose host applies the same gating to every call itself (the sidecar's ask
    /// tier, e.g. the twin writes). A turn that holds calls holds these itself, so it can
    /// announce the hold and ask in the terminal, then passes the approval down; a forward-mode
    /// turn (a design-flow phase) leaves them to the host's own check, as it forwards an MCP
    /// tool — FORGE-490's refusal is for in-process tools nothing else checks.
    pub host_enforced: BTreeSet<String>,
    /// Registry-id globs (`spicebridge.get_*`) an operator classified in the servers file, each
    /// with its class; the first that matches applies, never laxer than the server's own hints
    /// ([`Annotation::declared`]).
    pub classified: Vec<(String, Annotation)>,
}
