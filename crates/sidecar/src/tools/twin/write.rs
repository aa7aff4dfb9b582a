//! The twin's write tools: `twin.commit_work_product` (and `twin.commit_geometry`),
//! `twin.record_decision`, `twin.link`. Each declares the `twin_write` gate and the ask tier;
//! each checks its call in full in `preflight` (before the host gates or holds it) and again
//! when it runs, then writes one commit to the caller's branch.

use metaforge_app::limits::{Limits, TWIN_DECISION, TWIN_LINK, TWIN_WORK_PRODUCT, check_arguments};
use metaforge_app::twin::{DecisionInput, LinkInput, WorkProductInput, WriteTarget};
use metaforge_domain::grounding::GATE_TWIN_WRITE;
use metaforge_domain::tool_gating::{Annotation, ToolSpec};
use metaforge_ports::{
    CallerContext, HostCallOutcome, PortError, ToolDescriptor, ToolOutput, WORK_PRODUCT_ARTIFACT,
    WORK_PRODUCT_PHASE, WORK_PRODUCT_RUN,
};
use schemars::JsonSchema;
use serde_json::{Map, Value, json};

use super::args::{CommitGeometryArgs, CommitWorkProductArgs, LinkArgs, RecordDecisionArgs};
use super::{SidecarTwin, answer_error, author};
use crate::args::{ArgError, input_schema, parse};
use crate::envelope::invalid_arguments;
use crate::host::SidecarTool;
use crate::typed::ADDITIVE_WRITE;

/// `twin.commit_work_product`.
pub const COMMIT_WORK_PRODUCT_TOOL: &str = "twin.commit_work_product";
/// `twin.commit_geometry`: the same commit under the seed's name for a CAD model.
pub const COMMIT_GEOMETRY_TOOL: &str = "twin.commit_geometry";
/// `twin.record_decision`.
pub const RECORD_DECISION_TOOL: &str = "twin.record_decision";
/// `twin.link`.
pub const LINK_TOOL: &str = "twin.link";

/// A write's descriptor, its schema generated from `T`.
fn descriptor<T: JsonSchema>(name: &str, title: &str, description: &str) -> ToolDescriptor {
    ToolDescriptor {
        name: name.to_owned(),
        title: Some(title.to_owned()),
        description: description.to_owned(),
        input_schema: input_schema::<T>(),
        hints: ADDITIVE_WRITE,
    }
}

/// The gates every twin write declares (seed: "Gate declarations for chat tools").
fn write_gate(descriptor: &ToolDescriptor) -> ToolSpec {
    ToolSpec {
        name: descriptor.name.clone(),
        origin: "native".to_owned(),
        input_schema: Some(descriptor.input_schema.clone()),
        required_gates: vec![GATE_TWIN_WRITE.to_owned()],
        requires_approval: true,
        annotation: Annotation::from_hints(&descriptor.hints),
    }
}

/// Sizes first (the argument type's limits), then the typed parse.
fn parsed<T: serde::de::DeserializeOwned>(
    limits: Limits,
    arguments: &Map<String, Value>,
) -> Result<T, ArgError> {
    check_arguments(limits, arguments)?;
    parse(arguments.clone())
}

/// The run and phase a write was stamped with, for its answer.
fn run_fields(target: &WriteTarget, out: &mut Map<String, Value>) {
    if let Some(scope) = target.run() {
        out.insert(WORK_PRODUCT_RUN.to_owned(), json!(scope.run_id));
        out.insert(WORK_PRODUCT_PHASE.to_owned(), json!(scope.phase));
    }
}

/// One write tool's steps: parse, where it goes, check, write.
#[async_trait::async_trait]
trait TwinWrite: Send + Sync {
    type Input: Send + Sync;

    fn descriptor(&self) -> &ToolDescriptor;
    fn twin(&self) -> &SidecarTwin;
    fn input(&self, arguments: &Map<String, Value>) -> Result<Self::Input, ArgError>;
    async fn check(
        &self,
        target: &WriteTarget,
        input: &Self::Input,
    ) -> Result<(), metaforge_app::twin::TwinError>;
    async fn write(
        &self,
        target: &WriteTarget,
        author: &str,
        input: &Self::Input,
    ) -> Result<Value, metaforge_app::twin::TwinError>;

