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
//! [`scope`] (where a caller's writes go: [`WriteTarget`], [`RunScope`], the [`RunScopes`]
//! resolver and its engine-backed implementation).

pub mod scope;
pub mod service;

pub use scope::{
    EngineRunScopes, LOCAL_IDENTITY, LateRunScopes, NoRunScopes, RunScope, RunScopes, WriteTarget,
    caller_identity,
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
