//! The live registry and the per-turn view the agent loop reads.
//!
//! Invariants:
//! - one naming rule (`metaforge_domain::tool_naming`): MCP ids `<server>.<tool>`, provider
//!   names `mcp_<server>_<tool>` (hash-suffixed on a collision), natives under their own id;
//!   a tool keeps its provider name whatever the turn's scope;
//! - the registry applies no call rule: validation, gating, holds, the duplicate guard, the tool
//!   cap and error envelopes are the agent loop's; a call that reaches no result is the port's
//!   `Err`, which the loop turns into an envelope;
//! - a server that cannot list, or whose call finds it gone (`PortErrorKind::Unavailable`), is
//!   `unavailable` in [`ServerStatuses`], logged at ERROR on the change, never dropped quietly;
//!   its listed tools stay offered (the client reconnects on the next call);
//! - what `search_tools` registered and pinned lasts for the caller's session
//!   (`CallerContext::session`; a turn without one keeps it for the turn), so a promise made on
//!   one turn holds on the next.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use metaforge_agent::{AgentTool, ToolBox, ToolBoxes, ToolPolicy};
use metaforge_domain::tool_cap::ToolOrigin;
use metaforge_domain::tool_naming::{hashed_name, mcp_tool_id, preferred_provider_name};
use metaforge_ports::evidence::EVIDENCE_FILE_SCHEME;
use metaforge_ports::{
    CallFacts, CallerClass, CallerContext, HostCallOutcome, PortError, PortErrorKind, RECORDED_FIELD,
    ToolDescriptor, ToolHost, ToolOutput, ToolSource,
};
use serde_json::{Map, Value, json};

use super::scope::DomainScope;
use super::search::{
    DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT, SEARCH_TOOLS_ID, keywords, score, search_tools_descriptor,
};
use super::skill_tools::{self, Activation, is_skill_tool};
use super::status::{ServerStatus, ServerStatuses};
use crate::skills::SkillShelf;
use crate::twin::EvidenceRecorder;

/// Most sessions whose `search_tools` finds are remembered; the least recently used goes first.
pub const MAX_REMEMBERED_SESSIONS: usize = 1024;

/// Why a registry could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Two servers share one name (their tool ids would collide).
    #[error("MCP server name {0:?} is configured twice")]
    DuplicateServer(String),
    /// The native host offers a tool under the id the registry's own `search_tools` uses.
    #[error("the native host offers {0:?}, the id of the registry's own search tool")]
    ReservedNative(String),
}

/// One tool of the full catalogue (every connected server, whatever a turn's scope).
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogueTool {
    /// Registry id, `<server>.<tool>`.
    pub id: String,
    /// The serving server.
    pub server: String,
    /// The name sent to providers.
    pub provider_name: String,
    /// The tool as the server lists it.
    pub descriptor: ToolDescriptor,
}

struct Server {
    source: Arc<dyn ToolSource>,
    /// How long listing may take (connecting included, on first use).
    list_within: Duration,
}

/// What `search_tools` added for one session: ids registered beyond the turn's scope, and pins.
#[derive(Debug, Default)]
struct Found {
    registered: BTreeSet<String>,
    pinned: BTreeSet<String>,
}

#[derive(Default)]
struct Sessions {
    by_id: HashMap<String, (u64, Arc<Mutex<Found>>)>,
    tick: u64,
}

struct Shared {
    host: Option<Arc<dyn ToolHost>>,
    servers: Vec<Server>,
    scope: DomainScope,
    policy: ToolPolicy,
    statuses: Arc<ServerStatuses>,
    /// The full catalogue, in server then listing order.
    catalogue: RwLock<Vec<CatalogueTool>>,
    sessions: Mutex<Sessions>,
    /// The skill catalogue the skill tools disclose, when the composition loaded one.
    skills: Option<Arc<SkillShelf>>,
    /// The skills the servers serve over the Skills extension, by server, as last listed.
    server_skills: RwLock<std::collections::BTreeMap<String, crate::skills::SkillCatalog>>,
    /// Records a run phase's tool evidence in the twin, when this process composes a twin.
    evidence: Option<Arc<EvidenceRecorder>>,
}

