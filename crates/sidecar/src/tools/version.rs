//! `flow.version` and the `metaforge://flow/version/{id}` resource over [`FlowBindings`]: one
//! stored version, verified against its hash, in one shape whether the record came from the local
//! store or from the gateway.

use std::sync::Arc;

use metaforge_api::FlowBindings;
use metaforge_domain::flow::verify_version;
use metaforge_ports::{
    CallFacts, CallerContext, FlowVersionRecord, HostCallOutcome, PortError, PortErrorKind,
    ResourceTemplateDescriptor, ResourceText, ToolHints, ToolOutput,
};
use serde_json::{Value, json};

use crate::args::FlowVersionArgs;
use crate::envelope::{ToolError, not_found};
use crate::host::SidecarResource;
use crate::typed::{READ_ONLY, TypedTool};

/// `flow.version`: one stored version, verified against its hash.
pub struct FlowVersion {
    bindings: Arc<dyn FlowBindings>,
}

impl FlowVersion {
    /// The tool over `bindings`.
    pub fn new(bindings: Arc<dyn FlowBindings>) -> Self {
        Self { bindings }
    }
}

#[async_trait::async_trait]
impl TypedTool for FlowVersion {
    const NAME: &'static str = "flow.version";
    const TITLE: &'static str = "Read a flow version";
    const DESCRIPTION: &'static str = "One stored flow version: status, approval, hash and the flow itself.";
    const HINTS: ToolHints = READ_ONLY;
    type Args = FlowVersionArgs;

    async fn run(
        &self,
        _caller: &CallerContext,
        _facts: &CallFacts,
        args: FlowVersionArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        match read_version(self.bindings.as_ref(), &args.id).await {
            Ok(value) => Ok(HostCallOutcome::Done(ToolOutput::json(value))),
            Err(e) if e.kind == PortErrorKind::NotFound => Ok(not_found(&args.id, &e.message)),
            Err(e) => Err(e.into()),
        }
    }
}

async fn read_version(bindings: &dyn FlowBindings, id: &str) -> Result<Value, PortError> {
    version_view(&bindings.version(id).await?)
}

/// The `flow.version` result for one record, its content verified against its hash.
pub fn version_view(record: &FlowVersionRecord) -> Result<Value, PortError> {
    let flow = verify_version(record).map_err(|e| PortError::new(PortErrorKind::Corrupt, e.to_string()))?;
    Ok(json!({
        "id": record.id,
        "template_id": record.template_id,
        "template_version": record.template_version,
        "status": record.status,
        "origin": record.origin,
        "content_hash": record.content_hash,
        "approval_id": record.approval_id,
        "approver": record.approver,
        "created_at": record.created_at,
        "decided_at": record.decided_at,
        "flow": flow,
    }))
}

/// `metaforge://flow/version/{id}`: a version as markdown, for a client with no canvas.
pub struct FlowVersionResource {
    bindings: Arc<dyn FlowBindings>,
}

/// The resource URI prefix.
pub const FLOW_VERSION_URI_PREFIX: &str = "metaforge://flow/version/";

impl FlowVersionResource {
    /// The resource over `bindings`.
    pub fn new(bindings: Arc<dyn FlowBindings>) -> Self {
        Self { bindings }
    }
}

/// A version as markdown: header, status, and one section per phase with its gate.
pub fn version_markdown(version: &Value) -> String {
    let mut md = format!(
        "# Flow version {}\n\n- Template: {} {}\n- Status: {}\n- Content hash: `{}`\n",
        version["id"].as_str().unwrap_or_default(),
        version["template_id"].as_str().unwrap_or_default(),
        version["template_version"].as_str().unwrap_or_default(),
        version["status"].as_str().unwrap_or_default(),
        version["content_hash"].as_str().unwrap_or_default(),
    );
    if let Some(approval) = version["approval_id"].as_str() {
        md.push_str(&format!("- Approval: {approval}\n"));
    }
    if let Some(approver) = version["approver"].as_str() {
        md.push_str(&format!("- Decided by: {approver}\n"));
    }
    md.push_str(&format!(
        "\n## {}\n",
        version["flow"]["title"].as_str().unwrap_or_default()
    ));
    for phase in version["flow"]["phases"].as_array().into_iter().flatten() {
        md.push_str(&format!(
            "\n### {} (`{}`)\n",
            phase["title"].as_str().unwrap_or_default(),
            phase["id"].as_str().unwrap_or_default()
        ));
        let list = |v: &Value| -> String {
            v.as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        };
        let depends = list(&phase["depends_on"]);
        if !depends.is_empty() {
            md.push_str(&format!("- Depends on: {depends}\n"));
        }
        md.push_str(&format!("- Disciplines: {}\n", list(&phase["disciplines"])));
        if let Some(gate) = phase.get("gate").filter(|g| !g.is_null()) {
            md.push_str(&format!(
                "- Gate: {} — requires {}\n",
                gate["name"].as_str().unwrap_or_default(),
                list(&phase["required_deliverables"])
            ));
        }
    }
    md
}

#[async_trait::async_trait]
impl SidecarResource for FlowVersionResource {
    fn template(&self) -> ResourceTemplateDescriptor {
        ResourceTemplateDescriptor {
            uri_template: format!("{FLOW_VERSION_URI_PREFIX}{{id}}"),
            name: "flow-version".to_owned(),
            description: "A stored flow version as markdown".to_owned(),
            mime_type: "text/markdown".to_owned(),
        }
    }

    async fn read(&self, uri: &str) -> Option<Result<ResourceText, PortError>> {
        let id = uri.strip_prefix(FLOW_VERSION_URI_PREFIX)?;
        Some(
            read_version(self.bindings.as_ref(), id)
                .await
                .map(|v| ResourceText {
                    uri: uri.to_owned(),
                    mime_type: "text/markdown".to_owned(),
                    text: version_markdown(&v),
                }),
        )
    }
}
