//! The full tool catalogue across MCP servers, domain scoping, and `search_tools`.
//!
//! The catalogue is everything the configured servers offer; the registry is what a turn can
//! call. Domain scoping registers only the always-visible core servers plus the named
//! disciplines' tools (`domains = None` registers everything). A scoped turn can still reach the
//! rest through `search_tools`, which registers matches into the live registry and pins them, so
//! a tool it reports available is also kept in the next request's schemas (FORGE-94).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use metaforge_ports::{PortError, PortErrorKind, ToolDescriptor, ToolHints, ToolOutput, ToolSource};
use serde_json::{Map, Value, json};

use super::naming::mcp_tool_id;
use super::registry::{NativeTool, Registration, ToolRegistry};

/// Servers every turn sees, whatever its disciplines (the seed's core adapters).
pub const CORE_SERVERS: &[&str] = &[
    "twin",
    "project",
    "session",
    "knowledge",
    "memory",
    "constraint",
    "web",
    "component",
    "digikey",
    "mouser",
    "octopart",
];

/// One tool in the catalogue, with the source that serves it.
#[derive(Clone)]
pub struct CatalogueEntry {
    /// The serving server.
    pub source: Arc<dyn ToolSource>,
    /// The tool as the server describes it.
    pub descriptor: ToolDescriptor,
}

impl CatalogueEntry {
    /// Registry id.
    pub fn id(&self) -> String {
        mcp_tool_id(self.source.server_name(), &self.descriptor.name)
    }
}

/// Everything the configured servers offer, listed once.
#[derive(Clone, Default)]
pub struct ToolCatalogue {
    entries: Vec<CatalogueEntry>,
    /// Servers that could not be listed, with the reason (never silently empty).
    pub unavailable: BTreeMap<String, String>,
}

impl ToolCatalogue {
    /// Lists every source. A server that fails to list is recorded in `unavailable` and logged
    /// (`mcp_server_unavailable`), so one dead server does not take the others down.
    pub async fn load(sources: &[Arc<dyn ToolSource>]) -> Self {
        let mut catalogue = Self::default();
        for source in sources {
            match source.list_tools().await {
                Ok(tools) => catalogue
                    .entries
                    .extend(tools.into_iter().map(|descriptor| CatalogueEntry {
                        source: Arc::clone(source),
                        descriptor,
                    })),
                Err(e) => {
                    tracing::warn!(
                        event = "mcp_server_unavailable",
                        server = source.server_name(),
                        error = %e
                    );
                    catalogue
                        .unavailable
                        .insert(source.server_name().to_owned(), e.message);
                }
            }
        }
        catalogue
    }

    /// A catalogue over already-known entries (tests, and callers that list themselves).
    pub fn from_entries(entries: Vec<CatalogueEntry>) -> Self {
        Self {
            entries,
            unavailable: BTreeMap::new(),
        }
    }

    /// All entries.
    pub fn entries(&self) -> &[CatalogueEntry] {
        &self.entries
    }

    /// Entries whose id, name or description contain every keyword of `query` (case-blind),
    /// best first: more keyword hits in the name rank higher, then id order.
    pub fn search(&self, query: &str, limit: usize) -> Vec<&CatalogueEntry> {
        let words: Vec<String> = query
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        if words.is_empty() {
            return Vec::new();
        }
        let mut scored: Vec<(usize, String, &CatalogueEntry)> = self
            .entries
            .iter()
            .filter_map(|e| {
                let id = e.id().to_lowercase();
                let haystack = format!("{id} {}", e.descriptor.description.to_lowercase());
                if words.iter().all(|w| haystack.contains(w.as_str())) {
                    let name_hits = words.iter().filter(|w| id.contains(w.as_str())).count();
                    Some((name_hits, e.id(), e))
                } else {
                    None
                }
            })
            .collect();
        scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        scored.into_iter().take(limit).map(|(_, _, e)| e).collect()
    }
}

/// Which servers and tools belong to which discipline.
#[derive(Debug, Clone, Default)]
pub struct DomainScope {
    /// Always-visible servers.
    pub core_servers: BTreeSet<String>,
    /// Discipline → registry ids or `server.*` patterns it needs (the skills' `tools_required`).
    pub disciplines: BTreeMap<String, Vec<String>>,
}

