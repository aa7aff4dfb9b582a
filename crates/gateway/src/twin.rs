//! Read routes over the digital twin (`/v1/twin/...`): branches, nodes, a node's edges, the diff
//! of two branches and a branch's log, through the same [`TwinService`] the sidecar's `twin.*`
//! tools write with. Writes happen only through those tools (held for a person, or a run's
//! worker); there is no write route. With no twin composed every route answers 503.
//!
//! Query parameters are read as text and parsed here, so a bad one is a 400 naming it (`type`,
//! `limit`, `direction`); an unknown branch or node is a 404 naming the parameter.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use metaforge_app::twin::service::{DEFAULT_QUERY_LIMIT, MAX_QUERY_LIMIT};
use metaforge_app::twin::{NodeFilter, TwinError, TwinService, WORK_PRODUCT_CONTENT};
use metaforge_ports::{
    EdgeDirection, TWIN_MAIN_BRANCH, TwinBranch, TwinCommit, TwinDiff, TwinEdge, TwinEdgeType, TwinNode,
    TwinNodeType, WORK_PRODUCT_ARTIFACT, WORK_PRODUCT_PHASE, WORK_PRODUCT_RUN,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::GatewayState;
use super::error::{ApiError, ErrorBody};
use super::extract::ApiQuery;

/// The twin this gateway reads, or the 503 saying none is composed.
fn twin(state: &GatewayState) -> Result<&Arc<TwinService>, ApiError> {
    state.twin.as_ref().ok_or_else(|| {
        ApiError::unavailable(
            "no digital twin is composed in this process: the /v1/twin routes are served by a gateway started with the twin store (metaforge up / metaforge gateway)",
        )
    })
}

/// A twin refusal as the gateway's error: 400 for a bad parameter, 404 for an unknown branch or
/// node (both naming the parameter), 409 for a refused merge, the port's mapping otherwise.
impl From<TwinError> for ApiError {
    fn from(err: TwinError) -> Self {
        match err {
            TwinError::Invalid {
                ref field,
                ref message,
            } => ApiError::bad_request(field, format!("invalid parameter '{field}': {message}")),
            TwinError::UnknownBranch {
                ref field,
                ref branch,
            } => ApiError::new(StatusCode::NOT_FOUND, "not_found", err.to_string())
                .with_details(serde_json::json!({ "field": field, "branch": branch })),
            TwinError::UnknownNode {
                ref field,
                ref id,
                ref branch,
            } => ApiError::new(StatusCode::NOT_FOUND, "not_found", err.to_string())
                .with_details(serde_json::json!({ "field": field, "id": id, "branch": branch })),
            TwinError::MainMoved { .. } => ApiError::conflict(err.to_string()),
            TwinError::Store(e) => e.into(),
        }
    }
}

fn bad(field: &str, message: impl Into<String>) -> ApiError {
    let message = message.into();
    ApiError::bad_request(field, format!("invalid parameter '{field}': {message}"))
}

fn branch_or_main(branch: Option<String>) -> String {
    branch
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| TWIN_MAIN_BRANCH.to_owned())
}

fn limit(text: Option<&str>) -> Result<usize, ApiError> {
    let Some(text) = text else {
        return Ok(DEFAULT_QUERY_LIMIT);
    };
    text.parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_QUERY_LIMIT).contains(n))
        .ok_or_else(|| {
            bad(
                "limit",
                format!("must be a whole number from 1 to {MAX_QUERY_LIMIT} (got {text:?})"),
            )
        })
}

fn node_type(text: Option<&str>) -> Result<Option<TwinNodeType>, ApiError> {
    text.map(|t| {
        TwinNodeType::parse(t).ok_or_else(|| {
            let known: Vec<&str> = TwinNodeType::ALL.iter().map(|t| t.as_str()).collect();
            bad(
                "type",
                format!("{t:?} is not a node type (one of {})", known.join(", ")),
            )
        })
    })
    .transpose()
}

/// A property value from a query string: JSON when it reads as JSON (`42`, `true`, `"42"`),
/// else the text itself.
fn property_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

// ----- branches ---------------------------------------------------------------------------------

/// Every branch of the twin.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BranchList {
    /// Sorted by name; `main` is always one, each run that wrote has `run/<id>`.
    branches: Vec<TwinBranch>,
}

