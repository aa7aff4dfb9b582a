//! The embedded digital twin on SQLite: each branch's graph is materialised in tables, every
//! commit is one `BEGIN IMMEDIATE` transaction, and fast-forward merges copy the source state.

use std::path::Path;

use async_trait::async_trait;
use metaforge_ports::{
    EdgeDirection, PortError, PortErrorKind, TwinBranch, TwinCommit, TwinCommitRequest, TwinDiff, TwinEdge,
    TwinEdgeType, TwinNode, TwinNodeQuery, TwinStore, canonical_json,
};
use sqlx::{Sqlite, SqlitePool, Transaction};
use tracing::Instrument as _;

use crate::codec::{corrupt_label, not_found, parse_json, parse_ts, to_json, ts};
use crate::sqlite::{begin_write, db_error, open_pool};
use metaforge_ports::twin_rules::{
    CommitRefusal, check_expected_head, diff_states, normalised, validate_branch_name, validate_commit,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/twin");

/// How many commits an ancestry walk follows before judging the history corrupt.
const MAX_HISTORY_WALK: usize = 1_000_000;

/// The embedded twin in one SQLite file (`twin.db`).
#[derive(Clone)]
pub struct SqliteTwinStore {
    pool: SqlitePool,
}

#[derive(sqlx::FromRow)]
struct NodeRow {
    id: String,
    node_type: String,
    properties: String,
    content_hash: String,
}

impl NodeRow {
    fn into_node(self) -> Result<TwinNode, PortError> {
        Ok(TwinNode {
            node_type: metaforge_ports::TwinNodeType::parse(&self.node_type)
                .ok_or_else(|| corrupt_label("twin_nodes.node_type", &self.node_type))?,
            properties: parse_json("twin_nodes.properties", &self.properties)?,
            content_hash: self.content_hash,
            id: self.id,
        })
    }
}

#[derive(sqlx::FromRow)]
struct EdgeRow {
    id: String,
    edge_type: String,
    from_id: String,
    to_id: String,
    properties: String,
}

impl EdgeRow {
    fn into_edge(self) -> Result<TwinEdge, PortError> {
        Ok(TwinEdge {
            edge_type: TwinEdgeType::parse(&self.edge_type)
                .ok_or_else(|| corrupt_label("twin_edges.edge_type", &self.edge_type))?,
            properties: parse_json("twin_edges.properties", &self.properties)?,
            from: self.from_id,
            to: self.to_id,
            id: self.id,
        })
    }
}

#[derive(sqlx::FromRow)]
struct CommitRow {
    id: String,
    parent: Option<String>,
    branch: String,
    message: String,
    author: String,
    at: String,
    traceparent: Option<String>,
}

impl CommitRow {
    fn into_commit(self) -> Result<TwinCommit, PortError> {
        Ok(TwinCommit {
            at: parse_ts("twin_commits.at", &self.at)?,
            id: self.id,
            parent: self.parent,
            branch: self.branch,
            message: self.message,
            author: self.author,
            traceparent: self.traceparent,
        })
    }
}

type Tx = Transaction<'static, Sqlite>;

impl SqliteTwinStore {
    /// Opens (creating and migrating) the twin at `path`.
    pub async fn open(path: &Path) -> Result<Self, PortError> {
        Ok(Self {
            pool: open_pool(path, &MIGRATOR).await?,
        })
    }

    async fn head<'e, E>(executor: E, branch: &str) -> Result<Option<String>, PortError>
    where
        E: sqlx::Executor<'e, Database = Sqlite>,
    {
        let row: Option<(Option<String>,)> = sqlx::query_as("SELECT head FROM twin_branches WHERE name = ?")
            .bind(branch)
            .fetch_optional(executor)
            .await
            .map_err(|e| db_error("read a twin branch", e))?;
        row.map(|(h,)| h).ok_or_else(|| not_found("twin branch", branch))
    }

    async fn nodes_of<'e, E>(executor: E, branch: &str) -> Result<Vec<TwinNode>, PortError>
    where
        E: sqlx::Executor<'e, Database = Sqlite>,
    {
        let rows: Vec<NodeRow> = sqlx::query_as(
            "SELECT id, node_type, properties, content_hash FROM twin_nodes WHERE branch = ? ORDER BY id",
        )
        .bind(branch)
        .fetch_all(executor)
        .await
        .map_err(|e| db_error("read twin nodes", e))?;
        rows.into_iter().map(NodeRow::into_node).collect()
    }

    async fn edges_of<'e, E>(executor: E, branch: &str) -> Result<Vec<TwinEdge>, PortError>
    where
        E: sqlx::Executor<'e, Database = Sqlite>,
    {
        let rows: Vec<EdgeRow> = sqlx::query_as(
            "SELECT id, edge_type, from_id, to_id, properties FROM twin_edges WHERE branch = ? ORDER BY id",
        )
        .bind(branch)
        .fetch_all(executor)
        .await
        .map_err(|e| db_error("read twin edges", e))?;
        rows.into_iter().map(EdgeRow::into_edge).collect()
    }

    async fn node_exists(tx: &mut Tx, branch: &str, id: &str) -> Result<bool, PortError> {
        let row: Option<(i64,)> = sqlx::query_as("SELECT 1 FROM twin_nodes WHERE branch = ? AND id = ?")
            .bind(branch)
            .bind(id)
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| db_error("read a twin node", e))?;
        Ok(row.is_some())
    }

    async fn edge_exists(tx: &mut Tx, branch: &str, id: &str) -> Result<bool, PortError> {
        let row: Option<(i64,)> = sqlx::query_as("SELECT 1 FROM twin_edges WHERE branch = ? AND id = ?")
            .bind(branch)
            .bind(id)
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| db_error("read a twin edge", e))?;
        Ok(row.is_some())
    }

    async fn upsert_node(tx: &mut Tx, branch: &str, node: &TwinNode) -> Result<(), PortError> {
        let node = normalised(node);
        sqlx::query(
            "INSERT INTO twin_nodes (branch, id, node_type, properties, content_hash) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (branch, id) DO UPDATE SET \
             node_type = excluded.node_type, properties = excluded.properties, \
             content_hash = excluded.content_hash",
        )
        .bind(branch)
        .bind(&node.id)
        .bind(node.node_type.as_str())
        .bind(to_json("node.properties", &node.properties)?)
        .bind(&node.content_hash)
        .execute(&mut **tx)
        .await
        .map_err(|e| db_error("write a twin node", e))?;
        sqlx::query("DELETE FROM twin_node_props WHERE branch = ? AND node_id = ?")
            .bind(branch)
            .bind(&node.id)
            .execute(&mut **tx)
            .await
            .map_err(|e| db_error("clear twin node properties", e))?;
        for (key, value) in &node.properties {
            sqlx::query("INSERT INTO twin_node_props (branch, node_id, key, value) VALUES (?, ?, ?, ?)")
                .bind(branch)
                .bind(&node.id)
                .bind(key)
                .bind(canonical_json(value))
                .execute(&mut **tx)
                .await
                .map_err(|e| db_error("index a twin node property", e))?;
        }
        Ok(())
    }

    /// Replaces `target`'s graph with a copy of `source`'s.
    async fn copy_state(tx: &mut Tx, source: &str, target: &str) -> Result<(), PortError> {
        for sql in [
            "DELETE FROM twin_edges WHERE branch = ?1",
            "DELETE FROM twin_node_props WHERE branch = ?1",
            "DELETE FROM twin_nodes WHERE branch = ?1",
        ] {
            sqlx::query(sql)
                .bind(target)
                .execute(&mut **tx)
                .await
                .map_err(|e| db_error("clear a twin branch", e))?;
        }
        for sql in [
            "INSERT INTO twin_nodes (branch, id, node_type, properties, content_hash) \
             SELECT ?1, id, node_type, properties, content_hash FROM twin_nodes WHERE branch = ?2",
            "INSERT INTO twin_node_props (branch, node_id, key, value) \
             SELECT ?1, node_id, key, value FROM twin_node_props WHERE branch = ?2",
            "INSERT INTO twin_edges (branch, id, edge_type, from_id, to_id, properties) \
             SELECT ?1, id, edge_type, from_id, to_id, properties FROM twin_edges WHERE branch = ?2",
        ] {
            sqlx::query(sql)
                .bind(target)
                .bind(source)
                .execute(&mut **tx)
                .await
                .map_err(|e| db_error("copy a twin branch", e))?;
        }
        Ok(())
    }

    /// True when `ancestor` is `descendant` or one of its parents, transitively.
    async fn is_ancestor(tx: &mut Tx, ancestor: &str, descendant: &str) -> Result<bool, PortError> {
        let mut cursor = Some(descendant.to_owned());
        let mut steps = 0usize;
        while let Some(id) = cursor {
            if id == ancestor {
                return Ok(true);
            }
            steps += 1;
            if steps > MAX_HISTORY_WALK {
                return Err(PortError::new(
                    PortErrorKind::Corrupt,
                    "twin commit history is cyclic or too long to walk",
                ));
            }
            let row: Option<(Option<String>,)> =
                sqlx::query_as("SELECT parent FROM twin_commits WHERE id = ?")
                    .bind(&id)
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(|e| db_error("walk twin history", e))?;
            cursor = row.and_then(|(p,)| p);
        }
        Ok(false)
    }
}

