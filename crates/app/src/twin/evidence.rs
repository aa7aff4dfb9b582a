//! Evidence in the twin (issue 40, step 5): when a phase's agent calls an engineering tool whose
//! result carries [`ToolEvidence`] (`fea.static`, a `spice.*` analysis), MetaForge records it on
//! the run's branch itself — the model never copies the numbers — as one commit:
//!
//! - a `WorkProduct` node for the deliverable the evidence is for (`artifact`, usually
//!   `simulation_result`), whose `content` is the canonical JSON of the evidence (so its
//!   `content_hash` covers every number) and whose `evidence` property holds the quantities with
//!   their units, the tool and server, the programs and versions, the input's SHA-256, the
//!   sandbox limits and the output files' names, sizes and hashes;
//! - one `WorkProduct` node per output file whose text came with the result and matched its
//!   hash (`artifact` `<artifact>_file`, the text as `content`), linked from the result by a
//!   `CONTAINS` edge.
//!
//! Only a caller the run scopes confirm as working for a running phase gets its evidence
//! recorded (a person's chat records nothing unasked); `evidence` is a reserved property, so no
//! tool argument can forge it.

use std::sync::Arc;

use metaforge_ports::{
    CallerContext, ToolEvidence, ToolOutput, TwinChangeSet, TwinEdge, TwinEdgeType, TwinNode, TwinNodeType,
    WORK_PRODUCT_ARTIFACT, canonical_json,
};
use serde_json::{Map, Value, json};

use super::scope::{RunScopes, WriteTarget};
use super::service::TwinService;
use super::{
    TwinError, WORK_PRODUCT_CONTENT, WORK_PRODUCT_CONTENT_HASH, WORK_PRODUCT_EVIDENCE, WORK_PRODUCT_TITLE,
};

/// The property of a file node naming its media type.
pub const FILE_MEDIA_TYPE: &str = "media_type";
/// The property of a file node naming its file.
pub const FILE_NAME: &str = "file_name";

/// Where a tool's evidence was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvidence {
    /// The result node.
    pub node_id: String,
    /// The deliverable it records.
    pub artifact: String,
    /// The run's branch.
    pub branch: String,
    /// The commit.
    pub commit_id: String,
    /// The file nodes, by file name.
    pub files: Vec<(String, String)>,
    /// Files the evidence lists whose text did not come (too large) or did not match its hash.
    pub files_without_text: Vec<String>,
}

impl RecordedEvidence {
    /// What the model reads under `recorded` in the tool's result.
    pub fn to_json(&self) -> Value {
        json!({
            "node_id": self.node_id,
            "artifact": self.artifact,
            "branch": self.branch,
            "commit_id": self.commit_id,
            "files": self.files.iter().map(|(name, id)| json!({"name": name, "node_id": id})).collect::<Vec<_>>(),
            "files_without_text": self.files_without_text,
            "note": "MetaForge recorded this result in the twin; do not commit it again",
        })
    }
}

/// Records the evidence of a run phase's tool calls (module docs).
pub struct EvidenceRecorder {
    twin: Arc<TwinService>,
    scopes: Arc<dyn RunScopes>,
}

impl std::fmt::Debug for EvidenceRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvidenceRecorder").finish_non_exhaustive()
    }
}

impl EvidenceRecorder {
    /// The recorder over the twin and the scopes that say which run a caller works for.
    pub fn new(twin: Arc<TwinService>, scopes: Arc<dyn RunScopes>) -> Self {
        Self { twin, scopes }
    }

    /// Records the evidence `output` (a result of `server`'s tool) carries, when `caller` works
    /// for a running phase; `Ok(None)` when it carries none or the caller works for no run.
    ///
    /// # Errors
    /// Malformed evidence is [`TwinError::Invalid`] naming `evidence`; a twin failure is the
    /// store's.
    pub async fn record(
        &self,
        caller: &CallerContext,
        server: &str,
        output: &ToolOutput,
    ) -> Result<Option<RecordedEvidence>, TwinError> {
        let Some(parsed) = output.evidence() else {
            return Ok(None);
        };
        let evidence = parsed.map_err(|e| TwinError::invalid("evidence", e.to_string()))?;
        let Some(scope) = self.scopes.scope_of(caller).await? else {
            return Ok(None);
        };
        self.twin
            .commit_evidence(&WriteTarget::Run(scope), server, &evidence, output)
            .await
            .map(Some)
    }
}

