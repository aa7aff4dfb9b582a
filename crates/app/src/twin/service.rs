//! [`TwinService`]: the twin's use cases over the [`TwinStore`] port, shared by both doors (the
//! sidecar's `twin.*` tools write and read through it, the gateway's `/v1/twin` routes read).
//!
//! Every write is checked in full before anything is written (the door calls the `check_*`
//! twin of a write before it holds the call for a person, so a person is never asked to approve
//! a write that was always going to be refused), and is then one commit on the target's branch.

use std::collections::BTreeSet;
use std::sync::Arc;

use metaforge_ports::twin_rules::validate_branch_name;
use metaforge_ports::{
    Clock, EdgeDirection, IdGen, PortError, PortErrorKind, TWIN_MAIN_BRANCH, TwinBranch, TwinChangeSet,
    TwinCommit, TwinCommitRequest, TwinDiff, TwinEdge, TwinEdgeType, TwinNode, TwinNodeQuery, TwinNodeType,
    TwinStore, WORK_PRODUCT_ARTIFACT, WORK_PRODUCT_PHASE, WORK_PRODUCT_RUN, sha256_hex,
};
use serde_json::{Map, Value};

use super::scope::WriteTarget;
use super::{
    DECISION_ABOUT, DECISION_ALTERNATIVES, DECISION_RATIONALE, DECISION_STATEMENT, RESERVED_PROPERTIES,
    RunMerge, TwinError, WORK_PRODUCT_CONTENT, WORK_PRODUCT_CONTENT_HASH, WORK_PRODUCT_TITLE,
    WORK_PRODUCT_URI, branch_exists,
};

/// How many nodes a query answers when the caller names no limit.
pub const DEFAULT_QUERY_LIMIT: usize = 100;
/// The most nodes (or commits) one read answers.
pub const MAX_QUERY_LIMIT: usize = 500;

/// A work product to commit: the deliverable it is, its title and the hash of its content.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WorkProductInput {
    /// The deliverable name a gate requires (`cad_model`, `simulation_result`, `test_plan`, `bom`).
    pub artifact: String,
    /// A human title.
    pub title: String,
    /// The text content; its SHA-256 becomes `content_hash` and the text is kept with the node.
    pub content: Option<String>,
    /// The lower-case hex SHA-256 of content kept elsewhere (a STEP file at `uri`); when `content`
    /// is given too, the two must agree.
    pub content_hash: Option<String>,
    /// Where the file lives.
    pub uri: Option<String>,
    /// The id of the work product this commit replaces (a new version of it); `None` = a new node.
    pub replaces: Option<String>,
    /// Further properties (none of [`RESERVED_PROPERTIES`]).
    pub properties: Map<String, Value>,
}

/// A decision to record, with its rationale.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DecisionInput {
    /// What was decided.
    pub decision: String,
    /// Why (required: a decision without its reason is not a record).
    pub rationale: String,
    /// The options considered and not taken.
    pub alternatives: Vec<String>,
    /// The ids of the nodes the decision is about (each must be on the branch written).
    pub about: Vec<String>,
    /// Further properties (none of [`RESERVED_PROPERTIES`]).
    pub properties: Map<String, Value>,
}

/// A typed edge to add between two nodes of the branch written.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkInput {
    /// Source node id.
    pub from: String,
    /// Target node id.
    pub to: String,
    /// What the edge means.
    pub edge_type: TwinEdgeType,
    /// Its properties (none of [`RESERVED_PROPERTIES`]).
    pub properties: Map<String, Value>,
}

/// Which nodes a query wants: every criterion must hold.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFilter {
    /// Only nodes of this type.
    pub node_type: Option<TwinNodeType>,
    /// Only nodes whose top-level property equals the value exactly (JSON equality), each pair.
    pub properties: Vec<(String, Value)>,
    /// At most this many nodes (1..=[`MAX_QUERY_LIMIT`]).
    pub limit: usize,
}

impl Default for NodeFilter {
    fn default() -> Self {
        Self {
            node_type: None,
            properties: Vec::new(),
            limit: DEFAULT_QUERY_LIMIT,
        }
    }
}

