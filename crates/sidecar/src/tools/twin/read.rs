//! The twin's read tools: `twin.query`, `twin.get_node`, `twin.diff`. Read-only (never gated
//! or held); a caller naming no branch reads the branch it writes to.

use metaforge_app::twin::WORK_PRODUCT_CONTENT;
use metaforge_ports::{
    CallFacts, CallerContext, EdgeDirection, HostCallOutcome, TWIN_MAIN_BRANCH, ToolHints, ToolOutput,
    TwinNode,
};
use serde_json::{Value, json};

use super::args::{DiffArgs, GetNodeArgs, TwinQueryArgs};
use super::{SidecarTwin, answer_error};
use crate::args::ArgError;
use crate::envelope::ToolError;
use crate::typed::{READ_ONLY, TypedTool};

/// `twin.query`.
pub const QUERY_TOOL: &str = "twin.query";
/// `twin.get_node`.
pub const GET_NODE_TOOL: &str = "twin.get_node";
/// `twin.diff`.
pub const DIFF_TOOL: &str = "twin.diff";

/// A node as a listing shows it: its text content left out (`twin.get_node` returns it).
fn listed(node: &TwinNode) -> Value {
    let mut properties = node.properties.clone();
    let content = properties.remove(WORK_PRODUCT_CONTENT);
    let mut view = json!({
        "id": node.id,
        "node_type": node.node_type,
        "properties": properties,
        "content_hash": node.content_hash,
    });
    if let (Some(content), Some(out)) = (content, view.as_object_mut()) {
        out.insert(
            "content_omitted_chars".to_owned(),
            json!(content.as_str().map_or(0, |c| c.chars().count())),
        );
    }
    view
}

/// `twin.query`: the nodes of a branch by type and properties.
pub struct TwinQuery {
    twin: SidecarTwin,
}

impl TwinQuery {
    /// The tool.
    pub fn new(twin: SidecarTwin) -> Self {
        Self { twin }
    }
}

#[async_trait::async_trait]
impl TypedTool for TwinQuery {
    const NAME: &'static str = QUERY_TOOL;
    const TITLE: &'static str = "Query the twin";
    const DESCRIPTION: &'static str = "Lists the nodes of a twin branch by type and exact property values (e.g. type WorkProduct, \
                 properties {\"artifact\": \"cad_model\"}); text content is left out, twin.get_node returns it.";
    const HINTS: ToolHints = READ_ONLY;
    type Args = TwinQueryArgs;

    async fn run(
        &self,
        caller: &CallerContext,
        _facts: &CallFacts,
        args: TwinQueryArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        let branch = match &args.branch {
            Some(branch) => branch.clone(),
            None => self.twin.default_read_branch(caller).await?,
        };
        match self.twin.service.find(&branch, &args.filter()).await {
            Ok(found) => Ok(HostCallOutcome::Done(ToolOutput::json(json!({
                "branch": branch,
                "count": found.nodes.len(),
                "truncated": found.truncated,
                "nodes": found.nodes.iter().map(listed).collect::<Vec<_>>(),
            })))),
            Err(e) => Ok(answer_error(QUERY_TOOL, e, true)?),
        }
    }
}

/// `twin.get_node`: one node, whole, with its edges both ways.
pub struct GetNode {
    twin: SidecarTwin,
}

impl GetNode {
    /// The tool.
    pub fn new(twin: SidecarTwin) -> Self {
        Self { twin }
    }
}

#[async_trait::async_trait]
impl TypedTool for GetNode {
    const NAME: &'static str = GET_NODE_TOOL;
    const TITLE: &'static str = "Read a twin node";
    const DESCRIPTION: &'static str =
        "One twin node with all its properties (text content included) and its edges in both directions.";
    const HINTS: ToolHints = READ_ONLY;
    type Args = GetNodeArgs;

    async fn run(
        &self,
        caller: &CallerContext,
        _facts: &CallFacts,
        args: GetNodeArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        let branch = match &args.branch {
            Some(branch) => branch.clone(),
            None => self.twin.default_read_branch(caller).await?,
        };
        let node = match self.twin.service.node(&branch, &args.id).await {
            Ok(node) => node,
            Err(e) => return Ok(answer_error(GET_NODE_TOOL, e, true)?),
        };
        let edges = match self
            .twin
            .service
            .edges(&branch, &node.id, EdgeDirection::Both, None)
            .await
        {
            Ok(edges) => edges,
            Err(e) => return Ok(answer_error(GET_NODE_TOOL, e, true)?),
        };
        Ok(HostCallOutcome::Done(ToolOutput::json(json!({
            "branch": branch,
            "node": node,
            "edges": edges,
        }))))
    }
}

/// `twin.diff`: what differs from one branch to another.
pub struct TwinDiffTool {
    twin: SidecarTwin,
}

impl TwinDiffTool {
    /// The tool.
    pub fn new(twin: SidecarTwin) -> Self {
        Self { twin }
    }
}

#[async_trait::async_trait]
impl TypedTool for TwinDiffTool {
    const NAME: &'static str = DIFF_TOOL;
    const TITLE: &'static str = "Diff two twin branches";
    const DESCRIPTION: &'static str = "What differs from base (default main) to head (default this caller's run branch): nodes and \
                 edges added, removed and changed.";
    const HINTS: ToolHints = READ_ONLY;
    type Args = DiffArgs;

    async fn run(
        &self,
        caller: &CallerContext,
        _facts: &CallFacts,
        args: DiffArgs,
    ) -> Result<HostCallOutcome, ToolError> {
        let base = args.base.unwrap_or_else(|| TWIN_MAIN_BRANCH.to_owned());
        let head = match args.head {
            Some(head) => head,
            None => {
                let own = self.twin.default_read_branch(caller).await?;
                if own == base {
                    return Err(ArgError::new(
                        "head",
                        format!("name the branch to compare with {base} (this caller writes to {own})"),
                    )
                    .into());
                }
                own
            }
        };
        match self.twin.service.diff(&base, &head).await {
            Ok(diff) => Ok(HostCallOutcome::Done(ToolOutput::json(json!({
                "base": base,
                "head": head,
                "summary": {
                    "nodes_added": diff.nodes_added.len(),
                    "nodes_removed": diff.nodes_removed.len(),
                    "nodes_changed": diff.nodes_changed.len(),
                    "edges_added": diff.edges_added.len(),
                    "edges_removed": diff.edges_removed.len(),
                },
                "diff": diff,
            })))),
            Err(e) => Ok(answer_error(DIFF_TOOL, e, true)?),
        }
    }
}