/// Lists the twin's branches and their heads.
#[utoipa::path(get, path = "/v1/twin/branches", tag = "twin",
    responses((status = 200, body = BranchList), (status = 401, body = ErrorBody),
        (status = 503, description = "No twin is composed in this process", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn branches(State(state): State<Arc<GatewayState>>) -> Result<Json<BranchList>, ApiError> {
    Ok(Json(BranchList {
        branches: twin(&state)?.branches().await?,
    }))
}

// ----- nodes ------------------------------------------------------------------------------------

/// Which nodes to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodesQuery {
    /// The branch to read (default `main`).
    branch: Option<String>,
    /// Only nodes of this type (`WorkProduct`, `Decision`, `Constraint`, `Version`, `Component`,
    /// `Agent`).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    node_type: Option<String>,
    /// Only work products recording this deliverable (`cad_model`, …).
    artifact: Option<String>,
    /// Only nodes recorded by this phase.
    phase: Option<String>,
    /// Only nodes recorded by this run.
    run_id: Option<String>,
    /// Only nodes whose property of this name equals `value`.
    property: Option<String>,
    /// The value `property` must equal: JSON when it reads as JSON (`42`, `true`, `"42"`), else
    /// the text.
    value: Option<String>,
    /// At most this many nodes (1-500, default 100).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 500)]
    limit: Option<String>,
}

/// A page of nodes.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct NodeList {
    /// The branch read.
    branch: String,
    /// The matching nodes, sorted by id; a work product's text `content` is left out (read the
    /// node itself for it).
    nodes: Vec<TwinNode>,
    /// True when more nodes matched than `limit` let through.
    truncated: bool,
}

/// Lists a branch's nodes by type and properties.
#[utoipa::path(get, path = "/v1/twin/nodes", tag = "twin", params(NodesQuery),
    responses((status = 200, body = NodeList),
        (status = 400, description = "A bad parameter, named in details.field", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "The branch does not exist (details.field = branch)", body = ErrorBody),
        (status = 503, description = "No twin is composed in this process", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn nodes(
    State(state): State<Arc<GatewayState>>,
    ApiQuery(query): ApiQuery<NodesQuery>,
) -> Result<Json<NodeList>, ApiError> {
    let twin = twin(&state)?;
    let mut properties = Vec::new();
    for (key, given) in [
        (WORK_PRODUCT_ARTIFACT, &query.artifact),
        (WORK_PRODUCT_PHASE, &query.phase),
        (WORK_PRODUCT_RUN, &query.run_id),
    ] {
        if let Some(value) = given {
            properties.push((key.to_owned(), Value::String(value.clone())));
        }
    }
    match (&query.property, &query.value) {
        (Some(property), Some(value)) => properties.push((property.clone(), property_value(value))),
        (Some(_), None) => return Err(bad("value", "give the value the property must equal")),
        (None, Some(_)) => return Err(bad("property", "give the property the value is for")),
        (None, None) => {}
    }
    let filter = NodeFilter {
        node_type: node_type(query.node_type.as_deref())?,
        properties,
        limit: limit(query.limit.as_deref())?,
    };
    let branch = branch_or_main(query.branch);
    let found = twin.find(&branch, &filter).await?;
    Ok(Json(NodeList {
        branch,
        nodes: found.nodes.into_iter().map(without_content).collect(),
        truncated: found.truncated,
    }))
}

/// A listed node: its text content left out, its content hash kept.
fn without_content(mut node: TwinNode) -> TwinNode {
    node.properties.remove(WORK_PRODUCT_CONTENT);
    node
}

/// Which branch to read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct BranchQuery {
    /// The branch to read (default `main`).
    branch: Option<String>,
}

/// One node as a branch holds it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct NodeView {
    /// The branch read.
    branch: String,
    /// The node, whole (a work product's `artifact`, `title`, `content_hash`, text `content` when
    /// it was committed with it, and for a run's work its `run_id` and `phase`).
    node: TwinNode,
}

/// Reads one node of a branch.
#[utoipa::path(get, path = "/v1/twin/nodes/{id}", tag = "twin",
    params(("id" = String, Path, description = "Node id"), BranchQuery),
    responses((status = 200, body = NodeView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, description = "The branch or the node does not exist (details.field names which)", body = ErrorBody),
        (status = 503, description = "No twin is composed in this process", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn node(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<BranchQuery>,
) -> Result<Json<NodeView>, ApiError> {
    let twin = twin(&state)?;
    let branch = branch_or_main(query.branch);
    let node = twin.node(&branch, &id).await?;
    Ok(Json(NodeView { branch, node }))
}

/// Which edges of a node to read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct EdgesQuery {
    /// The branch to read (default `main`).
    branch: Option<String>,
    /// `outgoing`, `incoming` or `both` (default).
    #[param(value_type = Option<EdgeDirection>, inline)]
    direction: Option<String>,
    /// Only edges of this type (`DEPENDS_ON`, `IMPLEMENTS`, `VALIDATES`, `CONTAINS`,
    /// `CONSTRAINED_BY`, `PRODUCED_BY`, `VERSION_OF`).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    edge_type: Option<String>,
}

/// A node's edges.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EdgeList {
    /// The branch read.
    branch: String,
    /// The node.
    node_id: String,
    /// Its edges, sorted by id.
    edges: Vec<TwinEdge>,
}