/// A query's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundNodes {
    /// The matching nodes, sorted by id, at most the filter's limit.
    pub nodes: Vec<TwinNode>,
    /// True when more nodes matched than the limit let through.
    pub truncated: bool,
}

/// A node written by one commit.
#[derive(Debug, Clone, PartialEq)]
pub struct CommittedNode {
    /// The branch written.
    pub branch: String,
    /// The commit.
    pub commit: TwinCommit,
    /// The node as stored (its content hash computed).
    pub node: TwinNode,
}

/// An edge written by one commit.
#[derive(Debug, Clone, PartialEq)]
pub struct CommittedEdge {
    /// The branch written.
    pub branch: String,
    /// The commit.
    pub commit: TwinCommit,
    /// The edge as stored.
    pub edge: TwinEdge,
}

/// The twin's use cases over the store, with time and ids from their ports.
#[derive(Clone)]
pub struct TwinService {
    store: Arc<dyn TwinStore>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
}

/// A trimmed, non-empty text, or the refusal naming `field`.
fn required_text(field: &str, value: &str) -> Result<String, TwinError> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(TwinError::invalid(field, "must not be empty"));
    }
    if trimmed.chars().any(char::is_control) {
        return Err(TwinError::invalid(field, "must not contain control characters"));
    }
    Ok(trimmed.to_owned())
}

/// A lower-case hex SHA-256, or the refusal naming `field`.
fn sha256_text(field: &str, value: &str) -> Result<String, TwinError> {
    let hash = value.trim().to_ascii_lowercase();
    if hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(hash)
    } else {
        Err(TwinError::invalid(
            field,
            "must be the SHA-256 of the content as 64 hex digits",
        ))
    }
}

/// The caller's extra properties, refused when one names what MetaForge sets itself. A run's
/// `run_id` and `phase` may be repeated (a brief may tell a model to send them) only with the
/// values the writer's run scope has; anywhere else they are refused, so no argument can move a
/// work product into another run or phase.
fn extra_properties(
    field: &str,
    target: &WriteTarget,
    properties: &Map<String, Value>,
) -> Result<Map<String, Value>, TwinError> {
    let mut kept = Map::new();
    for (key, value) in properties {
        if key.trim().is_empty() {
            return Err(TwinError::invalid(field, "a property name must not be empty"));
        }
        let scoped = match (key.as_str(), target.run()) {
            (WORK_PRODUCT_RUN, Some(scope)) => Some(scope.run_id.as_str()),
            (WORK_PRODUCT_PHASE, Some(scope)) => Some(scope.phase.as_str()),
            _ => None,
        };
        if let Some(own) = scoped {
            if value.as_str() == Some(own) {
                continue;
            }
            return Err(TwinError::invalid(
                format!("{field}.{key}"),
                format!(
                    "this write belongs to {key} '{own}' (from the caller's run, never from an argument); omit it"
                ),
            ));
        }
        if RESERVED_PROPERTIES.contains(&key.as_str()) {
            return Err(TwinError::invalid(
                format!("{field}.{key}"),
                "MetaForge sets this property itself (the run and phase come from the caller's run, never from an argument)",
            ));
        }
        kept.insert(key.clone(), value.clone());
    }
    Ok(kept)
}

/// Stamps a run's write with its run and phase.
pub(super) fn stamp(target: &WriteTarget, properties: &mut Map<String, Value>) {
    if let Some(scope) = target.run() {
        properties.insert(WORK_PRODUCT_RUN.to_owned(), Value::String(scope.run_id.clone()));
        properties.insert(WORK_PRODUCT_PHASE.to_owned(), Value::String(scope.phase.clone()));
    }
}

fn branch_name(field: &str, name: &str) -> Result<(), TwinError> {
    validate_branch_name(name).map_err(|e| TwinError::invalid(field, e.message))
}

impl TwinService {
    /// The service over `store`.
    pub fn new(store: Arc<dyn TwinStore>, clock: Arc<dyn Clock>, ids: Arc<dyn IdGen>) -> Self {
        Self { store, clock, ids }
    }

