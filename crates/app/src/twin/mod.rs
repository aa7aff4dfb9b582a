//! The digital twin as the record of a run's work (issue 16, item 5): work products with the hash
//! of their content, decisions with their rationale, typed links, queries and branch diffs, over
//! the [`TwinStore`] port (SQLite, FalkorDB or the test double alike).
//!
//! **The run convention** (the run engine and the gate's deliverable check rely on it):
//! - a run's writes go to branch `run/<run_id>` ([`run_branch`]), created from `main` on the run's
//!   first write; every work product written there carries the run's `run_id` and `phase`, taken
//!   from the writer's [`RunScope`] and never from a tool argument;
//! - [`recorded_deliverables`] lists the `artifact` names of the work products recorded on that
//!   branch for one phase: what a gate's deliverable check reads, never the model's prose;
//! - [`merge_run_branch`] fast-forwards `main` to the run's branch when the release gate is
//!   approved, and refuses ([`TwinError::MainMoved`]), changing nothing, when `main` moved since.
//!
//! A write by anyone working for no run (a person's chat, a local client) goes to `main`.
//!
//! Code map: [`service`] (the [`TwinService`] both doors call, its inputs and results) ·
//! [`evidence`] (a run phase's tool evidence recorded by MetaForge, not copied by a model) ·
//! [`scope`] (where a caller's writes go: [`WriteTarget`], [`RunScope`], the [`RunScopes`]
//! resolver and its engine-backed implementation).
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## The twin as the record of work (issue 16, item 5) — `app::twin`, `crates/sidecar/src/tools/twin`, `gateway::twin`
//!
//! - **Service** `app::twin::TwinService` over the `TwinStore` port (SQLite `SqliteTwinStore`,
//!   `FalkorTwinStore` behind its feature, `MemoryTwinStore` in tests), time and ids from their ports.
//!   Writes, each one commit: `commit_work_product` (a `WorkProduct` node: `artifact` — the deliverable
//!   name a gate requires, `cad_model`, `simulation_result`, `test_plan`, `bom` … — `title`,
//!   `content_hash` = SHA-256 of the content (from `content`, kept with the node, or given for a file
//!   at `uri`; both given must agree), optional `uri`, `node_id` to replace a work product with a new
//!   version; for a run's work `run_id` and `phase`), `record_decision` (a `Decision` node: `decision`,
//!   `rationale` required, `alternatives`, `about` node ids that must exist), `link` (a typed edge
//!   between two existing nodes; self-links and duplicates refused). Each has a `check_*` twin that
//!   validates in full and writes nothing. Reads: `branches`, `node`, `find` (`NodeFilter`: type, every
//!   property equal, limit ≤ `MAX_QUERY_LIMIT`), `edges`, `diff`, `log`. `TwinError` names the field
//!   (`Invalid`, `UnknownBranch`, `UnknownNode`), `MainMoved` for a refused merge, `Store` otherwise.
//! - **Where a write goes** (`app::twin::scope`): `WriteTarget::Main` or `WriteTarget::Run(RunScope
//!   {run_id, phase})`, decided by `RunScopes::scope_of(caller)` at every call — never by an argument.
//!   `EngineRunScopes` asks the `FlowEngine`: a `service` caller's session names its run (the
//!   engine's server brain sets `CallerContext::session` to the run id) and the scope is that run's
//!   phase in flight while it is `running`; any other caller is scoped by the client task it claimed
//!   in this session (`claimed_by` = its authenticated identity, `claim_session` = its session; a
//!   session id alone proves nothing) while the engine still runs that phase. Unconfirmable
//!   (`live: false`, unknown run, parked run) = no scope. `NoRunScopes` for a process with no engine;
//!   `LateRunScopes` for a composition that builds the tools before the engine (no scope until set).
//! - **Tools** (`crates/sidecar/src/tools/twin`, `SidecarTwin { service, scopes }`, registered by
//!   `metaforge_sidecar::with_twin` / `host_in_process_with_twin`): writes `twin.commit_work_product`,
//!   `twin.commit_geometry` (the same commit, `artifact` defaulting to `cad_model`),
//!   `twin.record_decision`, `twin.link` — hints additive (not read-only, not destructive), gate spec
//!   `required_gates: ["twin_write"]` + `requires_approval` (the seed's gate declarations): the host
//!   holds a local/remote/untrusted caller's write in the one ledger and runs a service/client_task
//!   caller's; a service/client_task caller with no confirmed run phase is refused. Each write's
//!   `preflight` checks sizes (`app::limits` table), the typed parse and the service's `check_*`
//!   against the branch it will write, so bad arguments are refused before any hold; the write
//!   re-checks after approval. A commit answers `node_id`, `branch`, `commit_id` (and `run_id`,
//!   `phase`), which the grounding guard checks node ids against. Reads `twin.query` (text content
//!   left out), `twin.get_node` (with its edges), `twin.diff` (base `main`, head the caller's run
//!   branch by default) — read-only, never held; with no branch named they read the caller's branch.
//!   `SidecarHost::declared_gates()` lists each tool's static gates for the composition's
//!   `ToolPolicy::required_gates`, and `declared_holds()` its ask-tier tools (not those that hold
//!   their own effect, like `flow.propose`) for `ToolPolicy::requires_approval`: in a chat turn the
//!   agent loop holds a twin write itself — `tool.approval_requested` on the turn's stream, the
//!   terminal's `approve this call? [y/n]` — and once a person approves, calls the host with
//!   `CallFacts::approved_hold`; the host runs the call without a second hold only when its ledger
//!   reads that hold approved for this tool and exactly these arguments (`HeldWrites::approved_for`;
//!   anything else is held as usual). Transports never set `approved_hold`. Pinned by
//!   `sidecar/tests/it/sidecar_twin.rs` and `bins/tests/it/chat_process.rs` (one hold per write).
//! - **Routes** `gateway::twin` (`GatewayState::twin: Option<Arc<TwinService>>`, `None` → 503):
//!   `GET /v1/twin/branches`, `GET /v1/twin/nodes?branch=&type=&artifact=&phase=&run_id=&property=&value=&limit=`
//!   (text content left out), `GET /v1/twin/nodes/{id}?branch=`, `GET /v1/twin/nodes/{id}/edges?branch=&direction=&type=`,
//!   `GET /v1/twin/diff?base=&head=` (head required), `GET /v1/twin/log?branch=&limit=`; branch
//!   defaults to `main`; a bad or unknown parameter is a 400 and an unknown branch or node a 404, each
//!   naming it in `details.field`. No write route: the twin is written through the tools only.
//!
//! **Invariants (the run convention; the run engine and the gate's deliverable check rely on it):**
//! - A run's writes go to branch `run/<run_id>` (`metaforge_ports::run_branch`), created from
//!   `main` on the run's first write; they carry the run's `run_id` and `phase`
//!   (`WORK_PRODUCT_RUN`, `WORK_PRODUCT_PHASE`) from its `RunScope`; a caller's `properties` may
//!   repeat them only with those same values and may never set them otherwise (nor any other of
//!   `RESERVED_PROPERTIES`). A write by anyone working for no run goes
//!   to `main`.
//! - `app::twin::recorded_deliverables(store, run_id, phase)` lists, sorted and once each, the
//!   `artifact` of every `WorkProduct` on `run/<run_id>` whose `phase` is the phase and whose
//!   `run_id` is the run (an earlier run's merged work on the branch is not this run's); a run with no
//!   branch has recorded nothing. It is what a gate's deliverable check reads, never the model's prose.
//! - `app::twin::merge_run_branch(store, run_id)` fast-forwards `main` to the run's branch when the
//!   release gate is approved (`RunMerge::Merged`; again = no change), answers
//!   `RunMerge::NothingRecorded` for a run that wrote nothing, and refuses with
//!   `TwinError::MainMoved` (naming `main`'s head), changing nothing, when `main` moved since the run
//!   branched.
//! - Bad input writes nothing: no branch is created and no commit made for a refused write.
//!
//! Tests: `crates/app/tests/it/twin_service.rs` (every case over SQLite and the double; engine scopes),
//! `crates/app/tests/it/twin_runs.rs` (a run on the embedded engine whose worker writes through the
//! scopes completes with its deliverables recorded and its branch in `main`),
//! `crates/sidecar/tests/it/sidecar_twin.rs` (each caller class through `SidecarHost::call`),
//! `crates/gateway/tests/it/twin.rs` (the routes over the router).