/// The skills a turn sees: the shelf's, then each server's under its name (`None` when this
/// registry discloses no skills).
fn skill_catalog_of(shared: &Shared) -> Option<crate::skills::SkillCatalog> {
    let shelf = shared.skills.as_ref()?;
    let servers = shared
        .server_skills
        .read()
        .unwrap_or_else(PoisonError::into_inner);
    Some(
        servers
            .values()
            .fold((*shelf.current()).clone(), |catalog, remote| {
                catalog.merged(remote)
            }),
    )
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The central registry. Cheap to share; a turn reads it through [`ToolBoxes::for_turn`].
#[derive(Clone)]
pub struct ToolRegistry {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("servers", &self.shared.statuses.snapshot())
            .finish_non_exhaustive()
    }
}

/// Builds a [`ToolRegistry`]: the native host, the servers, scoping and the ask-tier policy.
#[derive(Default)]
pub struct ToolRegistryBuilder {
    host: Option<Arc<dyn ToolHost>>,
    servers: Vec<Server>,
    disabled: Vec<String>,
    scope: Option<DomainScope>,
    policy: ToolPolicy,
    skills: Option<Arc<SkillShelf>>,
    evidence: Option<Arc<EvidenceRecorder>>,
}

impl ToolRegistryBuilder {
    /// Records the evidence an MCP tool's result carries when the caller works for a running
    /// phase (`crate::twin::evidence`).
    pub fn evidence(mut self, recorder: Arc<EvidenceRecorder>) -> Self {
        self.evidence = Some(recorder);
        self
    }

    /// The skill catalogue, disclosed to every turn through the skill tools
    /// (`skills.activate`, `skills.activate_committing`).
    pub fn skills(mut self, shelf: Arc<SkillShelf>) -> Self {
        self.skills = Some(shelf);
        self
    }

    /// The native tools: `host.tools(class)` per caller, called through `host.call`.
    pub fn natives(mut self, host: Arc<dyn ToolHost>) -> Self {
        self.host = Some(host);
        self
    }

    /// One MCP server; listing it (connecting on first use) may take `list_within`.
    pub fn server(mut self, source: Arc<dyn ToolSource>, list_within: Duration) -> Self {
        self.servers.push(Server { source, list_within });
        self
    }

    /// A configured server switched off: reported `disabled`, never started.
    pub fn disabled_server(mut self, name: impl Into<String>) -> Self {
        self.disabled.push(name.into());
        self
    }

    /// Which servers each discipline sees (default: the seed's core servers, no discipline).
    pub fn scope(mut self, scope: DomainScope) -> Self {
        self.scope = Some(scope);
        self
    }

    /// The ask tier and static gates by registry id.
    pub fn policy(mut self, policy: ToolPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Lists every server concurrently (each within its own `list_within`) and returns the
    /// registry. A server that fails is `unavailable` with the reason, logged at ERROR
    /// (`mcp_server_unavailable`), and the others are offered.
    pub async fn build(mut self) -> Result<ToolRegistry, RegistryError> {
        if self.skills.is_some() {
            skill_tools::declare(&mut self.policy);
        }
        let mut names = BTreeSet::new();
        for name in self
            .servers
            .iter()
            .map(|s| s.source.server_name().to_owned())
            .chain(self.disabled.iter().cloned())
        {
            if !names.insert(name.clone()) {
                return Err(RegistryError::DuplicateServer(name));
            }
        }
        if !self.servers.is_empty()
            && let Some(host) = &self.host
            && every_class()
                .into_iter()
                .any(|c| host.tools(c).iter().any(|d| d.name == SEARCH_TOOLS_ID))
        {
            return Err(RegistryError::ReservedNative(SEARCH_TOOLS_ID.to_owned()));
        }
        let statuses = Arc::new(ServerStatuses::none());
        for name in &self.disabled {
            tracing::info!(event = "mcp_server_disabled", server = %name, "configured with \"disabled\": true; not started");
            statuses.set(name, ServerStatus::Disabled);
        }
        let registry = ToolRegistry {
            shared: Arc::new(Shared {
                host: self.host,
                servers: self.servers,
                scope: self.scope.unwrap_or_else(DomainScope::seed),
                policy: self.policy,
                statuses,
                catalogue: RwLock::new(Vec::new()),
                sessions: Mutex::new(Sessions::default()),
                skills: self.skills,
                server_skills: RwLock::new(std::collections::BTreeMap::new()),
                evidence: self.evidence,
            }),
        };
        registry.refresh().await;
        Ok(registry)
    }
}

/// Every caller class, so a native id is checked against what any caller may see. A match, so a
/// new class fails to compile here until it is listed.
fn every_class() -> [CallerClass; 5] {
    let listed = |c: CallerClass| match c {
        CallerClass::Local
        | CallerClass::Remote
        | CallerClass::Untrusted
        | CallerClass::Service
        | CallerClass::ClientTask => c,
    };
    [
        listed(CallerClass::Local),
        listed(CallerClass::Remote),
        listed(CallerClass::Untrusted),
        listed(CallerClass::Service),
        listed(CallerClass::ClientTask),
    ]
}

impl ToolRegistry {
    /// A builder.
    pub fn builder() -> ToolRegistryBuilder {
        ToolRegistryBuilder::default()
    }