    /// The store (for the run convention's free functions).
    pub fn store(&self) -> &Arc<dyn TwinStore> {
        &self.store
    }

    /// [`super::recorded_deliverables`] over this service's store.
    pub async fn recorded_deliverables(&self, run_id: &str, phase: &str) -> Result<Vec<String>, PortError> {
        super::recorded_deliverables(self.store.as_ref(), run_id, phase).await
    }

    /// [`super::merge_run_branch`] over this service's store.
    pub async fn merge_run_branch(&self, run_id: &str) -> Result<RunMerge, TwinError> {
        super::merge_run_branch(self.store.as_ref(), run_id).await
    }

    /// The branch a write to `target` is checked against: the run's branch once it exists, else
    /// `main` (which the run's branch will be created from).
    pub async fn read_branch(&self, target: &WriteTarget) -> Result<String, PortError> {
        let branch = target.branch();
        if branch == TWIN_MAIN_BRANCH || branch_exists(self.store.as_ref(), &branch).await? {
            Ok(branch)
        } else {
            Ok(TWIN_MAIN_BRANCH.to_owned())
        }
    }

    // ----- writes ---------------------------------------------------------------------------

    /// Checks a work product as [`commit_work_product`](Self::commit_work_product) would, and
    /// writes nothing.
    pub async fn check_work_product(
        &self,
        target: &WriteTarget,
        input: &WorkProductInput,
    ) -> Result<(), TwinError> {
        self.work_product_node(target, input).await.map(|_| ())
    }

    /// Commits a work product on the target's branch (creating a run's branch from `main` on its
    /// first write). A run's work product carries the run and phase; the node keeps `artifact`,
    /// `title`, `content_hash` (and `content`, `uri` when given).
    pub async fn commit_work_product(
        &self,
        target: &WriteTarget,
        author: &str,
        input: &WorkProductInput,
    ) -> Result<CommittedNode, TwinError> {
        let node = self.work_product_node(target, input).await?;
        let artifact = input.artifact.trim();
        let message = match &input.replaces {
            Some(id) => format!("work product {artifact} (replaces {id}): {}", input.title.trim()),
            None => format!("work product {artifact}: {}", input.title.trim()),
        };
        let (branch, commit) = self
            .write(
                target,
                author,
                message,
                TwinChangeSet {
                    upsert_nodes: vec![node.clone()],
                    ..TwinChangeSet::default()
                },
            )
            .await?;
        tracing::info!(event = "twin_work_product_committed", branch = %branch, node_id = %node.id, artifact, commit_id = %commit.id, "a work product was committed to the twin");
        Ok(CommittedNode { branch, commit, node })
    }

    async fn work_product_node(
        &self,
        target: &WriteTarget,
        input: &WorkProductInput,
    ) -> Result<TwinNode, TwinError> {
        let artifact = required_text("artifact", &input.artifact)?;
        let title = required_text("title", &input.title)?;
        let content_hash = match (&input.content, &input.content_hash) {
            (None, None) => {
                return Err(TwinError::invalid(
                    "content",
                    "give the work product's content, or content_hash (the SHA-256 of content kept at uri)",
                ));
            }
            (Some(content), None) => sha256_hex(content),
            (None, Some(hash)) => sha256_text("content_hash", hash)?,
            (Some(content), Some(hash)) => {
                let given = sha256_text("content_hash", hash)?;
                let actual = sha256_hex(content);
                if given != actual {
                    return Err(TwinError::invalid(
                        "content_hash",
                        format!("does not match the SHA-256 of content ({actual})"),
                    ));
                }
                actual
            }
        };
        let mut properties = extra_properties("properties", target, &input.properties)?;
        properties.insert(WORK_PRODUCT_ARTIFACT.to_owned(), Value::String(artifact));
        properties.insert(WORK_PRODUCT_TITLE.to_owned(), Value::String(title));
        properties.insert(WORK_PRODUCT_CONTENT_HASH.to_owned(), Value::String(content_hash));
        if let Some(content) = &input.content {
            properties.insert(WORK_PRODUCT_CONTENT.to_owned(), Value::String(content.clone()));
        }
        if let Some(uri) = &input.uri {
            properties.insert(
                WORK_PRODUCT_URI.to_owned(),
                Value::String(required_text("uri", uri)?),
            );
        }
        stamp(target, &mut properties);
        let id = match &input.replaces {
            None => self.ids.new_id(),
            Some(id) => {
                let branch = self.read_branch(target).await?;
                let existing = self.existing_node(&branch, "node_id", id).await?;
                if existing.node_type != TwinNodeType::WorkProduct {
                    return Err(TwinError::invalid(
                        "node_id",
                        format!(
                            "node '{id}' is a {}, not a work product",
                            existing.node_type.as_str()
                        ),
                    ));
                }
                existing.id
            }
        };
        Ok(TwinNode::new(id, TwinNodeType::WorkProduct, properties))
    }

