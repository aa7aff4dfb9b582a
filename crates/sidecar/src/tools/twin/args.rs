//! The `twin.*` tools' arguments as types, each with its schema generated from it (the same
//! rules as [`crate::args`]: snake_case, optional fields absent rather than `null`, unknown
//! top-level fields ignored). Each type turns into the twin service's input, so the tool's
//! parser, its schema and the service's checks are the only three places an argument is read.

use metaforge_app::twin::service::DEFAULT_QUERY_LIMIT;
use metaforge_app::twin::{DecisionInput, LinkInput, NodeFilter, WorkProductInput};
use metaforge_ports::{TwinEdgeType, TwinNodeType};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde_json::{Map, Value};

/// A JSON object of any shape.
type JsonObject = Map<String, Value>;

/// The deliverable `twin.commit_geometry` records when it is not told another.
pub const GEOMETRY_ARTIFACT: &str = "cad_model";

fn node_type_schema(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<&str> = TwinNodeType::ALL.iter().map(|t| t.as_str()).collect();
    json_schema!({
        "type": "string",
        "enum": names,
        "description": "only nodes of this type",
    })
}

fn edge_type_schema(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<&str> = TwinEdgeType::ALL.iter().map(|t| t.as_str()).collect();
    json_schema!({
        "type": "string",
        "enum": names,
        "description": "what the edge means: from DEPENDS_ON / IMPLEMENTS / VALIDATES / CONTAINS / ... to",
    })
}

/// What a work-product commit carries besides its artifact and title: the content or its hash,
/// where the file lives, the node it replaces, further properties.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct WorkProductBody {
    /// the text content (e.g. a STEP file's text); its SHA-256 becomes content_hash and the text is kept
    pub content: Option<String>,
    /// the SHA-256 (64 hex digits) of the content kept at uri, when the content itself is not sent
    pub content_hash: Option<String>,
    /// where the file lives (e.g. the STEP file an adapter exported)
    pub uri: Option<String>,
    /// the id of the work product this commit replaces with a new version (omit for a new one)
    pub node_id: Option<String>,
    /// further properties of the work product (units, bounding box, ...)
    pub properties: Option<JsonObject>,
}

impl WorkProductBody {
    /// The service's input for `artifact` titled `title`.
    fn into_input(self, artifact: String, title: String) -> WorkProductInput {
        WorkProductInput {
            artifact,
            title,
            content: self.content,
            content_hash: self.content_hash,
            uri: self.uri,
            replaces: self.node_id,
            properties: self.properties.unwrap_or_default(),
        }
    }
}

/// `twin.commit_work_product`: one deliverable with the hash of its content.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct CommitWorkProductArgs {
    /// the deliverable this is, as the flow's gate names it: cad_model, drawing, simulation_result, test_plan, bom, ...
    pub artifact: String,
    /// a human title, e.g. "Shelf bracket, rev B"
    pub title: String,
    /// the content and where it lives
    #[serde(flatten)]
    pub body: WorkProductBody,
}

impl CommitWorkProductArgs {
    /// The service's input.
    pub fn into_input(self) -> WorkProductInput {
        self.body.into_input(self.artifact, self.title)
    }
}

/// `twin.commit_geometry`: a CAD model (the seed's name for the CAD commit); `artifact` defaults
/// to [`GEOMETRY_ARTIFACT`].
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct CommitGeometryArgs {
    /// the deliverable this is (default cad_model)
    pub artifact: Option<String>,
    /// a human title, e.g. "Shelf bracket, rev B"
    pub title: String,
    /// the model's content and where it lives
    #[serde(flatten)]
    pub body: WorkProductBody,
}

impl CommitGeometryArgs {
    /// The service's input.
    pub fn into_input(self) -> WorkProductInput {
        let artifact = self.artifact.unwrap_or_else(|| GEOMETRY_ARTIFACT.to_owned());
        self.body.into_input(artifact, self.title)
    }
}

/// `twin.record_decision`: what was decided and why.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct RecordDecisionArgs {
    /// what was decided, in one sentence
    pub decision: String,
    /// why it was decided (required)
    pub rationale: String,
    /// the options considered and not taken
    pub alternatives: Option<Vec<String>>,
    /// ids of the twin nodes the decision is about
    pub about: Option<Vec<String>>,
    /// further properties
    pub properties: Option<JsonObject>,
}