    /// The live per-server states (shared: `/health` reads the same object the registry writes).
    pub fn statuses(&self) -> Arc<ServerStatuses> {
        Arc::clone(&self.shared.statuses)
    }

    /// The full catalogue of every connected server, whatever a turn's scope.
    pub fn catalogue(&self) -> Vec<CatalogueTool> {
        self.shared
            .catalogue
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Lists every server again, concurrently: a changed list replaces the old one, a server
    /// that fails is `unavailable` (its last listing stays offered), one that never listed and
    /// now does is `ok`. The sources keep their own cache (re-listed on `tools/list_changed`),
    /// so a refresh of a healthy server costs no round trip — and therefore does not clear an
    /// `unavailable` a call found: the next call that reaches the server does.
    pub async fn refresh(&self) {
        self.refresh_tools().await;
        self.refresh_skills().await;
    }

    /// Lists the skills of every server (only when this registry discloses skills at all): a
    /// server that fails keeps its last listing, logged.
    async fn refresh_skills(&self) {
        let shared = &self.shared;
        if shared.skills.is_none() {
            return;
        }
        let listings = futures::future::join_all(shared.servers.iter().map(|server| async move {
            tokio::time::timeout(server.list_within, server.source.list_skills()).await
        }))
        .await;
        let mut by_server = shared
            .server_skills
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        for (server, listing) in shared.servers.iter().zip(listings) {
            let name = server.source.server_name();
            match listing {
                Ok(Ok(served)) => {
                    let catalog = crate::skills::SkillCatalog::from_server(name, &served);
                    if !served.is_empty() {
                        tracing::info!(
                            event = "mcp_server_skills",
                            server = name,
                            skills = catalog.skills.len(),
                            refused = catalog.refused.len(),
                            "skills read from an MCP server"
                        );
                    }
                    by_server.insert(name.to_owned(), catalog);
                }
                Ok(Err(e)) => {
                    tracing::warn!(event = "mcp_server_skills_failed", server = name, error = %e.message, "the server's skills could not be read; its last listing stays");
                }
                Err(_elapsed) => {
                    tracing::warn!(
                        event = "mcp_server_skills_failed",
                        server = name,
                        "the server's skills were not listed in time; its last listing stays"
                    );
                }
            }
        }
    }

    async fn refresh_tools(&self) {
        let shared = &self.shared;
        let listings = futures::future::join_all(shared.servers.iter().map(|server| async move {
            let name = server.source.server_name();
            match tokio::time::timeout(server.list_within, server.source.list_tools()).await {
                Ok(Ok(tools)) => Ok(tools),
                Ok(Err(e)) => Err(e.message),
                Err(_elapsed) => Err(format!(
                    "mcp server {name}: did not start and list its tools within {:?}",
                    server.list_within
                )),
            }
        }))
        .await;
        let mut catalogue = self.catalogue();
        for (server, listing) in shared.servers.iter().zip(listings) {
            let name = server.source.server_name();
            match listing {
                Ok(tools) => {
                    let count = tools.len();
                    // A client answers a re-list from its cache while its session looks alive, so
                    // a listing says nothing about a server a call found gone: only a call that
                    // reaches it clears that (see `call_mcp`).
                    let had_listing = catalogue.iter().any(|t| t.server == name);
                    let found_gone = had_listing
                        && matches!(
                            shared.statuses.snapshot().get(name),
                            Some(ServerStatus::Unavailable { .. })
                        );
                    catalogue.retain(|t| t.server != name);
                    let mut classes = std::collections::BTreeMap::new();
                    for descriptor in &tools {
                        let tool = AgentTool::new(
                            mcp_tool_id(name, &descriptor.name),
                            String::new(),
                            ToolOrigin::Mcp(name.to_owned()),
                            descriptor.clone(),
                            &shared.policy,
                        );
                        *classes.entry(tool.gate.annotation.as_str()).or_insert(0) += 1;
                    }
                    shared.statuses.set_classes(name, classes);
                    catalogue.extend(tools.into_iter().map(|descriptor| CatalogueTool {
                        id: mcp_tool_id(name, &descriptor.name),
                        server: name.to_owned(),
                        provider_name: String::new(),
                        descriptor,
                    }));
                    if !found_gone {
                        let previous = shared.statuses.set(name, ServerStatus::Ok { tools: count });
                        if previous.is_none() {
                            tracing::info!(
                                event = "mcp_server_ready",
                                server = name,
                                tools = count,
                                "MCP server listed"
                            );
                        }
                    }
                }
                Err(reason) => {
                    shared.statuses.set(name, ServerStatus::Unavailable { reason });
                }
            }
        }
        // Server order, then the server's own order; names given in that order so a collision
        // suffix lands on the same tool whatever a turn's scope.
        let order: Vec<&str> = shared.servers.iter().map(|s| s.source.server_name()).collect();
        catalogue.sort_by_key(|t| order.iter().position(|s| *s == t.server));
        let mut taken: BTreeSet<String> = BTreeSet::from([SEARCH_TOOLS_ID.to_owned()]);
        for tool in &mut catalogue {
            let preferred = preferred_provider_name(Some(&tool.server), &tool.descriptor.name);
            let name = if taken.contains(&preferred) {
                hashed_name(&preferred, &tool.id)
            } else {
                preferred
            };
            taken.insert(name.clone());
            tool.provider_name = name;
        }
        *shared.catalogue.write().unwrap_or_else(PoisonError::into_inner) = catalogue;
    }

    fn found_for(&self, session: Option<&str>) -> Arc<Mutex<Found>> {
        let Some(session) = session else {
            return Arc::new(Mutex::new(Found::default()));
        };
        let mut sessions = lock(&self.shared.sessions);
        sessions.tick += 1;
        let tick = sessions.tick;
        if let Some((used, found)) = sessions.by_id.get_mut(session) {
            *used = tick;
            return Arc::clone(found);
        }
        if sessions.by_id.len() >= MAX_REMEMBERED_SESSIONS
            && let Some(oldest) = sessions
                .by_id
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(id, _)| id.clone())
        {
            sessions.by_id.remove(&oldest);
        }
        let found = Arc::new(Mutex::new(Found::default()));
        sessions
            .by_id
            .insert(session.to_owned(), (tick, Arc::clone(&found)));
        found
    }
}

impl ToolBoxes for ToolRegistry {
    /// An empty `domains` is no scoping signal and scopes nothing (seed: under-scoping costs
    /// nothing, a false negative is preferred over guessing).
    fn for_turn(&self, caller: &CallerContext, domains: Option<&[String]>) -> Arc<dyn ToolBox> {
        Arc::new(TurnTools {
            shared: Arc::clone(&self.shared),
            caller: caller.clone(),
            domains: domains.filter(|d| !d.is_empty()).map(<[String]>::to_vec),
            found: self.found_for(caller.session.as_deref()),
            active: Mutex::new(None),
        })
    }
}

/// One turn's view of the registry.
struct TurnTools {
    shared: Arc<Shared>,
    caller: CallerContext,
    domains: Option<Vec<String>>,
    found: Arc<Mutex<Found>>,
    /// The skill this turn activated last: its `allowed-tools` narrow what is offered.
    active: Mutex<Option<Activation>>,
}

impl TurnTools {
    fn visible(&self, tool: &CatalogueTool, found: &Found) -> bool {
        found.registered.contains(&tool.id)
            || self
                .shared
                .scope
                .admits(&tool.server, &tool.id, self.domains.as_deref())
    }