    /// Checks a decision as [`record_decision`](Self::record_decision) would, and writes nothing.
    pub async fn check_decision(&self, target: &WriteTarget, input: &DecisionInput) -> Result<(), TwinError> {
        self.decision_node(target, input).await.map(|_| ())
    }

    /// Records a decision (a `Decision` node with its rationale, the alternatives considered and
    /// the ids of the nodes it is about) on the target's branch.
    pub async fn record_decision(
        &self,
        target: &WriteTarget,
        author: &str,
        input: &DecisionInput,
    ) -> Result<CommittedNode, TwinError> {
        let node = self.decision_node(target, input).await?;
        let (branch, commit) = self
            .write(
                target,
                author,
                format!("decision: {}", input.decision.trim()),
                TwinChangeSet {
                    upsert_nodes: vec![node.clone()],
                    ..TwinChangeSet::default()
                },
            )
            .await?;
        tracing::info!(event = "twin_decision_recorded", branch = %branch, node_id = %node.id, commit_id = %commit.id, "a decision was recorded in the twin");
        Ok(CommittedNode { branch, commit, node })
    }

    async fn decision_node(
        &self,
        target: &WriteTarget,
        input: &DecisionInput,
    ) -> Result<TwinNode, TwinError> {
        let decision = required_text("decision", &input.decision)?;
        let rationale = required_text("rationale", &input.rationale)?;
        let alternatives = input
            .alternatives
            .iter()
            .enumerate()
            .map(|(i, a)| required_text(&format!("alternatives[{i}]"), a).map(Value::String))
            .collect::<Result<Vec<_>, _>>()?;
        let mut properties = extra_properties("properties", target, &input.properties)?;
        if !input.about.is_empty() {
            let branch = self.read_branch(target).await?;
            let mut seen = BTreeSet::new();
            for (i, id) in input.about.iter().enumerate() {
                let field = format!("about[{i}]");
                if !seen.insert(id.as_str()) {
                    return Err(TwinError::invalid(field, format!("node '{id}' is named twice")));
                }
                self.existing_node(&branch, &field, id).await?;
            }
        }
        properties.insert(DECISION_STATEMENT.to_owned(), Value::String(decision));
        properties.insert(DECISION_RATIONALE.to_owned(), Value::String(rationale));
        if !alternatives.is_empty() {
            properties.insert(DECISION_ALTERNATIVES.to_owned(), Value::Array(alternatives));
        }
        if !input.about.is_empty() {
            properties.insert(
                DECISION_ABOUT.to_owned(),
                Value::Array(input.about.iter().cloned().map(Value::String).collect()),
            );
        }
        stamp(target, &mut properties);
        Ok(TwinNode::new(
            self.ids.new_id(),
            TwinNodeType::Decision,
            properties,
        ))
    }

    /// Checks a link as [`link`](Self::link) would, and writes nothing.
    pub async fn check_link(&self, target: &WriteTarget, input: &LinkInput) -> Result<(), TwinError> {
        self.link_edge(target, input).await.map(|_| ())
    }

