//! MetaForge use cases, composed over `Arc<dyn Port>`.
//!
//! The app layer is where the pure rules of `metaforge-domain` meet the ports: the provider
//! pipeline and its usage writer, the routing resolver, the design-flow service and generator,
//! the approvals service, the field limits every door applies, and the tool registry. It names no
//! concrete adapter and no HTTP framework: `metaforge-gateway` and `metaforge-sidecar` are its
//! doors, `metaforge-bins` wires the adapters in.

pub mod approvals;
pub mod chat;
pub mod exposition;
pub mod flow_generator;
pub mod flow_validation;
pub mod flows;
pub mod limits;
pub mod pipeline;
pub mod processes;
pub mod routing;
pub mod runs;
pub mod skills;
pub mod tools;
pub mod turn_model;
pub mod twin;
pub mod unreachable_holds;
pub mod usage_metrics;