pub mod evidence;
pub mod scope;
pub mod service;

pub use evidence::{EvidenceRecorder, PhaseEvidence, RecordedEvidence, phase_evidence};
pub use scope::{
    EngineRunScopes, LOCAL_IDENTITY, LateRunScopes, NoRunScopes, RunScope, RunScopeFacts, RunScopes,
    WriteTarget, caller_identity,
};
pub use service::{
    CommittedEdge, CommittedNode, DecisionInput, FoundNodes, LinkInput, NodeFilter, TwinService,
    WorkProductInput,
};

use std::collections::BTreeSet;

use metaforge_ports::{
    PortError, PortErrorKind, TWIN_MAIN_BRANCH, TwinNodeQuery, TwinNodeType, TwinStore,
    WORK_PRODUCT_ARTIFACT, WORK_PRODUCT_PHASE, WORK_PRODUCT_RUN, run_branch,
};
use serde_json::Value;

/// The property holding a work product's human title.
pub const WORK_PRODUCT_TITLE: &str = "title";
/// The property holding the lower-case hex SHA-256 of a work product's content (distinct from
/// the node's own `content_hash`, which hashes the node's type and properties).
pub const WORK_PRODUCT_CONTENT_HASH: &str = "content_hash";
/// The property holding a work product's text content, when it was committed with its text.
pub const WORK_PRODUCT_CONTENT: &str = "content";
/// The property holding where a work product's file lives (`file://…`, an adapter's URI).
pub const WORK_PRODUCT_URI: &str = "uri";
/// The property holding a tool's evidence (set only by [`evidence::EvidenceRecorder`]).
pub const WORK_PRODUCT_EVIDENCE: &str = "evidence";
/// The property holding what a decision node decided.
pub const DECISION_STATEMENT: &str = "decision";
/// The property holding why.
pub const DECISION_RATIONALE: &str = "rationale";
/// The property holding the options that were considered and not taken.
pub const DECISION_ALTERNATIVES: &str = "alternatives";
/// The property holding the ids of the nodes a decision is about.
pub const DECISION_ABOUT: &str = "about";