    /// Adds a typed edge between two nodes of the target's branch. A second edge of the same type
    /// between the same nodes is refused naming the first.
    pub async fn link(
        &self,
        target: &WriteTarget,
        author: &str,
        input: &LinkInput,
    ) -> Result<CommittedEdge, TwinError> {
        let edge = self.link_edge(target, input).await?;
        let (branch, commit) = self
            .write(
                target,
                author,
                format!("link {} -{}-> {}", edge.from, edge.edge_type.as_str(), edge.to),
                TwinChangeSet {
                    add_edges: vec![edge.clone()],
                    ..TwinChangeSet::default()
                },
            )
            .await?;
        tracing::info!(event = "twin_nodes_linked", branch = %branch, edge_id = %edge.id, edge_type = edge.edge_type.as_str(), commit_id = %commit.id, "two twin nodes were linked");
        Ok(CommittedEdge { branch, commit, edge })
    }

    async fn link_edge(&self, target: &WriteTarget, input: &LinkInput) -> Result<TwinEdge, TwinError> {
        let from = required_text("from", &input.from)?;
        let to = required_text("to", &input.to)?;
        if from == to {
            return Err(TwinError::invalid("to", "a node cannot be linked to itself"));
        }
        let mut properties = extra_properties("properties", target, &input.properties)?;
        let branch = self.read_branch(target).await?;
        self.existing_node(&branch, "from", &from).await?;
        self.existing_node(&branch, "to", &to).await?;
        let twin = self
            .store
            .edges(&branch, &from, EdgeDirection::Outgoing, Some(input.edge_type))
            .await?
            .into_iter()
            .find(|e| e.to == to);
        if let Some(existing) = twin {
            return Err(TwinError::invalid(
                "to",
                format!(
                    "'{from}' is already linked to '{to}' by {} edge '{}'",
                    input.edge_type.as_str(),
                    existing.id
                ),
            ));
        }
        stamp(target, &mut properties);
        Ok(TwinEdge {
            id: self.ids.new_id(),
            edge_type: input.edge_type,
            from,
            to,
            properties,
        })
    }

    /// A fresh node or edge id.
    pub(super) fn new_id(&self) -> String {
        self.ids.new_id()
    }

    /// One commit on the target's branch, creating a run's branch from `main` first when it does
    /// not exist yet.
    pub(super) async fn write(
        &self,
        target: &WriteTarget,
        author: &str,
        message: String,
        changes: TwinChangeSet,
    ) -> Result<(String, TwinCommit), TwinError> {
        let author = required_text("author", author)?;
        let branch = target.branch();
        if let Some(scope) = target.run() {
            match self.store.create_branch(&branch, TWIN_MAIN_BRANCH).await {
                Ok(created) => {
                    tracing::info!(event = "twin_run_branch_created", run_id = %scope.run_id, branch = %branch, from_head = ?created.head, "the run's first twin write created its branch from main");
                }
                Err(e) if e.kind == PortErrorKind::Conflict => {}
                Err(e) => return Err(e.into()),
            }
        }
        let commit = self
            .store
            .commit(TwinCommitRequest {
                id: self.ids.new_id(),
                branch: branch.clone(),
                expected_head: None,
                message,
                author,
                at: self.clock.now(),
                changes,
            })
            .await?;
        Ok((branch, commit))
    }

    // ----- reads ----------------------------------------------------------------------------

    /// Every branch, sorted by name (always including `main`).
    pub async fn branches(&self) -> Result<Vec<TwinBranch>, TwinError> {
        Ok(self.store.branches().await?)
    }

    /// One node of `branch`.
    pub async fn node(&self, branch: &str, id: &str) -> Result<TwinNode, TwinError> {
        branch_name("branch", branch)?;
        self.existing_node(branch, "id", id).await
    }

