//! MetaForge use cases, composed over `Arc<dyn Port>`.
//!
//! The app layer is where the pure rules of `metaforge-domain` meet the ports: the provider
//! pipeline, the design-flow service, the approvals service and the gateway routes land here as
//! their issues come. It never names a concrete adapter; `metaforge-bins` wires those in.

pub mod approvals;
pub mod exposition;
pub mod flow_generator;
pub mod flow_validation;
pub mod flows;
// The gateway and the sidecar name every variant of our own enums (issue 11, W4).
#[deny(clippy::wildcard_enum_match_arm)]
pub mod gateway;
pub mod pipeline;
#[deny(clippy::wildcard_enum_match_arm)]
pub mod sidecar;
pub mod tools;
pub mod unreachable_holds;
pub mod usage_metrics;
