//! The tools a turn may call, behind the tool ports: MCP servers (`ToolSource`) and the native
//! host (`ToolHost`), named by the domain's naming rule and declared to the gating rule.
//!
//! [`ToolBox`] is what the loop reads; [`PortToolBox`] builds one from the ports. The central
//! registry of the composition (search_tools pinning, domain scoping) implements [`ToolBox`]
//! over the same ports.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use metaforge_domain::tool_cap::ToolOrigin;
use metaforge_domain::tool_gating::{Annotation, ToolSpec};
use metaforge_domain::tool_naming::{hashed_name, mcp_tool_id, preferred_provider_name};
use metaforge_ports::{
    CallerContext, HostCallOutcome, PortError, PortErrorKind, ToolDescriptor, ToolHost, ToolOutput,
    ToolSource,
};
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
}

impl AgentTool {
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
    /// Registry ids whose every call is held for a person (`requires_approval`).
    pub requires_approval: BTreeSet<String>,
    /// Registry id → static gates it declares (`twin_write`, `project_write`).
    pub required_gates: BTreeMap<String, Vec<String>>,
}

enum Runner {
    Native,
    Mcp(Arc<dyn ToolSource>),
}

/// A [`ToolBox`] over MCP servers and an optional native host, listed once at build.
pub struct PortToolBox {
    tools: Vec<AgentTool>,
    runners: BTreeMap<String, Runner>,
    native: Option<(Arc<dyn ToolHost>, CallerContext)>,
    unavailable: Vec<UnavailableServer>,
}

impl std::fmt::Debug for PortToolBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortToolBox")
            .field("tools", &self.tools.iter().map(|t| &t.id).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl PortToolBox {
    /// Lists every source's tools and the native host's tools for `caller`. A source that
    /// cannot list is skipped loudly: logged `mcp_server_unavailable` at error level and kept in
    /// [`PortToolBox::unavailable`], never dropped quietly.
    pub async fn build(
        sources: Vec<Arc<dyn ToolSource>>,
        native: Option<(Arc<dyn ToolHost>, CallerContext)>,
        policy: &ToolPolicy,
    ) -> Self {
        let mut tools = Vec::new();
        let mut runners = BTreeMap::new();
        let mut taken: BTreeSet<String> = BTreeSet::new();
        let mut add = |id: String, server: Option<&str>, descriptor: ToolDescriptor, runner: Runner| {
            let preferred =
                preferred_provider_name(server, if server.is_some() { &descriptor.name } else { &id });
            let provider_name = if taken.contains(&preferred) {
                hashed_name(&preferred, &id)
            } else {
                preferred
            };
            taken.insert(provider_name.clone());
            let origin = match server {
                Some(s) => ToolOrigin::Mcp(s.to_owned()),
                None => ToolOrigin::Native,
            };
            let gate = ToolSpec {
                name: id.clone(),
                origin: origin.as_string(),
                input_schema: Some(descriptor.input_schema.clone()),
                required_gates: policy.required_gates.get(&id).cloned().unwrap_or_default(),
                requires_approval: policy.requires_approval.contains(&id),
                annotation: Annotation::from_hints(&descriptor.hints),
            };
            runners.insert(id.clone(), runner);
            tools.push(AgentTool {
                id,
                provider_name,
                origin,
                descriptor,
                gate,
            });
        };
        if let Some((host, caller)) = &native {
            for descriptor in host.tools(caller.class) {
                add(descriptor.name.clone(), None, descriptor, Runner::Native);
            }
        }
        let mut unavailable = Vec::new();
        for source in sources {
            let server = source.server_name().to_owned();
            let listed = match source.list_tools().await {
                Ok(listed) => listed,
                Err(e) => {
                    tracing::error!(
                        event = "mcp_server_unavailable",
                        server = %server,
                        error = %e,
                        "an MCP server could not list its tools; its tools are not offered"
                    );
                    unavailable.push(UnavailableServer {
                        server,
                        message: e.message,
                    });
                    continue;
                }
            };
            for descriptor in listed {
                let id = mcp_tool_id(&server, &descriptor.name);
                add(id, Some(&server), descriptor, Runner::Mcp(Arc::clone(&source)));
            }
        }
        Self {
            tools,
            runners,
            native,
            unavailable,
        }
    }

    /// The servers skipped because they could not list their tools (for `/health`).
    pub fn unavailable(&self) -> &[UnavailableServer] {
        &self.unavailable
    }
}

/// An MCP server that could not be listed, reported rather than dropped quietly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnavailableServer {
    /// The configured server name.
    pub server: String,
    /// Why it could not be listed.
    pub message: String,
}

#[async_trait]
impl ToolBox for PortToolBox {
    fn tools(&self) -> Vec<AgentTool> {
        self.tools.clone()
    }

    async fn call(&self, tool: &AgentTool, arguments: Map<String, Value>) -> Result<ToolOutput, PortError> {
        match self.runners.get(&tool.id) {
            Some(Runner::Mcp(source)) => source.call_tool(&tool.descriptor.name, arguments).await,
            Some(Runner::Native) => {
                let Some((host, caller)) = &self.native else {
                    return Err(PortError::new(PortErrorKind::Internal, "native host missing"));
                };
                match host.call(caller, &tool.descriptor.name, arguments).await? {
                    HostCallOutcome::Done(output) => Ok(output),
                    // A chat turn has no channel to ask a person mid-call: the questions go back
                    // to the model as the result, as for a client with no input channel.
                    HostCallOutcome::NeedsInput { result, .. } => Ok(result),
                }
            }
            None => Err(PortError::new(
                PortErrorKind::NotFound,
                format!("tool '{}' is not registered", tool.id),
            )),
        }
    }
}