    /// The nodes of `branch` that match `filter`, sorted by id.
    pub async fn find(&self, branch: &str, filter: &NodeFilter) -> Result<FoundNodes, TwinError> {
        branch_name("branch", branch)?;
        check_limit(filter.limit)?;
        if let Some((key, _)) = filter.properties.iter().find(|(k, _)| k.trim().is_empty()) {
            return Err(TwinError::invalid(
                "properties",
                format!("a property name must not be empty (got {key:?})"),
            ));
        }
        let query = TwinNodeQuery {
            node_type: filter.node_type,
            property: filter.properties.first().cloned(),
        };
        let nodes = match self.store.find_nodes(branch, &query).await {
            Ok(nodes) => nodes,
            Err(e) => return Err(self.missing_branch(e, "branch", branch).await),
        };
        let mut matching = nodes.into_iter().filter(|n| {
            filter
                .properties
                .iter()
                .skip(1)
                .all(|(k, v)| n.properties.get(k) == Some(v))
        });
        let nodes: Vec<TwinNode> = matching.by_ref().take(filter.limit).collect();
        let truncated = matching.next().is_some();
        Ok(FoundNodes { nodes, truncated })
    }

    /// A node's edges on `branch`, optionally of one type, sorted by id (the node must exist).
    pub async fn edges(
        &self,
        branch: &str,
        id: &str,
        direction: EdgeDirection,
        edge_type: Option<TwinEdgeType>,
    ) -> Result<Vec<TwinEdge>, TwinError> {
        self.node(branch, id).await?;
        Ok(self.store.edges(branch, id, direction, edge_type).await?)
    }

    /// What differs from `base` to `head`.
    pub async fn diff(&self, base: &str, head: &str) -> Result<TwinDiff, TwinError> {
        branch_name("base", base)?;
        branch_name("head", head)?;
        match self.store.diff(base, head).await {
            Ok(diff) => Ok(diff),
            Err(e) if e.kind == PortErrorKind::NotFound => {
                for (field, name) in [("base", base), ("head", head)] {
                    if !branch_exists(self.store.as_ref(), name).await? {
                        return Err(TwinError::UnknownBranch {
                            field: field.to_owned(),
                            branch: name.to_owned(),
                        });
                    }
                }
                Err(e.into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// `branch`'s newest `limit` commits, newest first, and whether older ones were left out.
    pub async fn log(&self, branch: &str, limit: usize) -> Result<(Vec<TwinCommit>, bool), TwinError> {
        branch_name("branch", branch)?;
        check_limit(limit)?;
        let mut commits = match self.store.log(branch).await {
            Ok(commits) => commits,
            Err(e) => return Err(self.missing_branch(e, "branch", branch).await),
        };
        let truncated = commits.len() > limit;
        commits.truncate(limit);
        Ok((commits, truncated))
    }

    /// The node `id` on `branch`: an unknown branch or node is named by `field` (the branch's
    /// own refusal names `branch`).
    async fn existing_node(&self, branch: &str, field: &str, id: &str) -> Result<TwinNode, TwinError> {
        match self.store.node(branch, id).await {
            Ok(node) => Ok(node),
            Err(e) if e.kind == PortErrorKind::NotFound => {
                if branch_exists(self.store.as_ref(), branch).await? {
                    Err(TwinError::UnknownNode {
                        field: field.to_owned(),
                        id: id.to_owned(),
                        branch: branch.to_owned(),
                    })
                } else {
                    Err(TwinError::UnknownBranch {
                        field: "branch".to_owned(),
                        branch: branch.to_owned(),
                    })
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A store's `NotFound` for a read of `branch`: the branch named by `field` when it is the
    /// branch that is missing.
    async fn missing_branch(&self, e: PortError, field: &str, branch: &str) -> TwinError {
        if e.kind != PortErrorKind::NotFound {
            return e.into();
        }
        match branch_exists(self.store.as_ref(), branch).await {
            Ok(false) => TwinError::UnknownBranch {
                field: field.to_owned(),
                branch: branch.to_owned(),
            },
            Ok(true) => e.into(),
            Err(other) => other.into(),
        }
    }
}

fn check_limit(limit: usize) -> Result<(), TwinError> {
    if (1..=MAX_QUERY_LIMIT).contains(&limit) {
        Ok(())
    } else {
        Err(TwinError::invalid(
            "limit",
            format!("must be between 1 and {MAX_QUERY_LIMIT} (got {limit})"),
        ))
    }
}