    /// `None` when the call may go on to the gate; else the answer that ends it.
    async fn preflight_write(
        &self,
        caller: &CallerContext,
        arguments: &Map<String, Value>,
    ) -> Result<Option<HostCallOutcome>, PortError> {
        let tool = self.descriptor().name.as_str();
        let input = match self.input(arguments) {
            Ok(input) => input,
            Err(e) => return Ok(Some(invalid_arguments(tool, &e))),
        };
        let target = match self.twin().target(tool, caller).await? {
            Ok(target) => target,
            Err(refusal) => return Ok(Some(refusal)),
        };
        match self.check(&target, &input).await {
            Ok(()) => Ok(None),
            Err(e) => answer_error(tool, e, false).map(Some),
        }
    }

    /// Runs the write (again checked in full: the branch may have moved while a person decided).
    async fn run_write(
        &self,
        caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        let tool = self.descriptor().name.as_str();
        let input = match self.input(&arguments) {
            Ok(input) => input,
            Err(e) => return Ok(invalid_arguments(tool, &e)),
        };
        let target = match self.twin().target(tool, caller).await? {
            Ok(target) => target,
            Err(refusal) => return Ok(refusal),
        };
        match self.write(&target, &author(caller), &input).await {
            Ok(mut answer) => {
                if let Some(out) = answer.as_object_mut() {
                    run_fields(&target, out);
                }
                Ok(HostCallOutcome::Done(ToolOutput::json(answer)))
            }
            Err(e) => answer_error(tool, e, false),
        }
    }
}

/// `twin.commit_work_product` / `twin.commit_geometry`: one work product with the hash of its
/// content, on the caller's branch; answers the node id.
pub struct CommitWorkProduct {
    twin: SidecarTwin,
    descriptor: ToolDescriptor,
    geometry: bool,
}

impl CommitWorkProduct {
    /// `twin.commit_work_product`.
    pub fn work_product(twin: SidecarTwin) -> Self {
        Self {
            twin,
            descriptor: descriptor::<CommitWorkProductArgs>(
                COMMIT_WORK_PRODUCT_TOOL,
                "Commit a work product to the twin",
                "Records one deliverable (artifact: cad_model, drawing, simulation_result, test_plan, bom, ...) \
                 in the digital twin with the SHA-256 of its content, and answers its node id. In a design-flow \
                 run it lands on the run's branch, stamped with the run and phase: a gate counts a deliverable \
                 only when it was committed here, never because a reply describes it.",
            ),
            geometry: false,
        }
    }

    /// `twin.commit_geometry`.
    pub fn geometry(twin: SidecarTwin) -> Self {
        Self {
            twin,
            descriptor: descriptor::<CommitGeometryArgs>(
                COMMIT_GEOMETRY_TOOL,
                "Commit CAD geometry to the twin",
                "Records a CAD model (artifact cad_model unless told another) in the digital twin with the \
                 SHA-256 of its file, and answers its node id. Same as twin.commit_work_product.",
            ),
            geometry: true,
        }
    }
}

#[async_trait::async_trait]
impl TwinWrite for CommitWorkProduct {
    type Input = WorkProductInput;

    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    fn twin(&self) -> &SidecarTwin {
        &self.twin
    }

    fn input(&self, arguments: &Map<String, Value>) -> Result<WorkProductInput, ArgError> {
        if self.geometry {
            parsed::<CommitGeometryArgs>(&[TWIN_WORK_PRODUCT], arguments).map(CommitGeometryArgs::into_input)
        } else {
            parsed::<CommitWorkProductArgs>(&[TWIN_WORK_PRODUCT], arguments)
                .map(CommitWorkProductArgs::into_input)
        }
    }

    async fn check(
        &self,
        target: &WriteTarget,
        input: &WorkProductInput,
    ) -> Result<(), metaforge_app::twin::TwinError> {
        self.twin.service.check_work_product(target, input).await
    }

    async fn write(
        &self,
        target: &WriteTarget,
        author: &str,
        input: &WorkProductInput,
    ) -> Result<Value, metaforge_app::twin::TwinError> {
        let done = self
            .twin
            .service
            .commit_work_product(target, author, input)
            .await?;
        let property = |key: &str| done.node.properties.get(key).cloned().unwrap_or(Value::Null);
        Ok(json!({
            "status": "committed",
            "node_id": done.node.id,
            "node_type": done.node.node_type,
            "artifact": property(WORK_PRODUCT_ARTIFACT),
            "title": property(metaforge_app::twin::WORK_PRODUCT_TITLE),
            "content_hash": property(metaforge_app::twin::WORK_PRODUCT_CONTENT_HASH),
            "branch": done.branch,
            "commit_id": done.commit.id,
        }))
    }
}

