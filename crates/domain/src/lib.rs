//! MetaForge's rules, pure and deterministic.
//!
//! No IO, no clock, no randomness: time and ids come in as values. Integrators embed this crate
//! directly; the gateway, the MCP sidecar and the CLI all call the same functions.

pub mod approvals;
pub mod compaction;
pub mod flow;
pub mod grounding;
pub mod providers;
pub mod routing;
pub mod run;
pub mod skill;
pub mod tool_cap;
pub mod tool_gating;
pub mod tool_naming;
pub mod usage;