    /// `search_tools`: every match registered (when the turn could not see it) and pinned.
    fn search(&self, arguments: &Map<String, Value>) -> Result<ToolOutput, PortError> {
        let query = arguments
            .get("query")
            .and_then(Value::as_str)
            .ok_or_else(|| PortError::new(PortErrorKind::Invalid, "query: a string is required"))?;
        let limit = arguments
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_SEARCH_LIMIT, |l| {
                usize::try_from(l)
                    .unwrap_or(MAX_SEARCH_LIMIT)
                    .clamp(1, MAX_SEARCH_LIMIT)
            });
        let words = keywords(query);
        let catalogue = self
            .shared
            .catalogue
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut scored: Vec<(usize, &CatalogueTool)> = catalogue
            .iter()
            .filter_map(|t| score(&words, &t.id, &t.descriptor.description).map(|s| (s, t)))
            .collect();
        scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.id.cmp(&b.1.id)));
        let mut found = lock(&self.found);
        let mut matches = Vec::new();
        for (_, tool) in scored.into_iter().take(limit) {
            let status = if self.visible(tool, &found) {
                "already available"
            } else {
                found.registered.insert(tool.id.clone());
                "registered"
            };
            found.pinned.insert(tool.id.clone());
            matches.push(json!({
                "id": tool.id,
                "name": tool.provider_name,
                "status": status,
                "description": tool.descriptor.description,
            }));
        }
        tracing::info!(
            event = "search_tools",
            query,
            matches = matches.len(),
            "search_tools registered and pinned its matches"
        );
        Ok(ToolOutput::json(json!({
            "query": query,
            "count": matches.len(),
            "matches": matches,
        })))
    }

    async fn call_mcp(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<ToolOutput, PortError> {
        let Some(source) = self
            .shared
            .servers
            .iter()
            .find(|s| s.source.server_name() == server)
            .map(|s| Arc::clone(&s.source))
        else {
            return Err(PortError::new(
                PortErrorKind::NotFound,
                format!("no MCP server named {server:?} is configured"),
            ));
        };
        let result = source.call_tool(tool, arguments).await;
        let statuses = &self.shared.statuses;
        match &result {
            Err(e) if e.kind == PortErrorKind::Unavailable => {
                statuses.set(
                    server,
                    ServerStatus::Unavailable {
                        reason: e.message.clone(),
                    },
                );
            }
            Ok(_) | Err(_) => {
                // The server answered (a tool-level error or a refusal is still an answer).
                if matches!(
                    statuses.snapshot().get(server),
                    Some(ServerStatus::Unavailable { .. })
                ) {
                    let tools = self
                        .shared
                        .catalogue
                        .read()
                        .unwrap_or_else(PoisonError::into_inner)
                        .iter()
                        .filter(|t| t.server == server)
                        .count();
                    statuses.set(server, ServerStatus::Ok { tools });
                }
            }
        }
        result
    }
}

