//! The digital twin on FalkorDB (feature `falkordb`): RESP + OpenCypher. Nodes are
//! `(:TwinNode {branch, id, type, props, hash, pkv})`, edges carry their seed type as the
//! relationship type (`[:DEPENDS_ON {branch, id, props}]`), commits are `(:TwinCommit)` nodes
//! linked by `[:PARENT]`, and branches are `(:TwinBranch {name, head})`.
//!
//! FalkorDB has no multi-statement transactions, so a commit validates everything first with
//! reads, then applies its writes in order, the branch head last; writers in one process are
//! serialised by a mutex. Queries return scalar columns, never paths.

use std::collections::{BTreeSet, HashMap};

use async_trait::async_trait;
use falkordb::{AsyncGraph, FalkorAsyncClient, FalkorClientBuilder, FalkorValue, Row};
use futures::TryStreamExt;
use metaforge_ports::{
    EdgeDirection, PortError, PortErrorKind, TWIN_MAIN_BRANCH, TwinBranch, TwinCommit, TwinCommitRequest,
    TwinDiff, TwinEdge, TwinEdgeType, TwinNode, TwinNodeQuery, TwinNodeType, TwinStore, canonical_json,
};
use tokio::sync::Mutex;
use tracing::Instrument as _;

use crate::codec::{corrupt_label, not_found, parse_json, parse_ts, to_json, ts};
use metaforge_ports::twin_rules::{
    CommitRefusal, check_expected_head, diff_states, normalised, validate_branch_name, validate_commit,
};

/// The twin in one FalkorDB graph.
pub struct FalkorTwinStore {
    _client: FalkorAsyncClient,
    graph: AsyncGraph,
    writes: Mutex<()>,
}