impl RecordDecisionArgs {
    /// The service's input.
    pub fn into_input(self) -> DecisionInput {
        DecisionInput {
            decision: self.decision,
            rationale: self.rationale,
            alternatives: self.alternatives.unwrap_or_default(),
            about: self.about.unwrap_or_default(),
            properties: self.properties.unwrap_or_default(),
        }
    }
}

/// `twin.link`: a typed edge between two nodes.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct LinkArgs {
    /// the source node id
    pub from: String,
    /// the target node id
    pub to: String,
    /// what the edge means
    #[serde(rename = "type")]
    #[schemars(schema_with = "edge_type_schema")]
    pub edge_type: TwinEdgeType,
    /// the edge's properties
    pub properties: Option<JsonObject>,
}

impl LinkArgs {
    /// The service's input.
    pub fn into_input(self) -> LinkInput {
        LinkInput {
            from: self.from,
            to: self.to,
            edge_type: self.edge_type,
            properties: self.properties.unwrap_or_default(),
        }
    }
}

/// `twin.query`: nodes of a branch by type and properties.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct TwinQueryArgs {
    /// the branch to read (default: the branch this caller writes to — its run's, else main)
    pub branch: Option<String>,
    /// only nodes of this type
    #[serde(rename = "type", default)]
    #[schemars(schema_with = "node_type_schema")]
    pub node_type: Option<TwinNodeType>,
    /// only nodes whose properties equal these exactly, e.g. {"artifact": "cad_model"}
    pub properties: Option<JsonObject>,
    /// at most this many nodes (default 100)
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
}

impl TwinQueryArgs {
    /// The service's filter.
    pub fn filter(&self) -> NodeFilter {
        NodeFilter {
            node_type: self.node_type,
            properties: self
                .properties
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            limit: self.limit.unwrap_or(DEFAULT_QUERY_LIMIT),
        }
    }
}

/// `twin.get_node`: one node with its edges.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct GetNodeArgs {
    /// the node id
    pub id: String,
    /// the branch to read (default: the branch this caller writes to — its run's, else main)
    pub branch: Option<String>,
}

/// `twin.diff`: what differs between two branches.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct DiffArgs {
    /// the branch compared from (default main)
    pub base: Option<String>,
    /// the branch compared to (default: this caller's run branch; required for a caller working on main)
    pub head: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{input_schema, parse};
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn the_write_schemas_require_what_the_parsers_require() {
        let commit = input_schema::<CommitWorkProductArgs>();
        assert_eq!(commit["required"], json!(["artifact", "title"]));
        assert_eq!(commit["properties"]["content"]["type"], "string");
        let geometry = input_schema::<CommitGeometryArgs>();
        assert_eq!(geometry["required"], json!(["title"]));
        let decision = input_schema::<RecordDecisionArgs>();
        assert_eq!(decision["required"], json!(["decision", "rationale"]));
        let link = input_schema::<LinkArgs>();
        assert_eq!(link["required"], json!(["from", "to", "type"]));
        assert!(
            link["properties"]["type"]["enum"]
                .as_array()
                .is_some_and(|e| e.contains(&json!("DEPENDS_ON")))
        );
    }

    #[test]
    fn the_query_schema_lists_the_node_types_and_bounds_the_limit() {
        let query = input_schema::<TwinQueryArgs>();
        assert!(query.get("required").is_none_or(|r| r == &json!([])));
        assert_eq!(
            query["properties"]["type"]["enum"].as_array().map(Vec::len),
            Some(TwinNodeType::ALL.len())
        );
        assert_eq!(query["properties"]["limit"]["maximum"], 500);
        let problems =
            metaforge_domain::tool_gating::validate_arguments(Some(&query), &json!({"type": "Widget"}));
        assert!(
            !problems.is_empty(),
            "an unknown node type is refused by the schema"
        );
    }

    #[test]
    fn geometry_defaults_its_artifact_to_the_cad_model() {
        let parsed: CommitGeometryArgs =
            parse(args(json!({"title": "Bracket", "content": "solid"}))).unwrap_or_default();
        assert_eq!(parsed.into_input().artifact, GEOMETRY_ARTIFACT);
    }

    #[test]
    fn a_link_of_an_unknown_type_is_named_by_its_field() {
        let err = parse::<LinkArgs>(args(json!({"from": "a", "to": "b", "type": "LIKES"}))).err();
        assert_eq!(err.map(|e| e.field), Some("type".to_owned()));
    }
}
