//! In-memory doubles of every store port, behaving as the contract suites require.

mod approvals;
mod brain;
mod client_tasks;
mod flow_versions;
mod llm;
mod runs;
mod sessions;
mod tools;
mod twin;
mod usage;

pub use approvals::MemoryApprovalLedger;
pub use brain::{BrainStep, ScriptedPhaseBrain};
pub use client_tasks::MemoryClientTaskStore;
pub use flow_versions::MemoryFlowVersionStore;
pub use llm::{ScriptStep, ScriptedLlm};
pub use runs::MemoryRunLedger;
pub use sessions::MemorySessionStore;
pub use tools::{FakeToolSource, ToolHandler, descriptor};
pub use twin::MemoryTwinStore;
pub use usage::MemoryUsageStore;

use metaforge_ports::{PortError, PortErrorKind};

fn err(kind: PortErrorKind, message: impl Into<String>) -> PortError {
    PortError::new(kind, message)
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