/// Properties MetaForge sets itself: a caller's extra `properties` may not name them.
pub const RESERVED_PROPERTIES: &[&str] = &[
    WORK_PRODUCT_ARTIFACT,
    WORK_PRODUCT_PHASE,
    WORK_PRODUCT_RUN,
    WORK_PRODUCT_TITLE,
    WORK_PRODUCT_CONTENT_HASH,
    WORK_PRODUCT_CONTENT,
    WORK_PRODUCT_URI,
    WORK_PRODUCT_EVIDENCE,
    DECISION_STATEMENT,
    DECISION_RATIONALE,
    DECISION_ALTERNATIVES,
    DECISION_ABOUT,
];

/// Why a twin use case refused or failed. Bad input is refused before anything is written.
#[derive(Debug, thiserror::Error)]
pub enum TwinError {
    /// An input the twin cannot take; `field` names it (`artifact`, `about[2]`, `branch`).
    #[error("{field}: {message}")]
    Invalid {
        /// The input's path.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A branch the request names does not exist.
    #[error("{field}: twin branch '{branch}' does not exist")]
    UnknownBranch {
        /// The input that named it (`branch`, `base`, `head`).
        field: String,
        /// The branch.
        branch: String,
    },
    /// A node the request names is not on the branch read or written.
    #[error("{field}: no node '{id}' on twin branch '{branch}'")]
    UnknownNode {
        /// The input that named it (`id`, `from`, `about[0]`).
        field: String,
        /// The node id.
        id: String,
        /// The branch looked at.
        branch: String,
    },
    /// The run's branch cannot be fast-forwarded into `main`: `main` moved since the run branched.
    /// Nothing was merged.
    #[error(
        "twin branch '{branch}' of run '{run_id}' cannot be fast-forwarded into main: main moved since the run branched (main is at {main_head}); nothing was merged"
    )]
    MainMoved {
        /// The run.
        run_id: String,
        /// Its branch.
        branch: String,
        /// Where `main` is now (`(empty)` before its first commit).
        main_head: String,
    },
    /// The store failed (unreachable, corrupt, a racing writer).
    #[error(transparent)]
    Store(#[from] PortError),
}

