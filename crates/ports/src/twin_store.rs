//! The digital twin (seed §5.7): a versioned graph of work products with Git-like branches.
//! Every change is a commit on a branch; `main` always exists; merges are fast-forward only.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::error::PortError;

/// The branch every twin starts with.
pub const TWIN_MAIN_BRANCH: &str = "main";

/// The property of a `WorkProduct` node naming the deliverable it records (`cad_model`,
/// `drawing`, …): what a gate's readiness check counts (FORGE-495).
pub const WORK_PRODUCT_ARTIFACT: &str = "artifact";
/// The property of a `WorkProduct` node naming the phase that recorded it.
pub const WORK_PRODUCT_PHASE: &str = "phase";
/// The property of a `WorkProduct` node naming the run that recorded it.
pub const WORK_PRODUCT_RUN: &str = "run_id";

/// The branch a design-flow run's writes go to, `run/<id>` ("changes staged in a twin branch
/// before approval"): its phases' work products are read from here, never from a brain's prose,
/// and it is merged into `main` when the run completes past its release gate.
pub fn run_branch(run_id: &str) -> String {
    format!("run/{run_id}")
}

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TwinNodeType {
    /// An engineering artefact (model, drawing, BOM, report…).
    WorkProduct,
    /// A cross-domain rule a design must satisfy.
    Constraint,
    /// A version of a work product.
    Version,
    /// A physical or electronic component.
    Component,
    /// The agent that produced something.
    Agent,
    /// A design decision and its rationale (`twin.record_decision`).
    Decision,
}

impl TwinNodeType {
    /// Every node type, for engines that must enumerate them.
    pub const ALL: [Self; 6] = [
        Self::WorkProduct,
        Self::Constraint,
        Self::Version,
        Self::Component,
        Self::Agent,
        Self::Decision,
    ];

    /// The label as the seed spells it (used in storage and as a Cypher label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WorkProduct => "WorkProduct",
            Self::Constraint => "Constraint",
            Self::Version => "Version",
            Self::Component => "Component",
            Self::Agent => "Agent",
            Self::Decision => "Decision",
        }
    }

    /// Parses a label written by [`TwinNodeType::as_str`].
    pub fn parse(label: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == label)
    }
}

/// What an edge means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TwinEdgeType {
    /// `from` needs `to`.
    DependsOn,
    /// `from` implements the requirement or design `to`.
    Implements,
    /// `from` (a test, analysis) validates `to`.
    Validates,
    /// `from` contains `to` (assembly, part).
    Contains,
    /// `from` is subject to the constraint `to`.
    ConstrainedBy,
    /// `from` was produced by the agent `to`.
    ProducedBy,
    /// `from` is a version of `to`.
    VersionOf,
}

impl TwinEdgeType {
    /// Every edge type, for engines that must enumerate them (Cypher has no dynamic rel types).
    pub const ALL: [Self; 7] = [
        Self::DependsOn,
        Self::Implements,
        Self::Validates,
        Self::Contains,
        Self::ConstrainedBy,
        Self::ProducedBy,
        Self::VersionOf,
    ];

    /// The relationship type as the seed spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DependsOn => "DEPENDS_ON",
            Self::Implements => "IMPLEMENTS",
            Self::Validates => "VALIDATES",
            Self::Contains => "CONTAINS",
            Self::ConstrainedBy => "CONSTRAINED_BY",
            Self::ProducedBy => "PRODUCED_BY",
            Self::VersionOf => "VERSION_OF",
        }
    }

    /// Parses a type written by [`TwinEdgeType::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

/// A node on a branch. `content_hash` is derived from type and properties
/// ([`twin_content_hash`]), so two branches holding the same node agree on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TwinNode {
    /// uuid v7.
    pub id: String,
    /// What it is.
    pub node_type: TwinNodeType,
    /// Its properties (a JSON object).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub properties: serde_json::Map<String, serde_json::Value>,
    /// Lower-case hex SHA-256 of the canonical JSON of `{type, properties}`.
    pub content_hash: String,
}

impl TwinNode {
    /// A node with its content hash computed.
    pub fn new(
        id: impl Into<String>,
        node_type: TwinNodeType,
        properties: serde_json::Map<String, serde_json::Value>,
    ) -> Self {
        let content_hash = twin_content_hash(node_type, &properties);
        Self {
            id: id.into(),
            node_type,
            properties,
            content_hash,
        }
    }
}

/// A typed, directed edge on a branch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TwinEdge {
    /// uuid v7.
    pub id: String,
    /// What it means.
    pub edge_type: TwinEdgeType,
    /// Source node id.
    pub from: String,
    /// Target node id.
    pub to: String,
    /// Its properties (a JSON object).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub properties: serde_json::Map<String, serde_json::Value>,
}

/// The changes one commit makes, applied in this order: node upserts, node deletions (which
/// also remove the node's edges), edge removals, edge additions.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TwinChangeSet {
    /// Nodes created or replaced (the stored hash is recomputed, never trusted).
    pub upsert_nodes: Vec<TwinNode>,
    /// Node ids deleted (each must exist).
    pub delete_nodes: Vec<String>,
    /// Edges added (new ids; both ends must exist after the node changes).
    pub add_edges: Vec<TwinEdge>,
    /// Edge ids removed (each must exist).
    pub remove_edges: Vec<String>,
}

