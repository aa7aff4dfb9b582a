//! Port traits for MetaForge, and the value types that cross them.
//!
//! This is the innermost crate: the domain and every adapter depend on it, and it depends on
//! nothing that does IO. A record a ledger stores, a request a provider takes, the clock and the
//! id generator all live here, so the domain stays deterministic and adapters stay swappable.

pub mod approval;
pub mod clock;
pub mod credentials;
pub mod error;
pub mod flow_version;
pub mod llm;
pub mod provider;
pub mod usage;

pub use approval::{ApprovalKind, ApprovalRecord, ApprovalStatus};
pub use clock::{Clock, IdGen, Timestamp};
pub use credentials::{Credential, CredentialSecret, CredentialStore, StoredCredential};
pub use error::{PortError, PortErrorKind};
pub use flow_version::{FlowVersionOrigin, FlowVersionRecord, FlowVersionStatus};
pub use llm::{
    ChatMessage, ContentPart, FinishReason, LlmEventStream, LlmProvider, LlmRequest, LlmResponse,
    MessageRole, ProviderError, ProviderErrorKind, RawUsage, StreamEvent, SystemPrompt, ToolCall, ToolChoice,
    ToolSpec,
};
pub use provider::ApiFamily;
pub use usage::{Billing, UsageEvent};