/// `twin.record_decision`: a decision and its rationale, on the caller's branch.
pub struct RecordDecision {
    twin: SidecarTwin,
    descriptor: ToolDescriptor,
}

impl RecordDecision {
    /// The tool.
    pub fn new(twin: SidecarTwin) -> Self {
        Self {
            twin,
            descriptor: descriptor::<RecordDecisionArgs>(
                RECORD_DECISION_TOOL,
                "Record a design decision in the twin",
                "Records what was decided and why (rationale required), the alternatives considered and the \
                 twin nodes it is about; answers the decision's node id.",
            ),
        }
    }
}

#[async_trait::async_trait]
impl TwinWrite for RecordDecision {
    type Input = DecisionInput;

    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    fn twin(&self) -> &SidecarTwin {
        &self.twin
    }

    fn input(&self, arguments: &Map<String, Value>) -> Result<DecisionInput, ArgError> {
        parsed::<RecordDecisionArgs>(&[TWIN_DECISION], arguments).map(RecordDecisionArgs::into_input)
    }

    async fn check(
        &self,
        target: &WriteTarget,
        input: &DecisionInput,
    ) -> Result<(), metaforge_app::twin::TwinError> {
        self.twin.service.check_decision(target, input).await
    }

    async fn write(
        &self,
        target: &WriteTarget,
        author: &str,
        input: &DecisionInput,
    ) -> Result<Value, metaforge_app::twin::TwinError> {
        let done = self.twin.service.record_decision(target, author, input).await?;
        Ok(json!({
            "status": "recorded",
            "node_id": done.node.id,
            "node_type": done.node.node_type,
            "branch": done.branch,
            "commit_id": done.commit.id,
        }))
    }
}

/// `twin.link`: a typed edge between two nodes of the caller's branch.
pub struct Link {
    twin: SidecarTwin,
    descriptor: ToolDescriptor,
}

impl Link {
    /// The tool.
    pub fn new(twin: SidecarTwin) -> Self {
        Self {
            twin,
            descriptor: descriptor::<LinkArgs>(
                LINK_TOOL,
                "Link two twin nodes",
                "Adds a typed edge (from DEPENDS_ON / IMPLEMENTS / VALIDATES / CONTAINS / CONSTRAINED_BY / \
                 PRODUCED_BY / VERSION_OF to) between two nodes already in the twin; answers the edge id.",
            ),
        }
    }
}

#[async_trait::async_trait]
impl TwinWrite for Link {
    type Input = LinkInput;

    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    fn twin(&self) -> &SidecarTwin {
        &self.twin
    }

    fn input(&self, arguments: &Map<String, Value>) -> Result<LinkInput, ArgError> {
        parsed::<LinkArgs>(&[TWIN_LINK], arguments).map(LinkArgs::into_input)
    }

    async fn check(
        &self,
        target: &WriteTarget,
        input: &LinkInput,
    ) -> Result<(), metaforge_app::twin::TwinError> {
        self.twin.service.check_link(target, input).await
    }

    async fn write(
        &self,
        target: &WriteTarget,
        author: &str,
        input: &LinkInput,
    ) -> Result<Value, metaforge_app::twin::TwinError> {
        let done = self.twin.service.link(target, author, input).await?;
        Ok(json!({
            "status": "linked",
            "edge_id": done.edge.id,
            "edge_type": done.edge.edge_type,
            "from": done.edge.from,
            "to": done.edge.to,
            "branch": done.branch,
            "commit_id": done.commit.id,
        }))
    }
}

/// Every write is a [`SidecarTool`] through its [`TwinWrite`] steps.
macro_rules! sidecar_write {
    ($tool:ty) => {
        #[async_trait::async_trait]
        impl SidecarTool for $tool {
            fn descriptor(&self) -> ToolDescriptor {
                self.descriptor.clone()
            }

            fn gate_spec(&self) -> ToolSpec {
                write_gate(&self.descriptor)
            }

            async fn preflight(
                &self,
                caller: &CallerContext,
                arguments: &Map<String, Value>,
            ) -> Result<Option<HostCallOutcome>, PortError> {
                self.preflight_write(caller, arguments).await
            }

            async fn call(
                &self,
                caller: &CallerContext,
                arguments: Map<String, Value>,
            ) -> Result<HostCallOutcome, PortError> {
                self.run_write(caller, arguments).await
            }
        }
    };
}

sidecar_write!(CommitWorkProduct);
sidecar_write!(RecordDecision);
sidecar_write!(Link);