#[async_trait]
impl TwinStore for SqliteTwinStore {
    async fn branches(&self) -> Result<Vec<TwinBranch>, PortError> {
        let rows: Vec<(String, Option<String>)> =
            sqlx::query_as("SELECT name, head FROM twin_branches ORDER BY name")
                .fetch_all(&self.pool)
                .await
                .map_err(|e| db_error("list twin branches", e))?;
        Ok(rows
            .into_iter()
            .map(|(name, head)| TwinBranch { name, head })
            .collect())
    }

    async fn create_branch(&self, name: &str, from: &str) -> Result<TwinBranch, PortError> {
        validate_branch_name(name)?;
        let mut tx = begin_write(&self.pool).await?;
        let head = Self::head(&mut *tx, from).await?;
        if Self::head(&mut *tx, name).await.is_ok() {
            return Err(PortError::new(
                PortErrorKind::Conflict,
                format!("twin branch {name:?} already exists"),
            ));
        }
        sqlx::query("INSERT INTO twin_branches (name, head) VALUES (?, ?)")
            .bind(name)
            .bind(&head)
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("create a twin branch", e))?;
        Self::copy_state(&mut tx, from, name).await?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit a twin branch", e))?;
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
            let mut tx = begin_write(&self.pool).await?;
            let head = Self::head(&mut *tx, branch).await?;
            check_expected_head(&request, head.as_deref())?;
            let changes = &request.changes;
            for node in &changes.upsert_nodes {
                Self::upsert_node(&mut tx, branch, node).await?;
            }
            for (i, id) in changes.delete_nodes.iter().enumerate() {
                if !Self::node_exists(&mut tx, branch, id).await? {
                    return Err(CommitRefusal::NoNodeToDelete { index: i, id }.error(&request));
                }
                for sql in [
                    "DELETE FROM twin_edges WHERE branch = ?1 AND (from_id = ?2 OR to_id = ?2)",
                    "DELETE FROM twin_node_props WHERE branch = ?1 AND node_id = ?2",
                    "DELETE FROM twin_nodes WHERE branch = ?1 AND id = ?2",
                ] {
                    sqlx::query(sql)
                        .bind(branch)
                        .bind(id)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| db_error("delete a twin node", e))?;
                }
            }
            for (i, id) in changes.remove_edges.iter().enumerate() {
                let removed = sqlx::query("DELETE FROM twin_edges WHERE branch = ? AND id = ?")
                    .bind(branch)
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| db_error("remove a twin edge", e))?
                    .rows_affected();
                if removed == 0 {
                    return Err(CommitRefusal::NoEdgeToRemove { index: i, id }.error(&request));
                }
            }
            for (i, edge) in changes.add_edges.iter().enumerate() {
                if Self::edge_exists(&mut tx, branch, &edge.id).await? {
                    return Err(CommitRefusal::EdgeExists {
                        index: i,
                        id: &edge.id,
                    }
                    .error(&request));
                }
                for (end, node) in [("from", &edge.from), ("to", &edge.to)] {
                    if !Self::node_exists(&mut tx, branch, node).await? {
                        return Err(CommitRefusal::NoEdgeEnd { index: i, end, node }.error(&request));
                    }
                }
                sqlx::query(
                    "INSERT INTO twin_edges (branch, id, edge_type, from_id, to_id, properties) \
                     VALUES (?, ?, ?, ?, ?, ?)",
                )
                .bind(branch)
                .bind(&edge.id)
                .bind(edge.edge_type.as_str())
                .bind(&edge.from)
                .bind(&edge.to)
                .bind(to_json("edge.properties", &edge.properties)?)
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error("add a twin edge", e))?;
            }
            sqlx::query(
                "INSERT INTO twin_commits (id, parent, branch, message, author, at, changes, traceparent) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&request.id)
            .bind(&head)
            .bind(branch)
            .bind(&request.message)
            .bind(&request.author)
            .bind(ts(request.at))
            .bind(to_json("commit.changes", &request.changes)?)
            .bind(&traceparent)
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                let err = db_error("record a twin commit", e);
                if err.kind == PortErrorKind::Conflict {
                    CommitRefusal::CommitExists.error(&request)
                } else {
                    err
                }
            })?;
            sqlx::query("UPDATE twin_branches SET head = ? WHERE name = ?")
                .bind(&request.id)
                .bind(branch)
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error("move a twin branch head", e))?;
            tx.commit()
                .await
                .map_err(|e| db_error("commit a twin change", e))?;
            Ok(metaforge_ports::twin_rules::committed(request, head, traceparent))
        }
        .instrument(span)
        .await
    }

    async fn log(&self, branch: &str) -> Result<Vec<TwinCommit>, PortError> {
        let mut cursor = Self::head(&self.pool, branch).await?;
        let mut out = Vec::new();
        while let Some(id) = cursor {
            if out.len() > MAX_HISTORY_WALK {
                return Err(PortError::new(
                    PortErrorKind::Corrupt,
                    "twin commit history is cyclic or too long to walk",
                ));
            }
            let row: Option<CommitRow> = sqlx::query_as(
                "SELECT id, parent, branch, message, author, at, traceparent FROM twin_commits WHERE id = ?",
            )
            .bind(&id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| db_error("read a twin commit", e))?;
            let commit = row
                .ok_or_else(|| {
                    PortError::new(
                        PortErrorKind::Corrupt,
                        format!("twin commit {id} is referenced but missing"),
                    )
                })?
                .into_commit()?;
            cursor = commit.parent.clone();
            out.push(commit);
        }
        Ok(out)
    }

    async fn node(&self, branch: &str, id: &str) -> Result<TwinNode, PortError> {
        Self::head(&self.pool, branch).await?;
        let row: Option<NodeRow> = sqlx::query_as(
            "SELECT id, node_type, properties, content_hash FROM twin_nodes WHERE branch = ? AND id = ?",
        )
        .bind(branch)
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| db_error("read a twin node", e))?;
        row.ok_or_else(|| not_found("twin node", id))?.into_node()
    }

    async fn find_nodes(&self, branch: &str, query: &TwinNodeQuery) -> Result<Vec<TwinNode>, PortError> {
        Self::head(&self.pool, branch).await?;
        let (key, value) = match &query.property {
            Some((k, v)) => (Some(k.as_str()), Some(canonical_json(v))),
            None => (None, None),
        };
        let rows: Vec<NodeRow> = sqlx::query_as(
            "SELECT n.id, n.node_type, n.properties, n.content_hash FROM twin_nodes n \
             WHERE n.branch = ?1 AND (?2 IS NULL OR n.node_type = ?2) \
             AND (?3 IS NULL OR EXISTS (SELECT 1 FROM twin_node_props p WHERE p.branch = n.branch \
                  AND p.node_id = n.id AND p.key = ?3 AND p.value = ?4)) \
             ORDER BY n.id",
        )
        .bind(branch)
        .bind(query.node_type.map(|t| t.as_str()))
        .bind(key)
        .bind(value)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("query twin nodes", e))?;
        rows.into_iter().map(NodeRow::into_node).collect()
    }

    async fn edges(
        &self,
        branch: &str,
        node_id: &str,
        direction: EdgeDirection,
        edge_type: Option<TwinEdgeType>,
    ) -> Result<Vec<TwinEdge>, PortError> {
        self.node(branch, node_id).await?;
        let (outgoing, incoming) = match direction {
            EdgeDirection::Outgoing => (true, false),
            EdgeDirection::Incoming => (false, true),
            EdgeDirection::Both => (true, true),
        };
        let rows: Vec<EdgeRow> = sqlx::query_as(
            "SELECT id, edge_type, from_id, to_id, properties FROM twin_edges \
             WHERE branch = ?1 AND ((?2 AND from_id = ?4) OR (?3 AND to_id = ?4)) \
             AND (?5 IS NULL OR edge_type = ?5) ORDER BY id",
        )
        .bind(branch)
        .bind(outgoing)
        .bind(incoming)
        .bind(node_id)
        .bind(edge_type.map(|t| t.as_str()))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| db_error("read twin edges", e))?;
        rows.into_iter().map(EdgeRow::into_edge).collect()
    }

    async fn diff(&self, base: &str, head: &str) -> Result<TwinDiff, PortError> {
        // One read transaction so both sides come from the same snapshot.
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| db_error("begin a twin read", e))?;
        Self::head(&mut *tx, base).await?;
        Self::head(&mut *tx, head).await?;
        let base_nodes = Self::nodes_of(&mut *tx, base).await?;
        let base_edges = Self::edges_of(&mut *tx, base).await?;
        let head_nodes = Self::nodes_of(&mut *tx, head).await?;
        let head_edges = Self::edges_of(&mut *tx, head).await?;
        drop(tx);
        Ok(diff_states(base_nodes, base_edges, head_nodes, head_edges))
    }

    async fn merge_fast_forward(&self, source: &str, target: &str) -> Result<TwinBranch, PortError> {
        let mut tx = begin_write(&self.pool).await?;
        let source_head = Self::head(&mut *tx, source).await?;
        let target_head = Self::head(&mut *tx, target).await?;
        if source_head == target_head {
            return Ok(TwinBranch {
                name: target.to_owned(),
                head: target_head,
            });
        }
        let fast_forward = match (&target_head, &source_head) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(t), Some(s)) => Self::is_ancestor(&mut tx, t, s).await?,
        };
        if !fast_forward {
            return Err(PortError::new(
                PortErrorKind::Conflict,
                format!(
                    "cannot fast-forward {target:?} to {source:?}: {target:?} has commits \
                     {source:?} does not"
                ),
            ));
        }
        Self::copy_state(&mut tx, source, target).await?;
        sqlx::query("UPDATE twin_branches SET head = ? WHERE name = ?")
            .bind(&source_head)
            .bind(target)
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error("move a twin branch head", e))?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit a twin merge", e))?;
        Ok(TwinBranch {
            name: target.to_owned(),
            head: source_head,
        })
    }
}
