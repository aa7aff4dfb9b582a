//! The twin store double: each branch holds a full copy of its graph; commits form a parent chain.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use metaforge_ports::{
    EdgeDirection, PortError, PortErrorKind, TWIN_MAIN_BRANCH, TwinBranch, TwinCommit, TwinCommitRequest,
    TwinDiff, TwinEdge, TwinEdgeType, TwinNode, TwinNodeQuery, TwinStore, canonical_json,
};

use metaforge_ports::twin_rules::{
    CommitRefusal, check_expected_head, diff_states, normalised, validate_branch_name, validate_commit,
};

use super::{err, lock};

#[derive(Clone, Default)]
struct Graph {
    nodes: BTreeMap<String, TwinNode>,
    edges: BTreeMap<String, TwinEdge>,
}

struct Branch {
    head: Option<String>,
    graph: Graph,
}

struct State {
    branches: BTreeMap<String, Branch>,
    commits: BTreeMap<String, TwinCommit>,
}

/// A twin store in memory (unit tests only).
pub struct MemoryTwinStore {
    state: Mutex<State>,
}

impl Default for MemoryTwinStore {
    fn default() -> Self {
        let mut branches = BTreeMap::new();
        branches.insert(
            TWIN_MAIN_BRANCH.to_owned(),
            Branch {
                head: None,
                graph: Graph::default(),
            },
        );
        Self {
            state: Mutex::new(State {
                branches,
                commits: BTreeMap::new(),
            }),
        }
    }
}

impl MemoryTwinStore {
    /// A twin with an empty `main`.
    pub fn new() -> Self {
        Self::default()
    }
}

fn no_branch(name: &str) -> PortError {
    err(
        PortErrorKind::NotFound,
        format!("twin branch {name:?} does not exist"),
    )
}

fn apply(graph: &mut Graph, request: &TwinCommitRequest) -> Result<(), PortError> {
    let c = &request.changes;
    for n in &c.upsert_nodes {
        let n = normalised(n);
        graph.nodes.insert(n.id.clone(), n);
    }
    for (i, id) in c.delete_nodes.iter().enumerate() {
        if graph.nodes.remove(id).is_none() {
            return Err(CommitRefusal::NoNodeToDelete { index: i, id }.error(request));
        }
        graph.edges.retain(|_, e| e.from != *id && e.to != *id);
    }
    for (i, id) in c.remove_edges.iter().enumerate() {
        if graph.edges.remove(id).is_none() {
            return Err(CommitRefusal::NoEdgeToRemove { index: i, id }.error(request));
        }
    }
    for (i, e) in c.add_edges.iter().enumerate() {
        if graph.edges.contains_key(&e.id) {
            return Err(CommitRefusal::EdgeExists { index: i, id: &e.id }.error(request));
        }
        for (end, node) in [("from", &e.from), ("to", &e.to)] {
            if !graph.nodes.contains_key(node) {
                return Err(CommitRefusal::NoEdgeEnd { index: i, end, node }.error(request));
            }
        }
        graph.edges.insert(e.id.clone(), e.clone());
    }
    Ok(())
}

#[async_trait]
impl TwinStore for MemoryTwinStore {
    async fn branches(&self) -> Result<Vec<TwinBranch>, PortError> {
        Ok(lock(&self.state)
            .branches
            .iter()
            .map(|(name, b)| TwinBranch {
                name: name.clone(),
                head: b.head.clone(),
            })
            .collect())
    }

    async fn create_branch(&self, name: &str, from: &str) -> Result<TwinBranch, PortError> {
        validate_branch_name(name)?;
        let mut s = lock(&self.state);
        let source = s.branches.get(from).ok_or_else(|| no_branch(from))?;
        let copy = Branch {
            head: source.head.clone(),
            graph: source.graph.clone(),
        };
        if s.branches.contains_key(name) {
            return Err(err(
                PortErrorKind::Conflict,
                format!("twin branch {name:?} already exists"),
            ));
        }
        let head = copy.head.clone();
        s.branches.insert(name.to_owned(), copy);
        Ok(TwinBranch {
            name: name.to_owned(),
            head,
        })
    }

    async fn commit(&self, request: TwinCommitRequest) -> Result<TwinCommit, PortError> {
        validate_commit(&request)?;
        let mut s = lock(&self.state);
        let branch = s
            .branches
            .get(&request.branch)
            .ok_or_else(|| no_branch(&request.branch))?;
        check_expected_head(&request, branch.head.as_deref())?;
        if s.commits.contains_key(&request.id) {
            return Err(CommitRefusal::CommitExists.error(&request));
        }
        let mut graph = branch.graph.clone();
        apply(&mut graph, &request)?;
        let commit = metaforge_ports::twin_rules::committed(request.clone(), branch.head.clone(), None);
        s.commits.insert(commit.id.clone(), commit.clone());
        if let Some(b) = s.branches.get_mut(&request.branch) {
            b.head = Some(commit.id.clone());
            b.graph = graph;
        }
        Ok(commit)
    }

