//! The central tool registry: native and MCP tools in one place, one naming scheme, one
//! invocation path.
//!
//! Invariants:
//! - a registry id (`<server>.<tool>` or a native id) maps to exactly one provider name and back;
//! - registering a tool that is already present reports "already available" and changes nothing;
//! - a pinned tool stays pinned for the registry's life (FORGE-94: a `search_tools` promise holds);
//! - a call is validated against the tool's schema before anything runs (MET-569);
//! - a failed call returns a JSON envelope carrying the server's own payload, never a bare string.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use metaforge_ports::{PortError, PortErrorKind, ToolDescriptor, ToolOutput, ToolSource};
use serde::Serialize;
use serde_json::{Map, Value, json};

use metaforge_domain::tool_cap::{OfferedTool, ToolOrigin as CapOrigin, select_tools};
use metaforge_domain::tool_gating::{invalid_arguments_envelope, validate_arguments};

use super::naming::{hashed_name, mcp_tool_id, preferred_provider_name};

/// A tool implemented in-process (e.g. `search_tools`, the sidecar's `flow.*`).
#[async_trait::async_trait]
pub trait NativeTool: Send + Sync {
    /// The tool's descriptor; its `name` is the native id (e.g. `flow.list`).
    fn descriptor(&self) -> ToolDescriptor;

    /// Runs the tool on already-validated arguments.
    async fn invoke(&self, arguments: Map<String, Value>) -> Result<ToolOutput, PortError>;
}

/// Where a registered tool runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolOrigin {
    /// In-process.
    Native,
    /// On an MCP server.
    Mcp {
        /// The configured server name.
        server: String,
    },
}

/// One registered tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegisteredTool {
    /// Registry id.
    pub id: String,
    /// The name sent to providers (`[A-Za-z0-9_-]{1,64}`).
    pub provider_name: String,
    /// Where it runs.
    pub origin: ToolOrigin,
    /// The tool's own description and schema.
    pub descriptor: ToolDescriptor,
}

/// The answer to a registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// Newly registered under this provider name.
    Registered(String),
    /// It was already registered (under this provider name); nothing changed.
    AlreadyAvailable(String),
}

/// A tool schema in the shape every provider adapter turns into its own wire format.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderToolSchema {
    /// Provider-facing name.
    pub name: String,
    /// Description.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// The schemas chosen for one provider call.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaSelection {
    /// The schemas to send.
    pub schemas: Vec<ProviderToolSchema>,
    /// Registry ids that did not fit the provider's cap (logged as `tool_schemas_truncated`).
    pub dropped: Vec<String>,
}

/// Why a registration was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A native tool's id is not a valid provider name once dots become underscores.
    #[error("native tool id {0:?} must be [A-Za-z0-9_.-], at most 64 characters")]
    InvalidNativeId(String),
    /// Two native tools claim one id.
    #[error("native tool {0:?} is already registered")]
    DuplicateNative(String),
}

#[derive(Default)]
struct Inner {
    tools: BTreeMap<String, RegisteredTool>,
    by_provider_name: BTreeMap<String, String>,
    pinned: BTreeSet<String>,
    natives: BTreeMap<String, Arc<dyn NativeTool>>,
    sources: BTreeMap<String, Arc<dyn ToolSource>>,
}

