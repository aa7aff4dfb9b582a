//! Port traits for MetaForge, and the value types that cross them.
//!
//! This is the innermost crate: the domain and every adapter depend on it, and it depends on
//! nothing that does IO. A record a ledger stores, a request a provider takes, the clock and the
//! id generator all live here, so the domain stays deterministic and adapters stay swappable.
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## `crates/ports` — `metaforge-ports`
//!
//! The innermost crate. Port traits and the records that cross them: `FlowVersionRecord`,
//! `ApprovalRecord`/`ApprovalStatus`, `UsageEvent`/`Billing`, `ApiFamily`, `Clock`, `IdGen`,
//! and `PortError { kind, message, source }` so callers branch on a kind.
//! **Invariant:** no IO crate in its normal dependency tree (checked by `cargo xtask layering`).

pub mod approval;
pub mod approval_ledger;
pub mod approval_rules;
pub mod auth_failures;
pub mod canonical;
pub mod client_task_rules;
pub mod client_task_store;
pub mod clock;
pub mod credentials;
pub mod error;
pub mod event_bus;
pub mod evidence;
pub mod flow_engine;
pub mod flow_version;
pub mod flow_version_store;
pub mod lease;
pub mod llm;
pub mod phase_brain;
pub mod provider;
pub mod run_ledger;
pub mod run_ledger_rules;
pub mod run_state;
pub mod selection_store;
pub mod session_store;
pub mod skills;
pub mod tools;
pub mod twin_rules;
pub mod twin_store;
pub mod usage;
pub mod usage_store;

pub use approval::{ApprovalKind, ApprovalRecord, ApprovalStatus};
pub use approval_ledger::{
    APPROVAL_DEADLINE_GRACE_SECONDS, ApprovalDecision, ApprovalLedger, ApprovalTransition, ApprovalTrigger,
    DEFAULT_PENDING_PAGE, GoneParkers, MAX_PENDING_PAGE, ORPHANED_APPROVAL_REASON, PendingCursor,
    PendingPage, ResolveOutcome, WaiterResolution,
};
pub use approval_rules::{
    DEADLINE_REASON, GATE_DECISION_REFUSED_CODE, GateDecisionRefused, MAX_HOLD_TIMEOUT_SECONDS, hold_deadline,
};
pub use canonical::{canonical_json, canonical_sha256, sha256_hex};
pub use client_task_rules::client_task_key;
pub use client_task_store::{Claimant, ClientTask, ClientTaskStatus, ClientTaskStore, client_task_id};
pub use clock::{Clock, IdGen, Timestamp};
pub use credentials::{Credential, CredentialSecret, CredentialStore, StoredCredential};
pub use error::{PortError, PortErrorKind};
pub use event_bus::{BusEvent, EventBus, PublishReceipt, is_valid_event_kind};
pub use evidence::{
    EVIDENCE_FIELD, EvidenceFile, FileText, ProgramVersion, Quantity, QuantityKind, RECORDED_FIELD,
    SandboxReport, ToolEvidence, evidence_file_uri,
};
pub use flow_engine::{DrivenRuns, FlowEngine, GateAnswer, RunView, StartRun, WorkerHealth};
pub use flow_version::{FlowVersionOrigin, FlowVersionRecord, FlowVersionStatus};
pub use flow_version_store::{FlowVersionDecision, FlowVersionRestore, FlowVersionStore, SkippedFlowVersion};
pub use lease::{EMBEDDED_ENGINE_DUTY, Lease, LeaseStore, presence_duty};
pub use llm::{
    ContentPart, FinishReason, LlmEventStream, LlmMessage, LlmProvider, LlmRequest, LlmResponse, LlmRole,
    ModelTool, ProviderError, ProviderErrorKind, RawUsage, StreamEvent, SystemPrompt, ToolCall, ToolChoice,
};
pub use phase_brain::{EarlierSummary, PhaseBrain, PhaseBrief, PhaseFailure, PhaseOutcome};
pub use provider::ApiFamily;
pub use run_ledger::{
    FlowEngineKind, IntelligenceMode, RunLedger, RunRecord, RunStatus, RunStatusChange, RunTransition,
};
pub use run_ledger_rules::{check_settle, published_claim, terminal_run_conflict};
pub use run_state::{
    AUTO_APPROVER, DEADLINE_APPROVER, DecisionSurface, FeedbackSource, FlowRef, GateDecision,
    GateDecisionKind, GateRecord, OpenGate, PhaseFailureKind, PhaseFeedback, PhaseState, PhaseStatus,
    RunCommand, RunEvent, RunSettings, RunState, gate_approval_id, phase_attempt_key,
};
pub use selection_store::SelectionStore;
pub use session_store::{ChatMessage, ChatSession, MessageRole, SessionSearchHit, SessionStore, TurnLimits};
pub use skills::{SkillDirectories, SkillFiles, SkillOrigin, SkillsFingerprint};
pub use tools::{
    CallFacts, CallerClass, CallerContext, CallerGrants, ClassClaim, HostCallOutcome, InputChannel,
    InputQuestion, PromptArgumentDescriptor, PromptDescriptor, PromptText, ResourceTemplateDescriptor,
    ResourceText, SKILL_MANIFEST, ServedSkill, ToolDescriptor, ToolHints, ToolHost, ToolOutput, ToolSource,
};
pub use twin_store::{
    EdgeDirection, TWIN_MAIN_BRANCH, TwinBranch, TwinChangeSet, TwinCommit, TwinCommitRequest, TwinDiff,
    TwinEdge, TwinEdgeType, TwinNode, TwinNodeChange, TwinNodeQuery, TwinNodeType, TwinStore,
    WORK_PRODUCT_ARTIFACT, WORK_PRODUCT_PHASE, WORK_PRODUCT_RUN, run_branch, twin_content_hash,
};
pub use usage::{Billing, UsageEvent};
pub use usage_store::UsageStore;
