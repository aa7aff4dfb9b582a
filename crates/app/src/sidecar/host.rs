//! The sidecar's tool host: a fixed set of tools and resources behind the [`ToolHost`] port.

use std::collections::BTreeMap;
use std::sync::Arc;

use metaforge_ports::{
    CallerClass, CallerContext, HostCallOutcome, PortError, PortErrorKind, ResourceTemplateDescriptor,
    ResourceText, ToolDescriptor, ToolHost, ToolOutput,
};
use serde_json::{Map, Value};

use metaforge_domain::tool_gating::{invalid_arguments_envelope, validate_arguments};

/// One tool the sidecar exposes.
#[async_trait::async_trait]
pub trait SidecarTool: Send + Sync {
    /// Its descriptor (`name` is the dotted id, e.g. `flow.list`).
    fn descriptor(&self) -> ToolDescriptor;

    /// Whether callers of `class` see it at all (a tool a class may never call is not listed).
    fn offered_to(&self, class: CallerClass) -> bool {
        let _ = class;
        true
    }

    /// Runs the call; arguments were validated against the descriptor's schema.
    async fn call(
        &self,
        caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError>;
}

/// One resource family the sidecar serves.
#[async_trait::async_trait]
pub trait SidecarResource: Send + Sync {
    /// Its template.
    fn template(&self) -> ResourceTemplateDescriptor;

    /// Reads `uri` when it belongs to this family (`None` when it does not).
    async fn read(&self, uri: &str) -> Option<Result<ResourceText, PortError>>;
}

/// The sidecar's tools and resources.
#[derive(Default)]
pub struct SidecarHost {
    tools: BTreeMap<String, Arc<dyn SidecarTool>>,
    resources: Vec<Arc<dyn SidecarResource>>,
}

impl SidecarHost {
    /// An empty host.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool (a later tool with the same id replaces the earlier one).
    pub fn with_tool(mut self, tool: Arc<dyn SidecarTool>) -> Self {
        self.tools.insert(tool.descriptor().name, tool);
        self
    }

    /// Adds a resource family.
    pub fn with_resource(mut self, resource: Arc<dyn SidecarResource>) -> Self {
        self.resources.push(resource);
        self
    }

    /// Every tool descriptor, whoever the caller (for catalogue-wide checks).
    pub fn all_tools(&self) -> Vec<ToolDescriptor> {
        self.tools.values().map(|t| t.descriptor()).collect()
    }
}

#[async_trait::async_trait]
impl ToolHost for SidecarHost {
    fn tools(&self, caller: CallerClass) -> Vec<ToolDescriptor> {
        self.tools
            .values()
            .filter(|t| t.offered_to(caller))
            .map(|t| t.descriptor())
            .collect()
    }

    async fn call(
        &self,
        caller: &CallerContext,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        let Some(handler) = self.tools.get(tool).filter(|t| t.offered_to(caller.class)) else {
            return Err(PortError::new(
                PortErrorKind::NotFound,
                format!("unknown tool: {tool}"),
            ));
        };
        let as_value = Value::Object(arguments.clone());
        let problems = validate_arguments(Some(&handler.descriptor().input_schema), &as_value);
        if !problems.is_empty() {
            return Ok(HostCallOutcome::Done(ToolOutput::error(
                invalid_arguments_envelope(tool, &problems),
            )));
        }
        tracing::info!(event = "mcp_sidecar_call", tool, caller = caller.class.as_str(),);
        handler.call(caller, arguments).await
    }

    fn resource_templates(&self) -> Vec<ResourceTemplateDescriptor> {
        self.resources.iter().map(|r| r.template()).collect()
    }

    async fn read_resource(&self, uri: &str) -> Result<ResourceText, PortError> {
        for resource in &self.resources {
            if let Some(result) = resource.read(uri).await {
                return result;
            }
        }
        Err(PortError::new(
            PortErrorKind::NotFound,
            format!("unknown resource: {uri}"),
        ))
    }
}
