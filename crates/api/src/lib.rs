//! The wire contracts: each request and response body a client sends or reads, written once, and
//! the run service's views with the sidecar's run client port over them. The gateway serves these
//! types (and documents them in its OpenAPI, through `utoipa` behind the `openapi` feature); the
//! run service returns the views; the sidecar's run tools read them in process through
//! [`RunBindings`]; `adapters-gateway` (the sidecar's remote mode, `metaforge chat`) sends and
//! reads the same types, so no two sides can drift apart field by field.
//!
//! **Casing.** The seed names the fields of the public API, and it mixes two casings: the
//! propose answer is camelCase (`approvalId`, `generatedBy`, `requirementsPending`,
//! `openQuestions`), everything else snake_case. The names stay exactly as the seed gives them;
//! where a body carried a name in the other casing, or the MCP tool calls a field by another
//! name, a request accepts it as a `serde(alias)` and a response sends the consistent name beside
//! the old one (`versionId` beside `version_id`) until clients move.
//!
//! No IO, no HTTP framework: plain serde types over `metaforge-ports`/`metaforge-domain` values.

pub mod approvals;
pub mod error;
pub mod flow_bindings;
pub mod flows;
pub mod run_bindings;
pub mod run_views;
pub mod runs;
pub mod threads;

pub use approvals::{
    ApprovalList, DecisionKind, DecisionRequest, ListStatus, ParkBody, Resolution, ResolveRequest,
    ResolveResponse,
};
pub use error::ErrorBody;
pub use flow_bindings::{CallerProposal, FlowBindings, HeldProposal, ProposalAnswer};
pub use flows::{ProposalView, ProposeAnswerView, ProposeCaller, ProposeRequest, ProposeResponse};
pub use run_bindings::{RefusalKind, RunBindings, RunQuery, RunRefused, RunReply, TaskSubmission};
pub use run_views::{
    ClientTaskView, FlowStateView, GateView, PhaseView, RunDetail, RunStatusEntry, RunSummary, UNKNOWN_STATUS,
};
pub use runs::{CancelBody, GateChoice, GateDecisionBody, StartRunBody, SubmitBody, SurfaceBody};
pub use threads::{CreateThread, PostMessage};