    async fn log(&self, branch: &str) -> Result<Vec<TwinCommit>, PortError> {
        let s = lock(&self.state);
        let mut cursor = s
            .branches
            .get(branch)
            .ok_or_else(|| no_branch(branch))?
            .head
            .clone();
        let mut out = Vec::new();
        while let Some(id) = cursor {
            let c = s
                .commits
                .get(&id)
                .cloned()
                .ok_or_else(|| err(PortErrorKind::Corrupt, format!("twin commit {id} missing")))?;
            cursor = c.parent.clone();
            out.push(c);
        }
        Ok(out)
    }

    async fn node(&self, branch: &str, id: &str) -> Result<TwinNode, PortError> {
        let s = lock(&self.state);
        let b = s.branches.get(branch).ok_or_else(|| no_branch(branch))?;
        b.graph.nodes.get(id).cloned().ok_or_else(|| {
            err(
                PortErrorKind::NotFound,
                format!("twin node {id:?} does not exist"),
            )
        })
    }

    async fn find_nodes(&self, branch: &str, query: &TwinNodeQuery) -> Result<Vec<TwinNode>, PortError> {
        let s = lock(&self.state);
        let b = s.branches.get(branch).ok_or_else(|| no_branch(branch))?;
        Ok(b.graph
            .nodes
            .values()
            .filter(|n| query.node_type.is_none_or(|t| n.node_type == t))
            .filter(|n| {
                query.property.as_ref().is_none_or(|(k, v)| {
                    n.properties
                        .get(k)
                        .is_some_and(|have| canonical_json(have) == canonical_json(v))
                })
            })
            .cloned()
            .collect())
    }

    async fn edges(
        &self,
        branch: &str,
        node_id: &str,
        direction: EdgeDirection,
        edge_type: Option<TwinEdgeType>,
    ) -> Result<Vec<TwinEdge>, PortError> {
        let s = lock(&self.state);
        let b = s.branches.get(branch).ok_or_else(|| no_branch(branch))?;
        if !b.graph.nodes.contains_key(node_id) {
            return Err(err(
                PortErrorKind::NotFound,
                format!("twin node {node_id:?} does not exist"),
            ));
        }
        let (out, inc) = match direction {
            EdgeDirection::Outgoing => (true, false),
            EdgeDirection::Incoming => (false, true),
            EdgeDirection::Both => (true, true),
        };
        Ok(b.graph
            .edges
            .values()
            .filter(|e| (out && e.from == node_id) || (inc && e.to == node_id))
            .filter(|e| edge_type.is_none_or(|t| e.edge_type == t))
            .cloned()
            .collect())
    }

    async fn diff(&self, base: &str, head: &str) -> Result<TwinDiff, PortError> {
        let s = lock(&self.state);
        let b = &s.branches.get(base).ok_or_else(|| no_branch(base))?.graph;
        let h = &s.branches.get(head).ok_or_else(|| no_branch(head))?.graph;
        Ok(diff_states(
            b.nodes.values().cloned().collect(),
            b.edges.values().cloned().collect(),
            h.nodes.values().cloned().collect(),
            h.edges.values().cloned().collect(),
        ))
    }

    async fn merge_fast_forward(&self, source: &str, target: &str) -> Result<TwinBranch, PortError> {
        let mut s = lock(&self.state);
        let src = s.branches.get(source).ok_or_else(|| no_branch(source))?;
        let (src_head, src_graph) = (src.head.clone(), src.graph.clone());
        let tgt_head = s
            .branches
            .get(target)
            .ok_or_else(|| no_branch(target))?
            .head
            .clone();
        if src_head != tgt_head {
            let ff = match &tgt_head {
                None => true,
                Some(t) => {
                    let mut cursor = src_head.clone();
                    let mut found = false;
                    while let Some(id) = cursor {
                        if &id == t {
                            found = true;
                            break;
                        }
                        cursor = s.commits.get(&id).and_then(|c| c.parent.clone());
                    }
                    found
                }
            };
            if !ff {
                return Err(err(
                    PortErrorKind::Conflict,
                    format!("cannot fast-forward {target:?} to {source:?}"),
                ));
            }
            if let Some(b) = s.branches.get_mut(target) {
                b.head = src_head.clone();
                b.graph = src_graph;
            }
        }
        Ok(TwinBranch {
            name: target.to_owned(),
            head: src_head,
        })
    }
}