#[async_trait::async_trait]
impl ToolBox for TurnTools {
    fn tools(&self) -> Vec<AgentTool> {
        let shared = &self.shared;
        let mut out = Vec::new();
        let mut taken = BTreeSet::new();
        if let Some(host) = &shared.host {
            for descriptor in host.tools(self.caller.class) {
                let name = preferred_provider_name(None, &descriptor.name);
                taken.insert(name.clone());
                out.push(AgentTool::new(
                    descriptor.name.clone(),
                    name,
                    ToolOrigin::Native,
                    descriptor,
                    &shared.policy,
                ));
            }
        }
        if let Some(catalog) = skill_catalog_of(shared) {
            for tool in skill_tools::tools(&catalog, &shared.policy) {
                taken.insert(tool.provider_name.clone());
                out.push(tool);
            }
        }
        if !shared.servers.is_empty() {
            taken.insert(SEARCH_TOOLS_ID.to_owned());
            out.push(AgentTool::new(
                SEARCH_TOOLS_ID.to_owned(),
                SEARCH_TOOLS_ID.to_owned(),
                ToolOrigin::Native,
                search_tools_descriptor(),
                &shared.policy,
            ));
        }
        let found = lock(&self.found);
        let catalogue = shared.catalogue.read().unwrap_or_else(PoisonError::into_inner);
        for tool in catalogue.iter().filter(|t| self.visible(t, &found)) {
            // Natives are named first; an MCP name equal to one (only a native id starting
            // `mcp_` could do it) takes the hash suffix instead.
            let name = if taken.contains(&tool.provider_name) {
                hashed_name(&tool.provider_name, &tool.id)
            } else {
                tool.provider_name.clone()
            };
            taken.insert(name.clone());
            out.push(AgentTool::new(
                tool.id.clone(),
                name,
                ToolOrigin::Mcp(tool.server.clone()),
                tool.descriptor.clone(),
                &shared.policy,
            ));
        }
        if let Some(active) = lock(&self.active).as_ref() {
            out.retain(|tool| active.admits(tool));
        }
        out
    }

