//! MetaForge's rules, pure and deterministic.
//!
//! No IO, no clock, no randomness: time and ids come in as values. Integrators embed this crate
//! directly; the gateway, the MCP sidecar and the CLI all call the same functions.

pub mod flow;
pub mod providers;
