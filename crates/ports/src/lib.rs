//! Port traits for MetaForge, and the value types that cross them.
//!
//! This is the innermost crate: the domain and every adapter depend on it, and it depends on
//! nothing that does IO. A record a ledger stores, a request a provider takes, the clock and the
//! id generator all live here, so the domain stays deterministic and adapters stay swappable.

pub mod approval;
pub mod clock;
pub mod error;
pub mod flow_version;
pub mod provider;
pub mod tools;
pub mod usage;

pub use approval::{ApprovalKind, ApprovalRecord, ApprovalStatus};
pub use clock::{Clock, IdGen, Timestamp};
pub use error::{PortError, PortErrorKind};
pub use flow_version::{FlowVersionOrigin, FlowVersionRecord, FlowVersionStatus};
pub use provider::ApiFamily;
pub use tools::{
    CallerClass, CallerContext, HostCallOutcome, InputChannel, InputQuestion, ResourceTemplateDescriptor,
    ResourceText, ToolDescriptor, ToolHints, ToolHost, ToolOutput, ToolSource,
};
pub use usage::{Billing, UsageEvent};