    fn pinned(&self) -> BTreeSet<String> {
        lock(&self.found).pinned.clone()
    }

    async fn call(&self, tool: &AgentTool, arguments: Map<String, Value>) -> Result<ToolOutput, PortError> {
        self.call_native_or_mcp(tool, arguments, None).await
    }

    async fn call_approved(
        &self,
        tool: &AgentTool,
        arguments: Map<String, Value>,
        approval_id: &str,
    ) -> Result<ToolOutput, PortError> {
        self.call_native_or_mcp(tool, arguments, Some(approval_id)).await
    }
}

impl TurnTools {
    /// One call: `search_tools` here, a native through the host (with the hold a person already
    /// approved for it, if any, so the host does not hold it again), an MCP tool on its server.
    async fn call_native_or_mcp(
        &self,
        tool: &AgentTool,
        arguments: Map<String, Value>,
        approved_hold: Option<&str>,
    ) -> Result<ToolOutput, PortError> {
        match &tool.origin {
            ToolOrigin::Native if tool.id == SEARCH_TOOLS_ID && !self.shared.servers.is_empty() => {
                self.search(&arguments)
            }
            ToolOrigin::Native if is_skill_tool(&tool.id) && self.shared.skills.is_some() => {
                let catalog = skill_catalog_of(&self.shared).unwrap_or_default();
                if tool.id == skill_tools::READ_ID {
                    return skill_tools::read(&catalog, &arguments);
                }
                let (output, activation) = skill_tools::activate(&catalog, &tool.id, &arguments)?;
                if let Some(activation) = activation {
                    *lock(&self.active) = Some(activation);
                }
                Ok(output)
            }
            ToolOrigin::Native => {
                let Some(host) = &self.shared.host else {
                    return Err(PortError::new(
                        PortErrorKind::NotFound,
                        format!("no native host serves {:?}", tool.id),
                    ));
                };
                let facts = CallFacts {
                    answers: None,
                    approved_hold: approved_hold.map(str::to_owned),
                };
                match host
                    .call_with(&self.caller, &facts, &tool.descriptor.name, arguments)
                    .await?
                {
                    HostCallOutcome::Done(output) => Ok(output),
                    // A turn has no channel to ask a person mid-call: the questions go back to
                    // the model as the result, as for an MCP client with no input channel.
                    HostCallOutcome::NeedsInput { result, .. } => Ok(result),
                }
            }
            ToolOrigin::Mcp(server) => {
                let output = self.call_mcp(server, &tool.descriptor.name, arguments).await?;
                Ok(self.record_evidence(server, output).await)
            }
        }
    }

    /// Records the evidence `output` carries (when the caller works for a running phase) and
    /// tells the model where under [`RECORDED_FIELD`]; the evidence files' text is taken out
    /// either way, so it never reaches the model's context or a session's history.
    async fn record_evidence(&self, server: &str, mut output: ToolOutput) -> ToolOutput {
        let recorded = match &self.shared.evidence {
            Some(recorder) => match recorder.record(&self.caller, server, &output).await {
                Ok(Some(recorded)) => Some(recorded.to_json()),
                Ok(None) => None,
                Err(e) => {
                    tracing::warn!(event = "twin_evidence_not_recorded", server, error = %e, "a tool's evidence could not be recorded in the twin");
                    Some(
                        json!({"error": e.to_string(), "note": "record the result yourself with twin.commit_work_product"}),
                    )
                }
            },
            None => None,
        };
        output.content.retain(|block| !is_evidence_file(block));
        if let (Some(recorded), Some(Value::Object(structured))) = (recorded, output.structured.as_mut()) {
            structured.insert(RECORDED_FIELD.to_owned(), recorded);
            let text = Value::Object(structured.clone()).to_string();
            if let Some(first) = output
                .content
                .iter_mut()
                .find(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            {
                *first = json!({"type": "text", "text": text});
            }
        }
        output
    }
}

/// An embedded resource carrying an evidence file's text.
fn is_evidence_file(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("resource")
        && block
            .pointer("/resource/uri")
            .and_then(Value::as_str)
            .is_some_and(|uri| uri.starts_with(&format!("{EVIDENCE_FILE_SCHEME}://")))
}