/// Reads a node's edges on a branch.
#[utoipa::path(get, path = "/v1/twin/nodes/{id}/edges", tag = "twin",
    params(("id" = String, Path, description = "Node id"), EdgesQuery),
    responses((status = 200, body = EdgeList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, description = "The branch or the node does not exist (details.field names which)", body = ErrorBody),
        (status = 503, description = "No twin is composed in this process", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn edges(
    State(state): State<Arc<GatewayState>>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<EdgesQuery>,
) -> Result<Json<EdgeList>, ApiError> {
    let twin = twin(&state)?;
    let direction = match query.direction.as_deref() {
        None | Some("both") => EdgeDirection::Both,
        Some("outgoing") => EdgeDirection::Outgoing,
        Some("incoming") => EdgeDirection::Incoming,
        Some(other) => {
            return Err(bad(
                "direction",
                format!("{other:?} is not a direction (outgoing, incoming or both)"),
            ));
        }
    };
    let edge_type = query
        .edge_type
        .as_deref()
        .map(|t| {
            TwinEdgeType::parse(t).ok_or_else(|| {
                let known: Vec<&str> = TwinEdgeType::ALL.iter().map(|t| t.as_str()).collect();
                bad(
                    "type",
                    format!("{t:?} is not an edge type (one of {})", known.join(", ")),
                )
            })
        })
        .transpose()?;
    let branch = branch_or_main(query.branch);
    let edges = twin.edges(&branch, &id, direction, edge_type).await?;
    Ok(Json(EdgeList {
        branch,
        node_id: id,
        edges,
    }))
}

// ----- diff and log -----------------------------------------------------------------------------

/// The two branches to compare.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiffQuery {
    /// The branch compared from (default `main`).
    base: Option<String>,
    /// The branch compared to (required), e.g. `run/<id>`.
    head: Option<String>,
}

/// What differs from `base` to `head`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DiffResponse {
    /// The branch compared from.
    base: String,
    /// The branch compared to.
    head: String,
    /// Nodes and edges added, removed and changed, each list sorted by id.
    diff: TwinDiff,
}

/// Compares two branches (what a run's branch would bring into `main`).
#[utoipa::path(get, path = "/v1/twin/diff", tag = "twin", params(DiffQuery),
    responses((status = 200, body = DiffResponse),
        (status = 400, description = "head missing, or a bad branch name (details.field)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "base or head does not exist (details.field names which)", body = ErrorBody),
        (status = 503, description = "No twin is composed in this process", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn diff(
    State(state): State<Arc<GatewayState>>,
    ApiQuery(query): ApiQuery<DiffQuery>,
) -> Result<Json<DiffResponse>, ApiError> {
    let twin = twin(&state)?;
    let base = branch_or_main(query.base);
    let Some(head) = query.head.filter(|h| !h.is_empty()) else {
        return Err(bad("head", "name the branch to compare with base, e.g. run/<id>"));
    };
    let diff = twin.diff(&base, &head).await?;
    Ok(Json(DiffResponse { base, head, diff }))
}

/// Which branch's history to read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogQuery {
    /// The branch (default `main`).
    branch: Option<String>,
    /// At most this many commits, newest first (1-500, default 100).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 500)]
    limit: Option<String>,
}

/// A branch's history.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LogResponse {
    /// The branch read.
    branch: String,
    /// Its commits, newest first.
    commits: Vec<TwinCommit>,
    /// True when older commits were left out by `limit`.
    truncated: bool,
}

/// Reads a branch's commits, newest first.
#[utoipa::path(get, path = "/v1/twin/log", tag = "twin", params(LogQuery),
    responses((status = 200, body = LogResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, description = "The branch does not exist (details.field = branch)", body = ErrorBody),
        (status = 503, description = "No twin is composed in this process", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn log(
    State(state): State<Arc<GatewayState>>,
    ApiQuery(query): ApiQuery<LogQuery>,
) -> Result<Json<LogResponse>, ApiError> {
    let twin = twin(&state)?;
    let branch = branch_or_main(query.branch);
    let (commits, truncated) = twin.log(&branch, limit(query.limit.as_deref())?).await?;
    Ok(Json(LogResponse {
        branch,
        commits,
        truncated,
    }))
}
