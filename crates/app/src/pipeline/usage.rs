//! Usage attribution: a task-local scope (run id, phase, role, caller) that every model call in
//! the task reads, and the sink that receives one usage record per call.
//!
//! tokio task-locals do not cross `tokio::spawn`; spawn children through [`spawn_in_scope`] so
//! they inherit the scope, as the seed's context variable does.

use std::future::Future;

use metaforge_ports::{RawUsage, UsageEvent};

/// Who a call is attributed to: the agent loop's own type (one home), carried task-locally so the
/// pipeline's usage writer reads it without every call passing it.
pub use metaforge_agent::UsageScope;

tokio::task_local! {
    static USAGE_SCOPE: UsageScope;
}

/// Runs `future` with `scope` as the attribution of every call it makes.
pub async fn with_usage_scope<F: Future>(scope: UsageScope, future: F) -> F::Output {
    USAGE_SCOPE.scope(scope, future).await
}

/// The scope of the current task, if one was set.
pub fn current_usage_scope() -> Option<UsageScope> {
    USAGE_SCOPE.try_with(Clone::clone).ok()
}

/// Spawns `future` carrying the current task's usage scope.
pub fn spawn_in_scope<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match current_usage_scope() {
        Some(scope) => tokio::spawn(USAGE_SCOPE.scope(scope, future)),
        None => tokio::spawn(future),
    }
}

/// One call's usage: the attributed event with counts normalised by
/// `metaforge_domain::usage::normalize_usage` (and priced when the pipeline has a price table),
/// plus the provider's raw usage object for audit. Unknown counts stay `None`, never 0.
#[derive(Debug, Clone, PartialEq)]
pub struct CallUsage {
    /// The event (tokens `None` when unknown, never 0).
    pub event: UsageEvent,
    /// The provider's raw usage; `None` when the call reported none.
    pub raw: Option<RawUsage>,
}

/// Where usage records go (a usage store, a metrics bridge, a test collector).
pub trait UsageSink: Send + Sync {
    /// Records one call's usage. Must not block.
    fn record(&self, usage: CallUsage);
}