/// The live registry. Cheap to share (`Arc`); every method takes `&self`.
#[derive(Default)]
pub struct ToolRegistry {
    inner: RwLock<Inner>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        // A poisoned lock only means another thread panicked mid-update of plain maps; the maps
        // are still consistent per entry, so keep serving rather than take the sidecar down.
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers an in-process tool under its own id.
    pub fn register_native(&self, tool: Arc<dyn NativeTool>) -> Result<String, RegistryError> {
        let descriptor = tool.descriptor();
        let id = descriptor.name.clone();
        let valid = !id.is_empty()
            && id.len() <= super::naming::MAX_PROVIDER_NAME_LEN
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            return Err(RegistryError::InvalidNativeId(id));
        }
        let mut inner = self.write();
        if inner.tools.contains_key(&id) {
            return Err(RegistryError::DuplicateNative(id));
        }
        let name = unique_name(&inner, preferred_provider_name(None, &id), &id);
        inner.by_provider_name.insert(name.clone(), id.clone());
        inner.natives.insert(id.clone(), tool);
        inner.tools.insert(
            id.clone(),
            RegisteredTool {
                id,
                provider_name: name.clone(),
                origin: ToolOrigin::Native,
                descriptor,
            },
        );
        Ok(name)
    }

    /// Registers one MCP tool of `source` (its descriptor as the server lists it).
    pub fn register_mcp(&self, source: &Arc<dyn ToolSource>, descriptor: ToolDescriptor) -> Registration {
        let server = source.server_name().to_owned();
        let id = mcp_tool_id(&server, &descriptor.name);
        let mut inner = self.write();
        if let Some(existing) = inner.tools.get(&id) {
            return Registration::AlreadyAvailable(existing.provider_name.clone());
        }
        let name = unique_name(
            &inner,
            preferred_provider_name(Some(&server), &descriptor.name),
            &id,
        );
        inner
            .sources
            .entry(server.clone())
            .or_insert_with(|| Arc::clone(source));
        inner.by_provider_name.insert(name.clone(), id.clone());
        inner.tools.insert(
            id.clone(),
            RegisteredTool {
                id,
                provider_name: name.clone(),
                origin: ToolOrigin::Mcp { server },
                descriptor,
            },
        );
        Registration::Registered(name)
    }

    /// Protects `id` from the provider cap for the rest of this registry's life.
    pub fn pin(&self, id: &str) {
        self.write().pinned.insert(id.to_owned());
    }

    /// The pinned ids.
    pub fn pinned(&self) -> BTreeSet<String> {
        self.read().pinned.clone()
    }

    /// A tool by registry id or provider name.
    pub fn get(&self, id_or_name: &str) -> Option<RegisteredTool> {
        let inner = self.read();
        inner.tools.get(id_or_name).cloned().or_else(|| {
            inner
                .by_provider_name
                .get(id_or_name)
                .and_then(|id| inner.tools.get(id))
                .cloned()
        })
    }

    /// Every registered tool, by id.
    pub fn all(&self) -> Vec<RegisteredTool> {
        self.read().tools.values().cloned().collect()
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.read().tools.len()
    }

    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The schemas for one provider call, chosen under `max_tools` (the provider family's cap,
    /// `metaforge_domain::providers::max_tools_for`). A drop is logged loudly.
    pub fn schemas_for(&self, max_tools: Option<usize>) -> SchemaSelection {
        let (tools, pinned) = {
            let inner = self.read();
            (inner.tools.clone(), inner.pinned.clone())
        };
        // Selection runs on registry ids, the names pins and companion groups are written in.
        let candidates: Vec<OfferedTool> = tools
            .values()
            .map(|t| OfferedTool {
                name: t.id.clone(),
                origin: match &t.origin {
                    ToolOrigin::Native => CapOrigin::Native,
                    ToolOrigin::Mcp { server } => CapOrigin::Mcp(server.clone()),
                },
            })
            .collect();
        let selection = select_tools(&candidates, max_tools, &pinned);
        if !selection.dropped.is_empty() {
            tracing::warn!(
                event = "tool_schemas_truncated",
                limit = max_tools.unwrap_or(0),
                registered = candidates.len(),
                kept = selection.kept.len(),
                dropped_count = selection.dropped.len(),
                dropped = %selection.dropped.join(","),
                protected_exceeds_cap = selection.protected_exceeds_cap,
                "provider tool cap dropped tool schemas"
            );
        }
        let schemas = selection
            .kept
            .iter()
            .filter_map(|id| tools.get(id))
            .map(|t| ProviderToolSchema {
                name: t.provider_name.clone(),
                description: t.descriptor.description.clone(),
                parameters: t.descriptor.input_schema.clone(),
            })
            .collect();
        SchemaSelection {
            schemas,
            dropped: selection.dropped,
        }
    }

    /// Calls a tool by registry id or provider name. Every failure is an error envelope in the
    /// output (MET-569), so this never fails as a Rust error: the model always gets an answer.
    pub async fn invoke(&self, id_or_name: &str, arguments: Map<String, Value>) -> ToolOutput {
        let Some(tool) = self.get(id_or_name) else {
            return ToolOutput::error(json!({
                "status": "error", "error": "unknown_tool", "tool": id_or_name,
                "hint": "call search_tools to find and register a tool"
            }));
        };
        let arguments = Value::Object(arguments);
        let problems = validate_arguments(Some(&tool.descriptor.input_schema), &arguments);
        if !problems.is_empty() {
            return ToolOutput::error(invalid_arguments_envelope(&tool.id, &problems));
        }
        let Value::Object(arguments) = arguments else {
            return ToolOutput::error(json!({"status": "error", "error": "internal"}));
        };
        let result = match &tool.origin {
            ToolOrigin::Native => {
                let native = self.read().natives.get(&tool.id).cloned();
                match native {
                    Some(native) => native.invoke(arguments).await,
                    None => Err(PortError::new(PortErrorKind::Internal, "native handler missing")),
                }
            }
            ToolOrigin::Mcp { server } => {
                let source = self.read().sources.get(server).cloned();
                match source {
                    Some(source) => source.call_tool(&tool.descriptor.name, arguments).await,
                    None => Err(PortError::new(PortErrorKind::Internal, "mcp source missing")),
                }
            }
        };
        match result {
            Ok(output) if output.is_error => ToolOutput::error(json!({
                "status": "error", "error": "tool_error", "tool": tool.id,
                "details": server_payload(&output),
            })),
            Ok(output) => output,
            Err(e) => ToolOutput::error(json!({
                "status": "error",
                "error": port_error_code(e.kind),
                "tool": tool.id,
                "message": e.message,
            })),
        }
    }
}

/// The server's own error payload: its structured content, else its text parsed as JSON, else
/// the text itself — whichever keeps the most of what the server said.
fn server_payload(output: &ToolOutput) -> Value {
    if let Some(structured) = &output.structured {
        return structured.clone();
    }
    let text = output.text();
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

fn port_error_code(kind: PortErrorKind) -> &'static str {
    match kind {
        PortErrorKind::NotFound => "not_found",
        PortErrorKind::Invalid => "invalid_arguments",
        PortErrorKind::Unavailable => "unavailable",
        PortErrorKind::Conflict => "conflict",
        PortErrorKind::Corrupt => "corrupt",
        PortErrorKind::Internal => "internal",
    }
}

fn unique_name(inner: &Inner, preferred: String, id: &str) -> String {
    if !inner.by_provider_name.contains_key(&preferred) {
        return preferred;
    }
    hashed_name(&preferred, id)
}