impl DomainScope {
    /// The seed's core servers and the given discipline map.
    pub fn with_disciplines(disciplines: BTreeMap<String, Vec<String>>) -> Self {
        Self {
            core_servers: CORE_SERVERS.iter().map(|s| (*s).to_owned()).collect(),
            disciplines,
        }
    }

    /// Whether `entry` is visible to a turn scoped to `domains` (`None` = unscoped: everything).
    pub fn admits(&self, entry: &CatalogueEntry, domains: Option<&[String]>) -> bool {
        let Some(domains) = domains else {
            return true;
        };
        let server = entry.source.server_name();
        if self.core_servers.contains(server) {
            return true;
        }
        let id = entry.id();
        domains
            .iter()
            .filter_map(|d| self.disciplines.get(d))
            .flatten()
            .any(|pattern| match pattern.strip_suffix(".*") {
                Some(prefix) => prefix == server,
                None => *pattern == id,
            })
    }
}

/// Registers the catalogue's tools a turn scoped to `domains` may see. Returns how many were new.
pub fn register_scoped(
    registry: &ToolRegistry,
    catalogue: &ToolCatalogue,
    scope: &DomainScope,
    domains: Option<&[String]>,
) -> usize {
    catalogue
        .entries()
        .iter()
        .filter(|e| scope.admits(e, domains))
        .filter(|e| {
            matches!(
                registry.register_mcp(&e.source, e.descriptor.clone()),
                Registration::Registered(_)
            )
        })
        .count()
}

/// The `search_tools` native tool: keyword search over the full catalogue that registers and
/// pins what it finds.
pub struct SearchTools {
    registry: Arc<ToolRegistry>,
    catalogue: Arc<ToolCatalogue>,
}

/// The native id of the search tool.
pub const SEARCH_TOOLS_ID: &str = "search_tools";
const DEFAULT_SEARCH_LIMIT: usize = 10;
const MAX_SEARCH_LIMIT: usize = 50;

impl SearchTools {
    /// A search tool registering into `registry` (the live one, shared) from `catalogue`.
    pub fn new(registry: Arc<ToolRegistry>, catalogue: Arc<ToolCatalogue>) -> Self {
        Self { registry, catalogue }
    }
}

#[async_trait::async_trait]
impl NativeTool for SearchTools {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor {
            name: SEARCH_TOOLS_ID.to_owned(),
            title: Some("Search tools".to_owned()),
            description: "Search every configured tool server by keyword and make the matches \
                          callable from your next step. Tools already available are reported as such."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "required": ["query"],
                "properties": {
                    "query": {"type": "string", "description": "keywords, e.g. 'pcb drill'"},
                    "limit": {"type": "integer", "description": "most matches to return (default 10, max 50)"}
                }
            }),
            hints: ToolHints {
                read_only_hint: Some(true),
                ..ToolHints::default()
            },
        }
    }

    async fn invoke(&self, arguments: Map<String, Value>) -> Result<ToolOutput, PortError> {
        let query = arguments
            .get("query")
            .and_then(Value::as_str)
            .ok_or_else(|| PortError::new(PortErrorKind::Invalid, "query: required string"))?;
        let limit = arguments
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_SEARCH_LIMIT, |l| {
                usize::try_from(l)
                    .unwrap_or(MAX_SEARCH_LIMIT)
                    .clamp(1, MAX_SEARCH_LIMIT)
            });
        let mut matches = Vec::new();
        for entry in self.catalogue.search(query, limit) {
            let id = entry.id();
            let (status, name) = match self
                .registry
                .register_mcp(&entry.source, entry.descriptor.clone())
            {
                Registration::Registered(name) => ("registered", name),
                Registration::AlreadyAvailable(name) => ("already available", name),
            };
            // Pin both: "already available" is a promise the next turn's cap must keep.
            self.registry.pin(&id);
            matches.push(json!({
                "id": id, "name": name, "status": status,
                "description": entry.descriptor.description,
            }));
        }
        Ok(ToolOutput::json(json!({
            "query": query,
            "count": matches.len(),
            "matches": matches,
        })))
    }
}
