//! Twin rules every engine shares (SQLite, FalkorDB and the test double): request validation, the
//! stored form of a node and the diff of two branch states, so every engine answers the contract
//! identically. They live in `ports` because adapters never depend on the domain.

use std::collections::BTreeMap;

use crate::error::{PortError, PortErrorKind};
use crate::twin_store::{
    TwinCommit, TwinCommitRequest, TwinDiff, TwinEdge, TwinNode, TwinNodeChange, twin_content_hash,
};

/// Refuses a branch name that is empty, too long or not `[A-Za-z0-9._/-]`.
pub fn validate_branch_name(name: &str) -> Result<(), PortError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'));
    if ok {
        Ok(())
    } else {
        Err(PortError::new(
            PortErrorKind::Invalid,
            format!("branch name {name:?}: must be 1-200 characters of [A-Za-z0-9._/-]"),
        ))
    }
}

/// Why a well-formed commit cannot apply to its branch, worded once for every engine so each
/// answers the contract with the same field path and message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitRefusal<'a> {
    /// `expected_head` was given and the branch's head is another commit (a writer moved it).
    Moved {
        /// The head the writer expected.
        expected: &'a str,
        /// The head found.
        found: Option<&'a str>,
    },
    /// A commit with this id is already recorded.
    CommitExists,
    /// `delete_nodes[index]` names no node on the branch.
    NoNodeToDelete {
        /// The position in `delete_nodes`.
        index: usize,
        /// The node id.
        id: &'a str,
    },
    /// `remove_edges[index]` names no edge on the branch.
    NoEdgeToRemove {
        /// The position in `remove_edges`.
        index: usize,
        /// The edge id.
        id: &'a str,
    },
    /// `add_edges[index]` reuses an edge id that is on the branch (and not removed by the commit).
    EdgeExists {
        /// The position in `add_edges`.
        index: usize,
        /// The edge id.
        id: &'a str,
    },
    /// `add_edges[index]`'s end (`from` or `to`) is no node the branch has after the commit.
    NoEdgeEnd {
        /// The position in `add_edges`.
        index: usize,
        /// `from` or `to`.
        end: &'static str,
        /// The node id.
        node: &'a str,
    },
}

impl CommitRefusal<'_> {
    /// The refusal of `request` as the port answers it: `Conflict` for a moved head or a
    /// recorded id, `Invalid` naming the change's field otherwise.
    pub fn error(self, request: &TwinCommitRequest) -> PortError {
        let branch = &request.branch;
        match self {
            Self::Moved { expected, found } => PortError::new(
                PortErrorKind::Conflict,
                format!(
                    "twin branch {branch:?} moved: expected head {expected}, found {}",
                    found.unwrap_or("none")
                ),
            ),
            Self::CommitExists => PortError::new(
                PortErrorKind::Conflict,
                format!("twin commit {} already exists", request.id),
            ),
            Self::NoNodeToDelete { index, id } => PortError::new(
                PortErrorKind::Invalid,
                format!("commit.changes.delete_nodes[{index}]: node {id} is not on branch {branch:?}"),
            ),
            Self::NoEdgeToRemove { index, id } => PortError::new(
                PortErrorKind::Invalid,
                format!("commit.changes.remove_edges[{index}]: edge {id} is not on branch {branch:?}"),
            ),
            Self::EdgeExists { index, id } => PortError::new(
                PortErrorKind::Invalid,
                format!("commit.changes.add_edges[{index}].id: edge {id} already exists"),
            ),
            Self::NoEdgeEnd { index, end, node } => PortError::new(
                PortErrorKind::Invalid,
                format!("commit.changes.add_edges[{index}].{end}: node {node} is not on branch {branch:?}"),
            ),
        }
    }
}

/// Refuses `request` when it expects a head other than the branch's `head`.
pub fn check_expected_head(request: &TwinCommitRequest, head: Option<&str>) -> Result<(), PortError> {
    match request.expected_head.as_deref() {
        Some(expected) if head != Some(expected) => Err(CommitRefusal::Moved {
            expected,
            found: head,
        }
        .error(request)),
        Some(_) | None => Ok(()),
    }
}