impl TwinChangeSet {
    /// True when the set changes nothing (an empty commit is `Invalid`).
    pub fn is_empty(&self) -> bool {
        self.upsert_nodes.is_empty()
            && self.delete_nodes.is_empty()
            && self.add_edges.is_empty()
            && self.remove_edges.is_empty()
    }
}

/// A commit request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TwinCommitRequest {
    /// The new commit's id (uuid v7).
    pub id: String,
    /// The branch it goes on.
    pub branch: String,
    /// The head the writer based its change on; a different current head is a `Conflict`
    /// (optimistic concurrency). `None` commits on whatever the head is.
    pub expected_head: Option<String>,
    /// Why.
    pub message: String,
    /// Who.
    pub author: String,
    /// When.
    pub at: Timestamp,
    /// What.
    pub changes: TwinChangeSet,
}

/// A commit as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TwinCommit {
    /// Its id.
    pub id: String,
    /// The commit before it on its branch (`None` for a branch's first commit).
    pub parent: Option<String>,
    /// The branch it was made on.
    pub branch: String,
    /// Why.
    pub message: String,
    /// Who.
    pub author: String,
    /// When.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: Timestamp,
    /// The W3C `traceparent` of the commit's write (a child of the work that made it: a
    /// person's request, a run's phase), so a commit can be joined to its trace; absent when no
    /// trace was being recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A branch and where it points.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TwinBranch {
    /// Its name.
    pub name: String,
    /// Its head commit (`None` before the first commit).
    pub head: Option<String>,
}

/// A node present on both sides with different content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TwinNodeChange {
    /// The node on the base side.
    pub before: TwinNode,
    /// The node on the other side.
    pub after: TwinNode,
}

/// What differs between two branches, read from `base` towards `head`; every list sorted by id.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TwinDiff {
    /// Nodes only on `head`.
    pub nodes_added: Vec<TwinNode>,
    /// Nodes only on `base`.
    pub nodes_removed: Vec<TwinNode>,
    /// Nodes on both whose content hash differs.
    pub nodes_changed: Vec<TwinNodeChange>,
    /// Edges only on `head`.
    pub edges_added: Vec<TwinEdge>,
    /// Edges only on `base`.
    pub edges_removed: Vec<TwinEdge>,
}

/// A node query on one branch: every given criterion must hold.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TwinNodeQuery {
    /// Only nodes of this type.
    pub node_type: Option<TwinNodeType>,
    /// Only nodes whose top-level property `.0` equals `.1` exactly (JSON equality).
    pub property: Option<(String, serde_json::Value)>,
}

/// Which edges of a node to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EdgeDirection {
    /// Edges leaving the node.
    Outgoing,
    /// Edges arriving at the node.
    Incoming,
    /// Both.
    Both,
}

/// The twin store. Reads and writes name a branch; a branch that does not exist is `NotFound`.
#[async_trait]
pub trait TwinStore: Send + Sync {
    /// Every branch, sorted by name (always including `main`).
    async fn branches(&self) -> Result<Vec<TwinBranch>, PortError>;

    /// Creates `name` at `from`'s head with `from`'s content (`Conflict` if it exists, `Invalid`
    /// for an empty name).
    async fn create_branch(&self, name: &str, from: &str) -> Result<TwinBranch, PortError>;

    /// Applies a change set as one commit, all or nothing: a bad change (dangling edge, missing
    /// node, duplicate edge id, empty set) is `Invalid` and nothing is written.
    async fn commit(&self, request: TwinCommitRequest) -> Result<TwinCommit, PortError>;

    /// A branch's commits, newest first (following parents from its head).
    async fn log(&self, branch: &str) -> Result<Vec<TwinCommit>, PortError>;

    /// One node on a branch (`NotFound` when absent).
    async fn node(&self, branch: &str, id: &str) -> Result<TwinNode, PortError>;

    /// The nodes on a branch matching `query`, sorted by id.
    async fn find_nodes(&self, branch: &str, query: &TwinNodeQuery) -> Result<Vec<TwinNode>, PortError>;

    /// A node's edges on a branch, optionally of one type, sorted by id.
    async fn edges(
        &self,
        branch: &str,
        node_id: &str,
        direction: EdgeDirection,
        edge_type: Option<TwinEdgeType>,
    ) -> Result<Vec<TwinEdge>, PortError>;

    /// What differs from `base` to `head`.
    async fn diff(&self, base: &str, head: &str) -> Result<TwinDiff, PortError>;

    /// Fast-forwards `target` to `source`'s head: allowed only when `target`'s head is an
    /// ancestor of (or equal to) `source`'s head, otherwise `Conflict` and nothing changes.
    async fn merge_fast_forward(&self, source: &str, target: &str) -> Result<TwinBranch, PortError>;
}

/// The content hash of a node: SHA-256 (lower-case hex) of the canonical JSON of
/// `{"properties": …, "type": …}`.
pub fn twin_content_hash(
    node_type: TwinNodeType,
    properties: &serde_json::Map<String, serde_json::Value>,
) -> String {
    let mut doc = serde_json::Map::new();
    doc.insert(
        "type".to_owned(),
        serde_json::Value::String(node_type.as_str().to_owned()),
    );
    doc.insert(
        "properties".to_owned(),
        serde_json::Value::Object(properties.clone()),
    );
    crate::canonical::canonical_sha256(&serde_json::Value::Object(doc))
}