impl TwinError {
    /// A refused input.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The input a refusal names, when it names one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Invalid { field, .. }
            | Self::UnknownBranch { field, .. }
            | Self::UnknownNode { field, .. } => Some(field),
            Self::MainMoved { .. } | Self::Store(_) => None,
        }
    }
}

/// The deliverables recorded for `phase` on run `run_id`'s branch `run/<run_id>`: the `artifact`
/// of every `WorkProduct` node there whose `phase` is the phase and whose `run_id` is the run,
/// trimmed, sorted and once each. This is what a gate's deliverable check reads (never the
/// model's prose). A run that has written nothing yet (no branch) has recorded nothing.
pub async fn recorded_deliverables(
    store: &dyn TwinStore,
    run_id: &str,
    phase: &str,
) -> Result<Vec<String>, PortError> {
    let query = TwinNodeQuery {
        node_type: Some(TwinNodeType::WorkProduct),
        property: Some((WORK_PRODUCT_PHASE.to_owned(), Value::String(phase.to_owned()))),
    };
    let nodes = match store.find_nodes(&run_branch(run_id), &query).await {
        Ok(nodes) => nodes,
        Err(e) if e.kind == PortErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let recorded: BTreeSet<String> = nodes
        .iter()
        .filter(|n| n.properties.get(WORK_PRODUCT_RUN).and_then(Value::as_str) == Some(run_id))
        .filter_map(|n| n.properties.get(WORK_PRODUCT_ARTIFACT).and_then(Value::as_str))
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect();
    Ok(recorded.into_iter().collect())
}

/// What merging a run's branch came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunMerge {
    /// `main` now points where the run's branch does (also when it already did).
    Merged {
        /// `main`'s head after the merge.
        head: Option<String>,
    },
    /// The run wrote nothing to the twin (it has no branch): there is nothing to merge.
    NothingRecorded,
}

/// Fast-forwards `main` to run `run_id`'s branch (the release gate was approved). Refused with
/// [`TwinError::MainMoved`], changing nothing, when `main` moved since the run branched; merging
/// again after a merge changes nothing and answers `Merged`.
pub async fn merge_run_branch(store: &dyn TwinStore, run_id: &str) -> Result<RunMerge, TwinError> {
    let branch = run_branch(run_id);
    match store.merge_fast_forward(&branch, TWIN_MAIN_BRANCH).await {
        Ok(main) => {
            tracing::info!(event = "twin_run_branch_merged", run_id, branch = %branch, head = ?main.head, "the run's twin branch was fast-forwarded into main");
            Ok(RunMerge::Merged { head: main.head })
        }
        Err(e) if e.kind == PortErrorKind::NotFound => {
            if branch_exists(store, &branch).await? {
                Err(e.into())
            } else {
                Ok(RunMerge::NothingRecorded)
            }
        }
        Err(e) if e.kind == PortErrorKind::Conflict => {
            let main_head = store
                .branches()
                .await?
                .into_iter()
                .find(|b| b.name == TWIN_MAIN_BRANCH)
                .and_then(|b| b.head)
                .unwrap_or_else(|| "(empty)".to_owned());
            tracing::warn!(event = "twin_run_merge_refused", run_id, branch = %branch, main_head = %main_head, "main moved since the run branched; the run's twin branch was not merged");
            Err(TwinError::MainMoved {
                run_id: run_id.to_owned(),
                branch,
                main_head,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// True when `name` is one of the store's branches.
pub(crate) async fn branch_exists(store: &dyn TwinStore, name: &str) -> Result<bool, PortError> {
    Ok(store.branches().await?.iter().any(|b| b.name == name))
}