type Params = Vec<(&'static str, FalkorValue)>;

fn s(v: &str) -> FalkorValue {
    FalkorValue::String(v.to_owned())
}

fn list(items: impl IntoIterator<Item = String>) -> FalkorValue {
    FalkorValue::Array(items.into_iter().map(FalkorValue::String).collect())
}

fn engine_error(what: &str, e: falkordb::FalkorDBError) -> PortError {
    let kind = match &e {
        falkordb::FalkorDBError::ConnectionDown
        | falkordb::FalkorDBError::NoConnection
        | falkordb::FalkorDBError::EmptyConnection => PortErrorKind::Unavailable,
        _ => PortErrorKind::Internal,
    };
    PortError::with_source(kind, format!("FalkorDB could not {what}"), e)
}

fn col<T: falkordb::FromFalkorValue>(row: &Row, name: &str) -> Result<T, PortError> {
    row.try_get(name).map_err(|e| {
        PortError::with_source(
            PortErrorKind::Corrupt,
            format!("FalkorDB returned an unreadable column {name}"),
            e,
        )
    })
}

/// The string a node is matched on for one property: the canonical JSON of `[key, value]`,
/// unambiguous for any key and value (FalkorDB cannot store NUL, so no separator trick).
fn property_key(key: &str, value: &serde_json::Value) -> String {
    canonical_json(&serde_json::Value::Array(vec![
        serde_json::Value::String(key.to_owned()),
        value.clone(),
    ]))
}

/// Every property match string of a node (stored as the `pkv` list).
fn property_keys(node: &TwinNode) -> Vec<String> {
    node.properties.iter().map(|(k, v)| property_key(k, v)).collect()
}

fn node_from(row: &Row) -> Result<TwinNode, PortError> {
    let ty: String = col(row, "type")?;
    let props: String = col(row, "props")?;
    Ok(TwinNode {
        id: col(row, "id")?,
        node_type: TwinNodeType::parse(&ty).ok_or_else(|| corrupt_label("TwinNode.type", &ty))?,
        properties: parse_json("TwinNode.props", &props)?,
        content_hash: col(row, "hash")?,
    })
}

fn edge_from(row: &Row) -> Result<TwinEdge, PortError> {
    let ty: String = col(row, "type")?;
    let props: String = col(row, "props")?;
    Ok(TwinEdge {
        id: col(row, "id")?,
        edge_type: TwinEdgeType::parse(&ty).ok_or_else(|| corrupt_label("relationship type", &ty))?,
        from: col(row, "from")?,
        to: col(row, "to")?,
        properties: parse_json("edge.props", &props)?,
    })
}

const NODE_COLUMNS: &str = "n.id AS id, n.type AS type, n.props AS props, n.hash AS hash";
const EDGE_COLUMNS: &str = "r.id AS id, type(r) AS type, a.id AS from, z.id AS to, r.props AS props";

impl FalkorTwinStore {
    /// Connects to `url` (`falkor://127.0.0.1:PORT`) and uses graph `graph_name`, creating its
    /// indexes and the `main` branch when missing. An unreachable server is `Unavailable`.
    pub async fn connect(url: &str, graph_name: &str) -> Result<Self, PortError> {
        let info = url.try_into().map_err(|e| {
            PortError::with_source(PortErrorKind::Invalid, format!("FalkorDB url {url:?}"), e)
        })?;
        let client = FalkorClientBuilder::new_async()
            .with_connection_info(info)
            .build()
            .await
            .map_err(|e| {
                PortError::with_source(
                    PortErrorKind::Unavailable,
                    format!("FalkorDB at {url} is unreachable"),
                    e,
                )
            })?;
        let store = Self {
            graph: client.select_graph(graph_name),
            _client: client,
            writes: Mutex::new(()),
        };
        for index in [
            // Only the selective key: an index on `branch` (a handful of values) would lead the
            // planner to scan a whole branch instead of seeking the node id.
            "CREATE INDEX FOR (n:TwinNode) ON (n.id)",
            "CREATE INDEX FOR (b:TwinBranch) ON (b.name)",
            "CREATE INDEX FOR (c:TwinCommit) ON (c.id)",
        ] {
            if let Err(e) = store.run(index, Vec::new()).await {
                let already = e
                    .source
                    .as_ref()
                    .is_some_and(|s| s.to_string().contains("already indexed"));
                if !already {
                    return Err(e);
                }
            }
        }
        store
            .run(
                "MERGE (b:TwinBranch {name: $name})",
                vec![("name", s(TWIN_MAIN_BRANCH))],
            )
            .await?;
        Ok(store)
    }

    /// Deletes the whole graph (tests and benchmarks clean up with it).
    pub async fn delete_graph(&self) -> Result<(), PortError> {
        let mut graph = self.graph.clone();
        graph
            .delete()
            .await
            .map_err(|e| engine_error("delete the graph", e))
    }

    async fn run(&self, query: &str, params: Params) -> Result<Vec<Row>, PortError> {
        let mut graph = self.graph.clone();
        let mut builder = graph.query(query);
        for (k, v) in params {
            builder = builder.with_param(k, v);
        }
        let result = builder
            .execute()
            .await
            .map_err(|e| engine_error("run a query", e))?;
        result
            .data
            .try_collect::<Vec<Row>>()
            .await
            .map_err(|e| engine_error("read a query result", e))
    }

    async fn head(&self, branch: &str) -> Result<Option<String>, PortError> {
        let rows = self
            .run(
                "MATCH (b:TwinBranch {name: $name}) RETURN b.head AS head",
                vec![("name", s(branch))],
            )
            .await?;
        let row = rows.first().ok_or_else(|| not_found("twin branch", branch))?;
        col(row, "head")
    }

    async fn existing_node_ids(&self, branch: &str, ids: Vec<String>) -> Result<BTreeSet<String>, PortError> {
        if ids.is_empty() {
            return Ok(BTreeSet::new());
        }
        let rows = self
            .run(
                "MATCH (n:TwinNode {branch: $branch}) WHERE n.id IN $ids RETURN n.id AS id",
                vec![("branch", s(branch)), ("ids", list(ids))],
            )
            .await?;
        rows.iter().map(|r| col(r, "id")).collect()
    }

    async fn existing_edge_ids(&self, branch: &str, ids: Vec<String>) -> Result<BTreeSet<String>, PortError> {
        if ids.is_empty() {
            return Ok(BTreeSet::new());
        }
        let rows = self
            .run(
                "MATCH (:TwinNode {branch: $branch})-[r]->(:TwinNode {branch: $branch}) \
                 WHERE r.id IN $ids RETURN r.id AS id",
                vec![("branch", s(branch)), ("ids", list(ids))],
            )
            .await?;
        rows.iter().map(|r| col(r, "id")).collect()
    }

    async fn all_nodes(&self, branch: &str) -> Result<Vec<TwinNode>, PortError> {
        let rows = self
            .run(
                &format!("MATCH (n:TwinNode {{branch: $branch}}) RETURN {NODE_COLUMNS} ORDER BY n.id"),
                vec![("branch", s(branch))],
            )
            .await?;
        rows.iter().map(node_from).collect()
    }

    async fn all_edges(&self, branch: &str) -> Result<Vec<TwinEdge>, PortError> {
        let rows = self
            .run(
                &format!(
                    "MATCH (a:TwinNode {{branch: $branch}})-[r]->(z:TwinNode {{branch: $branch}}) \
                     RETURN {EDGE_COLUMNS} ORDER BY r.id"
                ),
                vec![("branch", s(branch))],
            )
            .await?;
        rows.iter().map(edge_from).collect()
    }

    /// Replaces `target`'s graph with a copy of `source`'s (one query per relationship type,
    /// since Cypher cannot create a relationship whose type is a parameter).
    async fn copy_state(&self, source: &str, target: &str) -> Result<(), PortError> {
        self.run(
            "MATCH (n:TwinNode {branch: $target}) DETACH DELETE n",
            vec![("target", s(target))],
        )
        .await?;
        self.run(
            "MATCH (n:TwinNode {branch: $source}) CREATE (:TwinNode {branch: $target, id: n.id, \
             type: n.type, props: n.props, hash: n.hash, pkv: n.pkv})",
            vec![("source", s(source)), ("target", s(target))],
        )
        .await?;
        for ty in TwinEdgeType::ALL {
            let rel = ty.as_str();
            self.run(
                &format!(
                    "MATCH (a:TwinNode {{branch: $source}})-[r:{rel}]->(z:TwinNode {{branch: $source}}) \
                     MATCH (a2:TwinNode {{branch: $target, id: a.id}}), (z2:TwinNode {{branch: $target, id: z.id}}) \
                     CREATE (a2)-[:{rel} {{branch: $target, id: r.id, props: r.props}}]->(z2)"
                ),
                vec![("source", s(source)), ("target", s(target))],
            )
            .await?;
        }
        Ok(())
    }

    async fn commit_exists(&self, id: &str) -> Result<bool, PortError> {
        Ok(!self
            .run(
                "MATCH (c:TwinCommit {id: $id}) RETURN c.id AS id",
                vec![("id", s(id))],
            )
            .await?
            .is_empty())
    }
}

#[async_trait]
impl TwinStore for FalkorTwinStore {
    async fn branches(&self) -> Result<Vec<TwinBranch>, PortError> {
        let rows = self
            .run(
                "MATCH (b:TwinBranch) RETURN b.name AS name, b.head AS head ORDER BY b.name",
                Vec::new(),
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(TwinBranch {
                    name: col(r, "name")?,
                    head: col(r, "head")?,
                })
            })
            .collect()
    }

    async fn create_branch(&self, name: &str, from: &str) -> Result<TwinBranch, PortError> {
        validate_branch_name(name)?;
        let _guard = self.writes.lock().await;
        let head = self.head(from).await?;
        if self.head(name).await.is_ok() {
            return Err(PortError::new(
                PortErrorKind::Conflict,
                format!("twin branch {name:?} already exists"),
            ));
        }
        self.copy_state(from, name).await?;
        self.run(
            "CREATE (:TwinBranch {name: $name, head: $head})",
            vec![
                ("name", s(name)),
                ("head", head.as_deref().map_or(FalkorValue::None, s)),
            ],
        )
        .await?;
        Ok(TwinBranch {
            name: name.to_owned(),
            head,
        })
    }

    async fn commit(&self, request: TwinCommitRequest) -> Result<TwinCommit, PortError> {
        // The write runs in its span, and the commit records that span's context.
        let span = crate::trace::commit_span(&request.branch);
        async move {
            let traceparent = crate::trace::current_traceparent();
            validate_commit(&request)?;
            let branch = request.branch.as_str();
            let _guard = self.writes.lock().await;
            let head = self.head(branch).await?;
            check_expected_head(&request, head.as_deref())?;
            if self.commit_exists(&request.id).await? {
                return Err(CommitRefusal::CommitExists.error(&request));
            }
            let c = &request.changes;

            // Validate the whole change set against the branch before writing anything.
            let deleting = self.existing_node_ids(branch, c.delete_nodes.clone()).await?;
            for (i, id) in c.delete_nodes.iter().enumerate() {
                if !deleting.contains(id) {
                    return Err(CommitRefusal::NoNodeToDelete { index: i, id }.error(&request));
                }
            }
            let removing = self.existing_edge_ids(branch, c.remove_edges.clone()).await?;
            for (i, id) in c.remove_edges.iter().enumerate() {
                if !removing.contains(id) {
                    return Err(CommitRefusal::NoEdgeToRemove { index: i, id }.error(&request));
                }
            }
            let clashing = self
                .existing_edge_ids(branch, c.add_edges.iter().map(|e| e.id.clone()).collect())
                .await?;
            let ends: Vec<String> = c
                .add_edges
                .iter()
                .flat_map(|e| [e.from.clone(), e.to.clone()])
                .collect();
            let mut present = self.existing_node_ids(branch, ends).await?;
            present.extend(c.upsert_nodes.iter().map(|n| n.id.clone()));
            for id in &c.delete_nodes {
                present.remove(id);
            }
            for (i, e) in c.add_edges.iter().enumerate() {
                if clashing.contains(&e.id) && !c.remove_edges.contains(&e.id) {
                    return Err(CommitRefusal::EdgeExists { index: i, id: &e.id }.error(&request));
                }
                for (end, node) in [("from", &e.from), ("to", &e.to)] {
                    if !present.contains(node) {
                        return Err(CommitRefusal::NoEdgeEnd { index: i, end, node }.error(&request));
                    }
                }
            }

            // Apply, in the contract's order; the branch head moves last.
            if !c.upsert_nodes.is_empty() {
                let nodes = c
                    .upsert_nodes
                    .iter()
                    .map(|n| {
                        let n = normalised(n);
                        Ok(FalkorValue::Map(HashMap::from([
                            ("id".to_owned(), s(&n.id)),
                            ("type".to_owned(), s(n.node_type.as_str())),
                            (
                                "props".to_owned(),
                                FalkorValue::String(to_json("node.properties", &n.properties)?),
                            ),
                            ("hash".to_owned(), s(&n.content_hash)),
                            ("pkv".to_owned(), list(property_keys(&n))),
                        ])))
                    })
                    .collect::<Result<Vec<_>, PortError>>()?;
                self.run(
                    "UNWIND $nodes AS x MERGE (n:TwinNode {branch: $branch, id: x.id}) \
                     SET n.type = x.type, n.props = x.props, n.hash = x.hash, n.pkv = x.pkv",
                    vec![("branch", s(branch)), ("nodes", FalkorValue::Array(nodes))],
                )
                .await?;
            }
            if !c.delete_nodes.is_empty() {
                self.run(
                    "MATCH (n:TwinNode {branch: $branch}) WHERE n.id IN $ids DETACH DELETE n",
                    vec![("branch", s(branch)), ("ids", list(c.delete_nodes.clone()))],
                )
                .await?;
            }
            if !c.remove_edges.is_empty() {
                self.run(
                    "MATCH (:TwinNode {branch: $branch})-[r]->(:TwinNode {branch: $branch}) \
                     WHERE r.id IN $ids DELETE r",
                    vec![("branch", s(branch)), ("ids", list(c.remove_edges.clone()))],
                )
                .await?;
            }
            for ty in TwinEdgeType::ALL {
                let edges = c
                    .add_edges
                    .iter()
                    .filter(|e| e.edge_type == ty)
                    .map(|e| {
                        Ok(FalkorValue::Map(HashMap::from([
                            ("id".to_owned(), s(&e.id)),
                            ("from".to_owned(), s(&e.from)),
                            ("to".to_owned(), s(&e.to)),
                            (
                                "props".to_owned(),
                                FalkorValue::String(to_json("edge.properties", &e.properties)?),
                            ),
                        ])))
                    })
                    .collect::<Result<Vec<_>, PortError>>()?;
                if edges.is_empty() {
                    continue;
                }
                let rel = ty.as_str();
                self.run(
                    &format!(
                        "UNWIND $edges AS e MATCH (a:TwinNode {{branch: $branch, id: e.from}}), \
                         (z:TwinNode {{branch: $branch, id: e.to}}) \
                         CREATE (a)-[:{rel} {{branch: $branch, id: e.id, props: e.props}}]->(z)"
                    ),
                    vec![("branch", s(branch)), ("edges", FalkorValue::Array(edges))],
                )
                .await?;
            }
            self.run(
                "CREATE (c:TwinCommit {id: $id, parent: $parent, branch: $branch, message: $message, \
                 author: $author, at: $at, traceparent: $traceparent}) \
                 WITH c MATCH (b:TwinBranch {name: $branch}) SET b.head = $id \
                 WITH c OPTIONAL MATCH (p:TwinCommit {id: $parent}) \
                 FOREACH (_ IN CASE WHEN p IS NULL THEN [] ELSE [1] END | CREATE (c)-[:PARENT]->(p))",
                vec![
                    ("id", s(&request.id)),
                    ("parent", head.as_deref().map_or(FalkorValue::None, s)),
                    ("branch", s(branch)),
                    ("message", s(&request.message)),
                    ("author", s(&request.author)),
                    ("at", FalkorValue::String(ts(request.at))),
                    ("traceparent", traceparent.as_deref().map_or(FalkorValue::None, s)),
                ],
            )
            .await?;
            Ok(metaforge_ports::twin_rules::committed(request, head, traceparent))
        }
        .instrument(span)
        .await
    }

    async fn log(&self, branch: &str) -> Result<Vec<TwinCommit>, PortError> {
        let Some(head) = self.head(branch).await? else {
            return Ok(Vec::new());
        };
        // One variable-length match walks the whole ancestry (SQLite walks it row by row).
        let rows = self
            .run(
                "MATCH (h:TwinCommit {id: $head})-[:PARENT*0..]->(c:TwinCommit) \
                 RETURN DISTINCT c.id AS id, c.parent AS parent, c.branch AS branch, \
                 c.message AS message, c.author AS author, c.at AS at, \
                 c.traceparent AS traceparent",
                vec![("head", s(&head))],
            )
            .await?;
        let mut by_id: HashMap<String, TwinCommit> = HashMap::new();
        for r in &rows {
            let at: String = col(r, "at")?;
            let commit = TwinCommit {
                id: col(r, "id")?,
                parent: col(r, "parent")?,
                branch: col(r, "branch")?,
                message: col(r, "message")?,
                author: col(r, "author")?,
                at: parse_ts("TwinCommit.at", &at)?,
                traceparent: col(r, "traceparent")?,
            };
            by_id.insert(commit.id.clone(), commit);
        }
        let mut out = Vec::with_capacity(by_id.len());
        let mut cursor = Some(head);
        while let Some(id) = cursor {
            let commit = by_id.remove(&id).ok_or_else(|| {
                PortError::new(
                    PortErrorKind::Corrupt,
                    format!("twin commit {id} is referenced but missing"),
                )
            })?;
            cursor = commit.parent.clone();
            out.push(commit);
        }
        Ok(out)
    }

    async fn node(&self, branch: &str, id: &str) -> Result<TwinNode, PortError> {
        self.head(branch).await?;
        let rows = self
            .run(
                &format!("MATCH (n:TwinNode {{branch: $branch, id: $id}}) RETURN {NODE_COLUMNS}"),
                vec![("branch", s(branch)), ("id", s(id))],
            )
            .await?;
        node_from(rows.first().ok_or_else(|| not_found("twin node", id))?)
    }

    async fn find_nodes(&self, branch: &str, query: &TwinNodeQuery) -> Result<Vec<TwinNode>, PortError> {
        self.head(branch).await?;
        let mut params: Params = vec![("branch", s(branch))];
        let mut filters = Vec::new();
        if let Some(ty) = query.node_type {
            filters.push("n.type = $type");
            params.push(("type", s(ty.as_str())));
        }
        if let Some((key, value)) = &query.property {
            filters.push("$kv IN n.pkv");
            params.push(("kv", FalkorValue::String(property_key(key, value))));
        }
        let filter = if filters.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", filters.join(" AND "))
        };
        let rows = self
            .run(
                &format!(
                    "MATCH (n:TwinNode {{branch: $branch}}) {filter} RETURN {NODE_COLUMNS} ORDER BY n.id"
                ),
                params,
            )
            .await?;
        rows.iter().map(node_from).collect()
    }

    async fn edges(
        &self,
        branch: &str,
        node_id: &str,
        direction: EdgeDirection,
        edge_type: Option<TwinEdgeType>,
    ) -> Result<Vec<TwinEdge>, PortError> {
        self.node(branch, node_id).await?;
        let rel = edge_type.map_or(String::new(), |t| format!(":{}", t.as_str()));
        let pattern = match direction {
            EdgeDirection::Outgoing => "WHERE a.id = $id",
            EdgeDirection::Incoming => "WHERE z.id = $id",
            EdgeDirection::Both => "WHERE a.id = $id OR z.id = $id",
        };
        let rows = self
            .run(
                &format!(
                    "MATCH (a:TwinNode {{branch: $branch}})-[r{rel}]->(z:TwinNode {{branch: $branch}}) \
                     {pattern} RETURN {EDGE_COLUMNS} ORDER BY r.id"
                ),
                vec![("branch", s(branch)), ("id", s(node_id))],
            )
            .await?;
        rows.iter().map(edge_from).collect()
    }

    async fn diff(&self, base: &str, head: &str) -> Result<TwinDiff, PortError> {
        self.head(base).await?;
        self.head(head).await?;
        Ok(diff_states(
            self.all_nodes(base).await?,
            self.all_edges(base).await?,
            self.all_nodes(head).await?,
            self.all_edges(head).await?,
        ))
    }

    async fn merge_fast_forward(&self, source: &str, target: &str) -> Result<TwinBranch, PortError> {
        let _guard = self.writes.lock().await;
        let source_head = self.head(source).await?;
        let target_head = self.head(target).await?;
        if source_head == target_head {
            return Ok(TwinBranch {
                name: target.to_owned(),
                head: target_head,
            });
        }
        let fast_forward = match (&target_head, &source_head) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(t), Some(s_head)) => !self
                .run(
                    "MATCH (:TwinCommit {id: $source})-[:PARENT*0..]->(a:TwinCommit {id: $target}) \
                     RETURN a.id AS id LIMIT 1",
                    vec![("source", s(s_head)), ("target", s(t))],
                )
                .await?
                .is_empty(),
        };
        if !fast_forward {
            return Err(PortError::new(
                PortErrorKind::Conflict,
                format!(
                    "cannot fast-forward {target:?} to {source:?}: {target:?} has commits {source:?} does not"
                ),
            ));
        }
        self.copy_state(source, target).await?;
        self.run(
            "MATCH (b:TwinBranch {name: $name}) SET b.head = $head",
            vec![
                ("name", s(target)),
                ("head", source_head.as_deref().map_or(FalkorValue::None, s)),
            ],
        )
        .await?;
        Ok(TwinBranch {
            name: target.to_owned(),
            head: source_head,
        })
    }
}