impl TwinService {
    /// Commits `evidence` (from `server`, with its files' text taken from `output`) on the
    /// target's branch: the result node, a node per file, their `CONTAINS` edges, one commit.
    ///
    /// # Errors
    /// [`TwinError::Invalid`] for evidence with no artifact or title; the store's failure.
    pub async fn commit_evidence(
        &self,
        target: &WriteTarget,
        server: &str,
        evidence: &ToolEvidence,
        output: &ToolOutput,
    ) -> Result<RecordedEvidence, TwinError> {
        let artifact = evidence.artifact.trim();
        if artifact.is_empty() || evidence.title.trim().is_empty() {
            return Err(TwinError::invalid(
                "evidence",
                "an evidence needs its artifact and title",
            ));
        }
        let mut record =
            serde_json::to_value(evidence).map_err(|e| TwinError::invalid("evidence", e.to_string()))?;
        if let Value::Object(map) = &mut record {
            map.insert("server".to_owned(), Value::String(server.to_owned()));
        }
        let content = canonical_json(&record);
        let mut properties = Map::new();
        properties.insert(
            WORK_PRODUCT_ARTIFACT.to_owned(),
            Value::String(artifact.to_owned()),
        );
        properties.insert(
            WORK_PRODUCT_TITLE.to_owned(),
            Value::String(evidence.title.trim().to_owned()),
        );
        properties.insert(
            WORK_PRODUCT_CONTENT_HASH.to_owned(),
            Value::String(metaforge_ports::sha256_hex(&content)),
        );
        properties.insert(WORK_PRODUCT_CONTENT.to_owned(), Value::String(content));
        properties.insert(WORK_PRODUCT_EVIDENCE.to_owned(), record);
        super::service::stamp(target, &mut properties);
        let result = TwinNode::new(self.new_id(), TwinNodeType::WorkProduct, properties);
        let mut changes = TwinChangeSet::default();
        let mut files = Vec::new();
        let mut files_without_text = Vec::new();
        for file in &evidence.files {
            let Some(text) = output.evidence_file_text(file) else {
                files_without_text.push(file.name.clone());
                continue;
            };
            let mut properties = Map::new();
            properties.insert(
                WORK_PRODUCT_ARTIFACT.to_owned(),
                Value::String(format!("{artifact}_file")),
            );
            properties.insert(
                WORK_PRODUCT_TITLE.to_owned(),
                Value::String(format!("{} ({})", file.name, evidence.tool)),
            );
            properties.insert(FILE_NAME.to_owned(), Value::String(file.name.clone()));
            properties.insert(FILE_MEDIA_TYPE.to_owned(), Value::String(file.media_type.clone()));
            properties.insert(
                WORK_PRODUCT_CONTENT_HASH.to_owned(),
                Value::String(file.sha256.clone()),
            );
            properties.insert(WORK_PRODUCT_CONTENT.to_owned(), Value::String(text.to_owned()));
            super::service::stamp(target, &mut properties);
            let node = TwinNode::new(self.new_id(), TwinNodeType::WorkProduct, properties);
            changes.add_edges.push(TwinEdge {
                id: self.new_id(),
                edge_type: TwinEdgeType::Contains,
                from: result.id.clone(),
                to: node.id.clone(),
                properties: Map::new(),
            });
            files.push((file.name.clone(), node.id.clone()));
            changes.upsert_nodes.push(node);
        }
        changes.upsert_nodes.insert(0, result.clone());
        let message = format!(
            "evidence {artifact} from {}: {}",
            evidence.tool,
            evidence.title.trim()
        );
        let (branch, commit) = self
            .write(target, &format!("tool:{server}"), message, changes)
            .await?;
        tracing::info!(
            event = "twin_evidence_recorded",
            branch = %branch,
            node_id = %result.id,
            tool = %evidence.tool,
            server,
            files = files.len(),
            commit_id = %commit.id,
            "a tool's evidence was recorded in the twin"
        );
        Ok(RecordedEvidence {
            node_id: result.id,
            artifact: artifact.to_owned(),
            branch,
            commit_id: commit.id,
            files,
            files_without_text,
        })
    }
}

/// A tool's evidence as recorded for a run's phase: what a gate card shows.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseEvidence {
    /// The result node.
    pub node_id: String,
    /// The branch it is on.
    pub branch: String,
    /// The server whose tool computed it.
    pub server: String,
    /// The evidence.
    pub evidence: ToolEvidence,
}

/// The evidence recorded for `phase` of run `run_id` on its branch, oldest node id first (none
/// when the run has no branch yet).
///
/// # Errors
/// The store's failure.
pub async fn phase_evidence(
    twin: &TwinService,
    run_id: &str,
    phase: &str,
) -> Result<Vec<PhaseEvidence>, TwinError> {
    let branch = metaforge_ports::run_branch(run_id);
    let filter = super::NodeFilter {
        node_type: Some(TwinNodeType::WorkProduct),
        properties: vec![
            (
                metaforge_ports::WORK_PRODUCT_PHASE.to_owned(),
                Value::String(phase.to_owned()),
            ),
            (
                metaforge_ports::WORK_PRODUCT_RUN.to_owned(),
                Value::String(run_id.to_owned()),
            ),
        ],
        limit: super::service::MAX_QUERY_LIMIT,
    };
    let nodes = match twin.find(&branch, &filter).await {
        Ok(found) => found.nodes,
        Err(TwinError::UnknownBranch { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(nodes
        .into_iter()
        .filter_map(|node| {
            let record = node.properties.get(WORK_PRODUCT_EVIDENCE)?;
            let server = record
                .get("server")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let evidence = serde_json::from_value(record.clone()).ok()?;
            Some(PhaseEvidence {
                node_id: node.id,
                branch: branch.clone(),
                server,
                evidence,
            })
        })
        .collect())
}