/// Refuses a malformed commit request before anything is read or written.
pub fn validate_commit(request: &TwinCommitRequest) -> Result<(), PortError> {
    let invalid = |field: &str, why: String| {
        Err(PortError::new(
            PortErrorKind::Invalid,
            format!("commit.{field}: {why}"),
        ))
    };
    if request.id.trim().is_empty() {
        return invalid("id", "must not be empty".into());
    }
    if request.author.trim().is_empty() {
        return invalid("author", "must not be empty".into());
    }
    if request.changes.is_empty() {
        return invalid("changes", "an empty change set is not a commit".into());
    }
    for (i, node) in request.changes.upsert_nodes.iter().enumerate() {
        if node.id.trim().is_empty() {
            return invalid(
                &format!("changes.upsert_nodes[{i}].id"),
                "must not be empty".into(),
            );
        }
    }
    for (i, edge) in request.changes.add_edges.iter().enumerate() {
        if edge.id.trim().is_empty() {
            return invalid(&format!("changes.add_edges[{i}].id"), "must not be empty".into());
        }
        if request.changes.add_edges[..i].iter().any(|e| e.id == edge.id) {
            return invalid(
                &format!("changes.add_edges[{i}].id"),
                format!("edge id {} appears twice", edge.id),
            );
        }
    }
    Ok(())
}

/// The commit a store records for `request` on top of `parent`, with the `traceparent` of the
/// write (every twin answers a commit with this record).
pub fn committed(
    request: TwinCommitRequest,
    parent: Option<String>,
    traceparent: Option<String>,
) -> TwinCommit {
    TwinCommit {
        id: request.id,
        parent,
        branch: request.branch,
        message: request.message,
        author: request.author,
        at: request.at,
        traceparent,
    }
}

/// The node as it will be stored: its hash recomputed from its content, never trusted.
pub fn normalised(node: &TwinNode) -> TwinNode {
    TwinNode {
        content_hash: twin_content_hash(node.node_type, &node.properties),
        ..node.clone()
    }
}

/// The diff from `base` to `head` given both branches' full states.
pub fn diff_states(
    base_nodes: Vec<TwinNode>,
    base_edges: Vec<TwinEdge>,
    head_nodes: Vec<TwinNode>,
    head_edges: Vec<TwinEdge>,
) -> TwinDiff {
    let base_n: BTreeMap<String, TwinNode> = base_nodes.into_iter().map(|n| (n.id.clone(), n)).collect();
    let head_n: BTreeMap<String, TwinNode> = head_nodes.into_iter().map(|n| (n.id.clone(), n)).collect();
    let base_e: BTreeMap<String, TwinEdge> = base_edges.into_iter().map(|e| (e.id.clone(), e)).collect();
    let head_e: BTreeMap<String, TwinEdge> = head_edges.into_iter().map(|e| (e.id.clone(), e)).collect();
    let mut diff = TwinDiff::default();
    for (id, node) in &head_n {
        match base_n.get(id) {
            None => diff.nodes_added.push(node.clone()),
            Some(before) if before.content_hash != node.content_hash => {
                diff.nodes_changed.push(TwinNodeChange {
                    before: before.clone(),
                    after: node.clone(),
                });
            }
            Some(_) => {}
        }
    }
    diff.nodes_removed = base_n
        .iter()
        .filter(|(id, _)| !head_n.contains_key(*id))
        .map(|(_, n)| n.clone())
        .collect();
    diff.edges_added = head_e
        .iter()
        .filter(|(id, e)| base_e.get(*id) != Some(e))
        .map(|(_, e)| e.clone())
        .collect();
    diff.edges_removed = base_e
        .iter()
        .filter(|(id, e)| head_e.get(*id) != Some(e))
        .map(|(_, e)| e.clone())
        .collect();
    diff
}
